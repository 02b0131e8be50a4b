`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The word packer of offrac_accel_sparse: up to LANES words of W bits a
 * cycle in (the lanes set in in_mask; COMPACT 0: a low run), full beats of
 * LANES words out, in order, a beat a cycle. With COMPACT the lanes are
 * first compacted (each word moved down by the number of unset lanes below
 * it, in four shift stages of 1, 2, 4 and 8 lanes, which never collide),
 * then rotated by the words held (up to LANES - 1, four stages again): the
 * rotated lanes at and above the held count complete the beat, the ones
 * below it are what is held next. A beat goes out (out_valid,
 * combinational) when LANES words are there, or with in_last what is left
 * (out_last, out_cnt words; more than LANES: a full beat, then the rest the
 * next cycle, busy meanwhile, input ignored). The words of a beat past
 * out_cnt are left undefined. The state moves only with en; clear empties
 * it.
 */
module offrac_sparse_packer #(
    parameter LANES   = 16,
    parameter W       = 32,
    parameter COMPACT = 1
) (
    input  wire               clk,
    input  wire               rst,
    input  wire               clear,
    input  wire               en,
    input  wire               in_valid,
    input  wire [LANES-1:0]   in_mask,
    input  wire [LANES*W-1:0] in_words,
    input  wire               in_last,
    output reg                out_valid,
    output reg  [LANES*W-1:0] out_data,
    output reg  [4:0]         out_cnt,
    output reg                out_last,
    output wire               busy
);

reg [LANES*W-1:0] acc;
reg [4:0]         fill = 5'd0;     // words held, < LANES
reg               pend = 1'b0;     // the rest of a last input waits to go out

assign busy = pend;

reg [LANES*W-1:0]   cw, nw;
reg [LANES-1:0]     cv, nv;
reg [LANES*4-1:0]   cd, nd;
reg [4:0]           cnt;
reg [LANES*W-1:0]   rot;
reg [5:0]           total;
reg [LANES*W-1:0]   acc_n;
reg [4:0]           fill_n;
reg                 pend_n;
integer l, s;
always @* begin
    // compaction: lane l moves down by cd[l], the unset lanes below it
    cnt = 5'd0;
    for (l = 0; l < LANES; l = l + 1) begin
        cd[4*l +: 4] = l[3:0] - cnt[3:0];
        cnt          = cnt + {4'd0, in_mask[l]};
    end
    cw = in_words;
    cv = in_mask;
    if (COMPACT) begin
        // stage s: lane l takes the word 2^s above it when that one moves by 2^s (bit s of its
        // distance), else keeps its own (the two never both want lane l); a plain 2:1 mux a bit
        for (s = 0; s < 4; s = s + 1) begin
            for (l = 0; l < LANES; l = l + 1) begin
                if (l + (1 << s) < LANES && cv[l + (1 << s)] && cd[4*(l + (1 << s)) + s]) begin
                    nw[W*l +: W] = cw[W*(l + (1 << s)) +: W];
                    nv[l]        = 1'b1;
                    nd[4*l +: 4] = cd[4*(l + (1 << s)) +: 4];
                end else begin
                    nw[W*l +: W] = cw[W*l +: W];
                    nv[l]        = cv[l] && !cd[4*l + s];
                    nd[4*l +: 4] = cd[4*l +: 4];
                end
            end
            cw = nw;
            cv = nv;
            cd = nd;
        end
    end
    if (!in_valid) begin
        cnt = 5'd0;
    end
    // rotated up by the words held: word j lands on lane (fill + j) mod LANES
    rot = cw;
    for (s = 0; s < 4; s = s + 1) begin
        for (l = 0; l < LANES; l = l + 1) begin
            nw[W*l +: W] = fill[s] ? rot[W*((l + LANES - (1 << s)) % LANES) +: W] : rot[W*l +: W];
        end
        rot = nw;
    end
    total = fill + cnt;

    // lane l of the beat out: a held word below fill (all of them with pend), else a new one;
    // held next: the words below fill while the beat is not complete, else the rotated rest
    // (after a last input nothing is held: acc_n does not matter)
    for (l = 0; l < LANES; l = l + 1) begin
        out_data[W*l +: W] = pend || l < fill ? acc[W*l +: W] : rot[W*l +: W];
        acc_n[W*l +: W]    = l < fill && total < LANES ? acc[W*l +: W] : rot[W*l +: W];
    end
    out_valid = 1'b0;
    out_cnt   = 5'd16;
    out_last  = 1'b0;
    fill_n    = total[4:0];
    pend_n    = 1'b0;
    if (pend) begin
        out_valid = 1'b1;
        out_cnt   = fill;
        out_last  = 1'b1;
        fill_n    = 5'd0;
    end else if (in_valid && in_last && total <= LANES) begin
        out_valid = total != 0;
        out_cnt   = total[4:0];
        out_last  = 1'b1;
        fill_n    = 5'd0;
    end else if (total >= LANES) begin
        out_valid = 1'b1;
        fill_n    = total - LANES;
        pend_n    = in_valid && in_last && total > LANES;
    end
end

always @(posedge clk) begin
    if (en) begin
        acc  <= acc_n;
        fill <= fill_n;
        pend <= pend_n;
    end
    if (rst || clear) begin
        fill <= 5'd0;
        pend <= 1'b0;
    end
end

endmodule

`resetall
