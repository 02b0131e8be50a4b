//! How fast the collectives' reductions run, against a copy of the same
//! bytes (the memory's floor) timed in the same process.
//!
//! ```text
//! cargo run --release --example reduce_speed [MIB] [REPS]
//! ```
//! Prints, per reduction, the median µs of `REPS` runs over `MIB` MiB and
//! its ratio to the copy's median.

use offrac_collective::reduce::{combine, combine_into};
use offrac_collective::{Dtype, RedOp};
use std::hint::black_box;
use std::time::Instant;

fn median_us(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(41);
    let n = mib << 20;
    let a: Vec<u8> = (0..n / 4)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    let b: Vec<u8> = (0..n / 4)
        .flat_map(|i| (1.0 - i as f32).to_le_bytes())
        .collect();
    let mut out = vec![0u8; n];
    let copy = median_us(reps, || {
        out.copy_from_slice(black_box(&a));
        black_box(&out);
    });
    println!("{mib} MiB, median of {reps}: copy {copy:.0} µs");
    for (dtype, op) in [
        (Dtype::F32, RedOp::Sum),
        (Dtype::F32, RedOp::Max),
        (Dtype::I32, RedOp::Sum),
    ] {
        let inplace = median_us(reps, || {
            combine(dtype, op, black_box(&mut out), black_box(&b));
        });
        let into = median_us(reps, || {
            combine_into(dtype, op, black_box(&mut out), black_box(&a), black_box(&b));
        });
        println!(
            "{dtype:?} {op:?}: combine {inplace:.0} µs ({:.2}x copy), combine_into {into:.0} µs ({:.2}x copy)",
            inplace / copy,
            into / copy
        );
    }
}
