/*
 * offrac AXI-Stream register stage: one beat of WIDTH bits (a payload beat's
 * tdata/tkeep/tlast, or a metadata word with its status and detail, packed by
 * the user) held while the sink stalls, never dropped or overwritten.
 *
 * s_ready = !m_valid || m_ready: a beat per cycle while the sink takes them.
 * The handshake every accelerator's outputs share, in one place.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_axis_reg #(
    parameter WIDTH = 512
) (
    input  wire              clk,
    input  wire              rst,

    input  wire [WIDTH-1:0]  s_tdata,
    input  wire              s_tvalid,
    output wire              s_tready,

    output wire [WIDTH-1:0]  m_tdata,
    output wire              m_tvalid,
    input  wire              m_tready
);

reg [WIDTH-1:0] data_reg;
reg             valid_reg = 1'b0;

assign s_tready = !valid_reg || m_tready;

always @(posedge clk) begin
    if (s_tready) begin
        valid_reg <= s_tvalid;
        data_reg  <= s_tdata;
    end
    if (rst) begin
        valid_reg <= 1'b0;
    end
end

assign m_tdata  = data_reg;
assign m_tvalid = valid_reg;

endmodule

`resetall
