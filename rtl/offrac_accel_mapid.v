/*
 * offrac accelerator, function 6 (mapid): each uint32 id of the payload to
 * its index in the dictionary, ids not in it to D (the number of distinct
 * keys), bit-exact with crates/accel/src/dlrm/mapid.rs.
 *
 * The wrapper interface of offrac_accel_minmax.v, plus a configuration
 * stream that loads the dictionary. Status and detail beside the metadata
 * word out, in the protocol's codes:
 *
 *   0 OK           the result follows: one uint32 per input id (the input's beats and tkeep)
 *   3 TOO_LARGE    more than MAX_BEATS beats; detail = MAX_BEATS * 64 (the maximum, in bytes)
 *   5 BAD_INPUT    empty payload or a length not a multiple of 4 (detail 0)
 *
 * The dictionary (loaded through s_cfg_*): one packet of 32-bit keys in list
 * order, a key on each beat with tkeep all set (a beat with tkeep 0 carries
 * none, so one such beat with tlast is the empty dictionary). A packet
 * replaces the dictionary: the table is cleared (2^TABLE_BITS / 2 cycles),
 * then each key is inserted unless it is there already, so a repeated key
 * keeps the index of its first occurrence and D counts the distinct keys,
 * as Dictionary::from_keys. Keys are taken only between requests; a request
 * waits for a packet under way. At most DICT_MAX distinct keys (half the
 * table): the ones past it are not inserted and cfg_overflow is set until
 * the next packet. The dictionary survives a reset (it is configuration,
 * the node's [functions.mapid]); a reset in the middle of a packet keeps the
 * keys inserted so far, and one in the middle of the clearing finishes the
 * clearing (an empty dictionary). The first reset after power-up clears the
 * table (no initial contents needed): requests wait 2^TABLE_BITS / 2 cycles.
 *
 * The table: open addressing with linear probing in a dual-port block RAM of
 * TABLE_SLOTS entries {used, key, index}. Each beat's 16 ids are looked up by
 * two offrac_mapid_probe units, the even elements on port A and the odd on
 * port B: two lookups per cycle, so a beat takes 8 cycles plus one per
 * extra probe. Three stages overlap: the next beat waits in a register
 * while the probes look up the current one (they take it the cycle the
 * last lookup of the one before resolves), and the finished beat's results
 * go to an offrac_result_buffer the cycle after. The buffer sends them out
 * (a beat a cycle) once the whole payload has been read and found valid.
 *
 * Input beats as for min-max: all but the last full, tkeep a run from byte 0.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_accel_mapid #(
    parameter DATA_WIDTH = 512,
    parameter KEEP_WIDTH = DATA_WIDTH / 8,
    parameter META_WIDTH = 128,
    parameter MAX_BEATS  = 256,            // 16 KiB, the software's inline_max_bytes
    parameter TABLE_BITS = 16,             // 65,536 slots: the built-in 32,768 keys at half load
    parameter DICT_MAX   = (1 << TABLE_BITS) / 2,
    parameter ADDR_WIDTH = $clog2(MAX_BEATS)
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

    // the dictionary's keys, one packet per dictionary
    input  wire [31:0]            s_cfg_tdata,
    input  wire [3:0]             s_cfg_tkeep,
    input  wire                   s_cfg_tvalid,
    output wire                   s_cfg_tready,
    input  wire                   s_cfg_tlast,
    output wire [TABLE_BITS:0]    cfg_dict_size,
    output wire                   cfg_overflow,

    // result payload out
    output wire [DATA_WIDTH-1:0]  m_axis_tdata,
    output wire [KEEP_WIDTH-1:0]  m_axis_tkeep,
    output wire                   m_axis_tvalid,
    input  wire                   m_axis_tready,
    output wire                   m_axis_tlast,

    // result metadata out, one word per request, before its payload
    output wire [META_WIDTH-1:0]  m_meta_tdata,
    output wire [7:0]             m_meta_status,
    output wire [31:0]            m_meta_detail,
    output wire                   m_meta_tvalid,
    input  wire                   m_meta_tready
);

localparam LANES   = 16;
localparam SLOTS   = 1 << TABLE_BITS;
localparam IDX_W   = TABLE_BITS;
localparam ENTRY_W = 1 + 32 + IDX_W;

localparam [7:0]
    STATUS_OK        = 8'd0,
    STATUS_TOO_LARGE = 8'd3,
    STATUS_BAD_INPUT = 8'd5;

localparam [3:0]
    ST_IDLE     = 4'd0,
    ST_RUN      = 4'd1,
    ST_STATUS   = 4'd4,
    ST_CLEAR    = 4'd5,
    ST_KEY      = 4'd6,
    ST_PROBE    = 4'd7,
    ST_CHECK    = 4'd8;

function [TABLE_BITS-1:0] hash;   // as offrac_mapid_probe
    input [31:0] k;
    integer b;
    begin
        hash = {TABLE_BITS{1'b0}};
        for (b = 0; b < 32; b = b + TABLE_BITS) begin
            hash = hash ^ (k >> b);
        end
    end
endfunction

reg [3:0]             state = ST_IDLE;
reg [META_WIDTH-1:0]  meta_word;

// ---- the dictionary --------------------------------------------------------

reg [ENTRY_W-1:0]     table_mem [0:SLOTS-1];
reg [ENTRY_W-1:0]     rd_a, rd_b;
reg                   a_en, b_en, a_we, b_we;
reg [TABLE_BITS-1:0]  a_addr, b_addr;
reg [ENTRY_W-1:0]     a_wdata, b_wdata;

always @(posedge clk) begin
    if (a_we) begin
        table_mem[a_addr] <= a_wdata;
    end
    if (a_en) begin
        rd_a <= table_mem[a_addr];
    end
end

always @(posedge clk) begin
    if (b_we) begin
        table_mem[b_addr] <= b_wdata;
    end
    if (b_en) begin
        rd_b <= table_mem[b_addr];
    end
end

reg [TABLE_BITS:0]    dict_size = 0;  // D
reg                   overflow = 1'b0;
reg                   dirty = 1'b1;   // a clearing due: the table is cleared after the first reset
reg                   clear_only;     // the clearing was restarted by a reset: no keys follow
reg [TABLE_BITS-1:0]  clear_addr;
reg [31:0]            cfg_key;
reg                   cfg_last;
reg [TABLE_BITS-1:0]  ld_addr;        // the slot read for cfg_key

wire ld_hit   = rd_a[ENTRY_W-1] && rd_a[IDX_W +: 32] == cfg_key;
wire ld_empty = !rd_a[ENTRY_W-1];

assign s_cfg_tready  = state == ST_KEY;
wire   cfg_take      = s_cfg_tvalid && s_cfg_tready;
assign cfg_dict_size = dict_size;
assign cfg_overflow  = overflow;

// ---- requests --------------------------------------------------------------

wire res_ready, stat_ready;

// a configuration packet goes first; a request waits for it
assign s_meta_tready = state == ST_IDLE && !s_cfg_tvalid;
assign s_axis_tready = state == ST_RUN && !in_done && !nx_valid;
wire meta_take = s_meta_tvalid && s_meta_tready;
wire data_take = s_axis_tvalid && s_axis_tready;

reg [ADDR_WIDTH:0]    n_beats;
reg                   too_large;
reg                   any_bytes;
reg                   ragged;
reg                   in_done;        // the payload's last beat has been read
// stage 1: the next beat, waiting for the probes
reg                   nx_valid = 1'b0;
reg [KEEP_WIDTH-1:0]  nx_keep;
reg [DATA_WIDTH-1:0]  beat_keys;      // the beat's kept bytes (the rest zero)
// stage 2: the beat in the probes (its keys are held there)
reg                   lk_busy = 1'b0;
reg [KEEP_WIDTH-1:0]  lk_keep;
// stage 3: its results (in the probes' result registers), to the result buffer
reg                   wr_valid = 1'b0;
reg [KEEP_WIDTH-1:0]  wr_keep;

wire [LANES-1:0] el_whole, el_part;
wire [DATA_WIDTH-1:0] kept;
genvar i;
generate
    for (i = 0; i < LANES; i = i + 1) begin : el
        assign el_whole[i] = &s_axis_tkeep[4*i +: 4];
        assign el_part[i]  = |s_axis_tkeep[4*i +: 4] && !el_whole[i];
    end
    for (i = 0; i < KEEP_WIDTH; i = i + 1) begin : kb
        assign kept[8*i +: 8] = s_axis_tkeep[i] ? s_axis_tdata[8*i +: 8] : 8'd0;
    end
endgenerate

// the two lookup ports: even elements on A, odd on B
wire [32*(LANES/2)-1:0] keys_a, keys_b, res_a, res_b;
generate
    for (i = 0; i < LANES / 2; i = i + 1) begin : split
        assign keys_a[32*i +: 32] = beat_keys[64*i +: 32];
        assign keys_b[32*i +: 32] = beat_keys[64*i + 32 +: 32];
    end
endgenerate

wire ready_a, ready_b, pa_en, pb_en;
// The beat in the probes is retired in the cycle both ports have resolved
// its last keys (a port that finished first waits, idle): its results are
// in the probes' registers in the next cycle, and stay there for at least
// that cycle even if the next beat goes in now. The result buffer takes a
// beat every cycle once it collects (it leaves that only for the status,
// which waits for the pipeline to drain); a beat goes into the probes only
// then, so stage 3 never waits.
wire retire     = lk_busy && ready_a && ready_b;
wire start_look = state == ST_RUN && nx_valid && ready_a && ready_b && res_ready;
wire [TABLE_BITS-1:0] pa_addr, pb_addr;
wire [31:0] missing = {{(31-TABLE_BITS){1'b0}}, dict_size};

offrac_mapid_probe #(.KEYS(LANES / 2), .TABLE_BITS(TABLE_BITS), .IDX_WIDTH(IDX_W)) probe_a (
    .clk(clk), .rst(rst), .ready(ready_a), .start(start_look), .keys(keys_a), .missing(missing),
    .done(), .results(res_a), .ram_en(pa_en), .ram_addr(pa_addr),
    .rd_used(rd_a[ENTRY_W-1]), .rd_key(rd_a[IDX_W +: 32]), .rd_idx(rd_a[IDX_W-1:0])
);

offrac_mapid_probe #(.KEYS(LANES / 2), .TABLE_BITS(TABLE_BITS), .IDX_WIDTH(IDX_W)) probe_b (
    .clk(clk), .rst(rst), .ready(ready_b), .start(start_look), .keys(keys_b), .missing(missing),
    .done(), .results(res_b), .ram_en(pb_en), .ram_addr(pb_addr),
    .rd_used(rd_b[ENTRY_W-1]), .rd_key(rd_b[IDX_W +: 32]), .rd_idx(rd_b[IDX_W-1:0])
);

wire [DATA_WIDTH-1:0] result_beat;
generate
    for (i = 0; i < LANES / 2; i = i + 1) begin : join_res
        assign result_beat[64*i +: 32]      = res_a[32*i +: 32];
        assign result_beat[64*i + 32 +: 32] = res_b[32*i +: 32];
    end
endgenerate

// ---- the RAM ports ---------------------------------------------------------

always @* begin
    a_en = 1'b0; a_we = 1'b0; a_addr = pa_addr; a_wdata = {ENTRY_W{1'b0}};
    b_en = 1'b0; b_we = 1'b0; b_addr = pb_addr; b_wdata = {ENTRY_W{1'b0}};
    case (state)
        ST_RUN: begin
            a_en = pa_en;
            b_en = pb_en;
        end
        ST_CLEAR: begin   // two slots a cycle
            a_we = 1'b1; a_addr = clear_addr;
            b_we = 1'b1; b_addr = clear_addr + 1'b1;
        end
        ST_PROBE: begin
            a_en = 1'b1; a_addr = hash(cfg_key);
        end
        ST_CHECK: begin
            if (!ld_hit && !ld_empty) begin
                a_en = 1'b1; a_addr = ld_addr + 1'b1;
            end
            if (ld_empty && dict_size < DICT_MAX) begin
                b_we = 1'b1; b_addr = ld_addr;
                b_wdata = {1'b1, cfg_key, dict_size[IDX_W-1:0]};
            end
        end
        default: begin
        end
    endcase
end

// ---- control ---------------------------------------------------------------

always @(posedge clk) begin
    case (state)
        ST_IDLE: begin
            if (s_cfg_tvalid) begin
                state      <= ST_CLEAR;
                clear_addr <= 0;
                clear_only <= 1'b0;
                dict_size  <= 0;
                overflow   <= 1'b0;
                dirty      <= 1'b1;
            end else if (meta_take) begin
                meta_word <= s_meta_tdata;
                n_beats   <= 0;
                too_large <= 1'b0;
                any_bytes <= 1'b0;
                ragged    <= 1'b0;
                in_done   <= 1'b0;
                state     <= ST_RUN;
            end
        end
        ST_RUN: begin
            if (data_take) begin
                any_bytes <= any_bytes || |s_axis_tkeep;
                ragged    <= ragged || |el_part;
                in_done   <= s_axis_tlast;
                if (n_beats < MAX_BEATS) begin
                    n_beats   <= n_beats + 1'b1;
                    nx_valid  <= 1'b1;
                    beat_keys <= kept;
                    nx_keep   <= s_axis_tkeep;
                end else begin
                    too_large <= 1'b1;   // read to the end, nothing more stored
                end
            end
            if (start_look) begin
                nx_valid <= 1'b0;
            end
            if (in_done && !nx_valid && !lk_busy && !wr_valid) begin
                state <= ST_STATUS;
            end
        end
        ST_STATUS: begin
            if (stat_ready) begin
                state <= ST_IDLE;
            end
        end
        ST_CLEAR: begin
            clear_addr <= clear_addr + 2'd2;
            if (clear_addr == SLOTS - 2) begin
                dirty <= 1'b0;
                state <= clear_only ? ST_IDLE : ST_KEY;
            end
        end
        ST_KEY: begin
            if (cfg_take) begin
                cfg_key  <= s_cfg_tdata;
                cfg_last <= s_cfg_tlast;
                if (&s_cfg_tkeep) begin
                    state <= ST_PROBE;
                end else if (s_cfg_tlast) begin
                    state <= ST_IDLE;
                end
            end
        end
        ST_PROBE: begin
            ld_addr <= hash(cfg_key);
            state   <= ST_CHECK;
        end
        default: begin   // ST_CHECK
            if (ld_hit || ld_empty) begin
                if (ld_empty) begin
                    if (dict_size < DICT_MAX) begin
                        dict_size <= dict_size + 1'b1;
                    end else begin
                        overflow <= 1'b1;
                    end
                end
                state <= cfg_last ? ST_IDLE : ST_KEY;
            end else begin
                ld_addr <= ld_addr + 1'b1;
            end
        end
    endcase

    // the lookup pipeline's stages 2 and 3
    if (retire || start_look) begin
        lk_busy <= start_look;
        lk_keep <= nx_keep;
    end
    wr_valid <= retire;
    if (retire) begin
        wr_keep <= lk_keep;
    end

    if (rst) begin
        state    <= ST_IDLE;
        nx_valid <= 1'b0;
        lk_busy  <= 1'b0;
        wr_valid <= 1'b0;
        if (dirty) begin
            state      <= ST_CLEAR;
            clear_addr <= 0;
            clear_only <= 1'b1;
            dict_size  <= 0;
        end
    end
end

// ---- out -------------------------------------------------------------------

wire [7:0] status =
    too_large               ? STATUS_TOO_LARGE :
    (!any_bytes || ragged)  ? STATUS_BAD_INPUT :
                              STATUS_OK;
wire [31:0] detail = too_large ? MAX_BEATS * 64 : 32'd0;

offrac_result_buffer #(
    .DATA_WIDTH(DATA_WIDTH), .META_WIDTH(META_WIDTH), .MAX_BEATS(MAX_BEATS)
) results (
    .clk(clk), .rst(rst),
    .s_res_tdata(result_beat), .s_res_tkeep(wr_keep),
    .s_res_tvalid(wr_valid), .s_res_tready(res_ready),
    .s_stat_tdata(meta_word), .s_stat_status(status), .s_stat_detail(detail),
    .s_stat_tvalid(state == ST_STATUS), .s_stat_tready(stat_ready),
    .m_axis_tdata(m_axis_tdata), .m_axis_tkeep(m_axis_tkeep), .m_axis_tvalid(m_axis_tvalid),
    .m_axis_tready(m_axis_tready), .m_axis_tlast(m_axis_tlast),
    .m_meta_tdata(m_meta_tdata), .m_meta_status(m_meta_status), .m_meta_detail(m_meta_detail),
    .m_meta_tvalid(m_meta_tvalid), .m_meta_tready(m_meta_tready)
);

endmodule

`resetall
