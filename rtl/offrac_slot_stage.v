/*
 * offrac slot stage: the selector in front of one slot queue per slot.
 *
 * A complete request (its descriptor, function and cost in payload bytes)
 * offered on s_req_* is placed, in the cycle it is taken, into the queue of
 * the slot the selector picks, and the answer goes out one cycle later on
 * m_sel_*: m_sel_ok with the slot, or !m_sel_ok when no slot hosting the
 * function has room (the request stays where it was: in the pool, for the
 * drain to offer again later; a function no slot hosts is refused
 * UNKNOWN_FUNCTION at admission, before it gets here). Picks and pushes
 * land on the same edge, so back-to-back requests see each other's bytes.
 *
 * Each slot's head comes out on its m_axis_* lane (descriptor in tdata, cost
 * in tsize) while the slot is idle; slot_done[i] ends the job slot i took.
 * s_req_tready = !m_sel_tvalid || m_sel_tready. slot_mask: the slots the
 * selector may pick (the configured ones); the others stay idle. slot_policy:
 * with POLICY 2 the selector's policy (0 RR, 1 JSQ), held steady between
 * resets; unused with POLICY 0 (RR) or 1 (JSQ).
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_slot_stage #(
    parameter SLOT_COUNT  = 4,
    parameter [8*SLOT_COUNT-1:0] SLOT_FUNCS = 0,
    parameter QUEUE_BYTES = 32768,
    parameter DEPTH       = 8,
    parameter POLICY      = 0,
    parameter DESC_WIDTH  = 64,
    parameter SIZE_WIDTH  = 32,
    parameter FUNC_COUNT  = 16,
    parameter SLOT_WIDTH  = SLOT_COUNT > 1 ? $clog2(SLOT_COUNT) : 1
) (
    input  wire                             clk,
    input  wire                             rst,

    input  wire [DESC_WIDTH-1:0]            s_req_tdata,
    input  wire [7:0]                       s_req_function,
    input  wire [SIZE_WIDTH-1:0]            s_req_cost,
    input  wire                             s_req_tvalid,
    output wire                             s_req_tready,

    output wire                             m_sel_ok,
    output wire [SLOT_WIDTH-1:0]            m_sel_slot,
    output wire                             m_sel_tvalid,
    input  wire                             m_sel_tready,

    output wire [SLOT_COUNT*DESC_WIDTH-1:0] m_axis_tdata,
    output wire [SLOT_COUNT*SIZE_WIDTH-1:0] m_axis_tsize,
    output wire [SLOT_COUNT-1:0]            m_axis_tvalid,
    input  wire [SLOT_COUNT-1:0]            m_axis_tready,
    input  wire [SLOT_COUNT-1:0]            slot_done,
    input  wire [SLOT_COUNT-1:0]            slot_mask,
    input  wire                             slot_policy,

    output wire [SLOT_COUNT*SIZE_WIDTH-1:0] slot_queued_bytes,
    output wire [SLOT_COUNT-1:0]            slot_busy,
    output wire [SLOT_COUNT-1:0]            slot_full   // every entry of the slot's queue taken
);

wire                  pick_ok;
wire [SLOT_WIDTH-1:0] pick_slot;

reg                  sel_valid_reg = 1'b0;
reg                  sel_ok_reg = 1'b0;
reg [SLOT_WIDTH-1:0] sel_slot_reg = {SLOT_WIDTH{1'b0}};

assign s_req_tready = !sel_valid_reg || m_sel_tready;
wire take = s_req_tvalid && s_req_tready;

offrac_selector #(
    .SLOT_COUNT(SLOT_COUNT),
    .SLOT_FUNCS(SLOT_FUNCS),
    .QUEUE_BYTES(QUEUE_BYTES),
    .SIZE_WIDTH(SIZE_WIDTH),
    .POLICY(POLICY),
    .FUNC_COUNT(FUNC_COUNT),
    .SLOT_WIDTH(SLOT_WIDTH)
) selector_inst (
    .clk(clk),
    .rst(rst),
    .req_function(s_req_function),
    .req_cost(s_req_cost),
    .pick_ok(pick_ok),
    .pick_slot(pick_slot),
    .take(take),
    .slot_queued_bytes(slot_queued_bytes),
    .slot_busy(slot_busy),
    .slot_full(slot_full),
    .slot_mask(slot_mask),
    .policy(slot_policy)
);

genvar g;
generate
    for (g = 0; g < SLOT_COUNT; g = g + 1) begin : slot
        offrac_slot_queue #(
            .DESC_WIDTH(DESC_WIDTH),
            .SIZE_WIDTH(SIZE_WIDTH),
            .DEPTH(DEPTH)
        ) queue_inst (
            .clk(clk),
            .rst(rst),
            .s_axis_tdata(s_req_tdata),
            .s_axis_tsize(s_req_cost),
            .s_axis_tvalid(take && pick_ok && pick_slot == g),
            .s_axis_tready(),
            .m_axis_tdata(m_axis_tdata[g*DESC_WIDTH +: DESC_WIDTH]),
            .m_axis_tsize(m_axis_tsize[g*SIZE_WIDTH +: SIZE_WIDTH]),
            .m_axis_tvalid(m_axis_tvalid[g]),
            .m_axis_tready(m_axis_tready[g]),
            .done(slot_done[g]),
            .queued_bytes(slot_queued_bytes[g*SIZE_WIDTH +: SIZE_WIDTH]),
            .busy(slot_busy[g]),
            .full(slot_full[g])
        );
    end
endgenerate

always @(posedge clk) begin
    if (s_req_tready) begin
        sel_valid_reg <= take;
        sel_ok_reg    <= pick_ok;
        sel_slot_reg  <= pick_slot;
    end
    if (rst) begin
        sel_valid_reg <= 1'b0;
    end
end

assign m_sel_tvalid = sel_valid_reg;
assign m_sel_ok     = sel_ok_reg;
assign m_sel_slot   = sel_slot_reg;

endmodule

`resetall
