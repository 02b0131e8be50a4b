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
 * The payload is buffered (MAX_BEATS x 512 bits, block RAM): the row count
 * and the offsets go out before the columns and values, so the buffer is
 * read three times after the header words, a beat at a time: the row ends
 * (offsets), the columns of the non-zero elements, their values. Reading a
 * beat (a cycle) also gives each of its 16 lanes its column (a chain of
 * wrapping increments from the beat's first column, registered); then
 * each cycle sends the word of the next lane that has one (a row end, a
 * non-zero element) and skips the lanes without: a pass takes a cycle per
 * beat plus a cycle per word (at least one per beat), not a cycle per
 * element. The row count comes from a restoring divider (n / cols, one bit
 * a cycle), whose remainder is the whole-rows check. Output words are
 * packed 16 to a beat, one word a cycle: a datapath that packs a beat's
 * words in one cycle is the throughput work left.
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

localparam LANES = 16;
localparam NW    = ADDR_WIDTH + 5;         // element counts up to MAX_BEATS * 16

localparam [7:0]
    STATUS_OK        = 8'd0,
    STATUS_TOO_LARGE = 8'd3,
    STATUS_BAD_INPUT = 8'd5;

localparam [3:0]
    ST_IDLE    = 4'd0,
    ST_IN      = 4'd1,
    ST_CHECK   = 4'd2,
    ST_DIV     = 4'd3,
    ST_STATUS  = 4'd4,
    ST_ROWS    = 4'd5,
    ST_ZERO    = 4'd6,
    ST_FETCH   = 4'd7,
    ST_ELEM    = 4'd8;

localparam [1:0]
    PASS_ENDS   = 2'd0,   // offsets[1..rows]: the non-zero count at each row's end
    PASS_COLS   = 2'd1,   // the column of each non-zero element
    PASS_VALUES = 2'd2;   // its value

reg [3:0]             state = ST_IDLE;
reg [META_WIDTH-1:0]  meta_word;
reg [63:0]            param;

// what the input showed
reg [ADDR_WIDTH:0]    n_beats;
reg [NW-1:0]          n_elems;
reg [NW-1:0]          nnz;
reg                   too_large;
reg                   any_bytes;
reg                   ragged;
reg                   not_rows;

// the buffer
reg [DATA_WIDTH-1:0]  mem [0:MAX_BEATS-1];
reg [DATA_WIDTH-1:0]  rd_data;

// n / cols
reg [NW-1:0]          cols;
reg [NW-1:0]          div_q;
reg [NW:0]            div_r;
reg [$clog2(NW+1)-1:0] div_i;

// the walk over the elements
reg [1:0]             pass;
reg [ADDR_WIDTH:0]    wb;             // beat
reg [3:0]             we;             // the lane the beat's next word is looked for from
reg [NW-1:0]          nz_seen;        // non-zero elements before the beat
reg [31:0]            words_left;     // words still to send, this one included

wire meta_ready;
assign s_meta_tready = state == ST_IDLE;
assign s_axis_tready = state == ST_IN;
wire meta_take = s_meta_tvalid && s_meta_tready;
wire data_take = s_axis_tvalid && s_axis_tready;

// ---- per-beat input checks ------------------------------------------------

wire [LANES-1:0] el_whole, el_part, el_nz;
genvar i;
generate
    for (i = 0; i < LANES; i = i + 1) begin : el
        assign el_whole[i] = &s_axis_tkeep[4*i +: 4];
        assign el_part[i]  = |s_axis_tkeep[4*i +: 4] && !el_whole[i];
        assign el_nz[i]    = el_whole[i] && |s_axis_tdata[32*i +: 31];   // != 0.0: not +-0
    end
endgenerate

reg [4:0] whole_n, nz_n;
integer k;
always @* begin
    whole_n = 5'd0;
    nz_n    = 5'd0;
    for (k = 0; k < LANES; k = k + 1) begin
        whole_n = whole_n + {4'd0, el_whole[k]};
        nz_n    = nz_n + {4'd0, el_nz[k]};
    end
end

always @(posedge clk) begin
    if (data_take && n_beats < MAX_BEATS) begin
        mem[n_beats[ADDR_WIDTH-1:0]] <= s_axis_tdata;
    end
    if (state == ST_FETCH) begin
        rd_data <= mem[wb[ADDR_WIDTH-1:0]];
    end
end

// ---- the word stream out --------------------------------------------------

// the beat read for the pass: its lanes' columns and which lanes hold elements
reg [NW*LANES-1:0]    lc;             // lane i's column: bits [NW*i +: NW]
reg [LANES-1:0]       lane_ok;
reg [NW-1:0]          col_base;       // the column of the next beat's lane 0

reg [NW*(LANES+1)-1:0] chain;
always @* begin
    chain[NW-1:0] = col_base;
    for (k = 0; k < LANES; k = k + 1) begin
        chain[NW*(k+1) +: NW] = chain[NW*k +: NW] == cols - 1'b1 ? {NW{1'b0}} : chain[NW*k +: NW] + 1'b1;
    end
end

wire [LANES-1:0] nz_ok, ends, ev, ev_from, ev_more;
generate
    for (i = 0; i < LANES; i = i + 1) begin : lane
        assign nz_ok[i] = lane_ok[i] && |rd_data[32*i +: 31];   // != 0.0: not +-0
        assign ends[i]  = lane_ok[i] && lc[NW*i +: NW] == cols - 1'b1;
    end
endgenerate
assign ev      = pass == PASS_ENDS ? ends : nz_ok;
assign ev_from = ev & ({LANES{1'b1}} << we);        // the lanes with a word from `we` on
assign ev_more = ev_from & (ev_from - 1'b1);        // those after the first
wire   has     = |ev_from;

reg [3:0] p;                                        // the first of them
reg [4:0] nz_upto, nz_beat;                         // non-zero lanes up to p, in the beat
always @* begin
    p = 4'd0;
    for (k = LANES - 1; k >= 0; k = k - 1) begin
        if (ev_from[k]) begin
            p = k[3:0];
        end
    end
    nz_upto = 5'd0;
    nz_beat = 5'd0;
    for (k = 0; k < LANES; k = k + 1) begin
        nz_upto = nz_upto + {4'd0, nz_ok[k] && k <= p};
        nz_beat = nz_beat + {4'd0, nz_ok[k]};
    end
end

wire beat_end = !has || ev_more == 0;               // no word left in this beat after this cycle's
wire last_rd  = wb + 1'b1 == n_beats;

reg        word_valid;
reg [31:0] word;
always @* begin
    word_valid = 1'b0;
    word       = 32'd0;
    case (state)
        ST_ROWS: begin
            word_valid = 1'b1;
            word       = div_q;
        end
        ST_ZERO: begin
            word_valid = 1'b1;   // offsets[0]
        end
        ST_ELEM: begin
            word_valid = has;
            case (pass)
                PASS_ENDS:   word = nz_seen + nz_upto;
                PASS_COLS:   word = lc[NW*p +: NW];
                default:     word = rd_data[32*p +: 32];
            endcase
        end
        default: begin
        end
    endcase
end

// 16 words to a beat; the beat waits in the packer while the sink stalls
reg [DATA_WIDTH-1:0] pk_data;
reg [4:0]            pk_cnt;
reg                  pk_last;
reg                  pk_full = 1'b0;
wire                 pk_ready;
wire                 word_ready = !pk_full;
wire                 word_take  = word_valid && word_ready;
wire                 advance    = !word_valid || word_ready;

reg [KEEP_WIDTH-1:0] pk_keep;
always @* begin
    for (k = 0; k < KEEP_WIDTH; k = k + 1) begin
        pk_keep[k] = (k / 4) < pk_cnt;
    end
end

always @(posedge clk) begin
    if (pk_full && pk_ready) begin
        pk_full <= 1'b0;
        pk_cnt  <= 5'd0;
    end
    if (word_take) begin
        pk_data[32*pk_cnt[3:0] +: 32] <= word;
        pk_cnt  <= pk_cnt + 1'b1;
        pk_last <= words_left == 1;
        if (pk_cnt == LANES - 1 || words_left == 1) begin
            pk_full <= 1'b1;
        end
    end
    if (rst) begin   // the last word of a result always fills the beat: it ends empty
        pk_full <= 1'b0;
        pk_cnt  <= 5'd0;
    end
end

offrac_axis_reg #(.WIDTH(DATA_WIDTH + KEEP_WIDTH + 1)) data_out (
    .clk(clk), .rst(rst),
    .s_tdata({pk_data, pk_keep, pk_last}), .s_tvalid(pk_full), .s_tready(pk_ready),
    .m_tdata({m_axis_tdata, m_axis_tkeep, m_axis_tlast}),
    .m_tvalid(m_axis_tvalid), .m_tready(m_axis_tready)
);

// ---- control ---------------------------------------------------------------

wire [63:0] cols_req = param == 0 ? {{(64-NW){1'b0}}, n_elems} : param;
wire [NW:0] div_shift = {div_r[NW-1:0], div_q[NW-1]};

reg [7:0]  status;
reg [31:0] detail;
always @* begin
    status = STATUS_OK;
    detail = 32'd0;
    if (too_large) begin
        status = STATUS_TOO_LARGE;
        detail = MAX_BEATS * 64;
    end else if (!any_bytes || ragged || not_rows || div_r != 0) begin
        status = STATUS_BAD_INPUT;
    end
end

always @(posedge clk) begin
    case (state)
        ST_IDLE: begin
            if (meta_take) begin
                meta_word <= s_meta_tdata;
                param     <= s_meta_tdata[PARAM_LSB +: 64];
                n_beats   <= 0;
                n_elems   <= 0;
                nnz       <= 0;
                too_large <= 1'b0;
                any_bytes <= 1'b0;
                ragged    <= 1'b0;
                state     <= ST_IN;
            end
        end
        ST_IN: begin
            if (data_take) begin
                any_bytes <= any_bytes || |s_axis_tkeep;
                ragged    <= ragged || |el_part;
                if (n_beats < MAX_BEATS) begin
                    n_beats <= n_beats + 1'b1;
                    n_elems <= n_elems + whole_n;
                    nnz     <= nnz + nz_n;
                end else begin
                    too_large <= 1'b1;   // read to the end, nothing more stored
                end
                if (s_axis_tlast) begin
                    state <= ST_CHECK;
                end
            end
        end
        ST_CHECK: begin
            cols     <= cols_req[NW-1:0];
            not_rows <= cols_req > n_elems;   // n >= 1, so cols > n leaves a remainder
            div_q    <= n_elems;
            div_r    <= 0;
            div_i    <= NW;
            state    <= ST_DIV;
        end
        ST_DIV: begin
            if (div_shift >= {1'b0, cols}) begin
                div_r <= div_shift - {1'b0, cols};
                div_q <= {div_q[NW-2:0], 1'b1};
            end else begin
                div_r <= div_shift;
                div_q <= {div_q[NW-2:0], 1'b0};
            end
            div_i <= div_i - 1'b1;
            if (div_i == 1 || not_rows) begin
                state <= ST_STATUS;
            end
        end
        ST_STATUS: begin
            if (meta_ready) begin
                words_left <= 2 + div_q + 2 * nnz;
                state      <= status == STATUS_OK ? ST_ROWS : ST_IDLE;
            end
        end
        ST_ROWS: begin
            if (word_take) begin
                words_left <= words_left - 1'b1;
                state      <= ST_ZERO;
            end
        end
        ST_ZERO: begin
            if (word_take) begin
                words_left <= words_left - 1'b1;
                pass       <= PASS_ENDS;
                wb         <= 0;
                col_base   <= 0;
                nz_seen    <= 0;
                state      <= ST_FETCH;
            end
        end
        ST_FETCH: begin
            we <= 4'd0;
            lc <= chain[NW*LANES-1:0];
            for (k = 0; k < LANES; k = k + 1) begin
                lane_ok[k] <= {wb[ADDR_WIDTH-1:0], k[3:0]} < n_elems;
            end
            col_base <= chain[NW*LANES +: NW];
            state    <= ST_ELEM;
        end
        default: begin   // ST_ELEM
            if (advance) begin
                if (word_take) begin
                    words_left <= words_left - 1'b1;
                end
                we <= p + 1'b1;
                if (beat_end) begin
                    nz_seen <= nz_seen + nz_beat;
                    wb      <= wb + 1'b1;
                    state   <= ST_FETCH;
                    if (last_rd) begin
                        wb       <= 0;
                        col_base <= 0;
                        nz_seen  <= 0;
                        pass     <= pass + 1'b1;
                        state    <= pass == PASS_VALUES ? ST_IDLE : ST_FETCH;
                    end
                end
            end
        end
    endcase

    if (rst) begin
        state <= ST_IDLE;
    end
end

wire [31:0] out_bytes = (32'd2 + div_q + 32'd2 * nnz) << 2;

offrac_axis_reg #(.WIDTH(META_WIDTH + 40 + 32)) meta_out (
    .clk(clk), .rst(rst),
    .s_tdata({meta_word, status, detail, out_bytes}), .s_tvalid(state == ST_STATUS), .s_tready(meta_ready),
    .m_tdata({m_meta_tdata, m_meta_status, m_meta_detail, m_meta_len}),
    .m_tvalid(m_meta_tvalid), .m_tready(m_meta_tready)
);

endmodule

`resetall
