/*
 * offrac min-max normalization, one element: y = (x - lo) / (hi - lo) as
 * crates/accel/src/minmax.rs computes it (normalise_generic), bit for bit.
 *
 * - !(hi > lo) (zero range, or lo = +inf / hi = -inf when every element is
 *   NaN): y = +0.0, or x itself when x is NaN, signalling ones included (the
 *   software's `x + 0.0` of a NaN is folded to x by the compiler).
 * - else x NaN: y is x quieted (x | 0x00400000), as x86 subss/divss give it.
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
 * A fixed-latency pipeline, one element per cycle, LATENCY (8) cycles from
 * an element taken to its result valid once the range's reciprocal is held:
 *   P0      the inputs registered;
 *   P1      both subtractions exact-then-normalized: the larger operand in a
 *           64-bit window, the smaller shifted in with a sticky bit (a
 *           difference below the normal range is exact, so it needs no
 *           subnormal rounding);
 *   D0      (P2) hi - lo rounded to 24 bits; if that overflows float32, the
 *           f64 path: both differences rounded to 53 bits, else to 24; the
 *           special cases (NaN, zero range, x - lo = 0) decided here and
 *           carried beside the divider; the significands A (x - lo) and D
 *           (hi - lo) and the reciprocal R = floor(2^108 / D) registered;
 *   M1      A * R (53 x 57 bits, DSPs);
 *   M2      Qe = floor(A * R / 2^53), which is the quotient floor(A * 2^55 / D)
 *           or one less, and the remainder A * 2^55 - Qe * D modulo 2^56
 *           (56 x 53 bits, DSPs, low half);
 *   M3      the remainder checked against D: the quotient (56 bits, what the
 *           f64 path needs; the float32 path uses the bits past its 27th only
 *           as a sticky bit, which rounds the same) and the sticky bit, the
 *           same bits as the unrolled restoring divider before gave;
 *   R1      the quotient normalized, rounded to 53 bits on the f64 path;
 *   R2      rounded to float32 (subnormals included): the output register.
 * R depends only on D, the request's range: it is computed when an element
 * whose D differs from the one held reaches P1, one bit a cycle (a
 * restoring division, 57 cycles); the whole pipeline is held meanwhile (58
 * cycles, once per request in the wrapper).
 * The whole pipeline advances together when its last stage is empty or
 * taken and no reciprocal is being computed (s_ready = adv; m_valid is low
 * while the reciprocal is computed): a stalled sink holds every stage,
 * nothing is dropped or overwritten.
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

localparam LATENCY = 8;             // P0, P1, D0 (P2), M1, M2, M3, R1, R2

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

// op_x - op_y exactly, normalized: {zero, sign, exponent of the MSB (12, signed), 66-bit window}
function [79:0] sub_norm;
    input [31:0] op_x, op_y;
    reg [23:0]  mx, my, m_big, m_small;
    reg [7:0]   ex, ey, e_big, e_diff;
    reg         x_big, eff_sub, small_sticky, zero, sign;
    reg [6:0]   shift, lz;
    reg [127:0] small_sh;
    reg [65:0]  sum;
    reg [11:0]  e;
    integer     k;
    begin
        mx = {op_x[30:23] != 0, op_x[22:0]};
        my = {op_y[30:23] != 0, op_y[22:0]};
        ex = (op_x[30:23] != 0) ? op_x[30:23] : 8'd1;   // value = m * 2^(e - 150)
        ey = (op_y[30:23] != 0) ? op_y[30:23] : 8'd1;
        x_big   = {ex, mx} >= {ey, my};
        e_big   = x_big ? ex : ey;
        m_big   = x_big ? mx : my;
        m_small = x_big ? my : mx;
        e_diff  = e_big - (x_big ? ey : ex);
        shift   = (e_diff > 8'd64) ? 7'd64 : e_diff[6:0];
        small_sh = {m_small, 104'd0} >> shift;
        small_sticky = |small_sh[63:0];
        eff_sub = op_x[31] == op_y[31];
        // {carry, 64-bit window, half-LSB}: the sticky as half a unit keeps the rounding of the exact result
        sum = eff_sub ? {1'b0, m_big, 40'd0, 1'b0} - {1'b0, small_sh[127:64], small_sticky}
                      : {1'b0, m_big, 40'd0, 1'b0} + {1'b0, small_sh[127:64], small_sticky};
        // sign: of op_x when |op_x| wins or on addition, flipped when |op_y| wins, +0 on exact cancellation
        zero = sum == 66'd0;
        sign = eff_sub ? (!zero && (x_big ? op_x[31] : !op_x[31])) : op_x[31];
        lz = 7'd66;
        for (k = 0; k < 66; k = k + 1) begin
            if (sum[k]) begin
                lz = 7'd65 - k[6:0];
            end
        end
        // bit 65 of the window is 2^(e_big - 150 + 24), so bit L is 2^(L + e_big - 191)
        e = {4'd0, e_big} - 12'd126 - {5'd0, lz};
        sub_norm = {zero, sign, e, sum << lz};
    end
endfunction

// a normalized window rounded to 24 bits (at the top of 53) or to 53: {exponent (12), significand (53)}
function [64:0] sub_round;
    input [65:0] sum_n;
    input [11:0] e;
    input        wide;
    reg          inc;
    reg [53:0]   m;
    begin
        if (wide) begin
            inc = sum_n[12] && (|sum_n[11:0] || sum_n[13]);
            m   = {1'b0, sum_n[65:13]} + {53'd0, inc};
        end else begin
            inc = sum_n[41] && (|sum_n[40:0] || sum_n[42]);
            m   = {1'b0, sum_n[65:42], 29'd0} + {24'd0, inc, 29'd0};
        end
        sub_round = m[53] ? {e + 12'd1, 53'h10000000000000} : {e, m[52:0]};
    end
endfunction

reg [LATENCY-1:0] vld = {LATENCY{1'b0}};   // vld[i]: stage i holds an element
wire stall;                                 // the reciprocal of a new range is being computed
wire adv = (!vld[LATENCY-1] || m_ready) && !stall;

assign s_ready = adv;

// ---- P0 --------------------------------------------------------------------

reg [31:0] x0, lo0, hi0;

always @(posedge clk) begin
    if (adv) begin
        x0  <= s_x;
        lo0 <= s_lo;
        hi0 <= s_hi;
    end
end

// ---- P1: both subtractions ------------------------------------------------

wire [79:0] b_full = sub_norm(hi0, lo0);
wire [79:0] a_full = sub_norm(x0, lo0);

reg [65:0]  b_win1, a_win1;
reg [11:0]  b_e1, a_e1;
reg         a_zero1, a_sign1;
reg         byp1;             // the result is decided without the divider
wire        x_nan0 = x0[30:23] == 8'hFF && x0[22:0] != 0;
reg [31:0]  byp_y1;

always @(posedge clk) begin
    if (adv) begin
        b_win1  <= b_full[65:0];
        b_e1    <= b_full[77:66];
        a_win1  <= a_full[65:0];
        a_e1    <= a_full[77:66];
        a_zero1 <= a_full[79];
        a_sign1 <= a_full[78];
        if (!lt(lo0, hi0)) begin
            // `if x.is_nan() { x + 0.0 } else { 0.0 }`: the shipping build folds `x + 0.0` of a NaN
            // to x, so a signalling NaN stays signalling here (accel_oracle shows it)
            byp1   <= 1'b1;
            byp_y1 <= x_nan0 ? x0 : 32'd0;
        end else if (x_nan0) begin
            byp1   <= 1'b1;
            byp_y1 <= x0 | 32'h00400000;
        end else begin
            byp1   <= 1'b0;
            byp_y1 <= 32'd0;
        end
    end
end

// ---- P2: rounding, the f64 path's choice, the divider's operands ----------

wire [64:0] b24 = sub_round(b_win1, b_e1, 1'b0);
wire [64:0] b53 = sub_round(b_win1, b_e1, 1'b1);
wire [64:0] a24 = sub_round(a_win1, a_e1, 1'b0);
wire [64:0] a53 = sub_round(a_win1, a_e1, 1'b1);
wire        wide_now = $signed(b24[64:53]) > 12'sd127;   // hi - lo overflows float32
wire [64:0] b_r = wide_now ? b53 : b24;
wire [64:0] a_r = wide_now ? a53 : a24;

// ---- the divider: a reciprocal of the range, a product and a remainder check ----
//
// The quotient wanted is the restoring divider's: Q = floor(A * 2^55 / D) (56 bits, A and D the
// 53-bit significands, normalized: both in [2^52, 2^53), the float32 path's with 29 zero bits
// below), and whether A * 2^55 - Q * D is non-zero (the sticky bit). R = floor(2^108 / D) is
// computed once per divisor (one bit a cycle, 57 cycles, the pipeline held meanwhile: D is the
// request's range, the same for all its elements). Per element, Qe = floor(A * R / 2^53) is Q or
// Q - 1 (A * R / 2^53 > A * 2^55 / D - A / 2^53 and A < 2^53); the remainder r = A * 2^55 - Qe * D,
// in [0, 2D), is computed modulo 2^56 (it is below 2^54), and r >= D adds the missing one.

wire [52:0] dv_now = b_r[52:0];
reg  [52:0] rc_d;                   // the divisor whose reciprocal is held
reg         rc_ok = 1'b0;
reg         rc_busy = 1'b0;
reg  [56:0] rc_q;                   // R = floor(2^108 / rc_d)
reg  [53:0] rc_rem;
reg  [5:0]  rc_i;
wire        rc_miss = vld[1] && (!rc_ok || dv_now != rc_d);
assign      stall = rc_miss;        // held until the reciprocal is there

wire [54:0] rc_trial = {rc_rem, 1'b0} - {2'b0, rc_d};
always @(posedge clk) begin
    if (rc_busy) begin
        if (!rc_trial[54]) begin
            rc_rem <= rc_trial[53:0];
            rc_q   <= {rc_q[55:0], 1'b1};
        end else begin
            rc_rem <= {rc_rem[52:0], 1'b0};
            rc_q   <= {rc_q[55:0], 1'b0};
        end
        rc_i <= rc_i - 1'b1;
        if (rc_i == 6'd1) begin
            rc_busy <= 1'b0;
            rc_ok   <= 1'b1;
        end
    end else if (rc_miss) begin
        rc_d    <= dv_now;
        rc_rem  <= 54'd1 << 51;     // floor(2^108 / 2^57): below D, the quotient's bits from 2^56 down follow
        rc_q    <= 57'd0;
        rc_i    <= 6'd57;
        rc_busy <= 1'b1;
        rc_ok   <= 1'b0;
    end
    if (rst) begin
        rc_busy <= 1'b0;
        rc_ok   <= 1'b0;
    end
end

// the side band of the divider's stages (0: D0, the operands registered; 1..3: M1..M3)
reg [11:0]  eq   [0:3];    // quotient exponent before normalization
reg         wide [0:3];
reg         byp  [0:3];
reg [31:0]  byp_y[0:3];

reg [52:0]  a_d0, d_d0;
reg [56:0]  r_d0;
reg [108:0] p_m1;          // A * R
reg [52:0]  a_m1, d_m1;
reg [55:0]  q_m2, r_m2;    // Qe, and A * 2^55 - Qe * D modulo 2^56
reg [52:0]  d_m2;
reg [55:0]  q_m3;
reg         st_m3;

wire [55:0] qe     = p_m1[108:53];
wire [55:0] qd_low = qe * d_m1;                      // modulo 2^56
wire [55:0] r_ge   = r_m2 - {3'd0, d_m2};
wire        r_over = r_m2 >= {3'd0, d_m2};
integer s;
always @(posedge clk) begin
    if (adv) begin
        a_d0     <= a_r[52:0];
        d_d0     <= dv_now;
        r_d0     <= rc_q;
        eq[0]    <= a_r[64:53] - b_r[64:53];
        wide[0]  <= wide_now;
        byp[0]   <= byp1 || a_zero1;
        byp_y[0] <= byp1 ? byp_y1 : {a_sign1, 31'd0};

        p_m1 <= a_d0 * r_d0;
        a_m1 <= a_d0;
        d_m1 <= d_d0;

        q_m2 <= qe;
        r_m2 <= {a_m1[0], 55'd0} - qd_low;
        d_m2 <= d_m1;

        q_m3  <= r_over ? q_m2 + 1'b1 : q_m2;
        st_m3 <= r_over ? r_ge != 0 : r_m2 != 0;

        for (s = 1; s <= 3; s = s + 1) begin
            eq[s]    <= eq[s-1];
            wide[s]  <= wide[s-1];
            byp[s]   <= byp[s-1];
            byp_y[s] <= byp_y[s-1];
        end
    end
end

// ---- R1: normalized, rounded to 53 bits on the f64 path --------------------

wire [55:0] q_al  = q_m3;
wire        wq    = wide[3];
wire [55:0] q_n   = q_al[55] ? q_al : q_al << 1;
wire [11:0] e_q   = q_al[55] ? eq[3] : eq[3] - 12'd1;
wire        q_sticky = st_m3;
wire        inc53 = q_n[2] && (q_n[1] || q_n[0] || q_sticky || q_n[3]);
wire [53:0] q53   = {1'b0, q_n[55:3]} + {53'd0, inc53};

reg [55:0]  m_f;
reg [11:0]  e_f;
reg         st_f;
reg         byp_r;
reg [31:0]  byp_y_r;

always @(posedge clk) begin
    if (adv) begin
        m_f     <= wq ? (q53[53] ? {1'b1, 55'd0} : {q53[52:0], 3'd0}) : q_n;
        e_f     <= (wq && q53[53]) ? e_q + 12'd1 : e_q;
        st_f    <= wq ? 1'b0 : q_sticky;
        byp_r   <= byp[3];
        byp_y_r <= byp_y[3];
    end
end

// ---- R2: float32, subnormals included ---------------------------------------

wire        f_sub     = $signed(e_f) < -12'sd126;
wire [11:0] f_sh_full = -12'd126 - e_f;
wire [5:0]  f_sh      = !f_sub ? 6'd0 : ($signed(f_sh_full) > 12'sd63 ? 6'd63 : f_sh_full[5:0]);
wire [127:0] f_tmp    = {m_f, 72'd0} >> f_sh;
wire        f_guard   = f_tmp[103];
wire        f_stk     = |f_tmp[102:0] || st_f;
wire [24:0] f_round   = {1'b0, f_tmp[127:104]} + {24'd0, f_guard && (f_stk || f_tmp[104])};
wire [11:0] f_ebits   = e_f + 12'd126;
wire [31:0] f_bits    = (f_sub ? 32'd0 : {1'b0, f_ebits[7:0], 23'd0}) + {7'd0, f_round};

reg [31:0] y_reg;

always @(posedge clk) begin
    if (adv) begin
        y_reg <= byp_r ? byp_y_r : f_bits;
    end
end

// ---- valid bits ---------------------------------------------------------------

always @(posedge clk) begin
    if (adv) begin
        vld <= {vld[LATENCY-2:0], s_valid};
    end
    if (rst) begin
        vld <= {LATENCY{1'b0}};
    end
end

assign m_y     = y_reg;
assign m_valid = vld[LATENCY-1] && !stall;

endmodule

`resetall
