/*
 * offrac request header parser (docs/protocol.md, "Request header").
 *
 * Takes the 64-byte request header as one 512-bit beat (byte 0 of the header
 * in tdata[7:0]: the wire is little-endian, so multi-byte fields are plain
 * bit slices) and presents the decoded fields plus an error code, registered,
 * on a valid/ready output. The checks and their precedence are those of
 * RequestHeader::decode in crates/proto/src/request.rs: the first failing
 * check wins, because the error decides whether the connection survives
 * (bad magic / bad version are fatal) and which id the answer carries.
 *
 * The hop extension (second beat, hops 4..7, origin_id) is not parsed here:
 * a header flagged HOP_EXT is accepted or refused on its own fields only.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_req_header_parse (
    input  wire          clk,
    input  wire          rst,

    // header beat in
    input  wire [511:0]  s_axis_tdata,
    input  wire          s_axis_tvalid,
    output wire          s_axis_tready,

    // decoded header out (one per input beat, in order)
    output wire          m_hdr_valid,
    input  wire          m_hdr_ready,
    output wire [3:0]    m_hdr_error,       // ERR_* below, 0 = valid header
    output wire [2:0]    m_hdr_error_hop,   // ERR_UNUSED_HOP: the first non-zero hop
    output wire          m_hdr_fatal,       // bad magic or version: stream boundary lost
    output wire [7:0]    m_hdr_flags,
    output wire [15:0]   m_hdr_tenant,
    output wire [7:0]    m_hdr_hop_count,
    output wire [7:0]    m_hdr_hop_index,
    output wire [63:0]   m_hdr_request_id,
    output wire [31:0]   m_hdr_payload_len,
    output wire [7:0]    m_hdr_reply_device,
    output wire [23:0]   m_hdr_budget_us,
    output wire [4*8-1:0]  m_hdr_hop_function,  // hop i in [8*i +: 8]
    output wire [4*8-1:0]  m_hdr_hop_device,
    output wire [4*64-1:0] m_hdr_hop_param      // hop i in [64*i +: 64]
);

// Error codes; the order is the decoder's precedence. 8.. are left for the
// extension's own errors (reserved bytes, unused extension hop).
localparam [3:0]
    ERR_NONE            = 4'd0,
    ERR_BAD_MAGIC       = 4'd1,
    ERR_BAD_VERSION     = 4'd2,
    ERR_RESERVED_FLAGS  = 4'd3,
    ERR_BAD_HOP_COUNT   = 4'd4,
    ERR_NEEDLESS_EXT    = 4'd5,
    ERR_BAD_HOP_INDEX   = 4'd6,
    ERR_UNUSED_HOP      = 4'd7;

localparam [15:0] REQUEST_MAGIC = 16'h4F51;
localparam [7:0]  VERSION       = 8'd1;

localparam [7:0] FLAG_HOP_EXT      = 8'h01;
localparam [7:0] FLAG_DIRECT_REPLY = 8'h04;
localparam [7:0] FLAG_FORWARDED    = 8'h08;
localparam [7:0] KNOWN_FLAGS       = 8'h0F;

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
reg [2:0] unused_hop;
always @* begin
    casez (hop_unused)
        4'b???1: unused_hop = 3'd0;
        4'b??10: unused_hop = 3'd1;
        4'b?100: unused_hop = 3'd2;
        default: unused_hop = 3'd3;
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

// One output register stage. Ready upstream whenever the register is empty
// or being emptied this cycle, so back-to-back headers go at one per cycle
// and nothing is overwritten while the consumer holds off.
reg          valid_reg = 1'b0;
reg [3:0]    error_reg;
reg [2:0]    error_hop_reg;
reg [511:0]  beat_reg;

assign s_axis_tready = !valid_reg || m_hdr_ready;

always @(posedge clk) begin
    if (s_axis_tready) begin
        valid_reg     <= s_axis_tvalid;
        error_reg     <= error;
        error_hop_reg <= (error == ERR_UNUSED_HOP) ? unused_hop : 3'd0;
        beat_reg      <= s_axis_tdata;
    end

    if (rst) begin
        valid_reg <= 1'b0;
    end
end

// The fields are slices of the held beat: registering the beat once is
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

generate
    for (i = 0; i < 4; i = i + 1) begin : hop_out
        assign m_hdr_hop_function[8*i +: 8] = beat_reg[(24+10*i)*8 +: 8];
        assign m_hdr_hop_device[8*i +: 8]   = beat_reg[(25+10*i)*8 +: 8];
        assign m_hdr_hop_param[64*i +: 64]  = beat_reg[(26+10*i)*8 +: 64];
    end
endgenerate

endmodule

`resetall
