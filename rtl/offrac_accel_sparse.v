/*
 * offrac accelerator, function 7 (sparsetransform): dense float32 rows to
 * CSR, bit-exact with crates/accel/src/dlrm/sparse.rs. The input is rows x
 * cols elements, row-major, cols the hop parameter (metadata bits
 * [PARAM_LSB +: 64]; 0: the whole payload is one row). The output is the
 * ragged layout with two arrays:
 *
 *   u32 rows, u32 offsets[rows + 1], u32 column[nnz], u32 value bits[nnz]
 *
 * one (column, value) pair per element != 0.0 (+0.0 and -0.0 dropped, NaN,
 * infinities and subnormals kept bit for bit), in row then column order.
 *
 * The wrapper interface of offrac_accel_minmax.v. Status and detail beside
 * the metadata word out, in the protocol's codes and the Rust code's order:
 *
 *   0 OK           the result follows (4 * (2 + rows + 2 * nnz) bytes, tkeep on the last beat)
 *   3 TOO_LARGE    more than MAX_BEATS beats; detail = MAX_BEATS * 64 (the maximum, in bytes)
 *   5 BAD_INPUT    empty payload or a length not a multiple of 4, then n elements not whole
 *                  rows of cols (cols > n included); detail 0
 *
 * One pass over the data, while it comes in (a beat a cycle): a word
 * packer (offrac_sparse_packer) compacts, in that cycle, the beat's non-zero
 * values and appends them to the values buffer (block RAM, MAX_BEATS x 512
 * bits, a beat written whenever one fills), and the beat's non-zero bitmap
 * (16 bits) goes to a second, small buffer. Each beat's 16 lanes get their
 * columns (a chain of wrapping increments from the beat's first column) and
 * row ends (a lane whose column is cols - 1), which the input only counts:
 * the row count is the number of row ends (cols 0: one), and the input is
 * whole rows exactly when its last element ends a row: no divider. The
 * payload itself is not kept. After the last beat the packer flushes (a
 * cycle), the metadata word goes out, then the result: the header words,
 * the row ends, the columns and the values, through the same packer (now
 * realigning: a region does not start on a beat boundary). The row ends
 * and the columns are regenerated from the bitmap, a bitmap beat a cycle
 * through the same lane logic (the running non-zero count at each row end;
 * the columns of the set lanes); the values a beat a cycle. So the output
 * takes n_beats cycles for each of the two walks (cols 0: one for the row
 * ends) and nnz / 16 for the values.
 *
 * Input beats as for min-max: all but the last full, tkeep a run from byte 0.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_accel_sparse #(
    parameter DATA_WIDTH = 512,
    parameter KEEP_WIDTH = DATA_WIDTH / 8,
    parameter META_WIDTH = 128,
    parameter PARAM_LSB  = 0,              // cols: metadata bits [PARAM_LSB +: 64]
    parameter MAX_BEATS  = 256,            // 16 KiB, the software's inline_max_bytes
    parameter ADDR_WIDTH = $clog2(MAX_BEATS)
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
    output wire [31:0]            m_meta_len,      // OK: the result's bytes, 4 * (2 + rows + 2 * nnz)
    output wire                   m_meta_tvalid,
    input  wire                   m_meta_tready
);

localparam LANES     = 16;
localparam NW        = ADDR_WIDTH + 5;     // element counts up to MAX_BEATS * 16
localparam MAX_ELEMS = MAX_BEATS * LANES;

localparam [7:0]
    STATUS_OK        = 8'd0,
    STATUS_TOO_LARGE = 8'd3,
    STATUS_BAD_INPUT = 8'd5;

localparam [2:0]
    ST_IDLE   = 3'd0,
    ST_IN     = 3'd1,
    ST_FLUSH  = 3'd2,
    ST_STATUS = 3'd3,
    ST_OUT    = 3'd4;

localparam [2:0]            // the regions of the result, in order
    RG_HDR  = 3'd0,         // rows, offsets[0] = 0
    RG_ENDS = 3'd1,         // offsets[1..rows]: a walk of the bitmap (cols 0: the one word nnz)
    RG_COLS = 3'd2,         // a walk of the bitmap
    RG_VALS = 3'd3,
    RG_DONE = 3'd4;

reg [2:0]             state = ST_IDLE;
reg [META_WIDTH-1:0]  meta_word;
reg [63:0]            param;

// what the input showed
reg [ADDR_WIDTH:0]    n_beats;
reg [NW-1:0]          nnz;
reg [NW-1:0]          rows;           // row ends seen (cols 0: set to 1 at the flush)
reg [LANES-1:0]       last_whole;     // the elements of the last beat stored
reg                   last_end;       // the last element seen ends a row
reg                   too_large;
reg                   any_bytes;
reg                   ragged;

wire meta_ready;
assign s_meta_tready = state == ST_IDLE;
assign s_axis_tready = state == ST_IN;
wire meta_take = s_meta_tvalid && s_meta_tready;
wire data_take = s_axis_tvalid && s_axis_tready;
wire feed      = data_take && n_beats < MAX_BEATS;   // a beat that is stored
wire out_phase = state == ST_OUT;

// ---- the lanes of a beat: element, non-zero, column, row end ----------------
// Shared by the input (the payload beat) and the output (a bitmap beat read back).

wire          one_row = param == 0;
wire          wrap_en = !one_row && param <= MAX_ELEMS;   // larger: no row ends in range (not whole rows)
wire [NW-1:0] col_max = param[NW-1:0] - 1'b1;            // cols - 1 when wrap_en
reg  [NW-1:0] col_base;                                    // the column of the next beat's lane 0
reg  [NW-1:0] run_base;                                    // the non-zeros before the next beat

wire [LANES-1:0] in_whole, in_part, in_nz;
genvar i;
generate
    for (i = 0; i < LANES; i = i + 1) begin : el
        assign in_whole[i] = &s_axis_tkeep[4*i +: 4];
        assign in_part[i]  = |s_axis_tkeep[4*i +: 4] && !in_whole[i];
        assign in_nz[i]    = in_whole[i] && |s_axis_tdata[32*i +: 31];   // != 0.0: not +-0
    end
endgenerate

reg  [LANES-1:0] b_map;              // the output's bitmap beat (stage B below)
reg              b_rend;             // the last beat of its walk (or region)
wire [LANES-1:0] el_whole = out_phase ? (b_rend ? last_whole : {LANES{1'b1}}) : in_whole;
wire [LANES-1:0] el_nz    = out_phase ? b_map : in_nz;

reg [NW*(LANES+1)-1:0] chain;        // lane i's column: bits [NW*i +: NW]; the next beat's at LANES
reg [LANES-1:0]        el_end;        // lane i is an element that ends its row
reg [NW*LANES-1:0]     end_word;      // the running non-zero count at lane i, i included
reg [4:0]              nz_n, end_n;
reg [NW-1:0]           run;
reg                    beat_any, beat_last_end;
integer k;
always @* begin
    chain[NW-1:0] = col_base;
    for (k = 0; k < LANES; k = k + 1) begin
        chain[NW*(k+1) +: NW] = wrap_en && chain[NW*k +: NW] == col_max ? {NW{1'b0}} : chain[NW*k +: NW] + 1'b1;
    end
    nz_n          = 5'd0;
    end_n         = 5'd0;
    run           = run_base;
    beat_any      = 1'b0;
    beat_last_end = 1'b0;
    for (k = 0; k < LANES; k = k + 1) begin
        el_end[k]            = el_whole[k] && wrap_en && chain[NW*k +: NW] == col_max;
        run                  = run + {{(NW-1){1'b0}}, el_nz[k]};
        end_word[NW*k +: NW] = run;
        nz_n                 = nz_n + {4'd0, el_nz[k]};
        end_n                = end_n + {4'd0, el_end[k]};
        if (el_whole[k]) begin
            beat_any      = 1'b1;
            beat_last_end = el_end[k];
        end
    end
end

// ---- the result out: a region sequencer (stage A), the buffers' read (stage B)

reg [2:0]            a_region;        // stage A: which region, which beat, what is left of it
reg [ADDR_WIDTH-1:0] a_beat;
reg [NW-1:0]         a_left;          // the walks: beats; the values: words
reg                  b_valid = 1'b0;  // stage B: the beat read, its region and word count
reg [2:0]            b_region;
reg [4:0]            b_cnt;
reg                  b_last;
reg [LANES*32-1:0]   vals_rd;

// ---- the packer: the values while the payload comes in, the result on the way out

wire                 o_ov, o_last, o_busy;
wire [LANES*32-1:0]  o_od;
wire [4:0]           o_cnt;
wire                 pk_ready;
wire                 o_en = out_phase ? !o_ov || pk_ready : 1'b1;
wire                 adv  = out_phase && o_en && !o_busy;

reg [LANES*32-1:0]   b_words;
reg [LANES-1:0]      b_mask;
always @* begin
    b_words = {LANES*32{1'b0}};
    b_mask  = {LANES{1'b1}} >> (LANES - b_cnt);
    case (b_region)
        RG_HDR: begin
            b_words[NW-1:0] = rows;   // word 1, offsets[0], is 0
        end
        RG_ENDS: begin
            if (one_row) begin
                b_words[NW-1:0] = nnz;
            end else begin
                b_mask = el_end;
                for (k = 0; k < LANES; k = k + 1) b_words[32*k +: NW] = end_word[NW*k +: NW];
            end
        end
        RG_COLS: begin
            b_mask = el_nz;
            for (k = 0; k < LANES; k = k + 1) b_words[32*k +: NW] = chain[NW*k +: NW];
        end
        default: b_words = vals_rd;
    endcase
end

wire pk_in_valid = out_phase ? b_valid : feed;

offrac_sparse_packer #(.LANES(LANES), .W(32), .COMPACT(1)) pk (
    .clk(clk), .rst(rst), .clear(meta_take || state == ST_STATUS), .en(o_en),
    .in_valid(pk_in_valid), .in_mask(out_phase ? b_mask : in_nz),
    .in_words(out_phase ? b_words : s_axis_tdata), .in_last(out_phase ? b_last : s_axis_tlast),
    .out_valid(o_ov), .out_data(o_od), .out_cnt(o_cnt), .out_last(o_last), .busy(o_busy)
);

reg [LANES*32-1:0] vals_mem [0:MAX_BEATS-1];
reg [LANES-1:0]    map_mem  [0:MAX_BEATS-1];
reg [ADDR_WIDTH:0] v_wp;

always @(posedge clk) begin
    if (o_ov && !out_phase) begin
        vals_mem[v_wp[ADDR_WIDTH-1:0]] <= o_od;
    end
    if (feed) begin
        map_mem[n_beats[ADDR_WIDTH-1:0]] <= in_nz;
    end
end

reg [KEEP_WIDTH-1:0] o_keep;
always @* begin
    for (k = 0; k < KEEP_WIDTH; k = k + 1) begin
        o_keep[k] = (k / 4) < o_cnt;
    end
end

offrac_axis_reg #(.WIDTH(DATA_WIDTH + KEEP_WIDTH + 1)) data_out (
    .clk(clk), .rst(rst),
    .s_tdata({o_od, o_keep, o_last}), .s_tvalid(o_ov && out_phase), .s_tready(pk_ready),
    .m_tdata({m_axis_tdata, m_axis_tkeep, m_axis_tlast}),
    .m_tvalid(m_axis_tvalid), .m_tready(m_axis_tready)
);

wire a_walk = a_region == RG_ENDS || a_region == RG_COLS;
wire a_fits = a_walk ? a_left <= 1 : a_left <= LANES;   // the region's last beat
always @(posedge clk) begin
    if (adv) begin
        vals_rd  <= vals_mem[a_beat];
        b_map    <= map_mem[a_beat];
        b_region <= a_region;
        b_valid  <= a_region != RG_DONE;
        b_cnt    <= a_region == RG_HDR ? 5'd2 : a_region == RG_ENDS ? 5'd1 : a_fits ? a_left[4:0] : 5'd16;
        b_rend   <= a_fits;
        b_last   <= a_fits && (a_region == RG_VALS || (a_region == RG_ENDS && nnz == 0));
        if (a_region == RG_HDR) begin
            a_region <= RG_ENDS;
            a_beat   <= 0;
            a_left   <= one_row ? 1 : n_beats;
        end else if (a_region != RG_DONE) begin
            a_beat <= a_beat + 1'b1;
            a_left <= a_left - (a_walk ? 1 : LANES);
            if (a_fits) begin
                a_region <= a_region == RG_ENDS && nnz == 0 ? RG_DONE : a_region + 1'b1;
                a_beat   <= 0;
                a_left   <= a_region == RG_ENDS ? n_beats : nnz;
            end
        end
        // stage B's beat goes into the packer now: the lane logic moves to the next bitmap beat
        if (b_valid && (b_region == RG_ENDS || b_region == RG_COLS)) begin
            col_base <= b_rend ? {NW{1'b0}} : chain[NW*LANES +: NW];
            run_base <= b_rend ? {NW{1'b0}} : run;
        end
    end
    if (state == ST_STATUS) begin   // the sequencer starts at the header words
        a_region <= RG_HDR;
        a_beat   <= 0;
        col_base <= 0;
        run_base <= 0;
    end
    if (state == ST_IN && feed) begin
        col_base <= chain[NW*LANES +: NW];
        run_base <= run;
    end
    if (meta_take) begin
        col_base <= 0;
        run_base <= 0;
    end
    if (rst) begin
        b_valid <= 1'b0;
    end
end

// ---- control ---------------------------------------------------------------

reg [7:0]  status;
reg [31:0] detail;
always @* begin
    status = STATUS_OK;
    detail = 32'd0;
    if (too_large) begin
        status = STATUS_TOO_LARGE;
        detail = MAX_BEATS * 64;
    end else if (!any_bytes || ragged || !last_end) begin
        status = STATUS_BAD_INPUT;
    end
end

always @(posedge clk) begin
    if (o_ov && !out_phase) v_wp <= v_wp + 1'b1;
    case (state)
        ST_IDLE: begin
            if (meta_take) begin
                meta_word <= s_meta_tdata;
                param     <= s_meta_tdata[PARAM_LSB +: 64];
                n_beats   <= 0;
                rows      <= 0;
                last_end  <= 1'b0;
                too_large <= 1'b0;
                any_bytes <= 1'b0;
                ragged    <= 1'b0;
                v_wp      <= 0;
                state     <= ST_IN;
            end
        end
        ST_IN: begin
            if (data_take) begin
                any_bytes <= any_bytes || |s_axis_tkeep;
                ragged    <= ragged || |in_part;
                if (n_beats < MAX_BEATS) begin
                    n_beats    <= n_beats + 1'b1;
                    rows       <= rows + end_n;
                    last_whole <= in_whole;
                    if (beat_any) begin
                        last_end <= one_row || beat_last_end;
                    end
                end else begin
                    too_large <= 1'b1;   // read to the end, nothing more stored
                end
                if (s_axis_tlast) begin
                    state <= ST_FLUSH;
                end
            end
        end
        ST_FLUSH: begin   // the packer writes its last values beat
            nnz <= run_base;
            if (one_row) begin
                rows <= 1;
            end
            state <= ST_STATUS;
        end
        ST_STATUS: begin
            if (meta_ready) begin
                state <= status == STATUS_OK ? ST_OUT : ST_IDLE;
            end
        end
        default: begin   // ST_OUT: until the last beat has left the packer
            if (a_region == RG_DONE && !b_valid && !o_busy) begin
                state <= ST_IDLE;
            end
        end
    endcase

    if (rst) begin
        state <= ST_IDLE;
    end
end

wire [31:0] out_bytes = (32'd2 + rows + 32'd2 * nnz) << 2;

offrac_axis_reg #(.WIDTH(META_WIDTH + 40 + 32)) meta_out (
    .clk(clk), .rst(rst),
    .s_tdata({meta_word, status, detail, out_bytes}), .s_tvalid(state == ST_STATUS), .s_tready(meta_ready),
    .m_tdata({m_meta_tdata, m_meta_status, m_meta_detail, m_meta_len}),
    .m_tvalid(m_meta_tvalid), .m_tready(m_meta_tready)
);

endmodule

`resetall
