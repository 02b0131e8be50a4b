//! The `gemv` kernel alone, against the pieces of main's old kernel path and a
//! memory baseline, all in one process and alternated (so each sees the same load).
//!
//! ```text
//! cargo build --release --workspace --bins --examples   # (make build)
//! target/release/examples/gemv_kernel [REPS]            # default 41
//! ```
//!
//! Per shape (`m × n` float32, the matrix then the vector, as the node's
//! `[load(x), load(A), gemv]` chain hands the kernel), median µs per call of:
//!
//! - `kernel`: `Gemv::run` as shipped (through `builtin`, output buffer reused as a slot does);
//! - `old`: the kernel before (kept here as the baseline): the whole input decoded into a
//!   `Vec<f32>`, then each row summed alone in the same 8-lane order;
//! - `old decode`: that decode pass alone;
//! - `copy fresh`: the input copied into a freshly allocated `Vec` (what a `load` hop does
//!   with a kept buffer: page faults included), `copy reused`: into a reused one.
//!
//! The old kernel's result is checked bit for bit against the shipped one.

use std::hint::black_box;
use std::time::Instant;

use offrac_accel::builtin;
use offrac_proto::FunctionId;

fn input(m: usize, n: usize) -> Vec<u8> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    (0..m * n + n)
        .flat_map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0).to_le_bytes()
        })
        .collect()
}

fn decode(input: &[u8], dst: &mut Vec<f32>) {
    dst.clear();
    dst.extend(
        input
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
}

/// The old kernel's row sum: 8 lanes, `k ≡ l (mod 8)`, folded pairwise.
fn old_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (ca, cb) in ac.zip(bc) {
        for l in 0..8 {
            lanes[l] += ca[l] * cb[l];
        }
    }
    for (l, (x, y)) in ar.iter().zip(br).enumerate() {
        lanes[l] += x * y;
    }
    let [l0, l1, l2, l3, l4, l5, l6, l7] = lanes;
    ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
}

fn old_gemv(input: &[u8], n: usize, ax: &mut Vec<f32>, out: &mut Vec<u8>) {
    decode(input, ax);
    let (a, x) = ax.split_at(ax.len() - n);
    for row in a.chunks_exact(n) {
        out.extend_from_slice(&old_dot(row, x).to_le_bytes());
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(41);
    println!("median µs per call over {reps} alternated repetitions");
    println!(
        "{:<12} {:>8} {:>8} {:>11} {:>11} {:>12} {:>10}",
        "shape", "kernel", "old", "old decode", "copy fresh", "copy reused", "old/kernel"
    );
    for (m, n) in [(2048usize, 1024usize), (1024, 1024), (2048, 2048)] {
        let data = input(m, n);
        let mut k = builtin(FunctionId::Gemv);
        let (mut out, mut out_old, mut ax, mut kept) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut t = [(); 5].map(|()| Vec::with_capacity(reps));
        for i in 0..reps + 3 {
            let mut time = |j: usize, f: &mut dyn FnMut()| {
                let s = Instant::now();
                f();
                if i >= 3 {
                    t[j].push(s.elapsed().as_secs_f64() * 1e6);
                }
            };
            time(0, &mut || {
                out.clear();
                if let Err(e) = k.run(n as u64, black_box(&data), &mut out) {
                    panic!("gemv: {e}");
                }
            });
            time(1, &mut || {
                out_old.clear();
                old_gemv(black_box(&data), n, &mut ax, &mut out_old);
            });
            time(2, &mut || decode(black_box(&data), &mut ax));
            time(3, &mut || {
                let mut v = Vec::with_capacity(data.len());
                v.extend_from_slice(black_box(&data));
                black_box(&v);
            });
            time(4, &mut || {
                kept.clear();
                kept.extend_from_slice(black_box(&data));
                black_box(&kept);
            });
            assert_eq!(out, out_old, "{m}x{n}: the kernel and the old one differ");
        }
        let [a, b, c, d, e] = t.each_mut().map(|v| median(v));
        println!(
            "{:<12} {:>8.0} {:>8.0} {:>11.0} {:>11.0} {:>12.0} {:>10.2}",
            format!("{m}x{n}"),
            a,
            b,
            c,
            d,
            e,
            b / a
        );
    }
}
