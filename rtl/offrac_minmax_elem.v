/*
 * offrac min-max normalization, one element: y = (x - lo) / (hi - lo) as
 * crates/accel/src/minmax.rs computes it (normalise_generic), bit for bit.
 *
 * - x NaN: y is x quieted (x | 0x00400000), as x86 subss/divss give it.
 * - !(hi > lo) (zero range, or lo = +inf / hi = -inf when every element is
 *   NaN): y = +0.0.
 * - hi - lo finite in float32: y = fl32(fl32(x - lo) / fl32(hi - lo)), each
 *   operation correctly rounded (round to nearest even, subnormals kept).
 * - hi - lo overflows float32: the f64 path, y = fl32(fl64(fl64(x - lo) /
 *   fl64(hi - lo))): the same operations rounded to 53 bits, then the
 *   quotient rounded again to float32 (double rounding, as the Rust code).
 *
 * lo and hi are the request's minimum and maximum, so lo <= x <= hi for
 * every non-NaN x and neither is infinite when hi > lo (the wrapper refuses
 * infinities); the quotient is then in [0, 1].
 *
 * The subtraction is exact-then-rounded: the larger operand in a 64-bit
 * window, the smaller shifted in with a sticky bit, the result normalized
 * and rounded to 24 or 53 bits with an unbounded exponent (a difference
 * below the normal range is exact, so no subnormal rounding is needed
 * there). The division is restoring, one quotient bit per cycle: 27 bits
 * for float32, 56 for the f64 path, then a sticky bit from the remainder.
 * About 31 cycles per element (60 on the f64 path); one element at a time.
 * The output is one register stage held while the sink stalls.
 */

`resetall
`timescale 1ns / 1ps
`default_nettype none

module offrac_minmax_elem (
    input  wire         clk,
    input  wire         rst,

    // one element and its request's lo / hi (float32 bits)
    input  wire [31:0]  s_x,
    input  wire [31:0]  s_lo,
    input  wire [31:0]  s_hi,
    input  wire         s_valid,
    output wire         s_ready,

    // the normalized element (float32 bits)
    output wire [31:0]  m_y,
    output wire         m_valid,
    input  wire         m_ready
);

localparam [2:0]
    ST_IDLE = 3'd0,
    ST_B    = 3'd1,   // range = hi - lo
    ST_A    = 3'd2,   // numerator = x - lo
    ST_DIV  = 3'd3,
    ST_RND  = 3'd4;

reg [2:0]   state = ST_IDLE;
reg [31:0]  x_reg, lo_reg, hi_reg;
reg         wide_reg;             // the f64 path: hi - lo overflowed float32
reg [52:0]  mb_reg;               // range significand, MSB set
reg signed [11:0] eb_reg;         // range exponent (of the MSB)
reg signed [11:0] eq_reg;         // quotient exponent before normalization
reg [53:0]  rem_reg;
reg [55:0]  q_reg;
reg [5:0]   cnt_reg;
reg [31:0]  y_reg;
reg         y_valid_reg = 1'b0;

// IEEE a < b on float32 bits: false with a NaN, -0 == +0
function lt;
    input [31:0] a, b;
    begin
        if ((a[30:23] == 8'hFF && a[22:0] != 0) || (b[30:23] == 8'hFF && b[22:0] != 0)) begin
            lt = 1'b0;
        end else if (a[30:0] == 0 && b[30:0] == 0) begin
            lt = 1'b0;
        end else begin
            case ({a[31], b[31]})
                2'b10:   lt = 1'b1;
                2'b01:   lt = 1'b0;
                2'b00:   lt = a[30:0] < b[30:0];
                default: lt = a[30:0] > b[30:0];
            endcase
        end
    end
endfunction

wire s_is_nan = s_x[30:23] == 8'hFF && s_x[22:0] != 0;

// ---- subtraction op_x - op_y, rounded to 24 or 53 bits -----------------

wire [31:0] op_x = (state == ST_B) ? hi_reg : x_reg;
wire [31:0] op_y = lo_reg;

wire [23:0] mx = {op_x[30:23] != 0, op_x[22:0]};
wire [23:0] my = {op_y[30:23] != 0, op_y[22:0]};
wire [7:0]  ex = (op_x[30:23] != 0) ? op_x[30:23] : 8'd1;  // value = m * 2^(e - 150)
wire [7:0]  ey = (op_y[30:23] != 0) ? op_y[30:23] : 8'd1;
wire        x_big = {ex, mx} >= {ey, my};
wire [7:0]  e_big = x_big ? ex : ey;
wire [23:0] m_big = x_big ? mx : my;
wire [23:0] m_small = x_big ? my : mx;
wire [7:0]  e_diff = e_big - (x_big ? ey : ex);
wire [6:0]  shift = (e_diff > 8'd64) ? 7'd64 : e_diff[6:0];
wire [127:0] small_sh = {m_small, 104'd0} >> shift;
wire        small_sticky = |small_sh[63:0];
wire        eff_sub = op_x[31] == op_y[31];

// {carry, 64-bit window, half-LSB}: the sticky as half a unit keeps the
// rounding of the exact result
wire [65:0] sum = eff_sub ? {1'b0, m_big, 40'd0, 1'b0} - {1'b0, small_sh[127:64], small_sticky}
                          : {1'b0, m_big, 40'd0, 1'b0} + {1'b0, small_sh[127:64], small_sticky};
// sign: of op_x when |op_x| wins or on addition, flipped when |op_y| wins, +0 on exact cancellation
wire sub_zero = sum == 66'd0;
wire sub_sign = eff_sub ? (!sub_zero && (x_big ? op_x[31] : !op_x[31])) : op_x[31];

reg [6:0] lz;
integer k;
always @* begin
    lz = 7'd66;
    for (k = 0; k < 66; k = k + 1) begin
        if (sum[k]) begin
            lz = 7'd65 - k[6:0];
        end
    end
end

wire [65:0] sum_n = sum << lz;
// exponent of the MSB: bit 65 of the window is 2^(e_big - 150 + 24), so bit L is 2^(L + e_big - 191)
wire signed [11:0] sub_e = $signed({4'd0, e_big}) - 12'sd126 - $signed({5'd0, lz});

reg [53:0] sub_m;   // rounded significand at [52:0] (bit 53: rounding carry)
reg        inc;
always @* begin
    if (wide_reg) begin
        inc   = sum_n[12] && (|sum_n[11:0] || sum_n[13]);
        sub_m = {1'b0, sum_n[65:13]} + {53'd0, inc};
    end else begin
        inc   = sum_n[41] && (|sum_n[40:0] || sum_n[42]);
        sub_m = {1'b0, sum_n[65:42], 29'd0} + {24'd0, inc, 29'd0};
    end
end
wire [52:0] sub_mant = sub_m[53] ? 53'h10000000000000 : sub_m[52:0];
wire signed [11:0] sub_exp = sub_m[53] ? sub_e + 12'sd1 : sub_e;
wire sub_overflow = sub_exp > 12'sd127;   // beyond float32: the f64 path

// ---- the quotient, normalized and rounded ------------------------------

wire [5:0]  n_bits = wide_reg ? 6'd56 : 6'd27;
wire [55:0] q_al   = wide_reg ? q_reg : q_reg << 29;
wire [55:0] q_n    = q_al[55] ? q_al : q_al << 1;
wire signed [11:0] e_q = q_al[55] ? eq_reg : eq_reg - 12'sd1;
wire        q_sticky = rem_reg != 0;

// f64 path: round to 53 bits first
wire        inc53 = q_n[2] && (q_n[1] || q_n[0] || q_sticky || q_n[3]);
wire [53:0] q53   = {1'b0, q_n[55:3]} + {53'd0, inc53};
wire [55:0] m_f   = wide_reg ? (q53[53] ? {1'b1, 55'd0} : {q53[52:0], 3'd0}) : q_n;
wire signed [11:0] e_f = (wide_reg && q53[53]) ? e_q + 12'sd1 : e_q;
wire        st_f  = wide_reg ? 1'b0 : q_sticky;

// then to float32, subnormals included
wire        f_sub   = e_f < -12'sd126;
wire signed [11:0] f_sh_full = -12'sd126 - e_f;
wire [5:0]  f_sh    = !f_sub ? 6'd0 : (f_sh_full > 12'sd63 ? 6'd63 : f_sh_full[5:0]);
wire [127:0] f_tmp  = {m_f, 72'd0} >> f_sh;
wire        f_guard = f_tmp[103];
wire        f_stk   = |f_tmp[102:0] || st_f;
wire [24:0] f_round = {1'b0, f_tmp[127:104]} + {24'd0, f_guard && (f_stk || f_tmp[104])};
wire [11:0] f_ebits = e_f + 12'sd126;
wire [31:0] f_bits  = (f_sub ? 32'd0 : {1'b0, f_ebits[7:0], 23'd0}) + {7'd0, f_round};

// ---- control -----------------------------------------------------------

assign s_ready = (state == ST_IDLE) && !y_valid_reg;

always @(posedge clk) begin
    if (m_ready) begin
        y_valid_reg <= 1'b0;
    end

    case (state)
        ST_IDLE: begin
            if (s_valid && s_ready) begin
                x_reg    <= s_x;
                lo_reg   <= s_lo;
                hi_reg   <= s_hi;
                wide_reg <= 1'b0;
                if (s_is_nan) begin
                    y_reg       <= s_x | 32'h00400000;
                    y_valid_reg <= 1'b1;
                end else if (!lt(s_lo, s_hi)) begin
                    y_reg       <= 32'd0;
                    y_valid_reg <= 1'b1;
                end else begin
                    state <= ST_B;
                end
            end
        end
        ST_B: begin
            if (!wide_reg && sub_overflow) begin
                wide_reg <= 1'b1;   // again, rounded to 53 bits
            end else begin
                mb_reg <= sub_mant;
                eb_reg <= sub_exp;
                state  <= ST_A;
            end
        end
        ST_A: begin
            if (sub_zero) begin
                y_reg       <= {sub_sign, 31'd0};
                y_valid_reg <= 1'b1;
                state       <= ST_IDLE;
            end else begin
                rem_reg <= {1'b0, sub_mant};
                eq_reg  <= sub_exp - eb_reg;
                q_reg   <= 56'd0;
                cnt_reg <= 6'd0;
                state   <= ST_DIV;
            end
        end
        ST_DIV: begin
            if (rem_reg >= {1'b0, mb_reg}) begin
                rem_reg <= (rem_reg - {1'b0, mb_reg}) << 1;
                q_reg   <= {q_reg[54:0], 1'b1};
            end else begin
                rem_reg <= rem_reg << 1;
                q_reg   <= {q_reg[54:0], 1'b0};
            end
            cnt_reg <= cnt_reg + 6'd1;
            if (cnt_reg == n_bits - 6'd1) begin
                state <= ST_RND;
            end
        end
        default: begin   // ST_RND
            y_reg       <= f_bits;
            y_valid_reg <= 1'b1;
            state       <= ST_IDLE;
        end
    endcase

    if (rst) begin
        state       <= ST_IDLE;
        y_valid_reg <= 1'b0;
    end
end

assign m_y     = y_reg;
assign m_valid = y_valid_reg;

endmodule

`resetall
