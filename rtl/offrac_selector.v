/*
 * offrac selector (OffRAC §3.6): which slot a complete request goes to, as
 * crates/core/src/selector.rs picks it.
 *
 * SLOT_FUNCS gives the function each slot hosts (8 bits a slot, slot 0 in
 * the low byte). A slot has room for a request of `cost` bytes when its
 * queue's bytes plus the cost fit QUEUE_BYTES and its queue has a free
 * entry. Among the slots hosting the request's function and with room:
 *   POLICY 0  RR:  the first from the function's turn on; the turn moves
 *                  past the chosen slot (and stays put when none has room);
 *   POLICY 1  JSQ: the fewest queued bytes, then an idle slot before a busy
 *                  one, then the lowest index;
 *   POLICY 2  run time: the `policy` input picks (0 RR, 1 JSQ); its owner
 *                  holds it steady between resets (the request path latches
 *                  cfg_slot_policy at reset), so RR's turns start from reset.
 * With POLICY 0 or 1 the `policy` input is unused (tie it off).
 * The core keeps the RR turn as an index into the function's list of slots;
 * here it is the slot index to search from (one past the last chosen),
 * which visits the function's slots in the same order. Turns are kept for
 * functions below FUNC_COUNT (functions no slot hosts never need one).
 *
 * slot_mask: the slots configured (the node's [[slots]]); a slot outside it is
 * never picked, so RR and JSQ run over the configured slots only (RR's turn
 * skips the others, which visits the configured slots in the core's order).
 *
 * The pick is combinational over the slots' state (`pick_ok`, `pick_slot`);
 * `take` (the request went to the pick this cycle) moves the turn.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_selector #(
    parameter SLOT_COUNT  = 4,
    parameter [8*SLOT_COUNT-1:0] SLOT_FUNCS = 0,
    parameter QUEUE_BYTES = 32768,
    parameter SIZE_WIDTH  = 32,
    parameter POLICY      = 0,
    parameter FUNC_COUNT  = 16,
    parameter SLOT_WIDTH  = SLOT_COUNT > 1 ? $clog2(SLOT_COUNT) : 1
) (
    input  wire                             clk,
    input  wire                             rst,

    input  wire [7:0]                       req_function,
    input  wire [SIZE_WIDTH-1:0]            req_cost,
    output reg                              pick_ok,
    output reg  [SLOT_WIDTH-1:0]            pick_slot,
    input  wire                             take,

    input  wire [SLOT_COUNT*SIZE_WIDTH-1:0] slot_queued_bytes,
    input  wire [SLOT_COUNT-1:0]            slot_busy,
    input  wire [SLOT_COUNT-1:0]            slot_full,
    input  wire [SLOT_COUNT-1:0]            slot_mask,
    input  wire                             policy      // POLICY 2 only: 0 RR, 1 JSQ
);

// JSQ or RR: fixed by POLICY, or the `policy` input's when POLICY is 2 (run time)
wire jsq = POLICY == 2 ? policy : POLICY == 1;

reg [SLOT_WIDTH-1:0] turn [0:FUNC_COUNT-1];

reg [SLOT_COUNT-1:0] fits;
integer i;
always @* begin
    for (i = 0; i < SLOT_COUNT; i = i + 1) begin
        fits[i] = slot_mask[i] && SLOT_FUNCS[8*i +: 8] == req_function && !slot_full[i]
            && {1'b0, slot_queued_bytes[SIZE_WIDTH*i +: SIZE_WIDTH]} + {1'b0, req_cost}
               <= {1'b0, QUEUE_BYTES[SIZE_WIDTH-1:0]};
    end
end

wire [SLOT_WIDTH-1:0] start = req_function < FUNC_COUNT ? turn[req_function] : {SLOT_WIDTH{1'b0}};

reg [SLOT_WIDTH:0]     idx;
reg [SIZE_WIDTH-1:0]   best_bytes;
reg                    best_busy;
integer k;
always @* begin
    pick_ok    = 1'b0;
    pick_slot  = {SLOT_WIDTH{1'b0}};
    idx        = {(SLOT_WIDTH+1){1'b0}};
    best_bytes = {SIZE_WIDTH{1'b0}};
    best_busy  = 1'b0;
    if (!jsq) begin
        for (k = SLOT_COUNT - 1; k >= 0; k = k - 1) begin
            // last to first, so that the first with room from the turn wins
            idx = start + k;
            if (idx >= SLOT_COUNT) begin
                idx = idx - SLOT_COUNT;
            end
            if (fits[idx[SLOT_WIDTH-1:0]]) begin
                pick_ok   = 1'b1;
                pick_slot = idx[SLOT_WIDTH-1:0];
            end
        end
    end else begin
        for (k = 0; k < SLOT_COUNT; k = k + 1) begin
            if (fits[k] && (!pick_ok
                    || slot_queued_bytes[SIZE_WIDTH*k +: SIZE_WIDTH] < best_bytes
                    || (slot_queued_bytes[SIZE_WIDTH*k +: SIZE_WIDTH] == best_bytes
                        && !slot_busy[k] && best_busy))) begin
                pick_ok    = 1'b1;
                pick_slot  = k[SLOT_WIDTH-1:0];
                best_bytes = slot_queued_bytes[SIZE_WIDTH*k +: SIZE_WIDTH];
                best_busy  = slot_busy[k];
            end
        end
    end
end

integer f;
always @(posedge clk) begin
    if (take && pick_ok && req_function < FUNC_COUNT) begin
        turn[req_function] <= (pick_slot == SLOT_COUNT - 1) ? {SLOT_WIDTH{1'b0}} : pick_slot + 1'b1;
    end
    if (rst) begin
        for (f = 0; f < FUNC_COUNT; f = f + 1) begin
            turn[f] <= {SLOT_WIDTH{1'b0}};
        end
    end
end

generate
    if (POLICY < 0 || POLICY > 2) begin : bad_policy
`ifdef __ICARUS__
        offrac_bad_parameter__POLICY_not_0_1_2 bad ();
`else
        $error("offrac_selector: POLICY (%0d) must be 0 (RR), 1 (JSQ) or 2 (run time: the policy input)",
               POLICY);
`endif
    end
endgenerate

endmodule

`resetall
