/*
 * offrac accelerator, function 3 (minmax): min-max normalization of a
 * float32 array, bit-exact with crates/accel/src/minmax.rs.
 *
 * The wrapper interface of offrac_accel_echo.v (512-bit payload in and out
 * with tkeep/tlast, one metadata word per request in and out), plus a
 * status and a detail beside the metadata word out, in the protocol's codes:
 *
 *   0 OK           the result payload follows (same beats and tkeep as the input)
 *   3 TOO_LARGE    more than MAX_BEATS beats; detail = MAX_BEATS * 64 (the maximum, in bytes)
 *   5 BAD_INPUT    empty payload or a length not a multiple of 4 (detail 0), or an
 *                  infinite element (detail = its index, the first one)
 *
 * An error has no payload out. The checks' order is the Rust code's
 * (element_count, then the infinity scan); TOO_LARGE comes first because
 * the node refuses such a request before running it. A request longer than
 * the buffer is still read to its end (nothing stored past MAX_BEATS) and
 * answered, so the stream never stalls and no request goes unanswered.
 *
 * The payload is buffered (MAX_BEATS x 512 bits, one write port, one
 * registered read port: block RAM) because the output needs min and max of
 * the whole input.
 *   1. min/max exactly as nan_min_max_generic: per lane (element j of each
 *      whole 64-byte beat) while the beats come in, a beat a cycle; after
 *      the last beat the 16 lanes folded in order (16 cycles), then the
 *      elements of a partial last beat in order. The order decides which
 *      of -0.0 / +0.0 is the minimum, which the output of a -0.0 element
 *      shows, so it is kept, not just the values.
 *   2. the elements fed from the buffer to offrac_minmax_elem, a pipeline
 *      of fixed latency, one a cycle (the next beat read while the current
 *      one is fed), and its results assembled into beats, each pushed out
 *      the cycle its last element comes out.
 * A request of n elements (b beats) takes about b + 16 + n + 64 cycles
 * with every sink ready: 354 for 1 KB. A stalled sink holds the pipeline.
 *
 * Input beats are assumed as the dispatcher gives them: all but the last
 * full, tkeep a contiguous run from byte 0. Metadata is taken only between
 * requests, data only after its request's metadata. Both outputs are an
 * offrac_axis_reg stage held while the sink stalls.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_accel_minmax #(
    parameter DATA_WIDTH = 512,
    parameter KEEP_WIDTH = DATA_WIDTH / 8,
    parameter META_WIDTH = 128,
    parameter MAX_BEATS  = 512,            // 32 KiB, the software's inline_max_bytes
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
    output wire                   m_meta_tvalid,
    input  wire                   m_meta_tready
);

localparam LANES = 16;   // float32 per beat: the Rust code's LANES, one block per beat

localparam [7:0]
    STATUS_OK        = 8'd0,
    STATUS_TOO_LARGE = 8'd3,
    STATUS_BAD_INPUT = 8'd5;

localparam [31:0] POS_INF = 32'h7F800000;
localparam [31:0] NEG_INF = 32'hFF800000;

localparam [2:0]
    ST_IDLE   = 3'd0,
    ST_IN     = 3'd1,
    ST_STATUS = 3'd2,
    ST_REDUCE = 3'd3,
    ST_TAIL   = 3'd4,
    ST_FETCH  = 3'd5,
    ST_LOAD   = 3'd6,
    ST_NORM   = 3'd7;

// IEEE a < b on float32 bits: false with a NaN, -0 == +0; except that two negatives of the same
// bits give 1. Every use is `if (lt(v, m)) m <= v` (or lt(m, v)), where taking a value with the
// same bits as the one held changes nothing, so one magnitude comparator serves both sign cases
// (two negatives: |a| >= |b|), not a < and a > of 31 bits each.
function lt;
    input [31:0] a, b;
    reg mag_lt;
    begin
        mag_lt = a[30:0] < b[30:0];
        if ((a[30:23] == 8'hFF && a[22:0] != 0) || (b[30:23] == 8'hFF && b[22:0] != 0)) begin
            lt = 1'b0;
        end else if (a[30:0] == 0 && b[30:0] == 0) begin
            lt = 1'b0;
        end else begin
            case ({a[31], b[31]})
                2'b10:   lt = 1'b1;
                2'b01:   lt = 1'b0;
                2'b00:   lt = mag_lt;
                default: lt = !mag_lt;
            endcase
        end
    end
endfunction

reg [2:0]             state = ST_IDLE;
reg [META_WIDTH-1:0]  meta_word;

// what the input showed
reg [ADDR_WIDTH:0]    n_beats;        // beats stored (at most MAX_BEATS)
reg                   too_large;
reg                   any_bytes;
reg                   ragged;
reg                   inf_found;
reg [ADDR_WIDTH+3:0]  inf_index;
reg [KEEP_WIDTH-1:0]  last_keep;
reg [4:0]             tail_n;         // elements in the last beat, 0..16
reg [DATA_WIDTH-1:0]  tail_data;      // the last beat, for the tail's min / max

// the buffer
reg [DATA_WIDTH-1:0]  mem [0:MAX_BEATS-1];
reg [DATA_WIDTH-1:0]  rd_data;

// min / max
reg [31:0]            lane_lo [0:LANES-1];
reg [31:0]            lane_hi [0:LANES-1];
reg [31:0]            lo_reg, hi_reg;
reg [3:0]             el_idx;         // lane being folded, tail element

// the element pass: feeder (buffer -> pipeline) and collector (pipeline -> beats)
reg [DATA_WIDTH-1:0]  cur;            // the beat being fed
reg [ADDR_WIDTH:0]    fb;             // its index
reg [3:0]             fi;             // the element of it fed next
reg                   feed_done;
reg [DATA_WIDTH-1:0]  acc;            // the result beat being assembled
reg [ADDR_WIDTH:0]    ob;             // its index
reg [3:0]             oi;             // the element of it coming next

wire meta_out_free;   // the output stages (offrac_axis_reg) take a beat
wire data_out_free;

assign s_meta_tready = state == ST_IDLE;
assign s_axis_tready = state == ST_IN;
wire meta_take = s_meta_tvalid && s_meta_tready;
wire data_take = s_axis_tvalid && s_axis_tready;

// ---- per-beat checks on the input ---------------------------------------

wire [LANES-1:0] el_whole, el_part, el_inf;
genvar i;
generate
    for (i = 0; i < LANES; i = i + 1) begin : el
        assign el_whole[i] = &s_axis_tkeep[4*i +: 4];
        assign el_part[i]  = |s_axis_tkeep[4*i +: 4] && !el_whole[i];
        assign el_inf[i]   = el_whole[i] && s_axis_tdata[32*i+23 +: 8] == 8'hFF
                             && s_axis_tdata[32*i +: 23] == 23'd0;
    end
endgenerate

reg [3:0] first_inf;
reg [4:0] whole_n;
integer k;
always @* begin
    first_inf = 4'd0;
    whole_n   = 5'd16;
    for (k = LANES - 1; k >= 0; k = k - 1) begin
        if (el_inf[k]) begin
            first_inf = k[3:0];
        end
        if (!el_whole[k]) begin
            whole_n = k[4:0];
        end
    end
end

// ---- min / max per lane while the beats come in (whole beats only) ------

wire whole_beat = &s_axis_tkeep;
integer j;
always @(posedge clk) begin
    for (j = 0; j < LANES; j = j + 1) begin
        if (meta_take) begin
            lane_lo[j] <= POS_INF;
            lane_hi[j] <= NEG_INF;
        end else if (data_take && whole_beat) begin
            // lane j of a whole beat: `if v < m { v } else { m }`
            if (lt(s_axis_tdata[32*j +: 32], lane_lo[j])) begin
                lane_lo[j] <= s_axis_tdata[32*j +: 32];
            end
            if (lt(lane_hi[j], s_axis_tdata[32*j +: 32])) begin
                lane_hi[j] <= s_axis_tdata[32*j +: 32];
            end
        end
    end
end

// ---- the buffer: write while reading in, registered read after -------

wire [ADDR_WIDTH:0] last_beat = n_beats - 1'b1;
wire [ADDR_WIDTH:0] rd_addr   = (state == ST_NORM) ? fb + 1'b1 : {(ADDR_WIDTH+1){1'b0}};

always @(posedge clk) begin
    if (data_take && !too_large && n_beats != MAX_BEATS) begin
        mem[n_beats[ADDR_WIDTH-1:0]] <= s_axis_tdata;
    end
end

always @(posedge clk) begin
    rd_data <= mem[rd_addr[ADDR_WIDTH-1:0]];
end

// ---- the fold: lanes in order, then the tail -----------------------------

wire [31:0] lane_lo_eff = lane_lo[el_idx];
wire [31:0] lane_hi_eff = lane_hi[el_idx];
wire [31:0] tail_el     = tail_data[32*el_idx +: 32];

// ---- the element pipeline -----------------------------------------------

wire [4:0]  n_el_f = (fb == last_beat) ? tail_n : 5'd16;   // elements of the beat fed
wire [4:0]  n_el_o = (ob == last_beat) ? tail_n : 5'd16;   // of the beat collected
wire        feeding = state == ST_NORM && !feed_done && n_el_f != 5'd0;
wire        elem_s_ready;
wire [31:0] elem_y;
wire        elem_m_valid;
wire        o_last_el = {1'b0, oi} == n_el_o - 5'd1;
wire        elem_m_ready = state == ST_NORM && (!o_last_el || data_out_free);
wire        feed_take = feeding && elem_s_ready;
wire        collect   = elem_m_valid && elem_m_ready;
// a last beat without elements (a payload of whole beats and then an empty one): pushed as it is
wire        empty_push = state == ST_NORM && ob == last_beat && tail_n == 5'd0;

offrac_minmax_elem u_elem (
    .clk     (clk),
    .rst     (rst),
    .s_x     (cur[32*fi +: 32]),
    .s_lo    (lo_reg),
    .s_hi    (hi_reg),
    .s_valid (feeding),
    .s_ready (elem_s_ready),
    .m_y     (elem_y),
    .m_valid (elem_m_valid),
    .m_ready (elem_m_ready)
);

reg [DATA_WIDTH-1:0] out_beat;   // acc with the element arriving now in place
always @* begin
    out_beat = acc;
    out_beat[32*oi +: 32] = elem_y;
end

wire push = (collect && o_last_el) || empty_push;
wire push_taken = push && data_out_free;

// ---- the answer -----------------------------------------------------------

reg [7:0]  st_status;
reg [31:0] st_detail;
always @* begin
    st_status = STATUS_OK;
    st_detail = 32'd0;
    if (too_large) begin
        st_status = STATUS_TOO_LARGE;
        st_detail = MAX_BEATS * 64;
    end else if (!any_bytes || ragged) begin
        st_status = STATUS_BAD_INPUT;
    end else if (inf_found) begin
        st_status = STATUS_BAD_INPUT;
        st_detail = {{(32-ADDR_WIDTH-4){1'b0}}, inf_index};
    end
end

always @(posedge clk) begin
    case (state)
        ST_IDLE: begin
            if (meta_take) begin
                meta_word <= s_meta_tdata;
                n_beats   <= 0;
                too_large <= 1'b0;
                any_bytes <= 1'b0;
                ragged    <= 1'b0;
                inf_found <= 1'b0;
                state     <= ST_IN;
            end
        end
        ST_IN: begin
            if (data_take) begin
                if (n_beats == MAX_BEATS) begin
                    too_large <= 1'b1;
                end else begin
                    n_beats <= n_beats + 1'b1;
                end
                any_bytes <= any_bytes || |s_axis_tkeep;
                ragged    <= ragged || |el_part;
                if (!inf_found && |el_inf) begin
                    inf_found <= 1'b1;
                    inf_index <= {n_beats[ADDR_WIDTH-1:0], first_inf};
                end
                if (s_axis_tlast) begin
                    last_keep <= s_axis_tkeep;
                    tail_n    <= whole_n;
                    tail_data <= s_axis_tdata;
                    state     <= ST_STATUS;
                end
            end
        end
        ST_STATUS: begin
            if (meta_out_free) begin
                lo_reg <= POS_INF;
                hi_reg <= NEG_INF;
                el_idx <= 4'd0;
                state  <= (st_status != STATUS_OK) ? ST_IDLE : ST_REDUCE;
            end
        end
        ST_REDUCE: begin
            // the lanes in order
            if (lt(lane_lo_eff, lo_reg)) begin
                lo_reg <= lane_lo_eff;
            end
            if (lt(hi_reg, lane_hi_eff)) begin
                hi_reg <= lane_hi_eff;
            end
            el_idx <= el_idx + 4'd1;
            if (el_idx == 4'd15) begin
                state <= (tail_n == 5'd16 || tail_n == 5'd0) ? ST_FETCH : ST_TAIL;
            end
        end
        ST_TAIL: begin
            // then the elements of a partial last beat one by one
            if (lt(tail_el, lo_reg)) begin
                lo_reg <= tail_el;
            end
            if (lt(hi_reg, tail_el)) begin
                hi_reg <= tail_el;
            end
            el_idx <= el_idx + 4'd1;
            if ({1'b0, el_idx} == tail_n - 5'd1) begin
                state <= ST_FETCH;
            end
        end
        ST_FETCH: begin
            state <= ST_LOAD;   // rd_data is beat 0 from the next cycle
        end
        ST_LOAD: begin
            cur       <= rd_data;
            fb        <= 0;
            fi        <= 4'd0;
            feed_done <= 1'b0;
            ob        <= 0;
            oi        <= 4'd0;
            state     <= ST_NORM;
        end
        default: begin   // ST_NORM
            if (feed_take) begin
                fi <= fi + 4'd1;
                if ({1'b0, fi} == n_el_f - 5'd1) begin
                    fi <= 4'd0;
                    if (fb == last_beat) begin
                        feed_done <= 1'b1;
                    end else begin
                        cur <= rd_data;   // beat fb + 1: read since fb changed, at least a cycle ago
                        fb  <= fb + 1'b1;
                    end
                end
            end
            if (!feed_done && n_el_f == 5'd0) begin
                feed_done <= 1'b1;
            end
            if (collect && !o_last_el) begin
                acc[32*oi +: 32] <= elem_y;
                oi <= oi + 4'd1;
            end
            if (push_taken) begin
                oi <= 4'd0;
                ob <= ob + 1'b1;
                if (ob == last_beat) begin
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
    .s_tdata({out_beat, (ob == last_beat) ? last_keep : {KEEP_WIDTH{1'b1}}, ob == last_beat}), .s_tvalid(push), .s_tready(data_out_free),
    .m_tdata({m_axis_tdata, m_axis_tkeep, m_axis_tlast}),
    .m_tvalid(m_axis_tvalid), .m_tready(m_axis_tready)
);

endmodule

`resetall
