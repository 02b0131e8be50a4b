/*
 * offrac response header builder (docs/protocol.md, "Response header").
 *
 * Packs the response fields into the 64-byte header as one 512-bit
 * AXI-Stream beat, byte 0 in tdata[7:0] (little-endian as on the wire), the
 * same bytes as ResponseHeader::encode in crates/proto/src/response.rs.
 * Reserved bytes (22..23, 56..63) are always zero and only the two defined
 * flag bits pass, so no field value can produce a header clients reject.
 *
 * tlast is set when nothing follows the header (payload_len == 0 and no
 * per-hop timings block), so a bodiless answer (BUSY, a receipt, ...) is a
 * complete one-beat frame; otherwise the payload stage ends the frame.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_resp_header_build (
    input  wire          clk,
    input  wire          rst,

    // response fields in
    input  wire          s_resp_valid,
    output wire          s_resp_ready,
    input  wire [7:0]    s_resp_flags,        // bit 0 HOP_TIMES, bit 1 RECEIPT
    input  wire [15:0]   s_resp_status,
    input  wire [7:0]    s_resp_hop_index,
    input  wire [7:0]    s_resp_device,
    input  wire [63:0]   s_resp_request_id,
    input  wire [31:0]   s_resp_payload_len,
    input  wire [15:0]   s_resp_tenant,
    input  wire [63:0]   s_resp_reassembly_ns,
    input  wire [63:0]   s_resp_queue_ns,
    input  wire [63:0]   s_resp_exec_ns,
    input  wire [63:0]   s_resp_detail,

    // header beat out
    output wire [511:0]  m_axis_tdata,
    output wire [63:0]   m_axis_tkeep,
    output wire          m_axis_tvalid,
    input  wire          m_axis_tready,
    output wire          m_axis_tlast
);

localparam [15:0] RESPONSE_MAGIC = 16'h5352;
localparam [7:0]  VERSION        = 8'd1;
localparam [7:0]  KNOWN_FLAGS    = 8'h03;

wire [7:0] flags = s_resp_flags & KNOWN_FLAGS;

wire [511:0] beat = {
    64'd0,                  // 56..63 reserved
    s_resp_detail,          // 48..55
    s_resp_exec_ns,         // 40..47
    s_resp_queue_ns,        // 32..39
    s_resp_reassembly_ns,   // 24..31
    16'd0,                  // 22..23 reserved
    s_resp_tenant,          // 20..21
    s_resp_payload_len,     // 16..19
    s_resp_request_id,      // 8..15
    s_resp_device,          // 7
    s_resp_hop_index,       // 6
    s_resp_status,          // 4..5
    flags,                  // 3
    VERSION,                // 2
    RESPONSE_MAGIC          // 0..1
};

// One output register stage, full throughput, holds while the sink stalls.
reg          valid_reg = 1'b0;
reg [511:0]  data_reg;
reg          last_reg;

assign s_resp_ready = !valid_reg || m_axis_tready;

always @(posedge clk) begin
    if (s_resp_ready) begin
        valid_reg <= s_resp_valid;
        data_reg  <= beat;
        last_reg  <= (s_resp_payload_len == 32'd0) && !flags[0];
    end

    if (rst) begin
        valid_reg <= 1'b0;
    end
end

assign m_axis_tdata  = data_reg;
assign m_axis_tkeep  = {64{1'b1}};
assign m_axis_tvalid = valid_reg;
assign m_axis_tlast  = last_reg;

endmodule

`resetall
