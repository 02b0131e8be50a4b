/*
 * offrac reassembly pool: admission and room bookkeeping (OffRAC §3.2, §3.4).
 *
 * BUF_COUNT buffers of BUF_BYTES payload bytes each, shared by every client
 * and function. Per buffer the pool keeps what crates/core/src/pool.rs keeps:
 * `used` (bytes reserved: the complete requests held plus the whole of the
 * one reassembling) and `reassembling` (a request is being written into it).
 * A buffer is eligible for a request of `size` bytes when it is not
 * reassembling and BUF_BYTES - used >= size.
 *
 * A new request's admission (s_admit_*: its payload length) is answered on
 * m_admit_*: m_admit_ok with the chosen buffer, or !m_admit_ok (the
 * dispatcher answers BUSY). POLICY picks the buffer:
 *   0  Naive RR:    the buffer whose turn it is; the turn moves on whether
 *                   or not it was eligible, and an ineligible turn refuses.
 *   1  Eligible RR: the first eligible buffer from the turn on; the turn
 *                   moves past it (and stays put on a refusal).
 *   2  JSB:         the eligible buffer with the fewest used bytes, the
 *                   lowest index on a tie.
 * Admitting reserves `size` bytes and marks the buffer reassembling.
 *
 * Three event inputs, each taken every cycle (no ready: the receive path and
 * the selector never wait on the pool's bookkeeping):
 *   finish  the request reassembling in a buffer is complete (it stays held);
 *   abort   the request reassembling in a buffer was abandoned: its bytes
 *           are released;
 *   release a complete request left a buffer for a slot queue: its bytes are
 *           released.
 * An admission decided in a cycle sees the state before that cycle's events
 * (they land on the same edge as the admission's reservation). Events are
 * trusted (an abort of a buffer not reassembling is the caller's bug).
 *
 * The decision is combinational over the buffers' state and registered once
 * (one cycle from s_admit to m_admit); s_admit_tready = !m_admit_tvalid ||
 * m_admit_tready, one admission a cycle.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_pool_admit #(
    parameter BUF_COUNT  = 4,
    parameter BUF_BYTES  = 32768,
    parameter SIZE_WIDTH = 32,
    parameter POLICY     = 1,
    parameter ID_WIDTH   = BUF_COUNT > 1 ? $clog2(BUF_COUNT) : 1
) (
    input  wire                            clk,
    input  wire                            rst,

    // admission: a new request's payload length in, the pool's answer out
    input  wire [SIZE_WIDTH-1:0]           s_admit_size,
    input  wire                            s_admit_tvalid,
    output wire                            s_admit_tready,

    output wire                            m_admit_ok,
    output wire [ID_WIDTH-1:0]             m_admit_buffer,
    output wire [SIZE_WIDTH-1:0]           m_admit_size,
    output wire                            m_admit_tvalid,
    input  wire                            m_admit_tready,

    // events, one of each kind per cycle at most
    input  wire                            finish_valid,
    input  wire [ID_WIDTH-1:0]             finish_buffer,
    input  wire                            abort_valid,
    input  wire [ID_WIDTH-1:0]             abort_buffer,
    input  wire [SIZE_WIDTH-1:0]           abort_size,
    input  wire                            release_valid,
    input  wire [ID_WIDTH-1:0]             release_buffer,
    input  wire [SIZE_WIDTH-1:0]           release_size,

    // state, for the selector's view and for tests
    output wire [BUF_COUNT*SIZE_WIDTH-1:0] buf_used,
    output wire [BUF_COUNT-1:0]            buf_reassembling
);

reg [BUF_COUNT*SIZE_WIDTH-1:0] used = {BUF_COUNT*SIZE_WIDTH{1'b0}};  // buffer i in [i*SIZE_WIDTH +: SIZE_WIDTH]
reg [BUF_COUNT-1:0]  reasm = {BUF_COUNT{1'b0}};
reg [ID_WIDTH-1:0]   turn = {ID_WIDTH{1'b0}};

reg                  out_valid_reg = 1'b0;
reg                  out_ok_reg = 1'b0;
reg [ID_WIDTH-1:0]   out_buffer_reg = {ID_WIDTH{1'b0}};
reg [SIZE_WIDTH-1:0] out_size_reg = {SIZE_WIDTH{1'b0}};

assign s_admit_tready = !out_valid_reg || m_admit_tready;
wire admit_take = s_admit_tvalid && s_admit_tready;

// eligibility of each buffer for the request offered now
reg [BUF_COUNT-1:0] eligible;
integer e;
always @* begin
    for (e = 0; e < BUF_COUNT; e = e + 1) begin
        eligible[e] = !reasm[e]
            && {1'b0, s_admit_size} <= {1'b0, BUF_BYTES[SIZE_WIDTH-1:0]} - {1'b0, used[e*SIZE_WIDTH +: SIZE_WIDTH]};
    end
end

// the policy's choice
reg                  pick_ok;
reg [ID_WIDTH-1:0]   pick;
reg [ID_WIDTH-1:0]   turn_next;
reg [ID_WIDTH:0]     idx;
reg [SIZE_WIDTH-1:0] best_used;
integer k;
always @* begin
    pick_ok   = 1'b0;
    pick      = {ID_WIDTH{1'b0}};
    turn_next = turn;
    idx       = {(ID_WIDTH+1){1'b0}};
    best_used = {SIZE_WIDTH{1'b0}};
    if (POLICY == 0) begin
        pick    = turn;
        pick_ok = eligible[turn];
        turn_next = (turn == BUF_COUNT - 1) ? {ID_WIDTH{1'b0}} : turn + 1'b1;
    end else if (POLICY == 1) begin
        for (k = BUF_COUNT - 1; k >= 0; k = k - 1) begin
            // scanned last to first so that the first eligible from the turn wins
            idx = turn + k;
            if (idx >= BUF_COUNT) begin
                idx = idx - BUF_COUNT;
            end
            if (eligible[idx[ID_WIDTH-1:0]]) begin
                pick_ok = 1'b1;
                pick    = idx[ID_WIDTH-1:0];
            end
        end
        if (pick_ok) begin
            turn_next = (pick == BUF_COUNT - 1) ? {ID_WIDTH{1'b0}} : pick + 1'b1;
        end
    end else begin
        for (k = 0; k < BUF_COUNT; k = k + 1) begin
            if (eligible[k] && (!pick_ok || used[k*SIZE_WIDTH +: SIZE_WIDTH] < best_used)) begin
                pick_ok   = 1'b1;
                pick      = k[ID_WIDTH-1:0];
                best_used = used[k*SIZE_WIDTH +: SIZE_WIDTH];
            end
        end
    end
end

integer b;
always @(posedge clk) begin
    if (s_admit_tready) begin
        out_valid_reg  <= admit_take;
        out_ok_reg     <= pick_ok;
        out_buffer_reg <= pick;
        out_size_reg   <= s_admit_size;
    end
    if (admit_take) begin
        turn <= turn_next;
    end

    for (b = 0; b < BUF_COUNT; b = b + 1) begin
        used[b*SIZE_WIDTH +: SIZE_WIDTH] <= used[b*SIZE_WIDTH +: SIZE_WIDTH]
            + ((admit_take && pick_ok && pick == b) ? s_admit_size : {SIZE_WIDTH{1'b0}})
            - ((abort_valid && abort_buffer == b) ? abort_size : {SIZE_WIDTH{1'b0}})
            - ((release_valid && release_buffer == b) ? release_size : {SIZE_WIDTH{1'b0}});
        if ((finish_valid && finish_buffer == b) || (abort_valid && abort_buffer == b)) begin
            reasm[b] <= 1'b0;
        end
        if (admit_take && pick_ok && pick == b) begin
            reasm[b] <= 1'b1;
        end
    end

    if (rst) begin
        out_valid_reg <= 1'b0;
        turn          <= {ID_WIDTH{1'b0}};
        reasm         <= {BUF_COUNT{1'b0}};
        used          <= {BUF_COUNT*SIZE_WIDTH{1'b0}};
    end
end

assign m_admit_tvalid  = out_valid_reg;
assign m_admit_ok     = out_ok_reg;
assign m_admit_buffer = out_buffer_reg;
assign m_admit_size   = out_size_reg;

assign buf_used         = used;
assign buf_reassembling = reasm;

endmodule

`resetall
