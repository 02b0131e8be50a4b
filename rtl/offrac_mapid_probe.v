/*
 * offrac MapId lookup port: finds KEYS keys, one after the other, in the
 * dictionary's hash table through one read port of its block RAM (MapId
 * has two of these, one per port of the dual-port RAM: two lookups per
 * cycle, seed 001 section III).
 *
 * Open addressing with linear probing: a key's first slot is hash(key), then
 * the next ones until the slot holds the key (its index is the result) or is
 * empty (the key is not in the dictionary: the result is `missing`, the
 * dictionary's size D). The table is never full (offrac_accel_mapid keeps at
 * most half of it used), so every search ends.
 *
 * One probe per cycle, batches back to back: `start` (only while `ready`)
 * takes a batch of `keys` (held inside, so the caller may change them
 * at once) and sends the first key's slot address in the same cycle; each
 * following cycle compares the slot read in the previous one and sends the
 * next address (the following slot, or the next key's hash). A batch
 * without collisions takes KEYS cycles, and `ready` is high in its last
 * one, so the next batch's first address goes out in that cycle: KEYS
 * lookups every KEYS cycles. `results` change all at once, in the cycle
 * after a batch's last key is resolved (`done` is high for that one cycle),
 * and stay until the next batch's `done`.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_mapid_probe #(
    parameter KEYS       = 8,
    parameter TABLE_BITS = 16,
    parameter IDX_WIDTH  = TABLE_BITS
) (
    input  wire                     clk,
    input  wire                     rst,

    output wire                     ready,
    input  wire                     start,
    input  wire [32*KEYS-1:0]       keys,
    input  wire [31:0]              missing,
    output reg                      done = 1'b0,
    output reg  [32*KEYS-1:0]       results,

    // the RAM port: address and read enable out, the slot read last cycle in
    output reg                      ram_en,
    output reg  [TABLE_BITS-1:0]    ram_addr,
    input  wire                     rd_used,
    input  wire [31:0]              rd_key,
    input  wire [IDX_WIDTH-1:0]     rd_idx
);

// The keys are hashed ids already (seed 001): fold them to TABLE_BITS bits.
function [TABLE_BITS-1:0] hash;
    input [31:0] k;
    integer b;
    begin
        hash = {TABLE_BITS{1'b0}};
        for (b = 0; b < 32; b = b + TABLE_BITS) begin
            hash = hash ^ (k >> b);
        end
    end
endfunction

localparam PI_WIDTH = KEYS > 1 ? $clog2(KEYS) : 1;

reg                   busy = 1'b0;      // a slot of key `pi` was read last cycle
reg [PI_WIDTH-1:0]    pi;
reg [TABLE_BITS-1:0]  paddr;            // the slot read last cycle
reg [32*KEYS-1:0]     kq;               // the batch's keys
reg [32*KEYS-1:0]     work;             // its results so far

wire [31:0] key      = kq[32*pi +: 32];
wire        final_k  = pi == KEYS - 1;
wire [31:0] next_key = kq[32*(final_k ? pi : pi + 1'b1) +: 32];
wire        resolved = busy && (!rd_used || rd_key == key);
wire [31:0] found    = rd_used ? {{(32-IDX_WIDTH){1'b0}}, rd_idx} : missing;

assign ready = !busy || (resolved && final_k);

always @* begin
    ram_en   = 1'b0;
    ram_addr = paddr + 1'b1;
    if (start) begin
        ram_en   = 1'b1;
        ram_addr = hash(keys[31:0]);
    end else if (busy && !resolved) begin
        ram_en   = 1'b1;
    end else if (resolved && !final_k) begin
        ram_en   = 1'b1;
        ram_addr = hash(next_key);
    end
end

integer k;

always @(posedge clk) begin
    done <= 1'b0;
    if (ram_en) begin
        paddr <= ram_addr;
    end
    if (resolved) begin
        work[32*pi +: 32] <= found;
        if (final_k) begin
            busy <= 1'b0;
            done <= 1'b1;
            for (k = 0; k < KEYS - 1; k = k + 1) begin
                results[32*k +: 32] <= work[32*k +: 32];
            end
            results[32*(KEYS-1) +: 32] <= found;
        end else begin
            pi <= pi + 1'b1;
        end
    end
    if (start) begin
        busy <= 1'b1;
        pi   <= 0;
        kq   <= keys;
    end
    if (rst) begin
        busy <= 1'b0;
        done <= 1'b0;
    end
end

endmodule

`resetall
