/*
 * offrac slot queue (OffRAC §3.6): the bounded queue of complete requests in
 * front of one accelerator slot, as crates/core/src/slot.rs keeps it.
 *
 * Each entry is a descriptor (opaque: where the request sits in the pool,
 * its metadata word, ...) and its cost in payload bytes. The queue counts
 * the bytes queued (not the job running, which has left it) and whether
 * its slot is busy: the head goes out on m_axis only while the slot is idle;
 * taking it makes the slot busy until `done`. The selector reads
 * `queued_bytes`, `busy` and `full` to decide where a request goes; the
 * queue itself holds DEPTH descriptors (the core counts only bytes, so a
 * selector must also treat a queue with every entry taken as having no
 * room).
 *
 * s_axis_tready = !full; a push and a pop may share a cycle. The head is
 * read from the entry array (distributed RAM for small DEPTH); `done` and a
 * new start take two cycles (the slot is idle for one in between).
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_slot_queue #(
    parameter DESC_WIDTH = 64,
    parameter SIZE_WIDTH = 32,
    parameter DEPTH      = 8,
    parameter PTR_WIDTH  = DEPTH > 1 ? $clog2(DEPTH) : 1
) (
    input  wire                   clk,
    input  wire                   rst,

    input  wire [DESC_WIDTH-1:0]  s_axis_tdata,
    input  wire [SIZE_WIDTH-1:0]  s_axis_tsize,
    input  wire                   s_axis_tvalid,
    output wire                   s_axis_tready,

    output wire [DESC_WIDTH-1:0]  m_axis_tdata,
    output wire [SIZE_WIDTH-1:0]  m_axis_tsize,
    output wire                   m_axis_tvalid,
    input  wire                   m_axis_tready,

    // the slot finished the job it took
    input  wire                   done,

    output wire [SIZE_WIDTH-1:0]  queued_bytes,
    output wire                   busy,
    output wire                   full
);

reg [DESC_WIDTH-1:0] desc_mem [0:DEPTH-1];
reg [SIZE_WIDTH-1:0] size_mem [0:DEPTH-1];
reg [PTR_WIDTH-1:0]  rd_ptr = {PTR_WIDTH{1'b0}};
reg [PTR_WIDTH-1:0]  wr_ptr = {PTR_WIDTH{1'b0}};
reg [PTR_WIDTH:0]    count = {(PTR_WIDTH+1){1'b0}};
reg [SIZE_WIDTH-1:0] bytes = {SIZE_WIDTH{1'b0}};
reg                  busy_reg = 1'b0;

assign full          = count == DEPTH;
assign s_axis_tready = !full;
assign m_axis_tvalid = count != 0 && !busy_reg;
assign m_axis_tdata  = desc_mem[rd_ptr];
assign m_axis_tsize  = size_mem[rd_ptr];

wire push = s_axis_tvalid && s_axis_tready;
wire pop  = m_axis_tvalid && m_axis_tready;

always @(posedge clk) begin
    if (push) begin
        desc_mem[wr_ptr] <= s_axis_tdata;
        size_mem[wr_ptr] <= s_axis_tsize;
        wr_ptr <= (wr_ptr == DEPTH - 1) ? {PTR_WIDTH{1'b0}} : wr_ptr + 1'b1;
    end
    if (pop) begin
        rd_ptr <= (rd_ptr == DEPTH - 1) ? {PTR_WIDTH{1'b0}} : rd_ptr + 1'b1;
    end
    count <= count + push - pop;
    bytes <= bytes + (push ? s_axis_tsize : {SIZE_WIDTH{1'b0}})
                   - (pop ? size_mem[rd_ptr] : {SIZE_WIDTH{1'b0}});
    if (done) begin
        busy_reg <= 1'b0;
    end
    if (pop) begin
        busy_reg <= 1'b1;
    end

    if (rst) begin
        rd_ptr   <= {PTR_WIDTH{1'b0}};
        wr_ptr   <= {PTR_WIDTH{1'b0}};
        count    <= {(PTR_WIDTH+1){1'b0}};
        bytes    <= {SIZE_WIDTH{1'b0}};
        busy_reg <= 1'b0;
    end
end

assign queued_bytes = bytes;
assign busy         = busy_reg;

endmodule

`resetall
