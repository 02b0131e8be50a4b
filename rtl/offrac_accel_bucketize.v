/*
 * offrac accelerator, function 8 (bucketize): each float32 x of the payload
 * to the number of borders of the chosen set strictly below it (numpy
 * searchsorted(borders, x, side="left")), bit-exact with
 * crates/accel/src/dlrm/bucketize.rs.
 *
 * The wrapper interface of offrac_accel_minmax.v, plus a configuration
 * stream that loads the border sets. Status and detail beside the metadata
 * word out, in the protocol's codes, checked in the Rust code's order:
 *
 *   0 OK           the result follows: one uint32 per input element (the input's beats and tkeep)
 *   3 TOO_LARGE    more than MAX_BEATS beats; detail = MAX_BEATS * 64 (the maximum, in bytes)
 *   5 BAD_INPUT    empty payload or a length not a multiple of 4 (detail 0); then the set
 *                  (the hop parameter, metadata bits [PARAM_LSB +: 64]) not configured
 *                  (detail = the number of sets); then a NaN (detail = its index, the first)
 *
 * The border sets (s_cfg_*): one packet of 32-bit words replaces them all:
 * the number of sets S, then for each set its border count m and its m
 * borders (float32 bits, ascending). A packet outside the limits (S >
 * SETS_MAX, m = 0 or m > BORDERS_MAX, tlast early or late) sets cfg_error
 * and leaves no set configured; so does a reset in the middle of a packet.
 * The node checks the borders themselves (finite, strictly ascending:
 * check_borders) before it sends them. Taken only between requests; a
 * request waits for a packet under way. The sets survive a reset between
 * packets (they are configuration, the node's [functions.bucketize]).
 *
 * Each border is kept as an order key (-0.0 made +0.0, then the sign bit
 * flipped for positives and every bit for negatives), so `b < x` is one
 * unsigned compare; an element is compared with every border of its set at
 * once and the true compares counted: PAR elements a cycle (default 2,
 * each with its own compares against the same set), 16 / PAR cycles a
 * beat. Results go to an offrac_result_buffer, sent once the whole payload
 * has been read (a NaN anywhere means no result).
 *
 * Input beats as for min-max: all but the last full, tkeep a run from byte 0.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_accel_bucketize #(
    parameter DATA_WIDTH  = 512,
    parameter KEEP_WIDTH  = DATA_WIDTH / 8,
    parameter META_WIDTH  = 128,
    parameter PARAM_LSB   = 0,             // the set: metadata bits [PARAM_LSB +: 64]
    parameter MAX_BEATS   = 256,           // 16 KiB, the software's inline_max_bytes
    parameter SETS_MAX    = 4,
    parameter BORDERS_MAX = 32,
    parameter PAR         = 2,             // elements counted a cycle: 1, 2, 4, 8 or 16
    parameter ADDR_WIDTH  = $clog2(MAX_BEATS)
) (
    input  wire                   clk,
    input  wire                   rst,

    // request payload in
    input  wire [DATA_WIDTH-1:0]  s_axis_tdata,
    input  wire [KEEP_WIDTH-1:0]  s_axis_tkeep,
    input  wire                   s_axis_tvalid,
    output wire                   s_axis_tready,
    input  wire                   s_axis_tlast,

    // request metadata in, one word per request
    input  wire [META_WIDTH-1:0]  s_meta_tdata,
    input  wire                   s_meta_tvalid,
    output wire                   s_meta_tready,

    // the border sets, one packet for all
    input  wire [31:0]            s_cfg_tdata,
    input  wire                   s_cfg_tvalid,
    output wire                   s_cfg_tready,
    input  wire                   s_cfg_tlast,
    output wire [7:0]             cfg_sets,
    output wire                   cfg_error,

    // result payload out
    output wire [DATA_WIDTH-1:0]  m_axis_tdata,
    output wire [KEEP_WIDTH-1:0]  m_axis_tkeep,
    output wire                   m_axis_tvalid,
    input  wire                   m_axis_tready,
    output wire                   m_axis_tlast,

    // result metadata out, one word per request, before its payload
    output wire [META_WIDTH-1:0]  m_meta_tdata,
    output wire [7:0]             m_meta_status,
    output wire [31:0]            m_meta_detail,
    output wire                   m_meta_tvalid,
    input  wire                   m_meta_tready
);

localparam LANES    = 16;
localparam SET_BITS = SETS_MAX > 1 ? $clog2(SETS_MAX) : 1;
localparam B_BITS   = $clog2(BORDERS_MAX + 1);

localparam [7:0]
    STATUS_OK        = 8'd0,
    STATUS_TOO_LARGE = 8'd3,
    STATUS_BAD_INPUT = 8'd5;

localparam [3:0]
    ST_IDLE    = 4'd0,
    ST_IN      = 4'd1,
    ST_COUNT   = 4'd2,
    ST_WRITE   = 4'd3,
    ST_STATUS  = 4'd4,
    ST_CFG_S   = 4'd5,
    ST_CFG_M   = 4'd6,
    ST_CFG_B   = 4'd7,
    ST_CFG_BAD = 4'd8;

// float32 bits -> a key whose unsigned order is the float order (no NaN; -0 == +0)
function [31:0] order_key;
    input [31:0] f;
    reg   [31:0] c;
    begin
        c = f == 32'h80000000 ? 32'd0 : f;
        order_key = c[31] ? ~c : {1'b1, c[30:0]};
    end
endfunction

function is_nan;
    input [31:0] f;
    begin
        is_nan = f[30:23] == 8'hFF && f[22:0] != 0;
    end
endfunction

reg [3:0]             state = ST_IDLE;
reg [META_WIDTH-1:0]  meta_word;

// ---- the border sets -------------------------------------------------------

reg [32*BORDERS_MAX-1:0] set_keys [0:SETS_MAX-1];
reg [B_BITS-1:0]         set_m    [0:SETS_MAX-1];
reg [7:0]                n_sets = 8'd0;
reg                      error = 1'b0;
reg [7:0]                ld_s;       // sets in the packet
reg [SET_BITS-1:0]       ld_set;     // the set being loaded
reg [B_BITS-1:0]         ld_m, ld_j;

assign s_cfg_tready = state == ST_CFG_S || state == ST_CFG_M || state == ST_CFG_B || state == ST_CFG_BAD;
wire   cfg_take     = s_cfg_tvalid && s_cfg_tready;
assign cfg_sets     = n_sets;
assign cfg_error    = error;

// ---- requests --------------------------------------------------------------

wire res_ready, stat_ready;

assign s_meta_tready = state == ST_IDLE && !s_cfg_tvalid;
assign s_axis_tready = state == ST_IN;
wire meta_take = s_meta_tvalid && s_meta_tready;
wire data_take = s_axis_tvalid && s_axis_tready;

wire [63:0] param = s_meta_tdata[PARAM_LSB +: 64];

reg [ADDR_WIDTH:0]       n_beats;
reg                      too_large;
reg                      any_bytes;
reg                      ragged;
reg                      bad_set;
reg                      nan_found;
reg [ADDR_WIDTH+3:0]     nan_index;
reg                      last_in;
reg [DATA_WIDTH-1:0]     beat_reg;
reg [KEEP_WIDTH-1:0]     beat_keep;
reg [3:0]                el_idx;
reg [DATA_WIDTH-1:0]     result_beat;
reg [32*BORDERS_MAX-1:0] cur_keys;    // the request's set
reg [B_BITS-1:0]         cur_m;

wire [LANES-1:0] el_whole, el_part, el_nan;
genvar i;
generate
    for (i = 0; i < LANES; i = i + 1) begin : el
        assign el_whole[i] = &s_axis_tkeep[4*i +: 4];
        assign el_part[i]  = |s_axis_tkeep[4*i +: 4] && !el_whole[i];
        assign el_nan[i]   = el_whole[i] && is_nan(s_axis_tdata[32*i +: 32]);
    end
endgenerate

// the first NaN of the beat
reg [3:0] nan_lane;
integer k;
always @* begin
    nan_lane = 4'd0;
    for (k = LANES - 1; k >= 0; k = k - 1) begin
        if (el_nan[k]) begin
            nan_lane = k;
        end
    end
end

// PAR elements (lanes el_idx ..) each against every border of the set
reg [32*PAR-1:0]     x_keys;
reg [B_BITS*PAR-1:0] below;
integer e;
always @* begin
    for (e = 0; e < PAR; e = e + 1) begin
        x_keys[32*e +: 32] = order_key(beat_reg[32*(el_idx + e) +: 32]);
        below[B_BITS*e +: B_BITS] = {B_BITS{1'b0}};
        for (k = 0; k < BORDERS_MAX; k = k + 1) begin
            if (k < cur_m && cur_keys[32*k +: 32] < x_keys[32*e +: 32]) begin
                below[B_BITS*e +: B_BITS] = below[B_BITS*e +: B_BITS] + 1'b1;
            end
        end
    end
end

// ---- control ---------------------------------------------------------------

always @(posedge clk) begin
    case (state)
        ST_IDLE: begin
            if (s_cfg_tvalid) begin
                state  <= ST_CFG_S;
                n_sets <= 8'd0;
                error  <= 1'b0;
            end else if (meta_take) begin
                meta_word <= s_meta_tdata;
                bad_set   <= param >= n_sets;
                cur_keys  <= set_keys[param[SET_BITS-1:0]];
                cur_m     <= set_m[param[SET_BITS-1:0]];
                n_beats   <= 0;
                too_large <= 1'b0;
                any_bytes <= 1'b0;
                ragged    <= 1'b0;
                nan_found <= 1'b0;
                state     <= ST_IN;
            end
        end
        ST_IN: begin
            if (data_take) begin
                beat_reg  <= s_axis_tdata;
                beat_keep <= s_axis_tkeep;
                last_in   <= s_axis_tlast;
                any_bytes <= any_bytes || |s_axis_tkeep;
                ragged    <= ragged || |el_part;
                if (!nan_found && |el_nan && n_beats < MAX_BEATS) begin
                    nan_found <= 1'b1;
                    nan_index <= {n_beats[ADDR_WIDTH-1:0], nan_lane};
                end
                el_idx <= 4'd0;
                if (n_beats < MAX_BEATS) begin
                    n_beats <= n_beats + 1'b1;
                    state   <= ST_COUNT;
                end else begin
                    too_large <= 1'b1;   // read to the end, nothing more stored
                    if (s_axis_tlast) begin
                        state <= ST_STATUS;
                    end
                end
            end
        end
        ST_COUNT: begin
            for (e = 0; e < PAR; e = e + 1) begin
                result_beat[32*(el_idx + e) +: 32] <= {{(32-B_BITS){1'b0}}, below[B_BITS*e +: B_BITS]};
            end
            el_idx <= el_idx + PAR[3:0];
            if (el_idx == LANES - PAR) begin
                state <= ST_WRITE;
            end
        end
        ST_WRITE: begin
            if (res_ready) begin
                state <= last_in ? ST_STATUS : ST_IN;
            end
        end
        ST_STATUS: begin
            if (stat_ready) begin
                state <= ST_IDLE;
            end
        end
        ST_CFG_S: begin
            if (cfg_take) begin
                ld_s   <= s_cfg_tdata[7:0];
                ld_set <= 0;
                if (s_cfg_tdata > SETS_MAX) begin
                    state <= s_cfg_tlast ? ST_IDLE : ST_CFG_BAD;
                    error <= 1'b1;
                end else if (s_cfg_tdata == 0) begin   // no sets: valid when the packet ends here
                    state <= s_cfg_tlast ? ST_IDLE : ST_CFG_BAD;
                    error <= !s_cfg_tlast;
                end else if (s_cfg_tlast) begin
                    state <= ST_IDLE;
                    error <= 1'b1;
                end else begin
                    state <= ST_CFG_M;
                end
            end
        end
        ST_CFG_M: begin
            if (cfg_take) begin
                ld_m <= s_cfg_tdata[B_BITS-1:0];
                ld_j <= 0;
                set_m[ld_set] <= s_cfg_tdata[B_BITS-1:0];
                if (s_cfg_tdata == 0 || s_cfg_tdata > BORDERS_MAX || s_cfg_tlast) begin
                    state <= s_cfg_tlast ? ST_IDLE : ST_CFG_BAD;
                    error <= 1'b1;
                end else begin
                    state <= ST_CFG_B;
                end
            end
        end
        ST_CFG_B: begin
            if (cfg_take) begin
                set_keys[ld_set][32*ld_j +: 32] <= order_key(s_cfg_tdata);
                ld_j <= ld_j + 1'b1;
                if (ld_j + 1'b1 == ld_m) begin
                    if (ld_set + 1'b1 == ld_s) begin   // the packet's last border
                        if (s_cfg_tlast) begin
                            n_sets <= ld_s;
                            state  <= ST_IDLE;
                        end else begin
                            error <= 1'b1;
                            state <= ST_CFG_BAD;
                        end
                    end else begin
                        ld_set <= ld_set + 1'b1;
                        state  <= s_cfg_tlast ? ST_IDLE : ST_CFG_M;
                        error  <= s_cfg_tlast;
                    end
                end else if (s_cfg_tlast) begin
                    error <= 1'b1;
                    state <= ST_IDLE;
                end
            end
        end
        default: begin   // ST_CFG_BAD: the rest of a bad packet, dropped
            if (cfg_take && s_cfg_tlast) begin
                state <= ST_IDLE;
            end
        end
    endcase

    if (rst) begin
        state <= ST_IDLE;
        if (state >= ST_CFG_S) begin   // a packet cut short: no set is trusted
            n_sets <= 8'd0;
            error  <= 1'b1;
        end
    end
end

// ---- out -------------------------------------------------------------------

reg [7:0]  status;
reg [31:0] detail;
always @* begin
    status = STATUS_OK;
    detail = 32'd0;
    if (too_large) begin
        status = STATUS_TOO_LARGE;
        detail = MAX_BEATS * 64;
    end else if (!any_bytes || ragged) begin
        status = STATUS_BAD_INPUT;
    end else if (bad_set) begin
        status = STATUS_BAD_INPUT;
        detail = {24'd0, n_sets};
    end else if (nan_found) begin
        status = STATUS_BAD_INPUT;
        detail = nan_index;
    end
end

offrac_result_buffer #(
    .DATA_WIDTH(DATA_WIDTH), .META_WIDTH(META_WIDTH), .MAX_BEATS(MAX_BEATS)
) results (
    .clk(clk), .rst(rst),
    .s_res_tdata(result_beat), .s_res_tkeep(beat_keep),
    .s_res_tvalid(state == ST_WRITE), .s_res_tready(res_ready),
    .s_stat_tdata(meta_word), .s_stat_status(status), .s_stat_detail(detail),
    .s_stat_tvalid(state == ST_STATUS), .s_stat_tready(stat_ready),
    .m_axis_tdata(m_axis_tdata), .m_axis_tkeep(m_axis_tkeep), .m_axis_tvalid(m_axis_tvalid),
    .m_axis_tready(m_axis_tready), .m_axis_tlast(m_axis_tlast),
    .m_meta_tdata(m_meta_tdata), .m_meta_status(m_meta_status), .m_meta_detail(m_meta_detail),
    .m_meta_tvalid(m_meta_tvalid), .m_meta_tready(m_meta_tready)
);

endmodule

`resetall
