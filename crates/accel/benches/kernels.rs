//! The built-in kernels under criterion, side by side with the FPGA
//! latencies of OffRAC Table 5 ("T5") and, for the DLRM operators, seed 001
//! Table II ("II": T_acc at 1 KB, 250 MHz).
//!
//! ```text
//! cargo bench -p offrac-accel --bench kernels            # all (make bench-kernels)
//! cargo bench -p offrac-accel --bench kernels -- topk    # those whose id has "topk"
//! ```
//!
//! Each case calls `Accelerator::run` through `builtin(..)` (payload decode,
//! compute and encode included; output buffer reused as a slot does).
//! Criterion reports each case as usual (its estimates and change against
//! the last run under `target/criterion/`); at the end a table gives, per
//! case, the median over criterion's samples of the mean time per call, the
//! 10th / 90th percentiles of those sample means, the FPGA latency and the
//! ratio. Data is deterministic (xorshift). Single-threaded: pin with
//! `taskset -c N cargo bench ...` for steadier numbers.

use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::Criterion;
use offrac_accel::builtin;
use offrac_proto::FunctionId;

/// Samples per case (criterion's minimum is 10).
const SAMPLES: usize = 41;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in [0, 1) with 24 random bits.
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Roughly normal (Irwin–Hall, 4 uniforms), scaled.
    fn normalish(&mut self) -> f32 {
        let s: f32 = (0..4).map(|_| self.unit()).sum();
        (s - 2.0) * 1.732 * 10.0
    }
}

struct Case {
    name: &'static str,
    f: FunctionId,
    param: u64,
    input: Vec<u8>,
    /// The FPGA latency, µs (NaN: none published).
    fpga_us: f64,
    /// Where `fpga_us` comes from: "T5" (OffRAC Table 5), "II" (seed 001 Table II).
    source: &'static str,
}

fn ints(rng: &mut XorShift, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|_| (rng.next() as u32 as i32).to_le_bytes())
        .collect()
}

fn floats(n: usize, mut g: impl FnMut() -> f32) -> Vec<u8> {
    (0..n).flat_map(|_| g().to_le_bytes()).collect()
}

fn cases() -> Vec<Case> {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut v = Vec::new();
    for bytes in [1024usize, 4096] {
        let n = bytes / 4;
        v.push(Case {
            name: "topk (K=16)",
            f: FunctionId::TopK,
            param: 16,
            input: ints(&mut rng, n),
            fpga_us: 1.6,
            source: "T5",
        });
        v.push(Case {
            name: "logit",
            f: FunctionId::Logit,
            param: 0,
            // (0, 1), never exactly 0.
            input: floats(n, || {
                (rng.unit() + 1.0 / (1u64 << 25) as f32).min(0.999_999)
            }),
            fpga_us: 2.3,
            source: "T5",
        });
        v.push(Case {
            name: "minmax",
            f: FunctionId::MinMax,
            param: 0,
            input: floats(n, || rng.normalish()),
            fpga_us: 5.4,
            source: "T5",
        });
    }
    // Input order must not matter (issue #10): sorted inputs beside random ones.
    for (bytes, name_asc, name_desc) in [
        (4096usize, "topk K=16 asc", "topk K=16 desc"),
        (65536, "topk K=16 asc", "topk K=16 desc"),
    ] {
        let n = (bytes / 4) as i32;
        let asc: Vec<u8> = (0..n).flat_map(|i| (i * 7 - 1000).to_le_bytes()).collect();
        let desc: Vec<u8> = (0..n)
            .rev()
            .flat_map(|i| (i * 7 - 1000).to_le_bytes())
            .collect();
        if bytes > 4096 {
            v.push(Case {
                name: "topk (K=16)",
                f: FunctionId::TopK,
                param: 16,
                input: ints(&mut rng, bytes / 4),
                fpga_us: f64::NAN,
                source: "",
            });
        }
        for (name, input) in [(name_asc, asc), (name_desc, desc)] {
            v.push(Case {
                name,
                f: FunctionId::TopK,
                param: 16,
                input,
                fpga_us: if bytes == 4096 { 1.6 } else { f64::NAN },
                source: "T5",
            });
        }
    }
    v.sort_by_key(|c| c.f);
    v.push(Case {
        name: "matmul 64x64",
        f: FunctionId::MatMul,
        param: 64,
        input: floats(2 * 64 * 64, || rng.normalish()),
        fpga_us: 80.0,
        source: "T5",
    });
    // One rank's block in experiments/gemv at 2048 and 1024 over 2 ranks
    // (the matrix, then the vector); no FPGA figure.
    for (name, m, n) in [
        ("gemv 2048x1024", 2048, 1024),
        ("gemv 1024x1024", 1024, 1024),
    ] {
        v.push(Case {
            name,
            f: FunctionId::Gemv,
            param: n as u64,
            input: floats(m * n + n, || rng.normalish()),
            fpga_us: f64::NAN,
            source: "",
        });
    }
    dlrm_cases(&mut rng, &mut v);
    v
}

/// The DLRM operators at 1 KiB: the four of seed 001 Table II, then the rest
/// of Table I (no FPGA figure published).
fn dlrm_cases(rng: &mut XorShift, v: &mut Vec<Case>) {
    use offrac_accel::dlrm::state::{default_dictionary_key, DEFAULT_DICTIONARY_KEYS};
    use offrac_accel::ragged::encode_id_lists;
    let n = 256;
    let mut case = |name, f, param, input, fpga_us: f64| {
        let source = if fpga_us.is_nan() { "" } else { "II" };
        v.push(Case {
            name,
            f,
            param,
            input,
            fpga_us,
            source,
        });
    };
    // 90 % of the ids in the dictionary, as in generated load.
    let ids: Vec<u8> = (0..n)
        .flat_map(|_| {
            let r = rng.next();
            if r.is_multiple_of(10) {
                r as u32 >> 3
            } else {
                default_dictionary_key((r >> 8) % DEFAULT_DICTIONARY_KEYS as u64)
            }
            .to_le_bytes()
        })
        .collect();
    case("mapid", FunctionId::MapId, 0, ids.clone(), 0.692);
    // Dense counts, half of them zero.
    let counts = floats(n, || {
        let u = rng.unit();
        if u < 0.5 {
            0.0
        } else {
            (u * 1e4).floor()
        }
    });
    case(
        "sparsetransform",
        FunctionId::SparseTransform,
        0,
        counts.clone(),
        1.240,
    );
    let probs = floats(n, || {
        (rng.unit() + 1.0 / (1u64 << 25) as f32).min(0.999_999)
    });
    case("logit", FunctionId::Logit, 0, probs, 1.092);
    case(
        "normalization",
        FunctionId::MinMax,
        0,
        floats(n, || rng.normalish()),
        4.092,
    );
    let positive = floats(n, || 1.0 + (rng.unit() * 1e4).floor());
    case(
        "bucketize",
        FunctionId::Bucketize,
        0,
        positive.clone(),
        f64::NAN,
    );
    case(
        "sigridhash",
        FunctionId::SigridHash,
        100_000 | (7 << 32),
        ids.clone(),
        f64::NAN,
    );
    case(
        "getlocalhour",
        FunctionId::GetLocalHour,
        3600,
        ids.clone(),
        f64::NAN,
    );
    case(
        "boxcox (l=0)",
        FunctionId::BoxCox,
        0,
        positive.clone(),
        f64::NAN,
    );
    case(
        "boxcox (l=0.5)",
        FunctionId::BoxCox,
        u64::from(0.5f32.to_bits()),
        positive,
        f64::NAN,
    );
    case(
        "onehot (C=16)",
        FunctionId::Onehot,
        16,
        floats(64, || (rng.next() % 16) as f32)
            .chunks(4)
            .flat_map(|c| (f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u32).to_le_bytes())
            .collect(),
        f64::NAN,
    );
    // Id lists: 1 KiB of rows of 0-7 ids from a vocabulary of 64.
    let mut lists = Vec::new();
    let mut words = 2;
    while words < n || lists.len() % 2 == 1 {
        let row: Vec<u32> = (0..rng.next() % 8)
            .map(|_| (rng.next() % 64) as u32)
            .collect();
        words += 1 + row.len();
        lists.push(row);
    }
    let lists = encode_id_lists(&lists);
    case(
        "firstx (X=2)",
        FunctionId::FirstX,
        2,
        lists.clone(),
        f64::NAN,
    );
    case(
        "idlisttransform",
        FunctionId::IdListTransform,
        0,
        lists.clone(),
        f64::NAN,
    );
    case(
        "cartesian",
        FunctionId::Cartesian,
        0,
        lists.clone(),
        f64::NAN,
    );
    case("ngram (n=2)", FunctionId::NGram, 2, lists, f64::NAN);
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// One case's samples as criterion timed them: (iterations, elapsed).
type Samples = Arc<Mutex<Vec<(u64, Duration)>>>;

fn main() {
    let mut c = Criterion::default()
        .sample_size(SAMPLES)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1000))
        .configure_from_args();
    let mut results = Vec::new();
    for case in cases() {
        let samples: Samples = Arc::default();
        let mut acc = builtin(case.f);
        let mut out = Vec::with_capacity(case.input.len());
        // The DLRM operators apart (logit appears in both tables).
        let group = if case.source == "II" { "dlrm " } else { "" };
        let id = format!("{group}{}/{}", case.name, case.input.len());
        let recorded = Arc::clone(&samples);
        c.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    out.clear();
                    let r = acc.run(black_box(case.param), black_box(&case.input), &mut out);
                    if let Err(e) = r {
                        panic!("{}: {e}", case.name);
                    }
                    black_box(&out);
                }
                let elapsed = t.elapsed();
                if let Ok(mut s) = recorded.lock() {
                    s.push((iters, elapsed));
                }
                elapsed
            })
        });
        // The last SAMPLES calls are the measurement (the ones before, the warm-up).
        let all = samples.lock().map(|s| s.clone()).unwrap_or_default();
        let measured = &all[all.len().saturating_sub(SAMPLES)..];
        if !measured.is_empty() {
            results.push((case, measured.to_vec()));
        }
    }
    c.final_summary();
    if results.is_empty() {
        return;
    }
    println!(
        "\nns per call: median / p10 / p90 over {SAMPLES} criterion samples of the mean per call"
    );
    println!(
        "{:<16} {:>7} {:>11} {:>11} {:>11} {:>10} {:>4} {:>10}",
        "function", "bytes", "median ns", "p10 ns", "p90 ns", "FPGA ns", "ref", "ours/FPGA"
    );
    for (case, samples) in results {
        let mut means: Vec<f64> = samples
            .iter()
            .map(|&(iters, d)| d.as_nanos() as f64 / iters.max(1) as f64)
            .collect();
        means.sort_by(f64::total_cmp);
        let med = percentile(&means, 0.5);
        let fpga_ns = case.fpga_us * 1000.0;
        println!(
            "{:<16} {:>7} {:>11.0} {:>11.0} {:>11.0} {:>10.0} {:>4} {:>10.3}",
            case.name,
            case.input.len(),
            med,
            percentile(&means, 0.1),
            percentile(&means, 0.9),
            fpga_ns,
            case.source,
            med / fpga_ns
        );
    }
}
