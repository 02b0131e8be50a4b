/*
 * offrac chain router (seed 001 §III-B; docs/protocol.md, "Chains"): after
 * a hop has run, decide where the request goes with the hop's result as its
 * payload, as the software node does (Job::advance in crates/core/src/job.rs,
 * Engine::route, the driver's forward in crates/node/src/driver/links.rs):
 *
 * - the hop failed (status != OK): the response path, that status and
 *   detail, hop_index = the hop that ran; no payload follows the hop.
 * - it was the chain's last hop: the response path, OK, the result as the
 *   response's payload, hop_index = the last hop.
 * - else the chain is "shifted": hop_index + 1 (our header keeps the whole
 *   chain and an index into it, where seed 001 shifts its Chain field left
 *   by one hop word; the same next hop is exposed). The next hop's device:
 *   - 0xFF or DEVICE_ID: the next local slot (m_next_*), refused first
 *     with TOO_LARGE (detail MAX_PAYLOAD) for a result over MAX_PAYLOAD,
 *     then with UNKNOWN_FUNCTION (detail the function) for a function not
 *     in HOSTED: an explicit answer naming the next hop, never a drop.
 *   - another device in PEERS: the network egress (m_net_*, tdest the
 *     device), the request header as the software forwards it.
 *   - a device not in PEERS: UNREACHABLE (detail the device).
 *   A refused hop's result is read and dropped.
 *
 * In: s_hop_* one word per hop run: the request's header and extension as
 * they came on the wire (bytes 0..63 the header, 64..127 the extension or
 * zero; hop_index = the hop that ran), the connection, the hop's status,
 * detail and output length, and the timings so far (reassembly, and queue
 * and exec summed over this node's hops including this one). Then, only
 * when the status is OK and the length is not 0, the result on s_axis_*
 * (packed from byte 0, tlast on its last beat).
 *
 * Out, each a frame of 512-bit beats, tuser the connection:
 * - m_resp_axis_*: our 64-byte response header, then the OK result.
 * - m_net_axis_*: the forwarded request header (+ extension), then the
 *   result; tdest the device. As the driver's forward: hop_index advanced,
 *   payload_len the result's, FORWARDED set, reply_device 0xFF unless
 *   DIRECT_REPLY, the caller's id as origin_id on a direct reply, HOP_EXT
 *   as set_ext_flag says. request_id stays the caller's: the link's own id
 *   is the link stage's to assign (it keeps the caller's per forwarded id
 *   to relay the answer); budget_us passes unchanged (no budgets in the RTL).
 * - m_next_axis_*: the request for the next local hop: its header
 *   (+ extension, as flagged) with hop_index advanced and payload_len the
 *   result's, then the result; m_next_reassembly/queue/exec ride along with
 *   every beat (the sums the final answer carries).
 * Response timings: the hop's sums on a result or a hop's error; 0 on a
 * refusal made here (as reply_to / fail_forwarded do). A request flagged
 * TRACE (flags bit 1) answered with a result or a hop's error gets the
 * per-hop timings block (s_hop_times, eight 8-byte records as
 * docs/protocol.md lays them out, built by the request path) as one beat
 * right after the response header, and HOP_TIMES (bit 0) in the response
 * flags, as Job::time_answer; so does UNREACHABLE (the driver's fail_forwarded,
 * with this hop's record in the block); the other refusals made here have
 * neither (reply_to).
 *
 * One hop at a time; one output register stage shared by the three ports
 * (a beat is held, never dropped, while its port stalls).
 *
 * HDR_HELD 1: s_hop_hdr is not latched here but held by the caller, from the
 * cycle after the hop's take until the next take (offrac_request_path reads
 * it from its descriptor memory at the take); 0: latched at the take, with
 * the hop's other fields.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_chain_router #(
    parameter CONN_WIDTH  = 2,
    parameter [7:0] DEVICE_ID = 8'd0,
    parameter [255:0] HOSTED = 256'h43,   // functions run by this node's slots
    parameter [255:0] PEERS  = 256'h0,    // devices in the device table
    parameter MAX_PAYLOAD = 16384,
    parameter HDR_HELD    = 0
) (
    input  wire                   clk,
    input  wire                   rst,

    // a hop has run
    input  wire [1023:0]          s_hop_hdr,
    input  wire [CONN_WIDTH-1:0]  s_hop_conn,
    input  wire [7:0]             s_hop_status,
    input  wire [63:0]            s_hop_detail,
    input  wire [31:0]            s_hop_len,
    input  wire [63:0]            s_hop_reassembly,
    input  wire [63:0]            s_hop_queue,
    input  wire [63:0]            s_hop_exec,
    input  wire [511:0]           s_hop_times,   // per-hop timings block (TRACE), this hop's record in
    input  wire                   s_hop_valid,
    output wire                   s_hop_ready,

    // its result (status OK and length > 0 only)
    input  wire [511:0]           s_axis_tdata,
    input  wire [63:0]            s_axis_tkeep,
    input  wire                   s_axis_tlast,
    input  wire                   s_axis_tvalid,
    output wire                   s_axis_tready,

    // the response path
    output wire [511:0]           m_resp_axis_tdata,
    output wire [63:0]            m_resp_axis_tkeep,
    output wire [CONN_WIDTH-1:0]  m_resp_axis_tuser,
    output wire                   m_resp_axis_tlast,
    output wire                   m_resp_axis_tvalid,
    input  wire                   m_resp_axis_tready,

    // the network egress
    output wire [511:0]           m_net_axis_tdata,
    output wire [63:0]            m_net_axis_tkeep,
    output wire [CONN_WIDTH-1:0]  m_net_axis_tuser,
    output wire [7:0]             m_net_axis_tdest,
    output wire                   m_net_axis_tlast,
    output wire                   m_net_axis_tvalid,
    input  wire                   m_net_axis_tready,

    // the next local hop
    output wire [511:0]           m_next_axis_tdata,
    output wire [63:0]            m_next_axis_tkeep,
    output wire [CONN_WIDTH-1:0]  m_next_axis_tuser,
    output wire                   m_next_axis_tlast,
    output wire                   m_next_axis_tvalid,
    input  wire                   m_next_axis_tready,
    output wire [63:0]            m_next_reassembly,
    output wire [63:0]            m_next_queue,
    output wire [63:0]            m_next_exec,

    output wire                   busy          // a hop taken and not all out yet
);

localparam [7:0] FLAG_HOP_EXT = 8'h01, FLAG_DIRECT_REPLY = 8'h04, FLAG_FORWARDED = 8'h08;
localparam [7:0] DEVICE_SELF = 8'hFF;
localparam [15:0] ST_OK = 16'd0, ST_UNKNOWN_FUNCTION = 16'd2, ST_TOO_LARGE = 16'd3,
                  ST_UNREACHABLE = 16'd11;
localparam [1:0] P_RESP = 2'd0, P_NET = 2'd1, P_NEXT = 2'd2;

// ---- the hop, latched ----------------------------------------------------
localparam [2:0] S_IDLE = 3'd0, S_HDR0 = 3'd1, S_HDR1 = 3'd2, S_PAY = 3'd3, S_DROP = 3'd4,
                 S_TIMES = 3'd5;
reg [2:0]            state = S_IDLE;
reg [1023:0]         hdr_reg = 1024'd0;
// the header is only read outside S_IDLE, when a held one is the hop's
wire [1023:0]        hdr = HDR_HELD ? s_hop_hdr : hdr_reg;
reg [CONN_WIDTH-1:0] conn = {CONN_WIDTH{1'b0}};
reg [7:0]            status = 8'd0;
reg [63:0]           detail = 64'd0;
reg [31:0]           len = 32'd0;
reg [63:0]           t_reasm = 64'd0, t_queue = 64'd0, t_exec = 64'd0;
reg [511:0]          t_hops = 512'd0;

assign s_hop_ready = state == S_IDLE;

// ---- the decision --------------------------------------------------------
wire [7:0]  flags     = hdr[31:24];
wire [15:0] tenant    = hdr[47:32];
wire [7:0]  hop_count = hdr[55:48];
wire [7:0]  ran       = hdr[63:56];
wire [63:0] req_id    = hdr[127:64];
wire [63:0] origin    = hdr[895:832];
wire [7:0]  nxt       = ran + 8'd1;
// hop i sits at byte 24 + 10 i of header + extension, for i < 4 and i >= 4 alike
wire [3:0]  nxt_i     = nxt[3:0];
wire [7:0]  nxt_fn    = hdr[8 * (24 + 10 * nxt_i) +: 8];
wire [7:0]  nxt_dev   = hdr[8 * (25 + 10 * nxt_i) +: 8];

wire failed  = status != 8'd0;
wire last    = nxt >= hop_count;
wire is_local = nxt_dev == DEVICE_SELF || nxt_dev == DEVICE_ID;
wire has_pay = !failed && len != 32'd0;   // a result follows on s_axis

reg  [1:0]  port;
reg  [15:0] r_status;
reg  [63:0] r_detail;
reg  [7:0]  r_hop;
reg         r_timed;   // the answer carries the hop's sums (not a refusal made here)
always @* begin
    port     = P_RESP;
    r_status = ST_OK;
    r_detail = 64'd0;
    r_hop    = nxt;
    r_timed  = 1'b0;
    if (failed) begin
        r_status = {8'd0, status};
        r_detail = detail;
        r_hop    = ran;
        r_timed  = 1'b1;
    end else if (last) begin
        r_hop    = ran;
        r_timed  = 1'b1;
    end else if (!is_local) begin
        if (PEERS[nxt_dev]) begin
            port = P_NET;
        end else begin
            r_status = ST_UNREACHABLE;
            r_detail = {56'd0, nxt_dev};
        end
    end else if (len > MAX_PAYLOAD) begin
        r_status = ST_TOO_LARGE;
        r_detail = MAX_PAYLOAD;
    end else if (!HOSTED[nxt_fn]) begin
        r_status = ST_UNKNOWN_FUNCTION;
        r_detail = {56'd0, nxt_fn};
    end else begin
        port = P_NEXT;
    end
end

wire answer_ok = port == P_RESP && r_status == ST_OK;   // the result goes out behind it
// TRACE: the per-hop timings block follows a result, a hop's error and UNREACHABLE (the driver's
// fail_forwarded answers a forward it cannot make with the chain's timings so far)
wire traced    = port == P_RESP && (r_timed || r_status == ST_UNREACHABLE) && flags[1];

// the response header (crates/proto/src/response.rs, ResponseHeader::encode)
wire [511:0] resp_beat = {
    64'd0,
    r_detail,
    r_timed ? t_exec : 64'd0,
    r_timed ? t_queue : 64'd0,
    r_timed ? t_reasm : 64'd0,
    16'd0,
    tenant,
    answer_ok ? len : 32'd0,   // the RTL sends no English message with an error
    req_id,
    DEVICE_ID,
    r_hop,
    r_status,
    {7'd0, traced},            // flags: HOP_TIMES
    8'd1,                      // version
    16'h5352                   // magic "RS"
};

// the next local hop's header: the chain advanced, the result as its payload
wire [1023:0] next_hdr = {hdr[1023:160], len, hdr[127:64], nxt, hdr[55:0]};

// the forwarded header, as the driver's forward builds it
wire        dr        = (flags & FLAG_DIRECT_REPLY) != 8'd0;
wire [63:0] caller_id = ((flags & FLAG_FORWARDED) != 8'd0 && dr) ? origin : req_id;
wire        net_ext   = hop_count > 8'd4 || dr;   // set_ext_flag, with FORWARDED now set
wire [7:0]  net_flags = (flags | FLAG_FORWARDED) & ~FLAG_HOP_EXT | (net_ext ? FLAG_HOP_EXT : 8'd0);
wire [1023:0] net_hdr = {
    hdr[1023:896],
    dr ? caller_id : 64'd0,                  // origin_id only on a direct reply
    hdr[831:168],
    dr ? hdr[167:160] : DEVICE_SELF,         // the answer comes back on the link
    len,
    hdr[127:64],
    nxt,
    hdr[55:32],
    net_flags,
    hdr[23:0]
};

wire has_ext = port == P_NET ? net_ext : flags[0];

// ---- the frame into the output register ----------------------------------
reg  [511:0] o_data;
reg  [63:0]  o_keep;
reg          o_last;
reg          o_valid;
wire         o_ready;

always @* begin
    o_data  = s_axis_tdata;
    o_keep  = s_axis_tkeep;
    o_last  = s_axis_tlast;
    o_valid = 1'b0;
    case (state)
        S_HDR0: begin
            o_valid = 1'b1;
            o_keep  = {64{1'b1}};
            o_data  = port == P_RESP ? resp_beat : port == P_NET ? net_hdr[511:0] : next_hdr[511:0];
            o_last  = port == P_RESP ? !traced && (!answer_ok || !has_pay) : !has_ext && !has_pay;
        end
        S_TIMES: begin
            o_valid = 1'b1;
            o_keep  = {64{1'b1}};
            o_data  = t_hops;
            o_last  = !answer_ok || !has_pay;
        end
        S_HDR1: begin
            o_valid = 1'b1;
            o_keep  = {64{1'b1}};
            o_data  = port == P_NET ? net_hdr[1023:512] : next_hdr[1023:512];
            o_last  = !has_pay;
        end
        S_PAY: o_valid = s_axis_tvalid;
        default: ;
    endcase
end

assign s_axis_tready = (state == S_PAY && o_ready) || state == S_DROP;

always @(posedge clk) begin
    case (state)
        S_IDLE: begin
            if (s_hop_valid) begin
                hdr_reg <= s_hop_hdr;
                conn    <= s_hop_conn;
                status  <= s_hop_status;
                detail  <= s_hop_detail;
                len     <= s_hop_len;
                t_reasm <= s_hop_reassembly;
                t_queue <= s_hop_queue;
                t_exec  <= s_hop_exec;
                t_hops  <= s_hop_times;
                state   <= S_HDR0;
            end
        end
        S_HDR0: begin
            if (o_ready) begin
                if (port != P_RESP && has_ext)
                    state <= S_HDR1;
                else if (traced)
                    state <= S_TIMES;
                else if (has_pay)
                    state <= (port == P_RESP && !answer_ok) ? S_DROP : S_PAY;
                else
                    state <= S_IDLE;
            end
        end
        S_HDR1: if (o_ready) state <= has_pay ? S_PAY : S_IDLE;
        S_TIMES: if (o_ready) state <= !has_pay ? S_IDLE : answer_ok ? S_PAY : S_DROP;
        S_PAY:  if (s_axis_tvalid && o_ready && s_axis_tlast) state <= S_IDLE;
        S_DROP: if (s_axis_tvalid && s_axis_tlast) state <= S_IDLE;
        default: state <= S_IDLE;
    endcase
    if (rst) begin
        state <= S_IDLE;
    end
end

// ---- one register stage, then the port the frame is for ------------------
localparam RW = 512 + 64 + 1 + 2 + 8 + CONN_WIDTH + 3 * 64;
wire [511:0]          r_data;
wire [63:0]           r_keep;
wire                  r_last;
wire [1:0]            r_port;
wire [7:0]            r_dest;
wire [CONN_WIDTH-1:0] r_conn;
wire [63:0]           r_reasm, r_queue, r_exec;
wire                  r_valid;
wire                  r_ready = r_port == P_RESP ? m_resp_axis_tready
                              : r_port == P_NET ? m_net_axis_tready : m_next_axis_tready;

offrac_axis_reg #(.WIDTH(RW)) out_reg (
    .clk(clk), .rst(rst),
    .s_tdata({o_data, o_keep, o_last, port, nxt_dev, conn, t_reasm, t_queue, t_exec}),
    .s_tvalid(o_valid), .s_tready(o_ready),
    .m_tdata({r_data, r_keep, r_last, r_port, r_dest, r_conn, r_reasm, r_queue, r_exec}),
    .m_tvalid(r_valid), .m_tready(r_ready)
);

assign m_resp_axis_tdata  = r_data;
assign m_resp_axis_tkeep  = r_keep;
assign m_resp_axis_tuser  = r_conn;
assign m_resp_axis_tlast  = r_last;
assign m_resp_axis_tvalid = r_valid && r_port == P_RESP;

assign m_net_axis_tdata   = r_data;
assign m_net_axis_tkeep   = r_keep;
assign m_net_axis_tuser   = r_conn;
assign m_net_axis_tdest   = r_dest;
assign m_net_axis_tlast   = r_last;
assign m_net_axis_tvalid  = r_valid && r_port == P_NET;

assign m_next_axis_tdata  = r_data;
assign m_next_axis_tkeep  = r_keep;
assign m_next_axis_tuser  = r_conn;
assign m_next_axis_tlast  = r_last;
assign m_next_axis_tvalid = r_valid && r_port == P_NEXT;
assign m_next_reassembly  = r_reasm;
assign m_next_queue       = r_queue;
assign m_next_exec        = r_exec;

assign busy = state != S_IDLE || r_valid;

endmodule

`resetall
