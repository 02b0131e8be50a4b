//! Trace-driven runs (`offrac_sim::trace`): popularity that shifts from one
//! function to another, against static provisioning by the N formula on the
//! mean rate, on the peak rate, and against the autoscaler over spare slots.
//! Seeded like the other simulation tests (`OFFRAC_SIM_SEED=N`).

mod common;

use common::{for_seeds, LOGIT, MS, TOPK};
use offrac_control::AutoscaleConfig;
use offrac_sim::trace::{formula_slots, run_trace, Arrival, Provisioning, TraceRun};

/// 400 ms: TOPK at 4,000 requests/s and LOGIT at 200/s, then the reverse.
fn shifting() -> Vec<Arrival> {
    let mut a = Vec::new();
    for (start, hot, cold) in [(0, TOPK, LOGIT), (200 * MS, LOGIT, TOPK)] {
        for i in 0..800u64 {
            a.push(Arrival {
                at_ns: start + i * 250_000,
                function: hot,
                bytes: 64,
            });
            if i % 20 == 0 {
                a.push(Arrival {
                    at_ns: start + i * 250_000 + 100_000,
                    function: cold,
                    bytes: 64,
                });
            }
        }
    }
    a
}

fn run(seed: u64, provisioning: Provisioning) -> offrac_sim::trace::TraceReport {
    let r = TraceRun {
        functions: vec![(TOPK, MS), (LOGIT, MS)],
        provisioning,
        connections: 8,
        queue_depth: 4,
        seed,
        sample_ns: 100_000,
    };
    run_trace(&r, &shifting()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_autoscaler_follows_a_shift_that_mean_provisioning_cannot() {
    let arrivals = shifting();
    let f = [(TOPK, MS), (LOGIT, MS)];
    // Mean 2,100 requests/s each: 3 slots at ρ = 0.75; the peak 4,000/s: 6.
    let mean = formula_slots(&arrivals, &f, 0.0, 0.75, None);
    let peak = formula_slots(&arrivals, &f, 0.0, 0.75, Some(10 * MS));
    assert_eq!(mean, vec![3, 3]);
    assert_eq!(peak, vec![6, 6]);
    for_seeds(|seed| {
        let m = run(seed, Provisioning::Static(mean.clone()));
        let p = run(seed, Provisioning::Static(peak.clone()));
        let a = run(
            seed,
            Provisioning::Autoscale {
                spare: 10,
                policy: AutoscaleConfig {
                    max_step: 4,
                    ..AutoscaleConfig::default()
                },
                period_ns: 10 * MS,
            },
        );
        for r in [&m, &p, &a] {
            assert_eq!(r.unanswered, 0, "{r:?}");
            assert_eq!(r.total.sent, arrivals.len() as u64);
            assert_eq!(r.total.ok + r.total.busy + r.total.other, r.total.sent);
        }
        // Three slots for 4,000 requests/s of 1 ms: a backlog grows by
        // 1,000 requests a second of the hot phase (small requests wait in
        // the node's 1 MiB small-request queue rather than being refused).
        assert!(m.total.p99_ns > 20 * MS, "mean-provisioned: {m:?}");
        assert!(p.total.p99_ns < 5 * MS, "peak-provisioned: {p:?}");
        assert_eq!(p.total.busy, 0, "peak-provisioned: {p:?}");
        // Each hot function in turn: the autoscaler lets a backlog build for
        // a few periods, far less than too few slots all along. The second
        // takes the first one's replicas as soon as it needs them (no spare
        // is left by then), not after the first one's calm streak.
        for f in 0..2 {
            assert!(
                a.functions[f].p99_ns < m.functions[f].p99_ns / 2,
                "function {f}: autoscaler {a:?} vs mean {m:?}"
            );
        }
        assert!(
            a.total.busy <= m.total.busy,
            "autoscaler {a:?} vs mean {m:?}"
        );
        assert!(a.replicated >= 6 && a.reclaimed >= 1, "{a:?}");
        // Slot-seconds: static is slots × span; the autoscaler pays for less
        // than the peak provisioning.
        let span = a.span_ns as f64 / 1e9;
        assert!((p.slot_seconds - 12.0 * span).abs() < 1e-3, "{p:?}");
        assert!(a.slot_seconds < p.slot_seconds, "{a:?} vs {p:?}");
        assert!(a.peak_slots <= 12, "{a:?}");
    });
}
