/*
 * offrac request path: the node's datapath from TCP payload in to response
 * bytes out (OffRAC §3, Fig. 11), composed of the dispatcher, a buffer
 * memory, a queue of complete requests, one accelerator per hosted function
 * (echo 0, top-k 1, min-max 3, MapId 6, SparseTransform 7, Bucketize 8),
 * the chain router with its chain buffer,
 * and the response path; m_net_axis_* is the egress of hops forwarded to
 * another device.
 *
 * In (s_axis_*): TCP payload beats of any connection, 1..64 bytes from
 * byte 0 (tkeep a low run), tuser = the connection, as the dispatcher takes
 * them. Out (m_axis_*): the response bytes of every connection, tuser = the
 * connection, tlast on each response's last beat; a response is our 64-byte
 * response header as one beat (tkeep all ones) followed by its result
 * payload packed from byte 0 (tkeep a low run on the last beat). A
 * response's beats are never interleaved with another's.
 *
 * - The dispatcher's admitted payload goes into the buffer memory: per
 *   buffer a ring of RING beats. The dispatcher's beats are as full as the
 *   segments made them (1..64 bytes from byte 0), so per buffer the bytes
 *   are packed into whole beats (a residue of up to 63 bytes per buffer)
 *   and a request's last bytes written as a partial beat; one write a
 *   cycle, so a last beat that makes two (residue plus beat over 64 bytes)
 *   holds the dispatcher for one cycle. A buffer may hold several complete requests
 *   (the pool counts bytes), each in whole beats, so the ring has room for
 *   BUF_BYTES / 64 beats plus one partial beat for every request it can hold
 *   at once (the queue's DESC_DEPTH, one executing and one reassembling).
 * - Complete requests (m_req_* of the dispatcher) go into a FIFO of
 *   DESC_DEPTH descriptors with their start beat in the ring and the cycle
 *   they were queued. While the FIFO is full the dispatcher waits with its
 *   complete request (it can still have answered everything before).
 * - The executor runs one hop at a time: a chained hop waiting in the
 *   chain buffer first (as the software's chained queue goes before the
 *   pool), else the next complete request in completion order. It sends the
 *   hop parameter (K for top-k, bits [63:0] of the metadata word) to the
 *   function's accelerator, reads the payload beats (two cycles a beat) from
 *   the ring, or from the chain buffer, into it, and releases the bytes in
 *   the pool when the last ring beat has been read (as the core releases a
 *   request leaving its buffer; a chained hop holds no pool bytes). An empty
 *   payload goes to top-k and MapId as one beat with tkeep 0 (they answer
 *   BAD_INPUT, as the software does); echo answers it without the
 *   accelerator.
 * - The hop's outcome goes to the chain router (offrac_chain_router.v) when
 *   the accelerator's metadata word comes out: the request's header, the
 *   status and detail (echo: OK), the result length (OK: echo and MapId the
 *   payload's length, top-k 4 * min(K, n)), timings in cycles summed over
 *   the chain's hops here (queue = queued until the executor took it, exec
 *   = taken until the metadata word, reassembly = the dispatcher's first
 *   byte to complete, for a chained hop to the end of the hop before it, as
 *   Job::advance), the per-hop timings block of a TRACE request (this hop's
 *   record over the earlier hops', which ride with a chained hop), then
 *   the result beats as they come. The router answers (our response header,
 *   the OK result; an error has no payload: the software's English message
 *   is not sent), or hands the next local hop to the chain buffer (its
 *   header, then the result as its payload; MAX_PAYLOAD bytes, one hop at a
 *   time), or forwards the request on m_net_axis_* (tdest the device) when
 *   the next hop is on a device in PEERS. The executor takes the next hop
 *   once the router is done with this one.
 * - The dispatcher's refusals (one header beat each) and the router's
 *   responses are merged frame by frame (alternating when both wait) into
 *   one output register stage.
 * - A connection's close (s_abort_*, the core's handle_close) goes to the
 *   dispatcher between input beats: its partial request, if any, is
 *   dropped (the pool's abort), and the next cycle that buffer's ring write
 *   pointer goes back to where its complete requests end, its packing
 *   residue cleared; nothing is answered. It waits while the dispatcher's
 *   payload beat or complete request, or a tail write here, is pending, so
 *   that no request of the buffer is still to be described.
 *
 * A request's current hop must be local (the dispatcher answers a peer
 * UNREACHABLE: forwarding at admission is not built). MapId's dictionary
 * comes on s_cfg_* (see offrac_accel_mapid.v), Bucketize's border sets on
 * s_bcfg_* (see offrac_accel_bucketize.v); both survive a reset. A hop
 * error's detail is the accelerator's, but 0 for BAD_INPUT, as the
 * software's worker answers it (Bucketize's set count or NaN index stays
 * inside).
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_request_path #(
    parameter CONN_COUNT  = 4,
    parameter CONN_WIDTH  = CONN_COUNT > 1 ? $clog2(CONN_COUNT) : 1,
    parameter BUF_COUNT   = 4,
    parameter BUF_BYTES   = 32768,
    parameter BUF_POLICY  = 1,
    parameter BUF_WIDTH   = BUF_COUNT > 1 ? $clog2(BUF_COUNT) : 1,
    parameter MAX_PAYLOAD = 16384,
    parameter DESC_DEPTH  = 8,
    parameter [7:0] DEVICE_ID = 8'd0,
    parameter TOPK_K_MAX  = 64,
    parameter MAPID_TABLE_BITS = 16,
    parameter MAPID_MAX_BEATS  = (MAX_PAYLOAD + 63) / 64,   // MapId's result buffer takes the largest payload
    parameter BUCKET_SETS_MAX    = 4,
    parameter BUCKET_BORDERS_MAX = 32,
    parameter [255:0] PEERS = 256'h0,  // devices a later hop may be forwarded to (m_net_axis_*)
    // the single-fragment FIFO (the core's small_request_max and small_queue_bytes; 0: off);
    // its ring is the size of a buffer's, so SMALL_BYTES <= BUF_BYTES
    parameter SMALL_MAX   = 0,
    parameter SMALL_BYTES = 0
) (
    input  wire                   clk,
    input  wire                   rst,

    input  wire [511:0]           s_axis_tdata,
    input  wire [63:0]            s_axis_tkeep,
    input  wire [CONN_WIDTH-1:0]  s_axis_tuser,
    input  wire [31:0]            s_axis_tseg,    // bytes of the beat's segment from it on (the dispatcher's)
    input  wire                   s_axis_tvalid,
    output wire                   s_axis_tready,

    output wire [511:0]           m_axis_tdata,
    output wire [63:0]            m_axis_tkeep,
    output wire [CONN_WIDTH-1:0]  m_axis_tuser,
    output wire                   m_axis_tlast,
    output wire                   m_axis_tvalid,
    input  wire                   m_axis_tready,

    // a chain's hop on another device: the request, forwarded (tdest the device, tuser the connection)
    output wire [511:0]           m_net_axis_tdata,
    output wire [63:0]            m_net_axis_tkeep,
    output wire [CONN_WIDTH-1:0]  m_net_axis_tuser,
    output wire [7:0]             m_net_axis_tdest,
    output wire                   m_net_axis_tlast,
    output wire                   m_net_axis_tvalid,
    input  wire                   m_net_axis_tready,

    // MapId's dictionary, one packet of 32-bit keys
    input  wire [31:0]            s_cfg_tdata,
    input  wire [3:0]             s_cfg_tkeep,
    input  wire                   s_cfg_tvalid,
    output wire                   s_cfg_tready,
    input  wire                   s_cfg_tlast,
    output wire [MAPID_TABLE_BITS:0] cfg_dict_size,
    output wire                   cfg_overflow,

    // Bucketize's border sets, one packet of 32-bit words (offrac_accel_bucketize.v)
    input  wire [31:0]            s_bcfg_tdata,
    input  wire                   s_bcfg_tvalid,
    output wire                   s_bcfg_tready,
    input  wire                   s_bcfg_tlast,
    output wire [7:0]             bcfg_sets,
    output wire                   bcfg_error,

    // a connection closed (the reactor saw it go): its partial request, if any, is dropped and its
    // buffer's bytes freed (the core's handle_close); taken between input beats
    input  wire                   s_abort_valid,
    input  wire [CONN_WIDTH-1:0]  s_abort_conn,
    output wire                   s_abort_ready,

    output wire [63:0]            cycles,         // free-running cycle count
    // for the driver: connections between requests, and nothing in flight anywhere
    output wire [CONN_COUNT-1:0]  conn_clean,
    // per connection: answers still to come out (on m_axis_* or m_net_axis_*) for requests the
    // dispatcher has refused or completed; with conn_clean, the connection's own work is done
    output wire [CONN_COUNT-1:0]  conn_owed,
    output wire                   idle
);

localparam RING_BEATS = BUF_BYTES / 64 + DESC_DEPTH + 2;
localparam RING_WIDTH = $clog2(RING_BEATS);
// rings 0..BUF_COUNT-1 are the buffers', ring BUF_COUNT the small queue's
localparam RB_WIDTH = BUF_WIDTH + 1;
localparam [RB_WIDTH-1:0] SMALL_RING = BUF_COUNT;
localparam DESC_WIDTH_FIFO = DESC_DEPTH > 1 ? $clog2(DESC_DEPTH) : 1;
localparam [255:0] HOSTED = 256'h1CB;   // functions 0, 1, 3, 6, 7 and 8
localparam [7:0] FN_ECHO = 8'd0, FN_TOPK = 8'd1, FN_MINMAX = 8'd3, FN_MAPID = 8'd6, FN_SPARSE = 8'd7,
                 FN_BUCKET = 8'd8;
localparam ACC_BEATS = (MAX_PAYLOAD + 63) / 64;   // min-max, SparseTransform, Bucketize buffers

reg [63:0] cyc = 64'd0;
assign cycles = cyc;

// ---- the dispatcher ------------------------------------------------------
wire [511:0]          b_tdata;
wire [63:0]           b_tkeep;
wire [BUF_WIDTH-1:0]  b_tuser;
wire                  b_tlast;
wire                  b_tsmall;
wire                  b_tvalid;
wire                  b_tready;

wire [CONN_WIDTH-1:0] q_conn;
wire [BUF_WIDTH-1:0]  q_buffer;
wire [63:0]           q_id;
wire [15:0]           q_tenant;
wire [7:0]            q_hop;
wire [7:0]            q_fn;
wire [31:0]           q_len;
wire [63:0]           q_param;
wire [7:0]            q_hcnt;
wire [1023:0]         q_hdr;
wire [63:0]           q_reasm;
wire                  q_small;
wire                  q_tvalid;
wire                  q_tready;

wire [511:0]          d_tdata;
wire [63:0]           d_tkeep;
wire [CONN_WIDTH-1:0] d_tuser;
wire                  d_tlast;
wire                  d_tvalid;
wire                  d_tready;

wire                  d_busy;
wire                  owe_valid;      // a request of owe_conn will be answered
wire [CONN_WIDTH-1:0] owe_conn;
wire                  d_abort_ready;
reg                   fl_valid = 1'b0;  // a request's tail still to write (the buffer memory's packing)
assign s_abort_ready = d_abort_ready && !fl_valid;
wire                  ab_valid;        // a buffer lost its partial request: its ring goes back
wire [BUF_WIDTH-1:0]  ab_buffer;
wire                  ab_small;
wire [RB_WIDTH-1:0]   ab_ring = ab_small ? SMALL_RING : {1'b0, ab_buffer};
reg                   rel_valid = 1'b0;
reg                   rel_small = 1'b0;   // the request released was a small one
reg  [BUF_WIDTH-1:0]  rel_buffer = {BUF_WIDTH{1'b0}};
reg  [31:0]           rel_size = 32'd0;

offrac_dispatcher #(
    .CONN_COUNT(CONN_COUNT), .CONN_WIDTH(CONN_WIDTH), .BUF_COUNT(BUF_COUNT),
    .BUF_BYTES(BUF_BYTES), .BUF_POLICY(BUF_POLICY), .BUF_WIDTH(BUF_WIDTH),
    .MAX_PAYLOAD(MAX_PAYLOAD), .HOSTED(HOSTED), .DEVICE_ID(DEVICE_ID), .PEERS(PEERS),
    .SMALL_MAX(SMALL_MAX), .SMALL_BYTES(SMALL_BYTES)
) disp_inst (
    .clk(clk), .rst(rst),
    .s_axis_tdata(s_axis_tdata), .s_axis_tkeep(s_axis_tkeep), .s_axis_tuser(s_axis_tuser),
    .s_axis_tseg(s_axis_tseg), .s_axis_tvalid(s_axis_tvalid), .s_axis_tready(s_axis_tready),
    .m_buf_axis_tdata(b_tdata), .m_buf_axis_tkeep(b_tkeep), .m_buf_axis_tuser(b_tuser),
    .m_buf_axis_tlast(b_tlast), .m_buf_axis_tsmall(b_tsmall), .m_buf_axis_tvalid(b_tvalid), .m_buf_axis_tready(b_tready),
    .m_req_conn(q_conn), .m_req_buffer(q_buffer), .m_req_request_id(q_id),
    .m_req_tenant(q_tenant), .m_req_hop_index(q_hop), .m_req_function(q_fn),
    .m_req_len(q_len), .m_req_param(q_param), .m_req_hop_count(q_hcnt), .m_req_hdr(q_hdr),
    .m_req_reassembly(q_reasm), .m_req_small(q_small),
    .m_req_tvalid(q_tvalid), .m_req_tready(q_tready),
    .m_resp_axis_tdata(d_tdata), .m_resp_axis_tkeep(d_tkeep), .m_resp_axis_tuser(d_tuser),
    .m_resp_axis_tlast(d_tlast), .m_resp_axis_tvalid(d_tvalid), .m_resp_axis_tready(d_tready),
    .release_valid(rel_valid && !rel_small), .release_buffer(rel_buffer), .release_size(rel_size),
    .buf_used(), .buf_reassembling(),
    .small_release_valid(rel_valid && rel_small), .small_release_size(rel_size), .small_used(),
    .abort_valid(s_abort_valid && !fl_valid), .abort_conn(s_abort_conn), .abort_ready(d_abort_ready),
    .m_abort_valid(ab_valid), .m_abort_buffer(ab_buffer), .m_abort_small(ab_small),
    .conn_clean(conn_clean), .owe_valid(owe_valid), .owe_conn(owe_conn), .busy(d_busy)
);

// ---- per connection: answers owed ------------------------------------------
reg  [15:0]           owed [0:CONN_COUNT-1];
wire                  paid_out = m_axis_tvalid && m_axis_tready && m_axis_tlast;
wire                  paid_net = m_net_axis_tvalid && m_net_axis_tready && m_net_axis_tlast;
integer oi;
always @(posedge clk) begin
    for (oi = 0; oi < CONN_COUNT; oi = oi + 1) begin
        owed[oi] <= owed[oi] + (owe_valid && owe_conn == oi)
                  - (paid_out && m_axis_tuser == oi) - (paid_net && m_net_axis_tuser == oi);
        if (rst) owed[oi] <= 16'd0;
    end
end
genvar og;
generate
    for (og = 0; og < CONN_COUNT; og = og + 1) begin : owed_bits
        assign conn_owed[og] = owed[og] != 16'd0;
    end
endgenerate

// ---- the buffer memory: a ring of beats per buffer -----------------------
reg [511:0]          mem [0:(BUF_COUNT + 1)*(1 << RING_WIDTH)-1];
reg [RING_WIDTH-1:0] wp [0:BUF_COUNT];      // next beat written
reg [RING_WIDTH-1:0] hp [0:BUF_COUNT];      // first beat of the next request described
reg [RING_WIDTH-1:0] rd_addr = {RING_WIDTH{1'b0}};
reg [RB_WIDTH-1:0]   rd_buf = {RB_WIDTH{1'b0}};
reg [511:0]          rd_data;

function [RING_WIDTH-1:0] ring_next(input [RING_WIDTH-1:0] p);
    ring_next = (p == RING_BEATS - 1) ? {RING_WIDTH{1'b0}} : p + 1'b1;
endfunction

function [RING_WIDTH-1:0] ring_add(input [RING_WIDTH-1:0] p, input [31:0] n);
    reg [31:0] s;
    begin
        s = p + n;
        ring_add = (s >= RING_BEATS) ? s - RING_BEATS : s;
    end
endfunction

wire [31:0] q_beats = (q_len + 32'd63) >> 6;

// packing: per buffer the bytes not yet a whole beat
reg [511:0]         pend [0:BUF_COUNT];
reg [5:0]           pend_n [0:BUF_COUNT];
reg [RB_WIDTH-1:0]  fl_buf = {RB_WIDTH{1'b0}};
wire [RB_WIDTH-1:0] b_ring = b_tsmall ? SMALL_RING : {1'b0, b_tuser};
reg [511:0]         fl_data = 512'd0;
assign b_tready = !fl_valid;
wire b_take = b_tvalid && b_tready;

reg [6:0] b_n;
reg [511:0] b_masked;
integer bk;
always @* begin
    b_n = 7'd0;
    for (bk = 0; bk < 64; bk = bk + 1) begin
        b_n = b_n + b_tkeep[bk];
        b_masked[8*bk +: 8] = b_tkeep[bk] ? b_tdata[8*bk +: 8] : 8'd0;
    end
end
wire [1023:0] b_comb  = {512'd0, pend[b_ring]} | ({512'd0, b_masked} << (8 * pend_n[b_ring]));
wire [7:0]    b_total = pend_n[b_ring] + b_n;

// ---- the queue of complete requests --------------------------------------
// and of the small ones (the single-fragment FIFO's descriptors), DESC_DEPTH each
localparam QW = 64 + 1024 + CONN_WIDTH + RB_WIDTH + RING_WIDTH + 64 + 16 + 8 + 8 + 32 + 64 + 64;
reg [QW-1:0] fifo [0:DESC_DEPTH-1];
reg [DESC_WIDTH_FIFO:0] f_count = 0;
reg [DESC_WIDTH_FIFO-1:0] f_wr = 0, f_rd = 0;
reg [QW-1:0] sfifo [0:DESC_DEPTH-1];
reg [DESC_WIDTH_FIFO:0] s_count = 0;
reg [DESC_WIDTH_FIFO-1:0] s_wr = 0, s_rd = 0;
assign q_tready = q_small ? s_count < DESC_DEPTH : f_count < DESC_DEPTH;
wire q_take = q_tvalid && q_tready && !q_small;
wire s_take = q_tvalid && q_tready && q_small;
wire [RB_WIDTH-1:0] q_ring = q_small ? SMALL_RING : {1'b0, q_buffer};
wire [QW-1:0] q_desc = {q_reasm, q_hdr, q_conn, q_ring, hp[q_ring], q_id, q_tenant, q_hop, q_fn, q_len, q_param, cyc};
wire f_pop, s_pop;

integer bi;
always @(posedge clk) begin
    cyc <= cyc + 1'b1;
    if (fl_valid) begin
        mem[{fl_buf, wp[fl_buf]}] <= fl_data;
        wp[fl_buf] <= ring_next(wp[fl_buf]);
        fl_valid <= 1'b0;
    end else if (b_take) begin
        if (b_total >= 64 || b_tlast) begin
            mem[{b_ring, wp[b_ring]}] <= b_comb[511:0];
            wp[b_ring] <= ring_next(wp[b_ring]);
            pend[b_ring]   <= b_tlast ? 512'd0 : b_comb[1023:512];
            pend_n[b_ring] <= b_tlast ? 6'd0 : b_total - 8'd64;
            if (b_tlast && b_total > 64) begin
                fl_valid <= 1'b1;
                fl_buf   <= b_ring;
                fl_data  <= b_comb[1023:512];
            end
        end else begin
            pend[b_ring]   <= b_comb[511:0];
            pend_n[b_ring] <= b_total[5:0];
        end
    end
    if (q_take) begin
        fifo[f_wr] <= q_desc;
        f_wr <= (f_wr == DESC_DEPTH - 1) ? 0 : f_wr + 1'b1;
    end
    if (s_take) begin
        sfifo[s_wr] <= q_desc;
        s_wr <= (s_wr == DESC_DEPTH - 1) ? 0 : s_wr + 1'b1;
    end
    if (q_take || s_take) begin
        hp[q_ring] <= ring_add(hp[q_ring], q_beats);
    end
    if (f_pop) begin
        f_rd <= (f_rd == DESC_DEPTH - 1) ? 0 : f_rd + 1'b1;
    end
    if (s_pop) begin
        s_rd <= (s_rd == DESC_DEPTH - 1) ? 0 : s_rd + 1'b1;
    end
    f_count <= f_count + q_take - f_pop;
    s_count <= s_count + s_take - s_pop;
    rd_data <= mem[{rd_buf, rd_addr}];
    if (ab_valid) begin
        // the abandoned request's beats and residue are dropped: the buffer's ring ends where its
        // complete requests end (the dispatcher took the abort with none of them still to describe)
        wp[ab_ring]     <= hp[ab_ring];
        pend[ab_ring]   <= 512'd0;
        pend_n[ab_ring] <= 6'd0;
    end
    if (rst) begin
        f_count <= 0;
        f_wr <= 0;
        f_rd <= 0;
        s_count <= 0;
        s_wr <= 0;
        s_rd <= 0;
        fl_valid <= 1'b0;
        for (bi = 0; bi <= BUF_COUNT; bi = bi + 1) begin
            pend[bi]   <= 512'd0;
            pend_n[bi] <= 6'd0;
            wp[bi] <= {RING_WIDTH{1'b0}};
            hp[bi] <= {RING_WIDTH{1'b0}};
        end
    end
end

wire [CONN_WIDTH-1:0] h_conn;
wire [RB_WIDTH-1:0]   h_buffer;   // its ring (SMALL_RING: a small request)
wire [RING_WIDTH-1:0] h_start;
wire [63:0]           h_id;
wire [15:0]           h_tenant;
wire [7:0]            h_hop;
wire [7:0]            h_fn;
wire [31:0]           h_len;
wire [63:0]           h_param;
wire [63:0]           h_cycle;
wire [1023:0]         h_hdr;
wire [63:0]           h_reasm;
// the head the executor takes next: a small request before the buffers' (the core's drain order)
assign {h_reasm, h_hdr, h_conn, h_buffer, h_start, h_id, h_tenant, h_hop, h_fn, h_len, h_param, h_cycle} =
    s_count != 0 ? sfifo[s_rd] : fifo[f_rd];

// ---- the chained hop: the router's next local hop, waiting for the executor ----
// One at a time (the executor runs one hop at a time): its header, then its
// payload (the last hop's result) into a buffer of MAX_PAYLOAD bytes.
localparam CHAIN_BEATS = (MAX_PAYLOAD + 63) / 64 + 1;
localparam CHAIN_WIDTH = $clog2(CHAIN_BEATS + 1);
localparam [1:0] C_HDR = 2'd0, C_EXT = 2'd1, C_PAY = 2'd2, C_FULL = 2'd3;
reg [511:0]           cmem [0:CHAIN_BEATS-1];
reg [CHAIN_WIDTH-1:0] c_wp = {CHAIN_WIDTH{1'b0}};
reg [1:0]             c_st = C_HDR;
reg [1023:0]          c_hdr = 1024'd0;
reg [CONN_WIDTH-1:0]  c_conn = {CONN_WIDTH{1'b0}};
reg [63:0]            c_qsum = 64'd0, c_esum = 64'd0, c_cycle = 64'd0;
reg [63:0]            c_reasm = 64'd0;   // its reassembly: first byte until the last hop's completion
reg [511:0]           c_times = 512'd0;  // the per-hop timings block so far
reg [63:0]            e_next_reasm = 64'd0;   // set at the hop's hand-over to the router: a chained
reg [511:0]           e_sent_times = 512'd0;  // next hop's reassembly, and the block with its record
reg [511:0]           c_rd;

wire [511:0]          n_tdata;
wire [CONN_WIDTH-1:0] n_tuser;
wire                  n_tlast;
wire                  n_tvalid;
wire [63:0]           n_queue, n_exec;
wire                  n_tready = c_st != C_FULL;
wire                  c_valid  = c_st == C_FULL;
wire                  c_pop;

wire [7:0]  c_hop   = c_hdr[63:56];
wire [3:0]  c_hop_i = c_hop[3:0];
wire [7:0]  c_fn    = c_hdr[8 * (24 + 10 * c_hop_i) +: 8];
wire [63:0] c_param = c_hdr[8 * (26 + 10 * c_hop_i) +: 64];
wire [31:0] c_len   = c_hdr[159:128];

always @(posedge clk) begin
    if (n_tvalid && n_tready) begin
        case (c_st)
            C_HDR: begin
                c_hdr  <= {512'd0, n_tdata};
                c_conn <= n_tuser;
                c_qsum <= n_queue;
                c_esum <= n_exec;
                c_reasm <= e_next_reasm;
                c_times <= e_sent_times;
                c_wp   <= {CHAIN_WIDTH{1'b0}};
                c_st   <= n_tlast ? C_FULL : n_tdata[24] ? C_EXT : C_PAY;   // flags bit 0: HOP_EXT
            end
            C_EXT: begin
                c_hdr[1023:512] <= n_tdata;
                c_st <= n_tlast ? C_FULL : C_PAY;
            end
            default: begin
                cmem[c_wp] <= n_tdata;
                c_wp <= c_wp + 1'b1;
                if (n_tlast) c_st <= C_FULL;
            end
        endcase
        c_cycle <= cyc;
    end
    if (c_pop) c_st <= C_HDR;
    if (rst) c_st <= C_HDR;
end

// ---- the executor: feed one hop into its accelerator ----------------------
localparam [2:0] E_IDLE = 3'd0, E_META = 3'd1, E_READ = 3'd2, E_FEED = 3'd3, E_WAIT = 3'd4;
reg [2:0]            e_state = E_IDLE;
reg [CONN_WIDTH-1:0] e_conn = 0;
reg [1023:0]         e_whdr = 0;     // the request's header (the router's input)
reg [7:0]            e_fn = 0;
reg [31:0]           e_len = 0;
reg [63:0]           e_param = 0;
reg [63:0]           e_queued = 0;   // queue cycles of this hop
reg [63:0]           e_qsum = 0;     // queue and exec cycles of the chain's earlier hops here
reg [63:0]           e_esum = 0;
reg [63:0]           e_start = 0;    // cycle the executor took it
reg [63:0]           e_reasm = 0;    // reassembly cycles (for a chained hop: to the last hop's completion)
reg [511:0]          e_times = 0;    // per-hop timings block of the chain's earlier hops here
reg [15:0]           e_queue_k = 0;  // this hop's queue cycles / 1000, saturating (the block's queue_us)
reg [31:0]           e_left = 0;     // beats still to feed
reg                  e_chain = 1'b0; // a chained hop: its payload is in cmem, not in a buffer
reg                  e_sent = 1'b0;  // the hop is with the router (set by the hop side)
wire                 rt_busy;

// a chained hop first: it holds no pool buffer, and the router waits on it
assign c_pop = e_state == E_IDLE && c_valid;
assign s_pop = e_state == E_IDLE && !c_valid && s_count != 0;
assign f_pop = e_state == E_IDLE && !c_valid && s_count == 0 && f_count != 0;

// accelerator inputs
reg          a_meta_valid;
wire [127:0] a_meta = {64'd0, e_param};
reg          a_valid;
wire [511:0] a_data = e_chain ? c_rd : rd_data;
wire [63:0]  a_keep = (e_len == 0) ? 64'd0
                    : (e_left == 1 && e_len[5:0] != 0) ? ({64{1'b1}} >> (64 - e_len[5:0])) : {64{1'b1}};
wire         a_last = e_left <= 1;

wire echo_meta_ready, topk_meta_ready, mapid_meta_ready, mm_meta_ready, sp_meta_ready, bk_meta_ready;
wire echo_ready, topk_ready, mapid_ready, mm_ready, sp_ready, bk_ready;
reg  meta_ready, data_ready;
always @* begin
    case (e_fn)
        FN_TOPK:   begin meta_ready = topk_meta_ready;  data_ready = topk_ready;  end
        FN_MINMAX: begin meta_ready = mm_meta_ready;    data_ready = mm_ready;    end
        FN_MAPID:  begin meta_ready = mapid_meta_ready; data_ready = mapid_ready; end
        FN_SPARSE: begin meta_ready = sp_meta_ready;    data_ready = sp_ready;    end
        FN_BUCKET: begin meta_ready = bk_meta_ready;    data_ready = bk_ready;    end
        default:   begin meta_ready = echo_meta_ready;  data_ready = echo_ready;  end
    endcase
end

always @* begin
    a_meta_valid = e_state == E_META;
    a_valid      = e_state == E_FEED;
end

always @(posedge clk) begin
    rel_valid <= 1'b0;
    // the block's queue field: the software's is µs (its ns / 1000), here cycles / 1000
    e_queue_k <= e_queued >= 64'd65535000 ? 16'hFFFF : e_queued[25:0] / 26'd1000;
    c_rd <= cmem[rd_addr[CHAIN_WIDTH-1:0]];
    case (e_state)
        E_IDLE: begin
            e_start <= cyc;
            rd_addr <= {RING_WIDTH{1'b0}};
            if (c_valid) begin
                e_chain  <= 1'b1;
                e_conn   <= c_conn;
                e_whdr   <= c_hdr;
                e_fn     <= c_fn;
                e_len    <= c_len;
                e_param  <= c_param;
                e_queued <= cyc - c_cycle;
                e_qsum   <= c_qsum;
                e_esum   <= c_esum;
                e_reasm  <= c_reasm;
                e_times  <= c_times;
                e_left   <= (c_len == 0) ? 32'd1 : (c_len + 32'd63) >> 6;
                e_state  <= E_META;
            end else if (s_count != 0 || f_count != 0) begin
                e_chain  <= 1'b0;
                e_conn   <= h_conn;
                e_whdr   <= h_hdr;
                e_fn     <= h_fn;
                e_len    <= h_len;
                e_param  <= h_param;
                e_queued <= cyc - h_cycle;
                e_qsum   <= 64'd0;
                e_esum   <= 64'd0;
                e_reasm  <= h_reasm;
                e_times  <= 512'd0;
                e_left   <= (h_len == 0) ? 32'd1 : (h_len + 32'd63) >> 6;
                rd_buf   <= h_buffer;
                rd_addr  <= h_start;
                rel_buffer <= h_buffer[BUF_WIDTH-1:0];
                rel_small  <= h_buffer == SMALL_RING;
                rel_size   <= h_len;
                e_state  <= E_META;
            end
        end
        E_META: begin
            if (e_fn == FN_ECHO && e_len == 0) begin
                rel_valid <= !e_chain;    // nothing to read: echo answers without the accelerator
                e_state   <= E_WAIT;
            end else if (meta_ready) begin
                e_state <= E_FEED;        // the first beat was read while the metadata waited
            end
        end
        E_READ: e_state <= E_FEED;
        E_FEED: begin
            if (data_ready) begin
                rd_addr <= ring_next(rd_addr);
                e_left  <= e_left - 1;
                if (a_last) begin
                    rel_valid <= !e_chain;
                    e_state   <= E_WAIT;
                end else begin
                    e_state <= E_READ;
                end
            end
        end
        // the router has the hop and is done with it (its frame is out, a
        // chained hop's in cmem): the next hop may use the accelerators
        E_WAIT: if (e_sent && !rt_busy) e_state <= E_IDLE;
        default: e_state <= E_IDLE;
    endcase
    if (rst) begin
        e_state   <= E_IDLE;
        rel_valid <= 1'b0;
    end
end

// ---- the accelerators ----------------------------------------------------
wire [511:0] echo_tdata, topk_tdata, mapid_tdata, mm_tdata, sp_tdata, bk_tdata;
wire [63:0]  echo_tkeep, topk_tkeep, mapid_tkeep, mm_tkeep, sp_tkeep, bk_tkeep;
wire         echo_tvalid, topk_tvalid, mapid_tvalid, mm_tvalid, sp_tvalid, bk_tvalid;
wire         echo_tlast, topk_tlast, mapid_tlast, mm_tlast, sp_tlast, bk_tlast;
wire         echo_mvalid, topk_mvalid, mapid_mvalid, mm_mvalid, sp_mvalid, bk_mvalid;
wire [7:0]   topk_status, mapid_status, mm_status, sp_status, bk_status;
wire [31:0]  topk_detail, mapid_detail, mm_detail, sp_detail, bk_detail;
wire [31:0]  sp_len;
wire         r_data_ready;
reg          r_meta_ready;

offrac_accel_echo echo_inst (
    .clk(clk), .rst(rst),
    .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid && e_fn == FN_ECHO),
    .s_axis_tready(echo_ready), .s_axis_tlast(a_last),
    .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid && e_fn == FN_ECHO && e_len != 0),
    .s_meta_tready(echo_meta_ready),
    .m_axis_tdata(echo_tdata), .m_axis_tkeep(echo_tkeep), .m_axis_tvalid(echo_tvalid),
    .m_axis_tready(r_data_ready && e_fn == FN_ECHO), .m_axis_tlast(echo_tlast),
    .m_meta_tdata(), .m_meta_tvalid(echo_mvalid), .m_meta_tready(r_meta_ready && e_fn == FN_ECHO)
);

offrac_accel_topk #(.K_MAX(TOPK_K_MAX)) topk_inst (
    .clk(clk), .rst(rst),
    .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid && e_fn == FN_TOPK),
    .s_axis_tready(topk_ready), .s_axis_tlast(a_last),
    .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid && e_fn == FN_TOPK),
    .s_meta_tready(topk_meta_ready),
    .m_axis_tdata(topk_tdata), .m_axis_tkeep(topk_tkeep), .m_axis_tvalid(topk_tvalid),
    .m_axis_tready(r_data_ready && e_fn == FN_TOPK), .m_axis_tlast(topk_tlast),
    .m_meta_tdata(), .m_meta_status(topk_status), .m_meta_detail(topk_detail),
    .m_meta_tvalid(topk_mvalid), .m_meta_tready(r_meta_ready && e_fn == FN_TOPK)
);

offrac_accel_mapid #(.TABLE_BITS(MAPID_TABLE_BITS), .MAX_BEATS(MAPID_MAX_BEATS)) mapid_inst (
    .clk(clk), .rst(rst),
    .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid && e_fn == FN_MAPID),
    .s_axis_tready(mapid_ready), .s_axis_tlast(a_last),
    .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid && e_fn == FN_MAPID),
    .s_meta_tready(mapid_meta_ready),
    .s_cfg_tdata(s_cfg_tdata), .s_cfg_tkeep(s_cfg_tkeep), .s_cfg_tvalid(s_cfg_tvalid),
    .s_cfg_tready(s_cfg_tready), .s_cfg_tlast(s_cfg_tlast),
    .cfg_dict_size(cfg_dict_size), .cfg_overflow(cfg_overflow),
    .m_axis_tdata(mapid_tdata), .m_axis_tkeep(mapid_tkeep), .m_axis_tvalid(mapid_tvalid),
    .m_axis_tready(r_data_ready && e_fn == FN_MAPID), .m_axis_tlast(mapid_tlast),
    .m_meta_tdata(), .m_meta_status(mapid_status), .m_meta_detail(mapid_detail),
    .m_meta_tvalid(mapid_mvalid), .m_meta_tready(r_meta_ready && e_fn == FN_MAPID)
);

offrac_accel_minmax #(.MAX_BEATS(ACC_BEATS)) minmax_inst (
    .clk(clk), .rst(rst),
    .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid && e_fn == FN_MINMAX),
    .s_axis_tready(mm_ready), .s_axis_tlast(a_last),
    .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid && e_fn == FN_MINMAX),
    .s_meta_tready(mm_meta_ready),
    .m_axis_tdata(mm_tdata), .m_axis_tkeep(mm_tkeep), .m_axis_tvalid(mm_tvalid),
    .m_axis_tready(r_data_ready && e_fn == FN_MINMAX), .m_axis_tlast(mm_tlast),
    .m_meta_tdata(), .m_meta_status(mm_status), .m_meta_detail(mm_detail),
    .m_meta_tvalid(mm_mvalid), .m_meta_tready(r_meta_ready && e_fn == FN_MINMAX)
);

offrac_accel_sparse #(.MAX_BEATS(ACC_BEATS)) sparse_inst (
    .clk(clk), .rst(rst),
    .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid && e_fn == FN_SPARSE),
    .s_axis_tready(sp_ready), .s_axis_tlast(a_last),
    .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid && e_fn == FN_SPARSE),
    .s_meta_tready(sp_meta_ready),
    .m_axis_tdata(sp_tdata), .m_axis_tkeep(sp_tkeep), .m_axis_tvalid(sp_tvalid),
    .m_axis_tready(r_data_ready && e_fn == FN_SPARSE), .m_axis_tlast(sp_tlast),
    .m_meta_tdata(), .m_meta_status(sp_status), .m_meta_detail(sp_detail), .m_meta_len(sp_len),
    .m_meta_tvalid(sp_mvalid), .m_meta_tready(r_meta_ready && e_fn == FN_SPARSE)
);

offrac_accel_bucketize #(
    .MAX_BEATS(ACC_BEATS), .SETS_MAX(BUCKET_SETS_MAX), .BORDERS_MAX(BUCKET_BORDERS_MAX)
) bucketize_inst (
    .clk(clk), .rst(rst),
    .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid && e_fn == FN_BUCKET),
    .s_axis_tready(bk_ready), .s_axis_tlast(a_last),
    .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid && e_fn == FN_BUCKET),
    .s_meta_tready(bk_meta_ready),
    .s_cfg_tdata(s_bcfg_tdata), .s_cfg_tvalid(s_bcfg_tvalid), .s_cfg_tready(s_bcfg_tready),
    .s_cfg_tlast(s_bcfg_tlast), .cfg_sets(bcfg_sets), .cfg_error(bcfg_error),
    .m_axis_tdata(bk_tdata), .m_axis_tkeep(bk_tkeep), .m_axis_tvalid(bk_tvalid),
    .m_axis_tready(r_data_ready && e_fn == FN_BUCKET), .m_axis_tlast(bk_tlast),
    .m_meta_tdata(), .m_meta_status(bk_status), .m_meta_detail(bk_detail),
    .m_meta_tvalid(bk_mvalid), .m_meta_tready(r_meta_ready && e_fn == FN_BUCKET)
);

reg [511:0] x_tdata;
reg [63:0]  x_tkeep;
reg         x_tvalid, x_tlast, x_mvalid;
reg [7:0]   x_status;
reg [31:0]  x_detail;
always @* begin
    case (e_fn)
        FN_TOPK: begin
            x_tdata = topk_tdata; x_tkeep = topk_tkeep; x_tvalid = topk_tvalid; x_tlast = topk_tlast;
            x_mvalid = topk_mvalid; x_status = topk_status; x_detail = topk_detail;
        end
        FN_MINMAX: begin
            x_tdata = mm_tdata; x_tkeep = mm_tkeep; x_tvalid = mm_tvalid; x_tlast = mm_tlast;
            x_mvalid = mm_mvalid; x_status = mm_status; x_detail = mm_detail;
        end
        FN_MAPID: begin
            x_tdata = mapid_tdata; x_tkeep = mapid_tkeep; x_tvalid = mapid_tvalid; x_tlast = mapid_tlast;
            x_mvalid = mapid_mvalid; x_status = mapid_status; x_detail = mapid_detail;
        end
        FN_SPARSE: begin
            x_tdata = sp_tdata; x_tkeep = sp_tkeep; x_tvalid = sp_tvalid; x_tlast = sp_tlast;
            x_mvalid = sp_mvalid; x_status = sp_status; x_detail = sp_detail;
        end
        FN_BUCKET: begin
            x_tdata = bk_tdata; x_tkeep = bk_tkeep; x_tvalid = bk_tvalid; x_tlast = bk_tlast;
            x_mvalid = bk_mvalid; x_status = bk_status; x_detail = bk_detail;
        end
        default: begin
            x_tdata = echo_tdata; x_tkeep = echo_tkeep; x_tvalid = echo_tvalid; x_tlast = echo_tlast;
            x_mvalid = echo_mvalid; x_status = 8'd0; x_detail = 32'd0;
        end
    endcase
end

// ---- the hop's outcome to the chain router -------------------------------
wire [63:0] n_elems = {32'd0, e_len >> 2};
wire [63:0] topk_n  = (e_param < n_elems) ? e_param : n_elems;
wire        echo_empty = e_fn == FN_ECHO && e_len == 0;
wire        hop_ok     = echo_empty || x_status == 8'd0;
wire        hop_valid  = e_state != E_IDLE && !e_sent && (x_mvalid || (echo_empty && e_state == E_WAIT));
wire        hop_ready;

always @* begin
    r_meta_ready = hop_valid && hop_ready;
end

// this hop's record in the per-hop timings block (docs/protocol.md): device, ran, queue (cycles /
// 1000, u16 saturating, where the software has µs), exec (cycles, u32 saturating, where it has ns)
wire [63:0]  e_exec   = cyc - e_start;
wire [2:0]   e_ran_i  = e_whdr[58:56];   // hop_index mod 8
wire [63:0]  hop_rec  = {e_exec[63:32] != 0 ? 32'hFFFFFFFF : e_exec[31:0], e_queue_k, 8'd1, DEVICE_ID};
reg  [511:0] hop_times;
always @* begin
    hop_times = e_times;
    hop_times[64 * e_ran_i +: 64] = hop_rec;
end

always @(posedge clk) begin
    if (hop_valid && hop_ready) begin
        e_sent <= 1'b1;
        // a chained next hop's reassembly ends where this hop completes (Job::advance sets its
        // complete_at to now); its block carries this hop's record
        e_next_reasm <= e_reasm + e_queued + e_exec;
        e_sent_times <= hop_times;
    end
    if (e_state == E_WAIT && e_sent && !rt_busy) e_sent <= 1'b0;
    if (rst) e_sent <= 1'b0;
end

wire [511:0]          rr_tdata;
wire [63:0]           rr_tkeep;
wire [CONN_WIDTH-1:0] rr_tuser;
wire                  rr_tlast;
wire                  rr_tvalid;
wire                  rr_tready;

offrac_chain_router #(
    .CONN_WIDTH(CONN_WIDTH), .DEVICE_ID(DEVICE_ID), .HOSTED(HOSTED), .PEERS(PEERS),
    .MAX_PAYLOAD(MAX_PAYLOAD)
) router_inst (
    .clk(clk), .rst(rst),
    .s_hop_hdr(e_whdr), .s_hop_conn(e_conn),
    .s_hop_status(hop_ok ? 8'd0 : x_status),
    .s_hop_detail(hop_ok || x_status == 8'd5 ? 64'd0 : {32'd0, x_detail}),   // BAD_INPUT: 0
    .s_hop_len(!hop_ok ? 32'd0 : e_fn == FN_TOPK ? {topk_n[29:0], 2'b00} : e_fn == FN_SPARSE ? sp_len : e_len),
    .s_hop_reassembly(e_reasm),
    .s_hop_queue(e_qsum + e_queued), .s_hop_exec(e_esum + e_exec), .s_hop_times(hop_times),
    .s_hop_valid(hop_valid), .s_hop_ready(hop_ready),
    .s_axis_tdata(x_tdata), .s_axis_tkeep(x_tkeep), .s_axis_tlast(x_tlast),
    .s_axis_tvalid(x_tvalid), .s_axis_tready(r_data_ready),
    .m_resp_axis_tdata(rr_tdata), .m_resp_axis_tkeep(rr_tkeep), .m_resp_axis_tuser(rr_tuser),
    .m_resp_axis_tlast(rr_tlast), .m_resp_axis_tvalid(rr_tvalid), .m_resp_axis_tready(rr_tready),
    .m_net_axis_tdata(m_net_axis_tdata), .m_net_axis_tkeep(m_net_axis_tkeep),
    .m_net_axis_tuser(m_net_axis_tuser), .m_net_axis_tdest(m_net_axis_tdest),
    .m_net_axis_tlast(m_net_axis_tlast), .m_net_axis_tvalid(m_net_axis_tvalid),
    .m_net_axis_tready(m_net_axis_tready),
    .m_next_axis_tdata(n_tdata), .m_next_axis_tkeep(), .m_next_axis_tuser(n_tuser),
    .m_next_axis_tlast(n_tlast), .m_next_axis_tvalid(n_tvalid), .m_next_axis_tready(n_tready),
    .m_next_reassembly(), .m_next_queue(n_queue), .m_next_exec(n_exec),
    .busy(rt_busy)
);

// ---- merge: refusals and responses, frame by frame -------------------------
reg  locked = 1'b0;
reg  owner = 1'b0;      // 0 the dispatcher, 1 the router
reg  last_owner = 1'b0;
wire o_ready;
wire pick = locked ? owner
          : (d_tvalid && rr_tvalid) ? !last_owner
          : rr_tvalid;
wire [511:0] o_tdata  = pick ? rr_tdata : d_tdata;
wire [63:0]  o_tkeep  = pick ? rr_tkeep : d_tkeep;
wire [CONN_WIDTH-1:0] o_tuser = pick ? rr_tuser : d_tuser;
wire         o_tlast  = pick ? rr_tlast : d_tlast;
wire         o_tvalid = pick ? rr_tvalid : d_tvalid;
assign d_tready  = o_ready && !pick;
assign rr_tready = o_ready && pick;

always @(posedge clk) begin
    if (o_tvalid && o_ready) begin
        locked     <= !o_tlast;
        owner      <= pick;
        last_owner <= pick;
    end
    if (rst) begin
        locked <= 1'b0;
        last_owner <= 1'b0;
    end
end

assign idle = !d_busy && !ab_valid && f_count == 0 && s_count == 0 && e_state == E_IDLE && !fl_valid && !m_axis_tvalid && !locked
            && !rt_busy && c_st == C_HDR;

offrac_axis_reg #(.WIDTH(512 + 64 + CONN_WIDTH + 1)) out_reg (
    .clk(clk), .rst(rst),
    .s_tdata({o_tdata, o_tkeep, o_tuser, o_tlast}), .s_tvalid(o_tvalid), .s_tready(o_ready),
    .m_tdata({m_axis_tdata, m_axis_tkeep, m_axis_tuser, m_axis_tlast}),
    .m_tvalid(m_axis_tvalid), .m_tready(m_axis_tready)
);

// ---- parameter checks, at elaboration (as offrac_dispatcher's, which checks its own) ----------
// The single-fragment FIFO's ring is a buffer's size, so SMALL_BYTES <= BUF_BYTES; the descriptor
// FIFOs need an entry.
generate
    if (SMALL_BYTES > BUF_BYTES) begin : bad_small_ring
`ifdef __ICARUS__
        offrac_bad_parameter__SMALL_BYTES_above_BUF_BYTES bad ();
`else
        $error("offrac_request_path: SMALL_BYTES (%0d) exceeds BUF_BYTES (%0d), the small queue's ring",
               SMALL_BYTES, BUF_BYTES);
`endif
    end
    if (DESC_DEPTH < 1) begin : bad_desc_depth
`ifdef __ICARUS__
        offrac_bad_parameter__DESC_DEPTH_below_1 bad ();
`else
        $error("offrac_request_path: DESC_DEPTH (%0d) must be at least 1", DESC_DEPTH);
`endif
    end
endgenerate

endmodule

`resetall
