/*
 * offrac accelerator wrapper skeleton, function 0 (echo).
 *
 * The accelerator interface of issue #12 (OffRAC Appendix D): a 512-bit
 * AXI-Stream of payload in and out (tkeep, tlast ends a request) plus one
 * metadata word per request (request id, hop parameter, ... as the
 * dispatcher packs them; opaque here). Echo answers each request with its
 * own payload and passes its metadata word to m_meta, so later accelerators
 * replace only the datapath between the two.
 *
 * A request's data beats are taken only once its metadata word is (in the
 * same cycle at the earliest), so metadata and payload never pair up wrong.
 * Both outputs are an offrac_axis_reg stage that holds while the sink
 * stalls: no beat is dropped or overwritten under backpressure.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_accel_echo #(
    parameter DATA_WIDTH = 512,
    parameter KEEP_WIDTH = DATA_WIDTH / 8,
    parameter META_WIDTH = 128
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

    // result metadata out, one word per result
    output wire [META_WIDTH-1:0]  m_meta_tdata,
    output wire                   m_meta_tvalid,
    input  wire                   m_meta_tready
);

reg  in_frame = 1'b0;   // metadata taken, tlast not yet
wire meta_out_free;
wire data_out_free;

// A new request's metadata only between requests, and only with room for it.
assign s_meta_tready = !in_frame && meta_out_free;
wire meta_take = s_meta_tvalid && s_meta_tready;

assign s_axis_tready = (in_frame || meta_take) && data_out_free;
wire data_take = s_axis_tvalid && s_axis_tready;

always @(posedge clk) begin
    if (meta_take) begin
        in_frame <= 1'b1;
    end
    if (data_take && s_axis_tlast) begin
        in_frame <= 1'b0;   // also a one-beat request whose metadata came this cycle
    end
    if (rst) begin
        in_frame <= 1'b0;
    end
end

offrac_axis_reg #(.WIDTH(DATA_WIDTH + KEEP_WIDTH + 1)) data_out (
    .clk(clk), .rst(rst),
    .s_tdata({s_axis_tdata, s_axis_tkeep, s_axis_tlast}), .s_tvalid(data_take), .s_tready(data_out_free),
    .m_tdata({m_axis_tdata, m_axis_tkeep, m_axis_tlast}),
    .m_tvalid(m_axis_tvalid), .m_tready(m_axis_tready)
);

offrac_axis_reg #(.WIDTH(META_WIDTH)) meta_out (
    .clk(clk), .rst(rst),
    .s_tdata(s_meta_tdata), .s_tvalid(meta_take), .s_tready(meta_out_free),
    .m_tdata(m_meta_tdata), .m_tvalid(m_meta_tvalid), .m_tready(m_meta_tready)
);

endmodule

`resetall
