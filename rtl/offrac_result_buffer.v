/*
 * offrac result buffer: store-and-forward of one request's result, shared by
 * the accelerators whose status is known only after their whole input (an
 * error anywhere in the payload means no payload out).
 *
 * The accelerator writes its result beats (s_res_*: tdata, tkeep of the last
 * one counts) and then closes the request with its metadata word, status and
 * detail (s_stat_*). The buffer sends the metadata word out first (m_meta_*),
 * then, when the status is OK (0), the stored beats (m_axis_*, tlast on the
 * last, its tkeep the last written one); any other status drops them. It
 * takes no new result beat until the stored ones are out.
 *
 * MAX_BEATS x DATA_WIDTH bits, one write port and one registered read port:
 * block RAM. The stored beats go out one a cycle while the sink takes them:
 * the next one is read while the last one read is pushed. The accelerator must not write more than MAX_BEATS beats (it
 * answers TOO_LARGE instead). Both outputs are offrac_axis_reg stages.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_result_buffer #(
    parameter DATA_WIDTH = 512,
    parameter KEEP_WIDTH = DATA_WIDTH / 8,
    parameter META_WIDTH = 128,
    parameter MAX_BEATS  = 512,
    parameter ADDR_WIDTH = $clog2(MAX_BEATS)
) (
    input  wire                   clk,
    input  wire                   rst,

    // result beats of the open request
    input  wire [DATA_WIDTH-1:0]  s_res_tdata,
    input  wire [KEEP_WIDTH-1:0]  s_res_tkeep,
    input  wire                   s_res_tvalid,
    output wire                   s_res_tready,

    // the request's end: its metadata word, status and detail
    input  wire [META_WIDTH-1:0]  s_stat_tdata,
    input  wire [7:0]             s_stat_status,
    input  wire [31:0]            s_stat_detail,
    input  wire                   s_stat_tvalid,
    output wire                   s_stat_tready,

    output wire [DATA_WIDTH-1:0]  m_axis_tdata,
    output wire [KEEP_WIDTH-1:0]  m_axis_tkeep,
    output wire                   m_axis_tvalid,
    input  wire                   m_axis_tready,
    output wire                   m_axis_tlast,

    output wire [META_WIDTH-1:0]  m_meta_tdata,
    output wire [7:0]             m_meta_status,
    output wire [31:0]            m_meta_detail,
    output wire                   m_meta_tvalid,
    input  wire                   m_meta_tready
);

localparam
    ST_COLLECT = 1'b0,
    ST_SEND    = 1'b1;

reg                   state = ST_COLLECT;
reg [DATA_WIDTH-1:0]  mem [0:MAX_BEATS-1];
reg [DATA_WIDTH-1:0]  rd_data;
reg                   rd_valid = 1'b0;   // rd_data holds a beat not yet pushed
reg                   rd_last;           // and it is the last one
reg [ADDR_WIDTH:0]    wr_ptr = 0;
reg [ADDR_WIDTH:0]    rd_ptr;
reg [KEEP_WIDTH-1:0]  last_keep;

wire meta_in_ready;
wire data_in_ready;

assign s_res_tready  = state == ST_COLLECT;
assign s_stat_tready = state == ST_COLLECT && meta_in_ready;
wire res_take  = s_res_tvalid && s_res_tready;
wire stat_take = s_stat_tvalid && s_stat_tready;
wire push      = rd_valid && data_in_ready;
wire fetch     = state == ST_SEND && rd_ptr != wr_ptr && (!rd_valid || push);

always @(posedge clk) begin
    if (res_take) begin
        mem[wr_ptr[ADDR_WIDTH-1:0]] <= s_res_tdata;
    end
    if (fetch) begin
        rd_data <= mem[rd_ptr[ADDR_WIDTH-1:0]];
    end
end

always @(posedge clk) begin
    case (state)
        ST_COLLECT: begin
            if (res_take) begin
                wr_ptr    <= wr_ptr + 1'b1;
                last_keep <= s_res_tkeep;
            end
            if (stat_take) begin
                rd_ptr <= 0;
                if (s_stat_status == 8'd0 && wr_ptr != 0) begin
                    state <= ST_SEND;
                end else begin
                    wr_ptr <= 0;
                end
            end
        end
        default: begin   // ST_SEND
            if (fetch) begin
                rd_ptr   <= rd_ptr + 1'b1;
                rd_valid <= 1'b1;
                rd_last  <= rd_ptr + 1'b1 == wr_ptr;
            end else if (push) begin
                rd_valid <= 1'b0;
            end
            if (push && rd_last) begin
                state  <= ST_COLLECT;
                wr_ptr <= 0;
            end
        end
    endcase

    if (rst) begin
        state    <= ST_COLLECT;
        wr_ptr   <= 0;
        rd_valid <= 1'b0;
    end
end

offrac_axis_reg #(.WIDTH(META_WIDTH + 40)) meta_out (
    .clk(clk), .rst(rst),
    .s_tdata({s_stat_tdata, s_stat_status, s_stat_detail}),
    .s_tvalid(stat_take), .s_tready(meta_in_ready),
    .m_tdata({m_meta_tdata, m_meta_status, m_meta_detail}),
    .m_tvalid(m_meta_tvalid), .m_tready(m_meta_tready)
);

offrac_axis_reg #(.WIDTH(DATA_WIDTH + KEEP_WIDTH + 1)) data_out (
    .clk(clk), .rst(rst),
    .s_tdata({rd_data, rd_last ? last_keep : {KEEP_WIDTH{1'b1}}, rd_last}),
    .s_tvalid(rd_valid), .s_tready(data_in_ready),
    .m_tdata({m_axis_tdata, m_axis_tkeep, m_axis_tlast}),
    .m_tvalid(m_axis_tvalid), .m_tready(m_axis_tready)
);

endmodule

`resetall
