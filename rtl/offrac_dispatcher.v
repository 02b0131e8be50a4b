/*
 * offrac dispatcher: the receive side of the request path (OffRAC §3, Fig. 11).
 *
 * In: TCP payload as a 512-bit AXI-Stream, each beat 1..64 bytes from byte 0
 * (tkeep a low run), tuser = the connection. A connection's bytes are one
 * stream: requests start at any byte offset and a header may straddle beats
 * and segments. Per connection the dispatcher keeps where it is (header,
 * hop extension, payload into a buffer, payload discarded, closed), the
 * bytes of an unfinished header (fewer than 64, and the whole header while
 * its extension is outstanding), and the request it is reading.
 *
 * For each request, as crates/core/src/engine.rs does with no peers, reply
 * endpoints, quotas or shutdown (its small-request queue is SMALL_MAX and
 * SMALL_BYTES, 0: off):
 *   - the header (and its extension when flagged) through
 *     offrac_req_header_parse; bad magic: MALFORMED (request id all ones),
 *     bad version: UNSUPPORTED_VERSION (detail 1), both close the
 *     connection (its later bytes are dropped); any other error: MALFORMED,
 *     the payload skipped (an extension's error carries the request's tenant
 *     and hop index, the header's do not, as in the core);
 *   - a reply device other than 0xFF without DIRECT_REPLY: UNREACHABLE
 *     (detail the device: this node has no reply endpoints);
 *   - each hop from hop_index on: a device neither 0xFF nor DEVICE_ID is
 *     UNREACHABLE (no device table), a function no slot hosts (HOSTED
 *     bitmap) UNKNOWN_FUNCTION, with that hop's index and the device or
 *     function as detail;
 *   - payload_len over MAX_PAYLOAD: TOO_LARGE (detail MAX_PAYLOAD);
 *   - then the single-fragment FIFO (OffRAC §3, the core's small queue):
 *     a request whose payload arrived whole (s_axis_tseg: the bytes of the
 *     beat's segment from it on; the payload is in the header's segment),
 *     64 + payload_len <= SMALL_MAX and small_used + payload_len <=
 *     SMALL_BYTES goes out with m_buf_axis_tsmall / m_req_small set and no
 *     buffer (small_used counts its bytes until small_release_*); one at a
 *     time (the small ring packs one request after another): while one is
 *     being read, another connection's goes to the pool (the core, one
 *     handle_bytes call at a time, cannot see two interleaved);
 *   - else the pool (offrac_pool_admit, inside): a buffer, or BUSY.
 * A refused request's payload is read and dropped; its answer is one
 * response-header beat from offrac_resp_header_build on m_resp_axis_*
 * (tuser = the connection), with no message payload (the software node's
 * answers carry an English message; the RTL's do not). Nothing is dropped
 * silently, and a full pool refuses at once: the receive path only waits
 * for its own outputs.
 * An admitted request's payload goes out on m_buf_axis_* (tuser = the
 * buffer, tlast on its last beat; bytes packed from byte 0, 64 a beat but
 * the last), then the complete request on m_req_* (connection, buffer,
 * request id, tenant, hop index, current function, payload length) as the
 * pool is told `finish`. The pool's `release` comes from outside (the drain,
 * when a request leaves its buffer for a slot queue).
 * A connection's close (abort_*, the engine's handle_close) is taken between
 * beats with no payload beat or complete request waiting to go out: a
 * partial request of it is abandoned (the pool's `abort` of its whole
 * reservation; m_abort_* names the buffer, for the top's buffer memory), the
 * connection's held bytes are forgotten and it starts again between
 * requests, a closed one too.
 *
 * A request's payload goes at line rate: a beat in the middle of it (more
 * payload after it), with the buffer sink ready, is taken and sent in the
 * same cycle from S_IDLE (so is a beat ending the request exactly, which
 * then completes from S_DONE; a skipped payload's or a closed connection's
 * middle beat is counted or dropped there, and a beat leaving a header
 * short of 64 bytes is joined to the bytes held). Any other beat (one that
 * completes a header, or ends one request and starts the next) is worked on
 * one connection at a time, a beat taken only when the last is used up and
 * each cycle one step (a header into the parser, one payload beat, one
 * answer, ...), so such a beat takes a few cycles.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_dispatcher #(
    parameter CONN_COUNT   = 4,
    parameter CONN_WIDTH   = CONN_COUNT > 1 ? $clog2(CONN_COUNT) : 1,
    parameter BUF_COUNT    = 4,
    parameter BUF_BYTES    = 32768,
    parameter BUF_POLICY   = 1,
    parameter BUF_WIDTH    = BUF_COUNT > 1 ? $clog2(BUF_COUNT) : 1,
    parameter MAX_PAYLOAD  = 32768,
    parameter [255:0] HOSTED = 256'h1,
    parameter [7:0] DEVICE_ID = 8'd0,
    // devices a later hop may run on (the chain router forwards it there); a
    // request's current hop must be local: forwarding at admission is not built
    parameter [255:0] PEERS = 256'h0,
    // the single-fragment FIFO (OffRAC §3; the core's small-request queue): a request whose
    // payload is in the same segment as its header's end and 64 + payload_len <= SMALL_MAX
    // skips the pool while the small queue's bytes stay within SMALL_BYTES (SMALL_MAX 0: off)
    parameter SMALL_MAX    = 0,
    parameter SMALL_BYTES  = 0
) (
    input  wire                   clk,
    input  wire                   rst,

    input  wire [511:0]           s_axis_tdata,
    input  wire [63:0]            s_axis_tkeep,
    input  wire [CONN_WIDTH-1:0]  s_axis_tuser,
    // bytes of this beat's segment (one read of the connection) from this beat on, this beat's
    // included: the bytes that arrived with it (the core's one `handle_bytes` call)
    input  wire [31:0]            s_axis_tseg,
    input  wire                   s_axis_tvalid,
    output wire                   s_axis_tready,

    // payload into the chosen buffer
    output wire [511:0]           m_buf_axis_tdata,
    output wire [63:0]            m_buf_axis_tkeep,
    output wire [BUF_WIDTH-1:0]   m_buf_axis_tuser,
    output wire                   m_buf_axis_tlast,
    output wire                   m_buf_axis_tsmall,   // into the small ring, not the buffer
    output wire                   m_buf_axis_tvalid,
    input  wire                   m_buf_axis_tready,

    // complete requests
    output reg  [CONN_WIDTH-1:0]  m_req_conn,
    output reg  [BUF_WIDTH-1:0]   m_req_buffer,
    output reg  [63:0]            m_req_request_id,
    output reg  [15:0]            m_req_tenant,
    output reg  [7:0]             m_req_hop_index,
    output reg  [7:0]             m_req_function,
    output reg  [31:0]            m_req_len,
    output reg  [63:0]            m_req_param,       // the current hop's parameter
    output reg  [7:0]             m_req_hop_count,
    output reg  [1023:0]          m_req_hdr,         // header and extension as on the wire (zero when none)
    // cycles from the beat carrying the header's first byte to the request going out complete
    // (the pool hears `finish` then): the core's reassembly time (Job::reassembly), in cycles
    output reg  [63:0]            m_req_reassembly,
    output reg                    m_req_small,       // a small request: in the small ring, no buffer
    output wire                   m_req_tvalid,
    input  wire                   m_req_tready,

    // answers (refusals): one response-header beat each
    output wire [511:0]           m_resp_axis_tdata,
    output wire [63:0]            m_resp_axis_tkeep,
    output wire [CONN_WIDTH-1:0]  m_resp_axis_tuser,
    output wire                   m_resp_axis_tlast,
    output wire                   m_resp_axis_tvalid,
    input  wire                   m_resp_axis_tready,

    // a request left buffer release_buffer (release_size bytes)
    input  wire                   release_valid,
    input  wire [BUF_WIDTH-1:0]   release_buffer,
    input  wire [31:0]            release_size,
    output wire [BUF_COUNT*32-1:0] buf_used,
    output wire [BUF_COUNT-1:0]   buf_reassembling,
    // a small request left the small queue (release_size bytes; the core's drain of `small`)
    input  wire                   small_release_valid,
    input  wire [31:0]            small_release_size,
    output reg  [31:0]            small_used = 32'd0,  // the small queue's bytes (the core's small_bytes)
    // a connection closed (the core's handle_close): its partial request, if any, is abandoned
    // (the pool's abort) and the connection starts again between requests. Taken when the
    // dispatcher is between beats with no payload beat or complete request waiting to go out, in
    // place of an input beat; m_abort_* says which buffer lost its partial request (one cycle).
    input  wire                   abort_valid,
    input  wire [CONN_WIDTH-1:0]  abort_conn,
    output wire                   abort_ready,
    output reg                    m_abort_valid = 1'b0,
    output reg  [BUF_WIDTH-1:0]   m_abort_buffer = {BUF_WIDTH{1'b0}},
    output reg                    m_abort_small = 1'b0,   // the partial request was a small one
    // per connection: between requests with no bytes held (its index may be given to a new client)
    output wire [CONN_COUNT-1:0]  conn_clean,
    // a request of connection owe_conn will be answered (one frame out of the top): its refusal
    // went into the response builder, or it went out complete; for the top's per-connection count
    output wire                   owe_valid,
    output wire [CONN_WIDTH-1:0]  owe_conn,
    output wire                   busy             // working on a beat, or an output waiting
);

localparam [2:0] RX_HEADER = 3'd0, RX_EXT = 3'd1, RX_PAYLOAD = 3'd2, RX_DISCARD = 3'd3, RX_CLOSED = 3'd4;
localparam [3:0] S_IDLE = 4'd0, S_WORK = 4'd1, S_EXT2 = 4'd2, S_PARSED = 4'd3, S_ADMIT = 4'd4,
                 S_ADMIT_WAIT = 4'd5, S_RESP = 4'd6, S_DONE = 4'd7, S_BUF = 4'd8, S_PROBE = 4'd9;
localparam [15:0] ST_BUSY = 16'd1, ST_UNKNOWN_FUNCTION = 16'd2, ST_TOO_LARGE = 16'd3,
                  ST_MALFORMED = 16'd4, ST_UNSUPPORTED_VERSION = 16'd7, ST_UNREACHABLE = 16'd11;
localparam [3:0] ERR_BAD_MAGIC = 4'd1, ERR_UNUSED_HOP = 4'd7, ERR_RESERVED_BYTES = 4'd8;

// ---- per-connection state ----------------------------------------------
reg [2:0]   c_rx   [0:CONN_COUNT-1];
reg [511:0] c_res  [0:CONN_COUNT-1];   // bytes of an unfinished header
reg [6:0]   c_rlen [0:CONN_COUNT-1];
reg [511:0] c_hdr  [0:CONN_COUNT-1];   // a header waiting for its extension
reg [32:0]  c_rem  [0:CONN_COUNT-1];   // payload bytes still to come
reg [BUF_WIDTH-1:0] c_buf [0:CONN_COUNT-1];
reg [63:0]  c_id   [0:CONN_COUNT-1];
reg [15:0]  c_ten  [0:CONN_COUNT-1];
reg [7:0]   c_hop  [0:CONN_COUNT-1];
reg [7:0]   c_fn   [0:CONN_COUNT-1];
reg [31:0]  c_len  [0:CONN_COUNT-1];
reg [63:0]  c_par  [0:CONN_COUNT-1];
reg [7:0]   c_hcnt [0:CONN_COUNT-1];
reg [1023:0] c_wire [0:CONN_COUNT-1];   // the request's header re-encoded, for the chain router
reg [63:0]  c_first [0:CONN_COUNT-1];   // the cycle its request's first byte came
reg         c_small [0:CONN_COUNT-1];   // its request is a small one

// ---- the connection being worked on ------------------------------------
reg [3:0]   state = S_IDLE;
reg [CONN_WIDTH-1:0] conn = {CONN_WIDTH{1'b0}};
reg [1023:0] w = 1024'd0;      // its bytes, byte 0 first
reg [7:0]   wlen = 8'd0;
reg [2:0]   rx = RX_HEADER;
reg [511:0] hdr = 512'd0;
// The parse under way is of a header whose extension has not arrived, with
// zeros in its place: only the header's own errors count (see S_PARSED).
reg         probing = 1'b0;
reg [32:0]  rem = 33'd0;
reg [BUF_WIDTH-1:0] buf_id = {BUF_WIDTH{1'b0}};
reg [63:0]  req_id = 64'd0;
reg [15:0]  req_tenant = 16'd0;
reg [7:0]   req_hop = 8'd0;
reg [7:0]   req_fn = 8'd0;
reg [31:0]  req_len = 32'd0;
reg [63:0]  req_param = 64'd0;
reg [7:0]   req_hcnt = 8'd0;
reg [1023:0] req_wire = 1024'd0;
reg [63:0]  d_cyc = 64'd0;     // free-running cycle count
reg [63:0]  in_cyc = 64'd0;    // the cycle the beat being worked on was taken
reg [63:0]  first = 64'd0;     // the cycle the current request's first byte was taken
reg         is_small = 1'b0;      // the request read is a small one (no pool buffer)
reg [31:0]  seg_after = 32'd0; // bytes of the beat's segment after the beat
// a small request is being read into the small ring (one at a time: the ring packs one request's
// beats after another's; a second connection's whole small request meanwhile goes to the pool)
reg         small_reasm = 1'b0;

// ---- the parser --------------------------------------------------------
reg  [511:0] p_tdata;
reg          p_tvalid;
wire         p_tready;
wire         h_valid;
reg          h_ready;
wire [3:0]   h_error;
wire [2:0]   h_error_hop;
wire         h_fatal;
wire [7:0]   h_flags;
wire [15:0]  h_tenant;
wire [7:0]   h_hop_count;
wire [7:0]   h_hop_index;
wire [63:0]  h_request_id;
wire [31:0]  h_payload_len;
wire [7:0]   h_reply_device;
wire [23:0]  h_budget_us;
wire [63:0]  h_hop_function;
wire [63:0]  h_hop_device;
wire [511:0] h_hop_param;
wire [63:0]  h_origin_id;

offrac_req_header_parse parse_inst (
    .clk(clk), .rst(rst),
    .s_axis_tdata(p_tdata), .s_axis_tvalid(p_tvalid), .s_axis_tready(p_tready),
    .m_hdr_valid(h_valid), .m_hdr_ready(h_ready),
    .m_hdr_error(h_error), .m_hdr_error_hop(h_error_hop), .m_hdr_fatal(h_fatal),
    .m_hdr_flags(h_flags), .m_hdr_tenant(h_tenant), .m_hdr_hop_count(h_hop_count),
    .m_hdr_hop_index(h_hop_index), .m_hdr_request_id(h_request_id),
    .m_hdr_payload_len(h_payload_len), .m_hdr_reply_device(h_reply_device),
    .m_hdr_budget_us(h_budget_us), .m_hdr_hop_function(h_hop_function),
    .m_hdr_hop_device(h_hop_device), .m_hdr_hop_param(h_hop_param),
    .m_hdr_origin_id(h_origin_id)
);

// ---- the pool ----------------------------------------------------------
wire        abort_take = abort_valid && abort_ready;
wire        part_abort = abort_take && c_rx[abort_conn] == RX_PAYLOAD;
wire        pool_abort = part_abort && !c_small[abort_conn];
wire        small_abort = part_abort && c_small[abort_conn];
reg         a_tvalid;
wire        a_tready;
wire        a_ok;
wire [BUF_WIDTH-1:0] a_buffer;
wire [31:0] a_size;
wire        a_out_valid;
reg         a_out_ready;
reg         fin_valid;

offrac_pool_admit #(
    .BUF_COUNT(BUF_COUNT), .BUF_BYTES(BUF_BYTES), .SIZE_WIDTH(32), .POLICY(BUF_POLICY),
    .ID_WIDTH(BUF_WIDTH)
) pool_inst (
    .clk(clk), .rst(rst),
    .s_admit_size(req_len), .s_admit_tvalid(a_tvalid), .s_admit_tready(a_tready),
    .m_admit_ok(a_ok), .m_admit_buffer(a_buffer), .m_admit_size(a_size),
    .m_admit_tvalid(a_out_valid), .m_admit_tready(a_out_ready),
    .finish_valid(fin_valid && !is_small), .finish_buffer(buf_id),
    .abort_valid(pool_abort), .abort_buffer(c_buf[abort_conn]), .abort_size(c_len[abort_conn]),
    .release_valid(release_valid), .release_buffer(release_buffer), .release_size(release_size),
    .buf_used(buf_used), .buf_reassembling(buf_reassembling)
);

// ---- the response builder ----------------------------------------------
reg         r_valid;
wire        r_ready;
reg [15:0]  r_status = 16'd0;
reg [63:0]  r_id = 64'd0;
reg [15:0]  r_tenant = 16'd0;
reg [7:0]   r_hop = 8'd0;
reg [63:0]  r_detail = 64'd0;
reg [CONN_WIDTH-1:0] resp_conn_reg = {CONN_WIDTH{1'b0}};

offrac_resp_header_build resp_inst (
    .clk(clk), .rst(rst),
    .s_resp_valid(r_valid), .s_resp_ready(r_ready),
    .s_resp_flags(8'd0), .s_resp_status(r_status), .s_resp_hop_index(r_hop),
    .s_resp_device(DEVICE_ID), .s_resp_request_id(r_id), .s_resp_payload_len(32'd0),
    .s_resp_tenant(r_tenant), .s_resp_reassembly_ns(64'd0), .s_resp_queue_ns(64'd0),
    .s_resp_exec_ns(64'd0), .s_resp_detail(r_detail),
    .m_axis_tdata(m_resp_axis_tdata), .m_axis_tkeep(m_resp_axis_tkeep),
    .m_axis_tvalid(m_resp_axis_tvalid), .m_axis_tready(m_resp_axis_tready),
    .m_axis_tlast(m_resp_axis_tlast)
);
// the builder's output stage moves exactly when it takes an input
always @(posedge clk) begin
    if (r_valid && r_ready) begin
        resp_conn_reg <= conn;
    end
end
assign m_resp_axis_tuser = resp_conn_reg;

// ---- decisions on a parsed header ----------------------------------------
// the first hop from hop_index on that cannot run here
reg        chain_bad;
reg [15:0] chain_status;
reg [7:0]  chain_hop;
reg [63:0] chain_detail;
integer i;
always @* begin
    chain_bad    = 1'b0;
    chain_status = 16'd0;
    chain_hop    = 8'd0;
    chain_detail = 64'd0;
    for (i = 7; i >= 0; i = i - 1) begin
        // last to first, so that the first bad hop wins
        if (i >= h_hop_index && i < h_hop_count) begin
            if (h_hop_device[8*i +: 8] != 8'hFF && h_hop_device[8*i +: 8] != DEVICE_ID
                && PEERS[h_hop_device[8*i +: 8]] && i != h_hop_index) begin
                chain_bad    = 1'b0;      // the next device checks the rest (check_chain)
            end else if (h_hop_device[8*i +: 8] != 8'hFF && h_hop_device[8*i +: 8] != DEVICE_ID) begin
                chain_bad    = 1'b1;
                chain_status = ST_UNREACHABLE;
                chain_hop    = i;
                chain_detail = h_hop_device[8*i +: 8];
            end else if (!HOSTED[h_hop_function[8*i +: 8]]) begin
                chain_bad    = 1'b1;
                chain_status = ST_UNKNOWN_FUNCTION;
                chain_hop    = i;
                chain_detail = h_hop_function[8*i +: 8];
            end
        end
    end
end

wire [7:0] cur_fn = h_hop_function[8*h_hop_index[2:0] +: 8];

// the core's small-request rule (engine.rs `admit`): the payload arrived whole (in the same segment
// as the header's end: the bytes in hand after the header plus the segment's later beats), the
// request is small, and the small queue has room for its payload
wire [32:0] seg_have   = {25'd0, wlen} + {1'b0, seg_after};
wire [32:0] small_room = {1'b0, small_used} + {1'b0, h_payload_len};
wire        small_fits = SMALL_MAX != 0 && seg_have >= {1'b0, h_payload_len}
                         && {1'b0, h_payload_len} + 33'd64 <= SMALL_MAX
                         && small_room <= SMALL_BYTES;
wire        small_take = small_fits && !small_reasm;
// the branch of S_PARSED that takes a request into the small queue
wire        admissible = state == S_PARSED && h_valid && !probing && !h_fatal && h_error == 0
                         && !(h_reply_device != 8'hFF && !h_flags[2]) && !chain_bad
                         && h_payload_len <= MAX_PAYLOAD;
wire        small_reserve = admissible && small_take;

// the parsed header as the wire has it (a valid header: its reserved bytes are 0)
reg [1023:0] h_wire;
integer hw;
always @* begin
    h_wire = 1024'd0;
    h_wire[191:0] = {h_budget_us, h_reply_device, h_payload_len, h_request_id, h_hop_index,
                     h_hop_count, h_tenant, h_flags, 8'd1, 16'h4F51};
    for (hw = 0; hw < 8; hw = hw + 1) begin
        h_wire[8*(24 + 10*hw) +: 80] = {h_hop_param[64*hw +: 64], h_hop_device[8*hw +: 8],
                                        h_hop_function[8*hw +: 8]};
    end
    h_wire[895:832] = h_origin_id;
end

// ---- bytes ---------------------------------------------------------------
reg [6:0] in_bytes;
integer k;
always @* begin
    in_bytes = 7'd0;
    for (k = 0; k < 64; k = k + 1) begin
        in_bytes = in_bytes + s_axis_tkeep[k];
    end
end

wire [7:0]  take_pay = (rem < wlen) ? rem[7:0] : wlen;    // bytes of payload in hand
wire [6:0]  beat_pay = (take_pay > 8'd64) ? 7'd64 : take_pay[6:0];
reg [511:0] in_data;   // the beat's bytes, those past tkeep zeroed (they would land in the residue)
integer m;
always @* begin
    for (m = 0; m < 64; m = m + 1) begin
        in_data[8*m +: 8] = s_axis_tkeep[m] ? s_axis_tdata[8*m +: 8] : 8'd0;
    end
end
wire [1023:0] w_in = {512'd0, c_res[s_axis_tuser]}
                   | ({512'd0, in_data} << (8 * c_rlen[s_axis_tuser]));

// The line-rate path: a beat in the middle of a connection's payload (or of bytes it skips) is the
// whole step, taken in S_IDLE itself: the connection holds no bytes there (a payload's beats go out
// as the segments cut them, the buffer memory packs them), so the beat goes out as it came, its
// count off the connection's remaining bytes, and the next beat is taken the next cycle. A beat
// that ends the request (or starts the next) goes the way of every other (S_WORK), but a payload
// beat that ends its request exactly goes out at once and the request completes from S_DONE.
wire [CONN_WIDTH-1:0] f_conn = s_axis_tuser;
wire        f_idle   = state == S_IDLE && s_axis_tvalid && !abort_valid && c_rlen[f_conn] == 7'd0;
wire        f_out_ok = !buf_tvalid || m_buf_axis_tready;
wire        f_more   = {26'd0, in_bytes} < c_rem[f_conn];     // payload still to come after this beat
wire        f_pay    = f_idle && c_rx[f_conn] == RX_PAYLOAD && f_out_ok;
wire        f_mid    = f_pay && f_more;                      // a middle beat: out, stay in S_IDLE
wire        f_end    = f_pay && {26'd0, in_bytes} == c_rem[f_conn];  // the request's last beat, exactly
wire        f_skip   = f_idle && ((c_rx[f_conn] == RX_DISCARD && f_more) || c_rx[f_conn] == RX_CLOSED);
// a beat that leaves a header (or its extension) still short of 64 bytes only joins the bytes held
wire        f_hold   = state == S_IDLE && s_axis_tvalid && !abort_valid
                       && (c_rx[f_conn] == RX_HEADER || c_rx[f_conn] == RX_EXT)
                       && {1'b0, c_rlen[f_conn]} + {1'b0, in_bytes} < 8'd64;

reg [511:0] buf_tdata = 512'd0;
reg [63:0]  buf_tkeep = 64'd0;
reg         buf_tlast = 1'b0;
reg [BUF_WIDTH-1:0] buf_tuser = {BUF_WIDTH{1'b0}};
reg         buf_tvalid = 1'b0;
reg         buf_tsmall = 1'b0;
reg         req_tvalid = 1'b0;

assign abort_ready       = state == S_IDLE && !buf_tvalid && !req_tvalid;
assign s_axis_tready     = state == S_IDLE && !abort_valid;
assign busy = state != S_IDLE || buf_tvalid || req_tvalid || m_resp_axis_tvalid;
genvar gc;
generate
    for (gc = 0; gc < CONN_COUNT; gc = gc + 1) begin : clean
        assign conn_clean[gc] = c_rx[gc] == RX_HEADER && c_rlen[gc] == 0 && !(state != S_IDLE && conn == gc);
    end
endgenerate
assign owe_valid = (state == S_RESP && r_ready) || (state == S_DONE && fin_valid);
assign owe_conn  = conn;
assign m_buf_axis_tdata  = buf_tdata;
assign m_buf_axis_tkeep  = buf_tkeep;
assign m_buf_axis_tuser  = buf_tuser;   // held with its beat: the dispatcher may move on to another connection
assign m_buf_axis_tlast  = buf_tlast;
assign m_buf_axis_tsmall = buf_tsmall;
assign m_buf_axis_tvalid = buf_tvalid;
assign m_req_tvalid      = req_tvalid;

always @* begin
    p_tvalid    = 1'b0;
    p_tdata     = w[511:0];
    h_ready     = 1'b0;
    a_tvalid    = 1'b0;
    a_out_ready = 1'b0;
    r_valid     = 1'b0;
    fin_valid   = 1'b0;
    case (state)
        S_WORK: begin
            if (rx == RX_HEADER && wlen >= 64 && !(w[24] && w[15:0] == 16'h4F51 && w[23:16] == 8'd1)) begin
                p_tvalid = 1'b1;              // a header without extension
            end else if (rx == RX_HEADER && wlen >= 64 && wlen < 128) begin
                p_tvalid = 1'b1;              // a flagged header, its extension not here yet: probe it
            end else if (rx == RX_EXT && wlen >= 64) begin
                p_tvalid = 1'b1;              // the saved header, then its extension
                p_tdata  = hdr;
            end
        end
        S_EXT2:       p_tvalid = 1'b1;
        S_PROBE: begin
            p_tvalid = 1'b1;
            p_tdata  = 512'd0;               // a stand-in extension: it has no errors of its own
        end
        S_PARSED:     h_ready = 1'b1;
        S_ADMIT:      a_tvalid = 1'b1;
        S_ADMIT_WAIT: a_out_ready = 1'b1;
        S_RESP:       r_valid = 1'b1;
        // the complete request goes out once its last payload beat has (at this edge at the latest)
        S_DONE:       fin_valid = (m_req_tready || !req_tvalid) && (m_buf_axis_tready || !buf_tvalid);
        default: ;
    endcase
end

task save;
    begin
        c_rx[conn]   <= rx;
        c_res[conn]  <= w[511:0];
        c_rlen[conn] <= wlen[6:0];
        c_hdr[conn]  <= hdr;
        c_rem[conn]  <= rem;
        c_buf[conn]  <= buf_id;
        c_id[conn]   <= req_id;
        c_ten[conn]  <= req_tenant;
        c_hop[conn]  <= req_hop;
        c_fn[conn]   <= req_fn;
        c_len[conn]  <= req_len;
        c_par[conn]  <= req_param;
        c_hcnt[conn] <= req_hcnt;
        c_wire[conn] <= req_wire;
        c_first[conn] <= first;
        c_small[conn] <= is_small;
        state <= S_IDLE;
    end
endtask

// refuse the parsed request: answer, then skip `skip` bytes (or close)
task refuse(input [15:0] status, input [63:0] id, input [15:0] tenant, input [7:0] hop,
            input [63:0] detail, input [32:0] skip, input close);
    begin
        r_status <= status;
        r_id     <= id;
        r_tenant <= tenant;
        r_hop    <= hop;
        r_detail <= detail;
        rem      <= skip;
        rx       <= close ? RX_CLOSED : (skip == 0 ? RX_HEADER : RX_DISCARD);
        first    <= in_cyc;   // bytes left in this beat begin the next request
        state    <= S_RESP;
    end
endtask

integer c;
always @(posedge clk) begin
    d_cyc <= d_cyc + 1'b1;
    if (m_req_tready) begin
        req_tvalid <= 1'b0;
    end
    if (m_buf_axis_tready) begin
        buf_tvalid <= 1'b0;
    end
    m_abort_valid <= part_abort;
    m_abort_buffer <= c_buf[abort_conn];
    m_abort_small <= small_abort;
    if (small_abort) begin
        small_reasm <= 1'b0;
    end
    // the small queue's bytes: reserved at the decision, freed as a small request leaves the queue
    // (the executor took it) or is abandoned by its connection's close
    small_used <= small_used + (small_reserve ? h_payload_len : 32'd0)
                - (small_release_valid ? small_release_size : 32'd0)
                - (small_abort ? c_len[abort_conn] : 32'd0);
    case (state)
        S_IDLE: begin
            if (abort_take) begin
                // the connection is gone: forget its bytes (a partial request's buffer is aborted above)
                c_rx[abort_conn]   <= RX_HEADER;
                c_rlen[abort_conn] <= 7'd0;
                c_res[abort_conn]  <= 512'd0;
            end else if (f_hold) begin
                c_res[f_conn]  <= w_in[511:0];
                c_rlen[f_conn] <= c_rlen[f_conn] + in_bytes;
                if (c_rx[f_conn] == RX_HEADER && c_rlen[f_conn] == 7'd0) begin
                    c_first[f_conn] <= d_cyc;   // a new request's first byte
                end
            end else if (f_mid || f_skip) begin
                // the line-rate step: the beat out (a payload's), the connection's count down
                if (f_mid) begin
                    buf_tvalid <= 1'b1;
                    buf_tdata  <= in_data;
                    buf_tkeep  <= s_axis_tkeep;
                    buf_tlast  <= 1'b0;
                    buf_tuser  <= c_buf[f_conn];
                    buf_tsmall <= c_small[f_conn];
                end
                if (c_rx[f_conn] != RX_CLOSED) begin
                    c_rem[f_conn] <= c_rem[f_conn] - in_bytes;
                end
            end else if (s_axis_tvalid) begin
                conn       <= s_axis_tuser;
                w          <= w_in;
                wlen       <= c_rlen[s_axis_tuser] + in_bytes;
                rx         <= c_rx[s_axis_tuser];
                hdr        <= c_hdr[s_axis_tuser];
                rem        <= c_rem[s_axis_tuser];
                buf_id     <= c_buf[s_axis_tuser];
                req_id     <= c_id[s_axis_tuser];
                req_tenant <= c_ten[s_axis_tuser];
                req_hop    <= c_hop[s_axis_tuser];
                req_fn     <= c_fn[s_axis_tuser];
                req_len    <= c_len[s_axis_tuser];
                req_param  <= c_par[s_axis_tuser];
                req_hcnt   <= c_hcnt[s_axis_tuser];
                req_wire   <= c_wire[s_axis_tuser];
                is_small      <= c_small[s_axis_tuser];
                seg_after  <= s_axis_tseg > in_bytes ? s_axis_tseg - in_bytes : 32'd0;
                in_cyc     <= d_cyc;
                // a new request's first byte is in this beat when the connection holds none of it
                first      <= (c_rx[s_axis_tuser] == RX_HEADER && c_rlen[s_axis_tuser] == 7'd0)
                              ? d_cyc : c_first[s_axis_tuser];
                state      <= S_WORK;
                if (f_end) begin
                    // the request's last beat, out now: the request completes from S_DONE
                    buf_tvalid <= 1'b1;
                    buf_tdata  <= in_data;
                    buf_tkeep  <= s_axis_tkeep;
                    buf_tlast  <= 1'b1;
                    buf_tuser  <= c_buf[f_conn];
                    buf_tsmall <= c_small[f_conn];
                    w          <= 1024'd0;
                    wlen       <= 8'd0;
                    rem        <= 33'd0;
                    state      <= S_DONE;
                end
            end
        end
        S_WORK: begin
            case (rx)
                RX_HEADER: begin
                    if (wlen < 64) begin
                        save;
                    end else if (w[24] && w[15:0] == 16'h4F51 && w[23:16] == 8'd1) begin
                        // Its extension must be here too before parsing. If it is not
                        // yet, the header alone is checked first: the engine answers a
                        // header's own error at once and skips the extension with the
                        // payload, whether or not the extension ever comes.
                        if (wlen >= 128 || p_tready) begin
                            hdr  <= w[511:0];
                            w    <= w >> 512;
                            wlen <= wlen - 64;
                            rx   <= RX_EXT;
                        end
                        if (wlen < 128 && p_tready) begin
                            probing <= 1'b1;
                            state   <= S_PROBE;
                        end
                    end else if (p_tready) begin
                        w     <= w >> 512;
                        wlen  <= wlen - 64;
                        state <= S_PARSED;
                    end
                end
                RX_EXT: begin
                    if (wlen < 64) begin
                        save;
                    end else if (p_tready) begin
                        state <= S_EXT2;
                    end
                end
                RX_PAYLOAD: begin
                    if (wlen == 0) begin
                        save;
                    end else if (!buf_tvalid || m_buf_axis_tready) begin
                        buf_tvalid <= 1'b1;
                        buf_tdata  <= w[511:0];
                        buf_tkeep  <= {64{1'b1}} >> (64 - beat_pay);
                        buf_tlast  <= rem == beat_pay;
                        buf_tuser  <= buf_id;
                        buf_tsmall <= is_small;
                        w    <= w >> (8 * beat_pay);
                        wlen <= wlen - beat_pay;
                        rem  <= rem - beat_pay;
                        if (rem == beat_pay) begin
                            state <= S_DONE;
                        end else if (wlen == {1'b0, beat_pay}) begin
                            // the beat used up, the request not: the connection waits for its next
                            save;
                            c_res[conn]  <= 512'd0;
                            c_rlen[conn] <= 7'd0;
                            c_rem[conn]  <= rem - beat_pay;
                        end
                    end
                end
                RX_DISCARD: begin
                    if (wlen == 0 || (wlen == take_pay && rem != take_pay)) begin
                        save;
                        c_res[conn]  <= 512'd0;
                        c_rlen[conn] <= 7'd0;
                        c_rem[conn]  <= rem - take_pay;
                    end
                    w    <= w >> (8 * take_pay);
                    wlen <= wlen - take_pay;
                    rem  <= rem - take_pay;
                    if (rem == take_pay) begin
                        rx    <= RX_HEADER;
                        first <= in_cyc;
                    end
                end
                default: begin                // closed: the rest is dropped
                    save;
                    c_rlen[conn] <= 7'd0;
                end
            endcase
        end
        S_PROBE: begin
            if (p_tready) begin
                state <= S_PARSED;
            end
        end
        S_EXT2: begin
            if (p_tready) begin
                w     <= w >> 512;
                wlen  <= wlen - 64;
                state <= S_PARSED;
            end
        end
        S_PARSED: begin
            if (h_valid && probing) begin
                probing <= 1'b0;
                if (h_error == 0) begin
                    state <= S_WORK;          // a sound header: wait for its extension (RX_EXT)
                end else begin
                    // answered now; the extension is skipped with the payload
                    refuse(ST_MALFORMED, h_request_id, 16'd0, 8'd0, 64'd0, 33'd64 + h_payload_len, 1'b0);
                end
            end else if (h_valid) begin
                req_id     <= h_request_id;
                req_tenant <= h_tenant;
                req_hop    <= h_hop_index;
                req_fn     <= cur_fn;
                req_len    <= h_payload_len;
                req_param  <= h_hop_param[64*h_hop_index[2:0] +: 64];
                req_hcnt   <= h_hop_count;
                req_wire   <= h_wire;
                if (h_fatal) begin
                    if (h_error == ERR_BAD_MAGIC) begin
                        refuse(ST_MALFORMED, {64{1'b1}}, 16'd0, 8'd0, 64'd0, 33'd0, 1'b1);
                    end else begin
                        refuse(ST_UNSUPPORTED_VERSION, h_request_id, 16'd0, 8'd0, 64'd1, 33'd0, 1'b1);
                    end
                end else if (h_error == ERR_RESERVED_BYTES
                             || (h_error == ERR_UNUSED_HOP && h_error_hop >= 4)) begin
                    refuse(ST_MALFORMED, h_request_id, h_tenant, h_hop_index, 64'd0, h_payload_len, 1'b0);
                end else if (h_error != 0) begin
                    refuse(ST_MALFORMED, h_request_id, 16'd0, 8'd0, 64'd0, h_payload_len, 1'b0);
                end else if (h_reply_device != 8'hFF && !h_flags[2]) begin
                    refuse(ST_UNREACHABLE, h_request_id, h_tenant, 8'd0, h_reply_device, h_payload_len, 1'b0);
                end else if (chain_bad) begin
                    refuse(chain_status, h_request_id, h_tenant, chain_hop, chain_detail, h_payload_len, 1'b0);
                end else if (h_payload_len > MAX_PAYLOAD) begin
                    refuse(ST_TOO_LARGE, h_request_id, h_tenant, h_hop_index, MAX_PAYLOAD, h_payload_len, 1'b0);
                end else if (small_take) begin
                    // the single-fragment FIFO: no pool buffer, the small queue's bytes reserved
                    is_small <= 1'b1;
                    small_reasm <= 1'b1;
                    rem   <= h_payload_len;
                    if (h_payload_len == 0) begin
                        state <= S_DONE;
                    end else begin
                        rx    <= RX_PAYLOAD;
                        state <= S_WORK;
                    end
                end else begin
                    is_small <= 1'b0;
                    state <= S_ADMIT;
                end
            end
        end
        S_ADMIT: begin
            if (a_tready) begin
                state <= S_ADMIT_WAIT;
            end
        end
        S_ADMIT_WAIT: begin
            if (a_out_valid) begin
                if (!a_ok) begin
                    refuse(ST_BUSY, req_id, req_tenant, req_hop, 64'd0, req_len, 1'b0);
                end else begin
                    buf_id <= a_buffer;
                    rem    <= req_len;
                    if (req_len == 0) begin
                        state <= S_DONE;
                    end else begin
                        rx    <= RX_PAYLOAD;
                        state <= S_WORK;
                    end
                end
            end
        end
        S_RESP: begin
            if (r_ready) begin
                state <= S_WORK;
            end
        end
        S_DONE: begin
            if (fin_valid) begin               // the pool hears `finish` as the request goes out
                req_tvalid       <= 1'b1;
                m_req_conn       <= conn;
                m_req_buffer     <= buf_id;
                m_req_request_id <= req_id;
                m_req_tenant     <= req_tenant;
                m_req_hop_index  <= req_hop;
                m_req_function   <= req_fn;
                m_req_len        <= req_len;
                m_req_param      <= req_param;
                m_req_hop_count  <= req_hcnt;
                m_req_hdr        <= req_wire;
                m_req_reassembly <= d_cyc - first;
                m_req_small      <= is_small;
                if (is_small) begin
                    small_reasm <= 1'b0;
                end
                rx    <= RX_HEADER;
                first <= in_cyc;
                state <= S_WORK;
                if (wlen == 0) begin
                    // nothing more in hand: the connection is between requests, take the next beat
                    save;
                    c_rx[conn] <= RX_HEADER;
                end
            end
        end
        default: state <= S_IDLE;
    endcase

    if (rst) begin
        state      <= S_IDLE;
        probing    <= 1'b0;
        req_tvalid <= 1'b0;
        buf_tvalid <= 1'b0;
        m_abort_valid <= 1'b0;
        m_abort_small <= 1'b0;
        small_used <= 32'd0;
        small_reasm <= 1'b0;
        for (c = 0; c < CONN_COUNT; c = c + 1) begin
            c_rx[c]   <= RX_HEADER;
            c_rlen[c] <= 7'd0;
            c_res[c]  <= 512'd0;
            c_small[c] <= 1'b0;
        end
    end
end

// ---- parameter checks, at elaboration ---------------------------------------
// A parameter set the software node would refuse as a configuration (crates/core/src/config.rs
// `validate`), or that the widths cannot hold, fails the build instead of misbehaving: Verilator
// (an error with -Werror-USERERROR, which the Verilated build passes beside -Wno-fatal) and Yosys
// print the $error; Icarus 11, which does not parse elaboration tasks, stops at the instance of a
// module that does not exist, named after the rule (Verilator resolves every instance, in a
// generate branch not taken too, so that one is for Icarus only).
generate
    if (CONN_COUNT < 1 || (CONN_COUNT > 1 && CONN_WIDTH < $clog2(CONN_COUNT))) begin : bad_conn
`ifdef __ICARUS__
        offrac_bad_parameter__CONN_COUNT_or_CONN_WIDTH bad ();
`else
        $error("offrac_dispatcher: CONN_COUNT (%0d) must be at least 1 and fit CONN_WIDTH (%0d) bits",
               CONN_COUNT, CONN_WIDTH);
`endif
    end
    if (BUF_COUNT < 1 || (BUF_COUNT > 1 && BUF_WIDTH < $clog2(BUF_COUNT))) begin : bad_buf
`ifdef __ICARUS__
        offrac_bad_parameter__BUF_COUNT_or_BUF_WIDTH bad ();
`else
        $error("offrac_dispatcher: BUF_COUNT (%0d) must be at least 1 and fit BUF_WIDTH (%0d) bits",
               BUF_COUNT, BUF_WIDTH);
`endif
    end
    if (BUF_POLICY < 0 || BUF_POLICY > 2) begin : bad_policy
`ifdef __ICARUS__
        offrac_bad_parameter__BUF_POLICY_not_0_1_2 bad ();
`else
        $error("offrac_dispatcher: BUF_POLICY (%0d) must be 0 (Naive RR), 1 (Eligible RR) or 2 (JSB)",
               BUF_POLICY);
`endif
    end
    if (MAX_PAYLOAD > BUF_BYTES) begin : bad_payload
`ifdef __ICARUS__
        offrac_bad_parameter__MAX_PAYLOAD_above_BUF_BYTES bad ();
`else
        $error("offrac_dispatcher: MAX_PAYLOAD (%0d) exceeds BUF_BYTES (%0d): such a request could never be admitted",
               MAX_PAYLOAD, BUF_BYTES);
`endif
    end
    if (SMALL_MAX != 0 && SMALL_BYTES < SMALL_MAX) begin : bad_small
`ifdef __ICARUS__
        offrac_bad_parameter__SMALL_BYTES_below_SMALL_MAX bad ();
`else
        $error("offrac_dispatcher: SMALL_BYTES (%0d) is below SMALL_MAX (%0d)", SMALL_BYTES, SMALL_MAX);
`endif
    end
endgenerate

endmodule

`resetall
