/*
 * offrac request header parser (docs/protocol.md, "Request header" and
 * "Hop extension").
 *
 * Takes the 64-byte request header as one 512-bit beat (byte 0 of the header
 * in tdata[7:0]: the wire is little-endian, so multi-byte fields are plain
 * bit slices), then, when the header is flagged HOP_EXT, the 64-byte hop
 * extension as the next beat, and presents one decoded request (all eight
 * hops, origin_id) plus an error code, registered, on a valid/ready output.
 * The checks and their precedence are those of RequestHeader::decode and
 * RequestHeader::decode_ext in crates/proto/src/request.rs: the first failing
 * check wins, because the error decides whether the connection survives
 * (bad magic / bad version are fatal) and which id the answer carries.
 *
 * Which beats belong to a request is the core's rule (engine.rs,
 * refuse_header): the extension beat is taken whenever flags bit 0 is set,
 * also when the header itself is refused (the node skips it with the
 * payload), except after a fatal error, when nothing after the header can be
 * trusted. A header's own error takes precedence over its extension's.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_req_header_parse (
    input  wire          clk,
    input  wire          rst,

    // header beat, then its extension beat when flagged, in
    input  wire [511:0]  s_axis_tdata,
    input  wire          s_axis_tvalid,
    output wire          s_axis_tready,

    // decoded request out (one per header, in order)
    output wire          m_hdr_valid,
    input  wire          m_hdr_ready,
    output wire [3:0]    m_hdr_error,       // ERR_* below, 0 = valid header
    output wire [2:0]    m_hdr_error_hop,   // ERR_UNUSED_HOP: the first non-zero hop (0..7)
    output wire          m_hdr_fatal,       // bad magic or version: stream boundary lost
    output wire [7:0]    m_hdr_flags,
    output wire [15:0]   m_hdr_tenant,
    output wire [7:0]    m_hdr_hop_count,
    output wire [7:0]    m_hdr_hop_index,
    output wire [63:0]   m_hdr_request_id,
    output wire [31:0]   m_hdr_payload_len,
    output wire [7:0]    m_hdr_reply_device,
    output wire [23:0]   m_hdr_budget_us,
    output wire [8*8-1:0]  m_hdr_hop_function,  // hop i in [8*i +: 8]; 4..7 zero without extension
    output wire [8*8-1:0]  m_hdr_hop_device,
    output wire [8*64-1:0] m_hdr_hop_param,     // hop i in [64*i +: 64]
    output wire [63:0]   m_hdr_origin_id    // extension bytes 40..48 on a FORWARDED + DIRECT_REPLY hop, else 0
);

// Error codes; the order is the decoder's precedence, then decode_ext's
// (reserved bytes before an unused extension hop, which is ERR_UNUSED_HOP
// with error hop 4..7, as the decoder's UnusedHop(i)).
localparam [3:0]
    ERR_NONE            = 4'd0,
    ERR_BAD_MAGIC       = 4'd1,
    ERR_BAD_VERSION     = 4'd2,
    ERR_RESERVED_FLAGS  = 4'd3,
    ERR_BAD_HOP_COUNT   = 4'd4,
    ERR_NEEDLESS_EXT    = 4'd5,
    ERR_BAD_HOP_INDEX   = 4'd6,
    ERR_UNUSED_HOP      = 4'd7,
    ERR_RESERVED_BYTES  = 4'd8;

localparam [15:0] REQUEST_MAGIC = 16'h4F51;
localparam [7:0]  VERSION       = 8'd1;

localparam [7:0] FLAG_HOP_EXT      = 8'h01;
localparam [7:0] FLAG_DIRECT_REPLY = 8'h04;
localparam [7:0] FLAG_FORWARDED    = 8'h08;
localparam [7:0] KNOWN_FLAGS       = 8'h0F;

// ---- the header beat --------------------------------------------------

// field slices of the input beat (byte offset * 8)
wire [15:0] magic       = s_axis_tdata[0   +: 16];
wire [7:0]  version     = s_axis_tdata[16  +: 8];
wire [7:0]  flags       = s_axis_tdata[24  +: 8];
wire [7:0]  hop_count   = s_axis_tdata[48  +: 8];
wire [7:0]  hop_index   = s_axis_tdata[56  +: 8];

// hop i is bytes 24+10i .. 33+10i: function, device, param (u64)
wire [3:0] hop_nonzero;

genvar i;
generate
    for (i = 0; i < 4; i = i + 1) begin : hop
        assign hop_nonzero[i] = |s_axis_tdata[(24+10*i)*8 +: 80];
    end
endgenerate

wire has_ext        = |(flags & FLAG_HOP_EXT);
// a forwarded direct-reply hop carries origin_id in the extension at any hop count
wire carries_origin = |(flags & FLAG_FORWARDED) && |(flags & FLAG_DIRECT_REPLY);
wire [7:0] max_hops = has_ext ? 8'd8 : 8'd4;

// hops at index >= hop_count (among the header's four) must be zero
wire [3:0] hop_unused;
generate
    for (i = 0; i < 4; i = i + 1) begin : unused
        assign hop_unused[i] = hop_nonzero[i] && (hop_count <= i);
    end
endgenerate

// lowest unused non-zero hop, as the decoder names the first one it finds
reg [1:0] unused_hop;
always @* begin
    casez (hop_unused)
        4'b???1: unused_hop = 2'd0;
        4'b??10: unused_hop = 2'd1;
        4'b?100: unused_hop = 2'd2;
        default: unused_hop = 2'd3;
    endcase
end

reg [3:0] error;
always @* begin
    if (magic != REQUEST_MAGIC) begin
        error = ERR_BAD_MAGIC;
    end else if (version != VERSION) begin
        error = ERR_BAD_VERSION;
    end else if (|(flags & ~KNOWN_FLAGS)) begin
        error = ERR_RESERVED_FLAGS;
    end else if (hop_count == 8'd0 || hop_count > max_hops) begin
        error = ERR_BAD_HOP_COUNT;
    end else if (has_ext && hop_count <= 8'd4 && !carries_origin) begin
        error = ERR_NEEDLESS_EXT;
    end else if (hop_index >= hop_count) begin
        error = ERR_BAD_HOP_INDEX;
    end else if (|hop_unused) begin
        error = ERR_UNUSED_HOP;
    end else begin
        error = ERR_NONE;
    end
end

wire fatal = (error == ERR_BAD_MAGIC) || (error == ERR_BAD_VERSION);

// ---- the extension beat, checked against the held header ---------------

reg [511:0] beat_reg;   // the header

wire [7:0] held_flags     = beat_reg[24 +: 8];
wire [7:0] held_hop_count = beat_reg[48 +: 8];
wire held_origin = |(held_flags & FLAG_FORWARDED) && |(held_flags & FLAG_DIRECT_REPLY);

// extension hop 4+i is bytes 10i .. 10i+9 of the beat
wire [3:0] ext_hop_unused;
generate
    for (i = 0; i < 4; i = i + 1) begin : ext_unused
        assign ext_hop_unused[i] = |s_axis_tdata[10*i*8 +: 80] && (held_hop_count <= 4 + i);
    end
endgenerate

// bytes 40..48 are origin_id on a hop that carries it, else reserved like 48..64
wire reserved_nonzero = |s_axis_tdata[48*8 +: 16*8] || (!held_origin && |s_axis_tdata[40*8 +: 8*8]);

reg [1:0] ext_unused_hop;
always @* begin
    casez (ext_hop_unused)
        4'b???1: ext_unused_hop = 2'd0;
        4'b??10: ext_unused_hop = 2'd1;
        4'b?100: ext_unused_hop = 2'd2;
        default: ext_unused_hop = 2'd3;
    endcase
end

wire [3:0] ext_error = reserved_nonzero ? ERR_RESERVED_BYTES :
                       |ext_hop_unused  ? ERR_UNUSED_HOP : ERR_NONE;

// ---- one output register stage -----------------------------------------
//
// Ready upstream whenever the register is empty or being emptied this
// cycle, so back-to-back headers go at one per cycle (one per two beats with
// an extension) and nothing is overwritten while the consumer holds off.
// Between a flagged header and its extension the stage is empty (not
// valid) and waits for the second beat.
reg          valid_reg = 1'b0;
reg          wait_ext_reg = 1'b0;
reg [3:0]    error_reg;
reg [2:0]    error_hop_reg;
reg [511:0]  ext_reg;   // the extension; zero when the request has none

assign s_axis_tready = !valid_reg || m_hdr_ready;

always @(posedge clk) begin
    if (wait_ext_reg) begin
        // valid_reg is low here, so s_axis_tready is high
        if (s_axis_tvalid) begin
            wait_ext_reg <= 1'b0;
            valid_reg    <= 1'b1;
            ext_reg      <= s_axis_tdata;
            if (error_reg == ERR_NONE) begin
                error_reg     <= ext_error;
                error_hop_reg <= (ext_error == ERR_UNUSED_HOP) ? {1'b1, ext_unused_hop} : 3'd0;
            end
        end
    end else if (s_axis_tready) begin
        wait_ext_reg  <= s_axis_tvalid && has_ext && !fatal;
        valid_reg     <= s_axis_tvalid && !(has_ext && !fatal);
        error_reg     <= error;
        error_hop_reg <= (error == ERR_UNUSED_HOP) ? {1'b0, unused_hop} : 3'd0;
        beat_reg      <= s_axis_tdata;
        ext_reg       <= 512'd0;
    end

    if (rst) begin
        valid_reg    <= 1'b0;
        wait_ext_reg <= 1'b0;
    end
end

// The fields are slices of the held beats: registering the beats once is
// cheaper than registering each decoded field separately (same flops).
assign m_hdr_valid        = valid_reg;
assign m_hdr_error        = error_reg;
assign m_hdr_error_hop    = error_hop_reg;
assign m_hdr_fatal        = (error_reg == ERR_BAD_MAGIC) || (error_reg == ERR_BAD_VERSION);
assign m_hdr_flags        = beat_reg[24  +: 8];
assign m_hdr_tenant       = beat_reg[32  +: 16];
assign m_hdr_hop_count    = beat_reg[48  +: 8];
assign m_hdr_hop_index    = beat_reg[56  +: 8];
assign m_hdr_request_id   = beat_reg[64  +: 64];
assign m_hdr_payload_len  = beat_reg[128 +: 32];
assign m_hdr_reply_device = beat_reg[160 +: 8];
assign m_hdr_budget_us    = beat_reg[168 +: 24];
assign m_hdr_origin_id    = held_origin ? ext_reg[40*8 +: 64] : 64'd0;

generate
    for (i = 0; i < 4; i = i + 1) begin : hop_out
        assign m_hdr_hop_function[8*i +: 8] = beat_reg[(24+10*i)*8 +: 8];
        assign m_hdr_hop_device[8*i +: 8]   = beat_reg[(25+10*i)*8 +: 8];
        assign m_hdr_hop_param[64*i +: 64]  = beat_reg[(26+10*i)*8 +: 64];
        assign m_hdr_hop_function[8*(4+i) +: 8] = ext_reg[(10*i)*8 +: 8];
        assign m_hdr_hop_device[8*(4+i) +: 8]   = ext_reg[(1+10*i)*8 +: 8];
        assign m_hdr_hop_param[64*(4+i) +: 64]  = ext_reg[(2+10*i)*8 +: 64];
    end
endgenerate

endmodule

`resetall
