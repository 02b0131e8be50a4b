/*
 * offrac request path: the node's datapath from TCP payload in to response
 * bytes out (OffRAC §3, Fig. 11), composed of the dispatcher, a buffer
 * memory, the lists of complete requests, the slot stage (the selector and
 * one slot queue per slot), the slots (each its own executor and
 * accelerator instance: SLOT_FUNCS, by default one per built-in: echo 0,
 * top-k 1, min-max 3, MapId 6, SparseTransform 7, Bucketize 8), the chain
 * router with its chain buffer,
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
 *   holds the dispatcher for one cycle. A buffer may hold several complete
 *   requests (the pool counts bytes), each in whole beats, so the ring has
 *   room for BUF_BYTES / 64 beats plus one partial beat for every request
 *   it can hold at once (PT, the release table's bound, and one
 *   reassembling).
 * - Complete requests (m_req_* of the dispatcher) go into a list of
 *   DESC_DEPTH descriptors (the small ones into a second) with their start
 *   beat in the ring and the cycle they were queued. While the list is full
 *   the dispatcher waits with its complete request. The request's header is
 *   written once into the descriptor memory; the lists, slot queues and
 *   slots carry its index, and the router reads it when it takes the hop.
 * - The drain (the core's Engine::drain) moves one request a cycle into the
 *   slot queue the selector picks (SLOT_POLICY RR, JSQ, or cfg_slot_policy's): the first, small
 *   ones before the pool's, that is the oldest of its (function, tenant)
 *   and that a slot of its function has room for; a request whose slots are
 *   all full waits, and does not block other functions' requests.
 * - Each slot runs one hop at a time, all slots at once: a chained hop of
 *   its function waiting in the chain buffer first (as the software's
 *   chained queue goes first), else its queue's head. It sends the hop
 *   parameter (K for top-k, bits [63:0] of the metadata word) to its
 *   accelerator and reads the payload beats (a beat a cycle: the next one
 *   read while a beat goes in) from the ring (one read port, shared round
 *   robin), or from the chain buffer, into it. The pool's bytes are released when the last ring beat has been
 *   read, in each ring's order (a table of releases; a chained hop holds no
 *   pool bytes). An empty payload goes to top-k and MapId as one beat with
 *   tkeep 0 (they answer BAD_INPUT, as the software does); echo answers it
 *   without the accelerator.
 * - The chain token: one chain at a time runs through the chain buffer; a
 *   slot starts a hop whose next hop is local only while no other such hop
 *   runs and the buffer is empty (so a next hop always finds the buffer
 *   free and a slot to run on).
 * - A slot's outcome goes to the chain router (offrac_chain_router.v), one
 *   slot at a time (round robin), when its accelerator's metadata word comes
 *   out: the request's header, the
 *   status and detail (echo: OK), the result length (OK: echo and MapId the
 *   payload's length, top-k 4 * min(K, n)), timings in cycles summed over
 *   the chain's hops here (queue = queued until the slot took it, exec
 *   = taken until the metadata word, reassembly = the dispatcher's first
 *   byte to complete, kept by a chained hop as Job::reassembly), the per-hop timings block of a TRACE request (this hop's
 *   record over the earlier hops', which ride with a chained hop), then
 *   the result beats as they come. The router answers (our response header,
 *   the OK result; an error has no payload: the software's English message
 *   is not sent), or hands the next local hop to the chain buffer (its
 *   header, then the result as its payload; MAX_PAYLOAD bytes, one hop at a
 *   time), or forwards the request on m_net_axis_* (tdest the device) when
 *   the next hop is on a device in PEERS. The slot takes its next hop
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
    parameter SMALL_BYTES = 0,
    // the slots (OffRAC §3.6): each its own executor and accelerator, the function of slot i in
    // bits [8i+7:8i] (echo 0, top-k 1, min-max 3, MapId 6, SparseTransform 7, Bucketize 8; at most
    // one MapId and one Bucketize slot: their state is loaded once); by default one slot a function
    parameter SLOT_COUNT  = 6,
    parameter [8*SLOT_COUNT-1:0] SLOT_FUNCS = 48'h08_07_06_03_01_00,
    // the selector (the core's slot_policy): 0 RR, 1 JSQ, 2 run time (cfg_slot_policy, at reset)
    parameter SLOT_POLICY = 0,
    parameter SLOT_QUEUE_BYTES = MAX_PAYLOAD,  // a slot queue's payload bytes (the core's slot_queue_bytes)
    parameter SLOT_DEPTH  = DESC_DEPTH         // a slot queue's entries
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

    // the slots configured (the node's [[slots]]), taken while rst is high and kept until the next
    // reset: a slot outside it is never chosen (selector, drain, chained hop) and stays idle; every
    // function the slots host (SLOT_FUNCS) needs one slot in it, since the dispatcher admits them all
    input  wire [SLOT_COUNT-1:0]  cfg_slot_mask,
    // with SLOT_POLICY 2: the selector's policy (the node's [selector] policy: 0 RR, 1 JSQ), taken
    // while rst is high and kept until the next reset, as cfg_slot_mask; unused with SLOT_POLICY 0/1
    input  wire                   cfg_slot_policy,
    // per slot: it took a hop this cycle (its queue's head or a chained hop), for the driver's counts
    output wire [SLOT_COUNT-1:0]  slot_start,

    output wire [63:0]            cycles,         // free-running cycle count
    // for the driver: connections between requests, and nothing in flight anywhere
    output wire [CONN_COUNT-1:0]  conn_clean,
    // per connection: answers still to come out (on m_axis_* or m_net_axis_*) for requests the
    // dispatcher has refused or completed; with conn_clean, the connection's own work is done
    output wire [CONN_COUNT-1:0]  conn_owed,
    output wire                   idle
);

// a ring holds BUF_BYTES in whole beats plus one partial beat for every request it can hold at
// once: at most 2 DESC_DEPTH + SLOT_COUNT (SLOT_DEPTH + 1) described and not released (the release
// table's bound, below), one reassembling
localparam RING_BEATS = BUF_BYTES / 64 + 2 * DESC_DEPTH + SLOT_COUNT * (SLOT_DEPTH + 1) + 2;
localparam RING_WIDTH = $clog2(RING_BEATS);
// rings 0..BUF_COUNT-1 are the buffers', ring BUF_COUNT the small queue's
localparam RB_WIDTH = BUF_WIDTH + 1;
localparam [RB_WIDTH-1:0] SMALL_RING = BUF_COUNT;
localparam DESC_WIDTH_FIFO = DESC_DEPTH > 1 ? $clog2(DESC_DEPTH) : 1;
localparam SLOT_WIDTH = SLOT_COUNT > 1 ? $clog2(SLOT_COUNT) : 1;
function [255:0] hosted_of(input [8*SLOT_COUNT-1:0] fs);
    integer i;
    begin
        hosted_of = 256'd0;
        for (i = 0; i < SLOT_COUNT; i = i + 1) hosted_of[fs[8*i +: 8]] = 1'b1;
    end
endfunction
// the first slot of a function (SLOT_COUNT - 1 when none: its configuration outputs read 0)
function integer first_slot(input [8*SLOT_COUNT-1:0] fs, input [7:0] f);
    integer i;
    begin
        first_slot = SLOT_COUNT - 1;
        for (i = SLOT_COUNT - 1; i >= 0; i = i - 1) if (fs[8*i +: 8] == f) first_slot = i;
    end
endfunction
// a hop whose next hop is local (the router hands it to m_next_*, unless it fails or is refused)
function chainy_of(input [1023:0] h);
    reg [7:0] nx;
    reg [7:0] dv;
    begin
        nx = h[63:56] + 8'd1;
        dv = h[8 * (25 + 10 * nx[3:0]) +: 8];
        chainy_of = nx < h[55:48] && (dv == 8'hFF || dv == DEVICE_ID);
    end
endfunction
localparam [255:0] HOSTED = hosted_of(SLOT_FUNCS);   // the functions the slots run
localparam MAPID_SLOT  = first_slot(SLOT_FUNCS, 8'd6);
localparam BUCKET_SLOT = first_slot(SLOT_FUNCS, 8'd8);
localparam [7:0] FN_ECHO = 8'd0, FN_TOPK = 8'd1, FN_MINMAX = 8'd3, FN_MAPID = 8'd6, FN_SPARSE = 8'd7,
                 FN_BUCKET = 8'd8;
localparam ACC_BEATS = (MAX_PAYLOAD + 63) / 64;   // min-max, SparseTransform, Bucketize buffers

reg [63:0] cyc = 64'd0;
assign cycles = cyc;

// the configured slots (cfg_slot_mask at reset), and the selector's policy with SLOT_POLICY 2
// (cfg_slot_policy at reset)
reg [SLOT_COUNT-1:0] slot_en = {SLOT_COUNT{1'b1}};
reg                  slot_jsq = 1'b0;
always @(posedge clk) begin
    if (rst) begin
        slot_en  <= cfg_slot_mask;
        slot_jsq <= cfg_slot_policy;
    end
end

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
wire [63:0]           q_id;           // unused here: the header (descriptor memory) has it
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

// ---- the complete requests waiting for a slot queue -------------------------
// Two lists of DESC_DEPTH descriptors in completion order, the small ones'
// (the single-fragment FIFO) and the buffers'. Every cycle the drain moves
// one request into the slot queue the selector picks: the first, small ones
// before the buffers' (the core's drain order), that is the oldest of its
// (function, tenant) and for which a slot of its function has room. A request
// whose slots are all full stays (as do the younger ones of its function and
// tenant, the core's `blocked`), and the others pass it.
//
// The request's header (1024 bits, the widest field) is written once, when
// the lists take the request, into the descriptor memory (below); the lists,
// the slot queues and the slots carry its index, and the router reads the
// header from the memory when it takes the hop. A descriptor (QW bits):
// cycle queued [63:0], param [127:64], len [159:128], function [167:160],
// hop index [175:168], tenant [191:176], then the start beat in the ring,
// the ring, the connection, the header's index, whether its next hop is
// local (chainy_of the header) and the reassembly cycles.
localparam DM_N     = 2 * DESC_DEPTH + SLOT_COUNT * (SLOT_DEPTH + 1);
localparam DM_WIDTH = DM_N > 1 ? $clog2(DM_N) : 1;
localparam QW = 64 + 1 + DM_WIDTH + CONN_WIDTH + RB_WIDTH + RING_WIDTH + 16 + 8 + 8 + 32 + 64 + 64;
localparam D_START = 192;
localparam D_RING  = D_START + RING_WIDTH;
localparam D_CONN  = D_RING + RB_WIDTH;
localparam D_DIX   = D_CONN + CONN_WIDTH;
localparam D_CHY   = D_DIX + DM_WIDTH;
localparam D_REASM = D_CHY + 1;
localparam ND = 2 * DESC_DEPTH;
reg [QW-1:0] s_list [0:DESC_DEPTH-1];
reg [QW-1:0] f_list [0:DESC_DEPTH-1];
reg [DESC_WIDTH_FIFO:0] f_count = 0;
reg [DESC_WIDTH_FIFO:0] s_count = 0;
wire outs_room;   // the release table has room for one more (below)
wire dm_room;     // the descriptor memory has a free entry (always, when a list has room: below)
assign q_tready = (q_small ? s_count < DESC_DEPTH : f_count < DESC_DEPTH) && outs_room && dm_room;
wire q_take = q_tvalid && q_tready && !q_small;
wire s_take = q_tvalid && q_tready && q_small;
wire [RB_WIDTH-1:0] q_ring = q_small ? SMALL_RING : {1'b0, q_buffer};
wire [DM_WIDTH-1:0] dm_free_i;   // the descriptor memory's entry a new request takes
wire [QW-1:0] q_desc = {q_reasm, chainy_of(q_hdr), dm_free_i, q_conn, q_ring, hp[q_ring], q_tenant, q_hop, q_fn,
                        q_len, q_param, cyc};

// the slot stage's state, for the drain's choice
wire [SLOT_COUNT*32-1:0] sq_bytes;
wire [SLOT_COUNT-1:0]    sq_full;
wire [SLOT_COUNT-1:0]    sq_busy;

reg  [QW-1:0]        w_desc [0:ND-1];
reg  [ND-1:0]        w_valid, w_fits, w_first;
reg                  dr_found;
reg  [$clog2(ND)-1:0] dr_e;
reg  [QW-1:0]        dr_desc;
integer we, wk;
always @* begin
    for (we = 0; we < ND; we = we + 1) begin
        if (we < DESC_DEPTH) begin
            w_desc[we]  = s_list[we];
            w_valid[we] = we < s_count;
        end else begin
            w_desc[we]  = f_list[we - DESC_DEPTH];
            w_valid[we] = we - DESC_DEPTH < f_count;
        end
    end
    for (we = 0; we < ND; we = we + 1) begin
        w_fits[we]  = 1'b0;
        w_first[we] = 1'b1;
        for (wk = 0; wk < SLOT_COUNT; wk = wk + 1) begin
            if (slot_en[wk] && SLOT_FUNCS[8*wk +: 8] == w_desc[we][167:160] && !sq_full[wk]
                    && {1'b0, sq_bytes[32*wk +: 32]} + {1'b0, w_desc[we][159:128]} <= SLOT_QUEUE_BYTES) begin
                w_fits[we] = 1'b1;
            end
        end
        for (wk = 0; wk < ND; wk = wk + 1) begin
            if (wk < we && w_valid[wk] && w_desc[wk][167:160] == w_desc[we][167:160]
                    && w_desc[wk][191:176] == w_desc[we][191:176]) begin
                w_first[we] = 1'b0;
            end
        end
    end
    dr_found = 1'b0;
    dr_e     = 0;
    for (we = ND - 1; we >= 0; we = we - 1) begin
        if (w_valid[we] && w_fits[we] && w_first[we]) begin
            dr_found = 1'b1;
            dr_e     = we[$clog2(ND)-1:0];
        end
    end
    dr_desc = w_desc[dr_e];
end
wire s_rm = dr_found && dr_e < DESC_DEPTH;
wire f_rm = dr_found && dr_e >= DESC_DEPTH;
wire [$clog2(ND)-1:0] f_rm_i = dr_e - DESC_DEPTH;

// the ring read port, shared by the slots (round robin, one read a cycle)
wire [SLOT_COUNT-1:0]            sl_want;
wire [SLOT_COUNT*RING_WIDTH-1:0] sl_raddr;
wire [SLOT_COUNT*RB_WIDTH-1:0]   sl_rbuf;
reg  [SLOT_WIDTH-1:0]            rd_last = SLOT_COUNT - 1;
reg  [SLOT_WIDTH-1:0]            rd_pick;
reg                              rd_any;
reg  [SLOT_WIDTH-1:0]            rd_tag = 0;
reg                              rd_tag_v = 1'b0;
reg  [SLOT_WIDTH:0]              rd_i;
integer rk;
always @* begin
    rd_any  = 1'b0;
    rd_pick = 0;
    for (rk = SLOT_COUNT; rk >= 1; rk = rk - 1) begin
        rd_i = rd_last + rk;
        if (rd_i >= SLOT_COUNT) rd_i = rd_i - SLOT_COUNT;
        if (sl_want[rd_i[SLOT_WIDTH-1:0]]) begin
            rd_any  = 1'b1;
            rd_pick = rd_i[SLOT_WIDTH-1:0];
        end
    end
end
wire [RB_WIDTH-1:0]   rd_buf  = sl_rbuf[RB_WIDTH*rd_pick +: RB_WIDTH];
wire [RING_WIDTH-1:0] rd_addr = sl_raddr[RING_WIDTH*rd_pick +: RING_WIDTH];

integer bi, li;
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
    // the lists: the entry drained leaves (the younger ones move up), a new one goes behind
    if (s_rm) begin
        for (li = 0; li < DESC_DEPTH - 1; li = li + 1) begin
            if (li >= dr_e) s_list[li] <= s_list[li + 1];
        end
    end
    if (f_rm) begin
        for (li = 0; li < DESC_DEPTH - 1; li = li + 1) begin
            if (li >= f_rm_i) f_list[li] <= f_list[li + 1];
        end
    end
    if (q_take) f_list[f_count - f_rm] <= q_desc;
    if (s_take) s_list[s_count - s_rm] <= q_desc;
    if (q_take || s_take) begin
        hp[q_ring] <= ring_add(hp[q_ring], q_beats);
    end
    f_count <= f_count + q_take - f_rm;
    s_count <= s_count + s_take - s_rm;
    rd_data  <= mem[{rd_buf, rd_addr}];
    rd_tag   <= rd_pick;
    rd_tag_v <= rd_any;
    if (rd_any) rd_last <= rd_pick;
    if (ab_valid) begin
        // the abandoned request's beats and residue are dropped: the buffer's ring ends where its
        // complete requests end (the dispatcher took the abort with none of them still to describe)
        wp[ab_ring]     <= hp[ab_ring];
        pend[ab_ring]   <= 512'd0;
        pend_n[ab_ring] <= 6'd0;
    end
    if (rst) begin
        f_count <= 0;
        s_count <= 0;
        fl_valid <= 1'b0;
        rd_tag_v <= 1'b0;
        for (bi = 0; bi <= BUF_COUNT; bi = bi + 1) begin
            pend[bi]   <= 512'd0;
            pend_n[bi] <= 6'd0;
            wp[bi] <= {RING_WIDTH{1'b0}};
            hp[bi] <= {RING_WIDTH{1'b0}};
        end
    end
end

// ---- the slot stage: the selector and one slot queue per slot ---------------
wire [SLOT_COUNT*QW-1:0] sq_tdata;
wire [SLOT_COUNT-1:0]    sq_tvalid;
wire [SLOT_COUNT-1:0]    sq_tready;
wire [SLOT_COUNT-1:0]    sq_done;

offrac_slot_stage #(
    .SLOT_COUNT(SLOT_COUNT), .SLOT_FUNCS(SLOT_FUNCS), .QUEUE_BYTES(SLOT_QUEUE_BYTES),
    .DEPTH(SLOT_DEPTH), .POLICY(SLOT_POLICY), .DESC_WIDTH(QW), .SIZE_WIDTH(32), .FUNC_COUNT(16),
    .SLOT_WIDTH(SLOT_WIDTH)
) stage_inst (
    .clk(clk), .rst(rst),
    .s_req_tdata(dr_desc), .s_req_function(dr_desc[167:160]), .s_req_cost(dr_desc[159:128]),
    .s_req_tvalid(dr_found), .s_req_tready(),
    .m_sel_ok(), .m_sel_slot(), .m_sel_tvalid(), .m_sel_tready(1'b1),
    .m_axis_tdata(sq_tdata), .m_axis_tsize(), .m_axis_tvalid(sq_tvalid), .m_axis_tready(sq_tready),
    .slot_done(sq_done), .slot_mask(slot_en), .slot_policy(slot_jsq),
    .slot_queued_bytes(sq_bytes), .slot_busy(sq_busy), .slot_full(sq_full)
);

// ---- the chained hop: the router's next local hop, waiting for a slot ----------
// One at a time: its header, then its payload (the last hop's result) into a
// buffer of MAX_PAYLOAD bytes. It goes to the first idle slot of its
// function, before that slot's queue (chains first, as the core's drain).
// At most one chain runs through it at a time (the chain token): a slot
// starts a hop whose next hop is local only while no other such hop runs
// and the buffer is empty, so a hop's next hop always finds the buffer free
// and a slot of its function to run on (no slot waits on the buffer while
// holding the router).
localparam CHAIN_BEATS = (MAX_PAYLOAD + 63) / 64 + 1;
localparam CHAIN_WIDTH = $clog2(CHAIN_BEATS + 1);
localparam [1:0] C_HDR = 2'd0, C_EXT = 2'd1, C_PAY = 2'd2, C_FULL = 2'd3;
reg [511:0]           cmem [0:CHAIN_BEATS-1];
reg [CHAIN_WIDTH-1:0] c_wp = {CHAIN_WIDTH{1'b0}};
reg [1:0]             c_st = C_HDR;
reg [1023:0]          c_hdr = 1024'd0;
reg [CONN_WIDTH-1:0]  c_conn = {CONN_WIDTH{1'b0}};
reg [63:0]            c_qsum = 64'd0, c_esum = 64'd0, c_cycle = 64'd0;
reg [63:0]            c_reasm = 64'd0;   // its reassembly: the request's (first byte to complete)
reg [511:0]           c_times = 512'd0;  // the per-hop timings block so far
reg [63:0]            e_next_reasm = 64'd0;   // set at the hop's hand-over to the router: a chained
reg [511:0]           e_sent_times = 512'd0;  // next hop's reassembly, and the block with its record
reg [511:0]           c_rd;
reg [SLOT_WIDTH-1:0]  c_holder = 0;      // the slot reading the chained hop's payload

wire [511:0]          n_tdata;
wire [CONN_WIDTH-1:0] n_tuser;
wire                  n_tlast;
wire                  n_tvalid;
wire [63:0]           n_queue, n_exec;
wire                  n_tready = c_st != C_FULL;
wire                  c_valid  = c_st == C_FULL;

wire [7:0]  c_hop   = c_hdr[63:56];
wire [3:0]  c_hop_i = c_hop[3:0];
wire [7:0]  c_fn    = c_hdr[8 * (24 + 10 * c_hop_i) +: 8];
wire [63:0] c_param = c_hdr[8 * (26 + 10 * c_hop_i) +: 64];
wire [31:0] c_len   = c_hdr[159:128];

wire [SLOT_COUNT-1:0] sl_idle;
wire [SLOT_COUNT-1:0] sl_chainrun;   // running a hop of the chain token
wire [SLOT_COUNT-1:0] sl_czwant;     // idle, its head's next hop is local, the token is free
reg  [SLOT_COUNT-1:0] c_offer, cz_ok;
wire                  chain_busy = (|sl_chainrun) || c_st != C_HDR;
wire                  c_pop = |c_offer;
integer ck;
always @* begin
    c_offer = {SLOT_COUNT{1'b0}};
    cz_ok   = {SLOT_COUNT{1'b0}};
    for (ck = SLOT_COUNT - 1; ck >= 0; ck = ck - 1) begin
        if (c_valid && slot_en[ck] && sl_idle[ck] && SLOT_FUNCS[8*ck +: 8] == c_fn) begin
            c_offer = {SLOT_COUNT{1'b0}};
            c_offer[ck] = 1'b1;
        end
        if (sl_czwant[ck]) begin
            cz_ok = {SLOT_COUNT{1'b0}};
            cz_ok[ck] = 1'b1;
        end
    end
end

integer hk;
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
    if (c_pop) begin
        c_st <= C_HDR;
        for (hk = 0; hk < SLOT_COUNT; hk = hk + 1) begin
            if (c_offer[hk]) c_holder <= hk[SLOT_WIDTH-1:0];
        end
    end
    c_rd <= cmem[sl_raddr[RING_WIDTH*c_holder +: CHAIN_WIDTH]];
    if (rst) c_st <= C_HDR;
end

// ---- the pool's releases, in each ring's order --------------------------------
// Slots finish out of order, but a ring's beats must be freed in order (else
// a later write could overrun a request still to be read). A slot that has
// read a request's last beat hands its release (one a cycle, round robin)
// to a table of PT entries; a release leaves the table, one a cycle, when
// every request before it in its ring has been released. The table never
// fills: at most PT requests with payload are described and not released
// (the lists stop taking complete requests at PT; the dispatcher waits),
// so a slot never waits on another's release.
localparam PT = 2 * DESC_DEPTH + SLOT_COUNT * (SLOT_DEPTH + 1);
localparam PT_WIDTH = $clog2(PT + 1);
wire [SLOT_COUNT-1:0]            sl_prv;
wire [SLOT_COUNT*RB_WIDTH-1:0]   sl_pr_ring;
wire [SLOT_COUNT*RING_WIDTH-1:0] sl_pr_start;
wire [SLOT_COUNT*32-1:0]         sl_pr_size;
reg  [RING_WIDTH-1:0]            rp [0:BUF_COUNT];   // the first beat not yet released
reg  [PT-1:0]                    pt_v = {PT{1'b0}};
reg  [RB_WIDTH-1:0]              pt_ring [0:PT-1];
reg  [RING_WIDTH-1:0]            pt_start [0:PT-1];
reg  [31:0]                      pt_size [0:PT-1];
reg  [PT_WIDTH-1:0]              outs = 0;           // requests with payload described, not released
assign outs_room = outs < PT;
// the slot handing its release over this cycle (round robin), and the free entry it takes
reg  [SLOT_WIDTH-1:0]            in_last = SLOT_COUNT - 1;
reg  [SLOT_WIDTH-1:0]            in_g;
reg                              in_any;
reg  [SLOT_WIDTH:0]              in_i;
reg  [SLOT_COUNT-1:0]            ins;
reg  [PT_WIDTH-1:0]              in_e;
// the entry released this cycle
reg                              ret_any;
reg  [PT_WIDTH-1:0]              ret_e;
integer tk;
always @* begin
    in_any = 1'b0;
    in_g   = 0;
    for (tk = SLOT_COUNT; tk >= 1; tk = tk - 1) begin
        in_i = in_last + tk;
        if (in_i >= SLOT_COUNT) in_i = in_i - SLOT_COUNT;
        if (sl_prv[in_i[SLOT_WIDTH-1:0]]) begin
            in_any = 1'b1;
            in_g   = in_i[SLOT_WIDTH-1:0];
        end
    end
    ins = {SLOT_COUNT{1'b0}};
    ins[in_g] = in_any;
    in_e    = 0;
    ret_any = 1'b0;
    ret_e   = 0;
    for (tk = PT - 1; tk >= 0; tk = tk - 1) begin
        if (!pt_v[tk]) in_e = tk[PT_WIDTH-1:0];
        if (pt_v[tk] && pt_start[tk] == rp[pt_ring[tk]]) begin
            ret_any = 1'b1;
            ret_e   = tk[PT_WIDTH-1:0];
        end
    end
end
wire [RB_WIDTH-1:0] ret_ring = pt_ring[ret_e];
wire [31:0]         ret_size = pt_size[ret_e];
integer pi;
always @(posedge clk) begin
    rel_valid <= ret_any;
    if (ret_any) begin
        rel_buffer <= ret_ring[BUF_WIDTH-1:0];
        rel_small  <= ret_ring == SMALL_RING;
        rel_size   <= ret_size;
        rp[ret_ring] <= ring_add(pt_start[ret_e], (ret_size + 32'd63) >> 6);
        pt_v[ret_e] <= 1'b0;
    end
    if (in_any) begin
        in_last <= in_g;
        pt_v[in_e]     <= 1'b1;
        pt_ring[in_e]  <= sl_pr_ring[RB_WIDTH*in_g +: RB_WIDTH];
        pt_start[in_e] <= sl_pr_start[RING_WIDTH*in_g +: RING_WIDTH];
        pt_size[in_e]  <= sl_pr_size[32*in_g +: 32];
    end
    outs <= outs + ((q_take || s_take) && q_len != 0) - ret_any;
    if (rst) begin
        rel_valid <= 1'b0;
        pt_v      <= {PT{1'b0}};
        outs      <= 0;
        for (pi = 0; pi <= BUF_COUNT; pi = pi + 1) rp[pi] <= {RING_WIDTH{1'b0}};
    end
end

// ---- the router's port: one slot's outcome at a time -------------------------
wire [SLOT_COUNT-1:0]      sl_hopv;
wire [SLOT_COUNT-1:0]      sl_leave;
wire [SLOT_COUNT*DM_WIDTH-1:0] sl_dix;   // the header's index in the descriptor memory
wire [SLOT_COUNT-1:0]      sl_chain;       // a chained hop: its header is c_hdr
wire [SLOT_COUNT*CONN_WIDTH-1:0] sl_conn;
wire [SLOT_COUNT*8-1:0]    sl_status;
wire [SLOT_COUNT*64-1:0]   sl_detail;
wire [SLOT_COUNT*32-1:0]   sl_olen;
wire [SLOT_COUNT*64-1:0]   sl_reasm, sl_queue, sl_exec;
wire [SLOT_COUNT*512-1:0]  sl_times;
wire [SLOT_COUNT*512-1:0]  sl_tdata;
wire [SLOT_COUNT*64-1:0]   sl_tkeep;
wire [SLOT_COUNT-1:0]      sl_tlast, sl_tvalid;
wire                       rt_busy;
wire                       hop_ready;
wire                       r_data_ready;
reg                        r_locked = 1'b0;
reg  [SLOT_WIDTH-1:0]      r_own = 0;
reg  [SLOT_WIDTH-1:0]      r_last = SLOT_COUNT - 1;
reg  [SLOT_WIDTH-1:0]      r_pick;
reg                        r_any;
reg  [SLOT_WIDTH:0]        r_i;
integer qk;
always @* begin
    r_any  = 1'b0;
    r_pick = 0;
    for (qk = SLOT_COUNT; qk >= 1; qk = qk - 1) begin
        r_i = r_last + qk;
        if (r_i >= SLOT_COUNT) r_i = r_i - SLOT_COUNT;
        if (sl_hopv[r_i[SLOT_WIDTH-1:0]]) begin
            r_any  = 1'b1;
            r_pick = r_i[SLOT_WIDTH-1:0];
        end
    end
end
wire [SLOT_WIDTH-1:0] r_sel     = r_locked ? r_own : r_pick;
wire                  hop_valid = !r_locked && r_any;
wire                  hop_take  = hop_valid && hop_ready;

always @(posedge clk) begin
    if (hop_take) begin
        r_locked <= 1'b1;
        r_own    <= r_pick;
        r_last   <= r_pick;
        // a chained next hop keeps the request's reassembly (its earlier hops' queueing and
        // execution are in the queue and exec sums); its block carries this hop's record
        e_next_reasm <= sl_reasm[64*r_pick +: 64];
        e_sent_times <= sl_times[512*r_pick +: 512];
    end
    if (r_locked && sl_leave[r_own]) r_locked <= 1'b0;
    if (rst) r_locked <= 1'b0;
end

// ---- the descriptor memory: each complete request's header, written once -------
// DM_N entries: a request holds one from the cycle the lists take it until the
// router takes its hop (the header is read then), so at most 2 DESC_DEPTH in the
// lists, SLOT_COUNT * SLOT_DEPTH in the slot queues and one a slot are held: a
// list with room always finds a free entry. One write port (the lists' intake,
// at the lowest free entry) and one read port (the router's take: the hop it
// takes is the one read, so the header reaches the router in the cycle its own
// register would have had it, and is held for the frame). A chained hop's
// header is c_hdr, copied at the take (the router's next hop overwrites c_hdr
// while it still sends this one's).
(* ram_style = "block" *)
reg  [1023:0]         dm [0:DM_N-1];
reg  [DM_N-1:0]       dm_used = {DM_N{1'b0}};
reg  [1023:0]         dm_q = 1024'd0;   // the header of the hop the router has
reg  [1023:0]         ch_q = 1024'd0;   // a chained hop's header, as c_hdr was at its take
reg                   h_chain = 1'b0;   // the router's hop is a chained one
// the lowest free entry, and whether there is one (a function: evaluated from time 0 on)
function [DM_WIDTH:0] dm_first_free(input [DM_N-1:0] used);
    integer i;
    begin
        dm_first_free = {(DM_WIDTH+1){1'b0}};
        for (i = DM_N - 1; i >= 0; i = i - 1) begin
            if (!used[i]) dm_first_free = {1'b1, i[DM_WIDTH-1:0]};
        end
    end
endfunction
wire [DM_WIDTH:0]     dm_ff  = dm_first_free(dm_used);
wire [DM_WIDTH-1:0]   dm_fi  = dm_ff[DM_WIDTH-1:0];
wire                  dm_any = dm_ff[DM_WIDTH];
assign dm_free_i = dm_fi;
assign dm_room   = dm_any;
wire [DM_WIDTH-1:0] dm_ra = sl_dix[DM_WIDTH*r_pick +: DM_WIDTH];
wire                dm_rel = hop_take && !sl_chain[r_pick];
always @(posedge clk) begin
    if (q_take || s_take) dm[dm_fi] <= q_hdr;
    if (hop_take) dm_q <= dm[dm_ra];
end
always @(posedge clk) begin
    if (hop_take) begin
        h_chain <= sl_chain[r_pick];
        if (sl_chain[r_pick]) ch_q <= c_hdr;
    end
    if (q_take || s_take) dm_used[dm_fi] <= 1'b1;
    if (dm_rel) dm_used[dm_ra] <= 1'b0;
    if (rst) dm_used <= {DM_N{1'b0}};
end

// ---- the slots: each its own executor and accelerator ---------------------------
localparam [2:0] E_IDLE = 3'd0, E_META = 3'd1, E_READ = 3'd2, E_FEED = 3'd3, E_WAIT = 3'd4;

wire [SLOT_COUNT-1:0]            mcr, bcr;   // the slots' configuration readies
wire [SLOT_COUNT*(MAPID_TABLE_BITS+1)-1:0] m_dict;
wire [SLOT_COUNT-1:0]            m_ovf, b_err;
wire [SLOT_COUNT*8-1:0]          b_sets;
// the configuration goes to the first MapId and the first Bucketize slot (one of each: their state
// is loaded once); with no such slot it is taken and dropped
assign s_cfg_tready  = mcr[MAPID_SLOT];
assign s_bcfg_tready = bcr[BUCKET_SLOT];
assign cfg_dict_size = m_dict[(MAPID_TABLE_BITS+1)*MAPID_SLOT +: MAPID_TABLE_BITS+1];
assign cfg_overflow  = m_ovf[MAPID_SLOT];
assign bcfg_sets     = b_sets[8*BUCKET_SLOT +: 8];
assign bcfg_error    = b_err[BUCKET_SLOT];

genvar g;
generate
for (g = 0; g < SLOT_COUNT; g = g + 1) begin : slot
    localparam [7:0] FN = SLOT_FUNCS[8*g +: 8];
    reg [2:0]            st = E_IDLE;
    reg [CONN_WIDTH-1:0] conn = 0;
    reg [DM_WIDTH-1:0]   dix = 0;      // the header's index in the descriptor memory (not chained)
    reg [2:0]            ran_i = 0;    // the hop's index mod 8 (its record in the timings block)
    reg [31:0]           len = 0;
    reg [63:0]           param = 0;
    reg [63:0]           queued = 0;   // queue cycles of this hop
    reg [63:0]           qsum = 0;     // queue and exec cycles of the chain's earlier hops here
    reg [63:0]           esum = 0;
    reg [63:0]           start = 0;    // cycle the slot took it
    reg [63:0]           reasm = 0;    // reassembly cycles (a chained hop: the request's, kept)
    reg [15:0]           queue_k = 0;  // this hop's queue cycles / 1000, saturating (the block's queue_us)
    reg [31:0]           left = 0;     // beats still to feed
    reg                  chain = 1'b0; // a chained hop: its payload is in cmem, not in a ring
    reg                  chainy = 1'b0; // it holds the chain token
    reg                  sent = 1'b0;  // the hop is with the router
    reg                  have = 1'b0;  // the first beat was read while the metadata waited
    reg [RB_WIDTH-1:0]   rbuf = 0;
    reg [RING_WIDTH-1:0] raddr = 0;
    reg [RING_WIDTH-1:0] first = 0;
    reg [511:0]          sd = 512'd0;  // the beat read for this slot
    reg                  prv = 1'b0;   // a release waiting for its ring's turn
    reg [RB_WIDTH-1:0]   pr_ring = 0;
    reg [RING_WIDTH-1:0] pr_start = 0;
    reg [31:0]           pr_size = 0;

    wire [QW-1:0] hd = sq_tdata[QW*g +: QW];
    wire head_chainy = hd[D_CHY];
    // per-hop timings block of the chain's earlier hops here: a chained hop's is c_times, which
    // stays until the router takes this hop (the next hop is this one's outcome)
    wire [511:0] times = chain ? c_times : 512'd0;
    assign sl_dix[DM_WIDTH*g +: DM_WIDTH] = dix;
    assign sl_chain[g] = chain;
    wire idle_now    = st == E_IDLE;
    assign sl_idle[g]     = idle_now;
    assign sl_chainrun[g] = !idle_now && chainy;
    assign sl_czwant[g]   = idle_now && !c_offer[g] && sq_tvalid[g] && !prv && head_chainy && !chain_busy;
    wire take_head = idle_now && !c_offer[g] && sq_tvalid[g] && !prv && (!head_chainy || cz_ok[g]);
    assign sq_tready[g] = take_head;
    assign slot_start[g] = take_head || c_offer[g];
    wire gnt = chain || (rd_any && rd_pick == g);
    assign sl_rbuf[RB_WIDTH*g +: RB_WIDTH] = rbuf;
    assign sl_prv[g] = prv;
    assign sl_pr_ring[RB_WIDTH*g +: RB_WIDTH] = pr_ring;
    assign sl_pr_start[RING_WIDTH*g +: RING_WIDTH] = pr_start;
    assign sl_pr_size[32*g +: 32] = pr_size;

    wire         a_last = left <= 1;
    wire [127:0] a_meta = {64'd0, param};
    wire [511:0] a_data = chain ? c_rd : (rd_tag_v && rd_tag == g) ? rd_data : sd;
    wire [63:0]  a_keep = (len == 0) ? 64'd0
                        : (left == 1 && len[5:0] != 0) ? ({64{1'b1}} >> (64 - len[5:0])) : {64{1'b1}};
    wire         echo_empty = FN == FN_ECHO && len == 0;
    wire         a_meta_valid = st == E_META && !echo_empty;
    wire         a_valid = st == E_FEED;
    wire         meta_ready, data_ready;
    // a beat a cycle: while a beat goes into the accelerator, the next one is read (the chain
    // buffer's every cycle, the ring's when the shared port grants it)
    wire ahead = st == E_FEED && data_ready && !a_last;
    assign sl_want[g] = !chain && ((st == E_META && !have) || st == E_READ || ahead);
    assign sl_raddr[RING_WIDTH*g +: RING_WIDTH] = ahead ? ring_next(raddr) : raddr;
    wire [511:0] x_tdata;
    wire [63:0]  x_tkeep;
    wire         x_tvalid, x_tlast, x_mvalid;
    wire [7:0]   x_status;
    wire [31:0]  x_detail;
    wire [31:0]  x_len;    // SparseTransform's output length
    wire         x_ready  = r_data_ready && r_locked && r_own == g;
    wire         leave    = st == E_WAIT && sent && !rt_busy;
    wire         accepted = hop_take && r_pick == g;
    assign sl_leave[g] = leave;
    assign sq_done[g]  = leave && !chain;

    always @(posedge clk) begin
        // the block's queue field: the software's is µs (its ns / 1000), here cycles / 1000
        queue_k <= queued >= 64'd65535000 ? 16'hFFFF : queued[25:0] / 26'd1000;
        if (rd_tag_v && rd_tag == g) sd <= rd_data;
        if (ins[g]) prv <= 1'b0;
        case (st)
            E_IDLE: begin
                start <= cyc;
                have  <= 1'b0;
                raddr <= {RING_WIDTH{1'b0}};
                if (c_offer[g]) begin
                    chain  <= 1'b1;
                    chainy <= 1'b1;
                    conn   <= c_conn;
                    ran_i  <= c_hop[2:0];
                    len    <= c_len;
                    param  <= c_param;
                    queued <= cyc - c_cycle;
                    qsum   <= c_qsum;
                    esum   <= c_esum;
                    reasm  <= c_reasm;
                    left   <= (c_len == 0) ? 32'd1 : (c_len + 32'd63) >> 6;
                    st     <= E_META;
                end else if (take_head) begin
                    chain  <= 1'b0;
                    chainy <= head_chainy;
                    conn   <= hd[D_CONN +: CONN_WIDTH];
                    dix    <= hd[D_DIX +: DM_WIDTH];
                    ran_i  <= hd[170:168];
                    len    <= hd[159:128];
                    param  <= hd[127:64];
                    queued <= cyc - hd[63:0];
                    qsum   <= 64'd0;
                    esum   <= 64'd0;
                    reasm  <= hd[D_REASM +: 64];
                    left   <= (hd[159:128] == 0) ? 32'd1 : (hd[159:128] + 32'd63) >> 6;
                    rbuf   <= hd[D_RING +: RB_WIDTH];
                    raddr  <= hd[D_START +: RING_WIDTH];
                    first  <= hd[D_START +: RING_WIDTH];
                    st     <= E_META;
                end
            end
            E_META: begin
                if (gnt) have <= 1'b1;
                if (echo_empty) begin
                    st <= E_WAIT;             // nothing to read: echo answers without the accelerator
                end else if (meta_ready) begin
                    st <= (have || gnt) ? E_FEED : E_READ;
                end
            end
            E_READ: if (gnt) st <= E_FEED;
            E_FEED: begin
                if (data_ready) begin
                    raddr <= ring_next(raddr);
                    left  <= left - 1;
                    if (a_last) begin
                        if (!chain && len != 0) begin
                            prv      <= 1'b1;
                            pr_ring  <= rbuf;
                            pr_start <= first;
                            pr_size  <= len;
                        end
                        st <= E_WAIT;
                    end else begin
                        st <= gnt ? E_FEED : E_READ;   // the next beat read ahead, or to be read
                    end
                end
            end
            // the router has the hop and is done with it (its frame is out, a
            // chained hop's in cmem): the slot takes the next
            E_WAIT: if (leave) st <= E_IDLE;
            default: st <= E_IDLE;
        endcase
        if (accepted) sent <= 1'b1;
        if (leave) sent <= 1'b0;
        if (rst) begin
            st   <= E_IDLE;
            sent <= 1'b0;
            prv  <= 1'b0;
        end
    end

    // the hop's outcome
    wire [63:0] n_elems = {32'd0, len >> 2};
    wire [63:0] topk_n  = (param < n_elems) ? param : n_elems;
    wire        hop_ok  = echo_empty || x_status == 8'd0;
    assign sl_hopv[g] = !idle_now && !sent && (x_mvalid || (echo_empty && st == E_WAIT));
    // this hop's record in the per-hop timings block (docs/protocol.md): device, ran, queue (cycles /
    // 1000, u16 saturating, where the software has µs), exec (cycles, u32 saturating, where it has ns)
    wire [63:0]  exec_c  = cyc - start;
    wire [63:0]  hop_rec = {exec_c[63:32] != 0 ? 32'hFFFFFFFF : exec_c[31:0], queue_k, 8'd1, DEVICE_ID};
    reg  [511:0] hop_times;
    always @* begin
        hop_times = times;
        hop_times[64 * ran_i +: 64] = hop_rec;
    end
    assign sl_conn[CONN_WIDTH*g +: CONN_WIDTH] = conn;
    assign sl_status[8*g +: 8] = hop_ok ? 8'd0 : x_status;
    assign sl_detail[64*g +: 64] = hop_ok || x_status == 8'd5 ? 64'd0 : {32'd0, x_detail};   // BAD_INPUT: 0
    assign sl_olen[32*g +: 32] = !hop_ok ? 32'd0 : FN == FN_TOPK ? {topk_n[29:0], 2'b00}
                               : FN == FN_SPARSE ? x_len : len;
    assign sl_reasm[64*g +: 64]  = reasm;
    assign sl_queue[64*g +: 64]  = qsum + queued;
    assign sl_exec[64*g +: 64]   = esum + exec_c;
    assign sl_times[512*g +: 512] = hop_times;
    assign sl_tdata[512*g +: 512] = x_tdata;
    assign sl_tkeep[64*g +: 64]   = x_tkeep;
    assign sl_tlast[g]  = x_tlast;
    assign sl_tvalid[g] = x_tvalid;

    if (FN == FN_TOPK) begin : topk
        assign mcr[g] = 1'b1; assign bcr[g] = 1'b1; assign x_len = 32'd0;
        assign m_dict[(MAPID_TABLE_BITS+1)*g +: MAPID_TABLE_BITS+1] = 0; assign m_ovf[g] = 1'b0;
        assign b_sets[8*g +: 8] = 8'd0; assign b_err[g] = 1'b0;
        offrac_accel_topk #(.K_MAX(TOPK_K_MAX)) inst (
            .clk(clk), .rst(rst),
            .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid),
            .s_axis_tready(data_ready), .s_axis_tlast(a_last),
            .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid), .s_meta_tready(meta_ready),
            .m_axis_tdata(x_tdata), .m_axis_tkeep(x_tkeep), .m_axis_tvalid(x_tvalid),
            .m_axis_tready(x_ready), .m_axis_tlast(x_tlast),
            .m_meta_tdata(), .m_meta_status(x_status), .m_meta_detail(x_detail),
            .m_meta_tvalid(x_mvalid), .m_meta_tready(accepted)
        );
    end else if (FN == FN_MAPID) begin : mapid
        assign bcr[g] = 1'b1; assign x_len = 32'd0;
        assign b_sets[8*g +: 8] = 8'd0; assign b_err[g] = 1'b0;
        offrac_accel_mapid #(.TABLE_BITS(MAPID_TABLE_BITS), .MAX_BEATS(MAPID_MAX_BEATS)) inst (
            .clk(clk), .rst(rst),
            .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid),
            .s_axis_tready(data_ready), .s_axis_tlast(a_last),
            .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid), .s_meta_tready(meta_ready),
            .s_cfg_tdata(s_cfg_tdata), .s_cfg_tkeep(s_cfg_tkeep), .s_cfg_tvalid(s_cfg_tvalid && g == MAPID_SLOT),
            .s_cfg_tready(mcr[g]), .s_cfg_tlast(s_cfg_tlast),
            .cfg_dict_size(m_dict[(MAPID_TABLE_BITS+1)*g +: MAPID_TABLE_BITS+1]), .cfg_overflow(m_ovf[g]),
            .m_axis_tdata(x_tdata), .m_axis_tkeep(x_tkeep), .m_axis_tvalid(x_tvalid),
            .m_axis_tready(x_ready), .m_axis_tlast(x_tlast),
            .m_meta_tdata(), .m_meta_status(x_status), .m_meta_detail(x_detail),
            .m_meta_tvalid(x_mvalid), .m_meta_tready(accepted)
        );
    end else if (FN == FN_MINMAX) begin : minmax
        assign mcr[g] = 1'b1; assign bcr[g] = 1'b1; assign x_len = 32'd0;
        assign m_dict[(MAPID_TABLE_BITS+1)*g +: MAPID_TABLE_BITS+1] = 0; assign m_ovf[g] = 1'b0;
        assign b_sets[8*g +: 8] = 8'd0; assign b_err[g] = 1'b0;
        offrac_accel_minmax #(.MAX_BEATS(ACC_BEATS)) inst (
            .clk(clk), .rst(rst),
            .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid),
            .s_axis_tready(data_ready), .s_axis_tlast(a_last),
            .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid), .s_meta_tready(meta_ready),
            .m_axis_tdata(x_tdata), .m_axis_tkeep(x_tkeep), .m_axis_tvalid(x_tvalid),
            .m_axis_tready(x_ready), .m_axis_tlast(x_tlast),
            .m_meta_tdata(), .m_meta_status(x_status), .m_meta_detail(x_detail),
            .m_meta_tvalid(x_mvalid), .m_meta_tready(accepted)
        );
    end else if (FN == FN_SPARSE) begin : sparse
        assign mcr[g] = 1'b1; assign bcr[g] = 1'b1;
        assign m_dict[(MAPID_TABLE_BITS+1)*g +: MAPID_TABLE_BITS+1] = 0; assign m_ovf[g] = 1'b0;
        assign b_sets[8*g +: 8] = 8'd0; assign b_err[g] = 1'b0;
        offrac_accel_sparse #(.MAX_BEATS(ACC_BEATS)) inst (
            .clk(clk), .rst(rst),
            .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid),
            .s_axis_tready(data_ready), .s_axis_tlast(a_last),
            .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid), .s_meta_tready(meta_ready),
            .m_axis_tdata(x_tdata), .m_axis_tkeep(x_tkeep), .m_axis_tvalid(x_tvalid),
            .m_axis_tready(x_ready), .m_axis_tlast(x_tlast),
            .m_meta_tdata(), .m_meta_status(x_status), .m_meta_detail(x_detail), .m_meta_len(x_len),
            .m_meta_tvalid(x_mvalid), .m_meta_tready(accepted)
        );
    end else if (FN == FN_BUCKET) begin : bucketize
        assign mcr[g] = 1'b1; assign x_len = 32'd0;
        assign m_dict[(MAPID_TABLE_BITS+1)*g +: MAPID_TABLE_BITS+1] = 0; assign m_ovf[g] = 1'b0;
        offrac_accel_bucketize #(
            .MAX_BEATS(ACC_BEATS), .SETS_MAX(BUCKET_SETS_MAX), .BORDERS_MAX(BUCKET_BORDERS_MAX)
        ) inst (
            .clk(clk), .rst(rst),
            .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid),
            .s_axis_tready(data_ready), .s_axis_tlast(a_last),
            .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid), .s_meta_tready(meta_ready),
            .s_cfg_tdata(s_bcfg_tdata), .s_cfg_tvalid(s_bcfg_tvalid && g == BUCKET_SLOT), .s_cfg_tready(bcr[g]),
            .s_cfg_tlast(s_bcfg_tlast), .cfg_sets(b_sets[8*g +: 8]), .cfg_error(b_err[g]),
            .m_axis_tdata(x_tdata), .m_axis_tkeep(x_tkeep), .m_axis_tvalid(x_tvalid),
            .m_axis_tready(x_ready), .m_axis_tlast(x_tlast),
            .m_meta_tdata(), .m_meta_status(x_status), .m_meta_detail(x_detail),
            .m_meta_tvalid(x_mvalid), .m_meta_tready(accepted)
        );
    end else begin : echo
        assign mcr[g] = 1'b1; assign bcr[g] = 1'b1; assign x_len = 32'd0;
        assign m_dict[(MAPID_TABLE_BITS+1)*g +: MAPID_TABLE_BITS+1] = 0; assign m_ovf[g] = 1'b0;
        assign b_sets[8*g +: 8] = 8'd0; assign b_err[g] = 1'b0;
        assign x_status = 8'd0;
        assign x_detail = 32'd0;
        offrac_accel_echo inst (
            .clk(clk), .rst(rst),
            .s_axis_tdata(a_data), .s_axis_tkeep(a_keep), .s_axis_tvalid(a_valid),
            .s_axis_tready(data_ready), .s_axis_tlast(a_last),
            .s_meta_tdata(a_meta), .s_meta_tvalid(a_meta_valid), .s_meta_tready(meta_ready),
            .m_axis_tdata(x_tdata), .m_axis_tkeep(x_tkeep), .m_axis_tvalid(x_tvalid),
            .m_axis_tready(x_ready), .m_axis_tlast(x_tlast),
            .m_meta_tdata(), .m_meta_tvalid(x_mvalid), .m_meta_tready(accepted)
        );
    end
end
endgenerate

// ---- the chain router ----------------------------------------------------------
wire [511:0]          rr_tdata;
wire [63:0]           rr_tkeep;
wire [CONN_WIDTH-1:0] rr_tuser;
wire                  rr_tlast;
wire                  rr_tvalid;
wire                  rr_tready;

offrac_chain_router #(
    .CONN_WIDTH(CONN_WIDTH), .DEVICE_ID(DEVICE_ID), .HOSTED(HOSTED), .PEERS(PEERS),
    .MAX_PAYLOAD(MAX_PAYLOAD), .HDR_HELD(1)
) router_inst (
    .clk(clk), .rst(rst),
    .s_hop_hdr(h_chain ? ch_q : dm_q), .s_hop_conn(sl_conn[CONN_WIDTH*r_sel +: CONN_WIDTH]),
    .s_hop_status(sl_status[8*r_sel +: 8]), .s_hop_detail(sl_detail[64*r_sel +: 64]),
    .s_hop_len(sl_olen[32*r_sel +: 32]), .s_hop_reassembly(sl_reasm[64*r_sel +: 64]),
    .s_hop_queue(sl_queue[64*r_sel +: 64]), .s_hop_exec(sl_exec[64*r_sel +: 64]),
    .s_hop_times(sl_times[512*r_sel +: 512]),
    .s_hop_valid(hop_valid), .s_hop_ready(hop_ready),
    .s_axis_tdata(sl_tdata[512*r_sel +: 512]), .s_axis_tkeep(sl_tkeep[64*r_sel +: 64]),
    .s_axis_tlast(sl_tlast[r_sel]), .s_axis_tvalid(sl_tvalid[r_sel] && r_locked), .s_axis_tready(r_data_ready),
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

assign idle = !d_busy && !ab_valid && f_count == 0 && s_count == 0 && (&sl_idle) && !(|sq_tvalid) && !(|sq_busy)
            && !(|sl_prv) && pt_v == 0 && !rel_valid && !fl_valid && !m_axis_tvalid && !locked
            && !rt_busy && c_st == C_HDR && !r_locked;

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
