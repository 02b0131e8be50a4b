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
 * One probe per cycle: the slot read in the previous cycle is compared here
 * and the next address (the following slot, or the next key's hash) goes to
 * the RAM in the same cycle. `start` (with the keys stable until `done`)
 * begins a batch; `done` is high when the batch's results are in.
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

    input  wire                     start,
    input  wire [32*KEYS-1:0]       keys,
    input  wire [31:0]              missing,
    output wire                     done,
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

reg                   busy = 1'b0;
reg                   pend = 1'b0;      // a slot of key `pi` was read last cycle
reg [PI_WIDTH-1:0]    pi;
reg [TABLE_BITS-1:0]  paddr;            // the slot read last cycle

wire [31:0] key      = keys[32*pi +: 32];
wire        final_k  = pi == KEYS - 1;
wire [31:0] next_key = keys[32*(final_k ? pi : pi + 1'b1) +: 32];
wire        resolved = pend && (!rd_used || rd_key == key);

always @* begin
    ram_en   = 1'b0;
    ram_addr = paddr + 1'b1;
    if (busy) begin
        if (!pend) begin
            ram_en   = 1'b1;
            ram_addr = hash(key);
        end else if (!resolved) begin
            ram_en   = 1'b1;
        end else if (!final_k) begin
            ram_en   = 1'b1;
            ram_addr = hash(next_key);
        end
    end
end

always @(posedge clk) begin
    if (ram_en) begin
        paddr <= ram_addr;
    end
    if (busy) begin
        pend <= 1'b1;
        if (resolved) begin
            results[32*pi +: 32] <= rd_used ? {{(32-IDX_WIDTH){1'b0}}, rd_idx} : missing;
            if (final_k) begin
                busy <= 1'b0;
                pend <= 1'b0;
            end else begin
                pi <= pi + 1'b1;
            end
        end
    end
    if (start) begin
        busy <= 1'b1;
        pend <= 1'b0;
        pi   <= 0;
    end
    if (rst) begin
        busy <= 1'b0;
        pend <= 1'b0;
    end
end

assign done = !busy;

endmodule

`resetall
