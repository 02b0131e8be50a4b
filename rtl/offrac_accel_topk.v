/*
 * offrac accelerator, function 1 (topk): the min(K, n) largest int32 values
 * of the payload, descending, duplicates kept, bit-exact with
 * crates/accel/src/topk.rs (numpy np.sort(x)[::-1][:k]).
 *
 * The wrapper interface of offrac_accel_minmax.v: payload in and out, one
 * metadata word per request in and out, and a status and detail beside the
 * metadata word out, in the protocol's codes:
 *
 *   0  OK           the result follows: min(K, n) int32, 16 per beat, tkeep on the last
 *   5  BAD_INPUT    empty payload, a length not a multiple of 4, or K = 0 (detail 0),
 *                   in the Rust code's order (element_count, then K)
 *   10 UNSUPPORTED  min(K, n) > K_MAX (detail = K_MAX): more than this instance keeps
 *
 * K is the hop parameter, bits [PARAM_LSB +: 64] of the metadata word. An
 * error has no payload out.
 *
 * No buffer: the input streams through a sorted array of the K_MAX largest
 * values so far (an insertion register: every entry compares with the new
 * value at once, the ones below it shift down by one, the last falls off),
 * one element per cycle, so a beat takes 16 cycles. An element equal to
 * entries goes after them; equal values are indistinguishable in the output,
 * so this is the software's result. The top K is the first K of the top
 * K_MAX. After the last beat the first min(K, n) entries go out.
 *
 * Input beats as for min-max: all but the last full, tkeep a run from byte
 * 0. Both outputs are an offrac_axis_reg stage held while the sink stalls.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_accel_topk #(
    parameter DATA_WIDTH = 512,
    parameter KEEP_WIDTH = DATA_WIDTH / 8,
    parameter META_WIDTH = 128,
    parameter PARAM_LSB  = 0,              // K: metadata bits [PARAM_LSB +: 64]
    parameter K_MAX      = 64              // a multiple of 16
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
    output wire                   m_meta_tvalid,
    input  wire                   m_meta_tready
);

localparam LANES = 16;
localparam OUT_BEATS = K_MAX / LANES;

localparam [7:0]
    STATUS_OK          = 8'd0,
    STATUS_BAD_INPUT   = 8'd5,
    STATUS_UNSUPPORTED = 8'd10;

localparam [2:0]
    ST_IDLE   = 3'd0,
    ST_IN     = 3'd1,
    ST_INS    = 3'd2,
    ST_STATUS = 3'd3,
    ST_OUT    = 3'd4;

reg [2:0]             state = ST_IDLE;
reg [META_WIDTH-1:0]  meta_word;
reg [63:0]            k_reg;

// the beat being inserted
reg [DATA_WIDTH-1:0]  beat_reg;
reg [LANES-1:0]       whole_reg;      // element j of the beat is all there
reg                   last_reg_in;
reg [3:0]             el_idx;

reg [31:0]            n_elems;
reg                   any_bytes;
reg                   ragged;

// the K_MAX largest so far, descending; entry i in [32*i +: 32]
reg [32*K_MAX-1:0]    ents;
reg [K_MAX-1:0]       ents_valid;

// output
reg [31:0]            out_n;          // min(K, n) values to send
reg [31:0]            out_sent;

wire meta_out_free;   // the output stages (offrac_axis_reg) take a beat
wire data_out_free;

assign s_meta_tready = state == ST_IDLE;
assign s_axis_tready = state == ST_IN;
wire meta_take = s_meta_tvalid && s_meta_tready;
wire data_take = s_axis_tvalid && s_axis_tready;

// ---- per-beat input checks ------------------------------------------------

wire [LANES-1:0] el_whole, el_part;
genvar i;
generate
    for (i = 0; i < LANES; i = i + 1) begin : el
        assign el_whole[i] = &s_axis_tkeep[4*i +: 4];
        assign el_part[i]  = |s_axis_tkeep[4*i +: 4] && !el_whole[i];
    end
endgenerate

reg [4:0] whole_n;
integer k;
always @* begin
    whole_n = 5'd0;
    for (k = 0; k < LANES; k = k + 1) begin
        whole_n = whole_n + {4'd0, el_whole[k]};
    end
end

// ---- insertion ------------------------------------------------------------

wire [31:0] v = beat_reg[32*el_idx +: 32];
wire        insert = state == ST_INS && whole_reg[el_idx];
wire [K_MAX-1:0] ge;   // entry i stays where it is (a prefix: the array is sorted)

generate
    for (i = 0; i < K_MAX; i = i + 1) begin : ins
        assign ge[i] = ents_valid[i] && $signed(ents[32*i +: 32]) >= $signed(v);

        always @(posedge clk) begin
            if (insert && !ge[i]) begin
                if (i == 0 || ge[i == 0 ? 0 : i-1]) begin
                    ents[32*i +: 32] <= v;
                    ents_valid[i]    <= 1'b1;
                end else begin
                    ents[32*i +: 32] <= ents[32*(i == 0 ? 0 : i-1) +: 32];
                    ents_valid[i]    <= ents_valid[i == 0 ? 0 : i-1];
                end
            end
            if (state == ST_IDLE) begin
                ents_valid[i] <= 1'b0;
            end
        end
    end
endgenerate

// ---- output beats -----------------------------------------------------------

wire [31:0] out_left  = out_n - out_sent;
wire        out_final = out_left <= LANES;
wire [4:0]  out_count = out_final ? out_left[4:0] : 5'd16;
wire [$clog2(OUT_BEATS+1)-1:0] out_beat = out_sent[4 +: $clog2(OUT_BEATS+1)];

reg [KEEP_WIDTH-1:0] out_keep;
always @* begin
    for (k = 0; k < KEEP_WIDTH; k = k + 1) begin
        out_keep[k] = (k / 4) < out_count;
    end
end

// ---- the answer -----------------------------------------------------------

reg [7:0]  st_status;
reg [31:0] st_detail;
always @* begin
    st_status = STATUS_OK;
    st_detail = 32'd0;
    if (!any_bytes || ragged || k_reg == 64'd0) begin
        st_status = STATUS_BAD_INPUT;
    end else if (k_reg > K_MAX && n_elems > K_MAX) begin
        st_status = STATUS_UNSUPPORTED;
        st_detail = K_MAX;
    end
end

always @(posedge clk) begin
    case (state)
        ST_IDLE: begin
            if (meta_take) begin
                meta_word <= s_meta_tdata;
                k_reg     <= s_meta_tdata[PARAM_LSB +: 64];
                n_elems   <= 32'd0;
                any_bytes <= 1'b0;
                ragged    <= 1'b0;
                state     <= ST_IN;
            end
        end
        ST_IN: begin
            if (data_take) begin
                beat_reg    <= s_axis_tdata;
                whole_reg   <= el_whole;
                last_reg_in <= s_axis_tlast;
                el_idx      <= 4'd0;
                n_elems     <= n_elems + {27'd0, whole_n};
                any_bytes   <= any_bytes || |s_axis_tkeep;
                ragged      <= ragged || |el_part;
                state       <= ST_INS;
            end
        end
        ST_INS: begin
            el_idx <= el_idx + 4'd1;
            if (el_idx == 4'd15) begin
                state <= last_reg_in ? ST_STATUS : ST_IN;
            end
        end
        ST_STATUS: begin
            if (meta_out_free) begin
                out_sent <= 32'd0;
                out_n    <= (k_reg < {32'd0, n_elems}) ? k_reg[31:0] : n_elems;
                state    <= st_status == STATUS_OK ? ST_OUT : ST_IDLE;
            end
        end
        default: begin   // ST_OUT
            if (data_out_free) begin
                out_sent <= out_sent + LANES;
                if (out_final) begin
                    state <= ST_IDLE;
                end
            end
        end
    endcase

    if (rst) begin
        state <= ST_IDLE;
    end
end

offrac_axis_reg #(.WIDTH(META_WIDTH + 40)) meta_out (
    .clk(clk), .rst(rst),
    .s_tdata({meta_word, st_status, st_detail}), .s_tvalid(state == ST_STATUS), .s_tready(meta_out_free),
    .m_tdata({m_meta_tdata, m_meta_status, m_meta_detail}),
    .m_tvalid(m_meta_tvalid), .m_tready(m_meta_tready)
);

offrac_axis_reg #(.WIDTH(DATA_WIDTH + KEEP_WIDTH + 1)) data_out (
    .clk(clk), .rst(rst),
    .s_tdata({ents[DATA_WIDTH*out_beat +: DATA_WIDTH], out_keep, out_final}), .s_tvalid(state == ST_OUT), .s_tready(data_out_free),
    .m_tdata({m_axis_tdata, m_axis_tkeep, m_axis_tlast}),
    .m_tvalid(m_axis_tvalid), .m_tready(m_axis_tready)
);

endmodule

`resetall
