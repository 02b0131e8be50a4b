//! The simulator's contract: deterministic per seed, conserving, and
//! reproducing the paper's qualitative results and Kingman's formula.

use offrac_core::BufferPolicy;
use offrac_sim::{kingman_erlang2_wait, run, Delay, NodeModel, PoolModel, SimConfig, Summary};

fn sim(cfg: &SimConfig) -> Summary {
    run(cfg).unwrap_or_else(|e| panic!("{e}"))
}

fn fig7(policy: BufferPolicy, seed: u64) -> SimConfig {
    SimConfig {
        clients: 8,
        sizes: "multi".parse().unwrap_or_else(|e| panic!("{e}")),
        exec_us: vec![10.0, 5.0, 1.0],
        instances: vec![4, 4, 4],
        node: NodeModel::Reassembled(PoolModel {
            policy,
            ..PoolModel::default()
        }),
        seed,
        ..SimConfig::default()
    }
}

#[test]
fn same_seed_same_result_other_seed_other_result() {
    let a = sim(&fig7(BufferPolicy::EligibleRr, 3));
    assert_eq!(a, sim(&fig7(BufferPolicy::EligibleRr, 3)));
    assert_ne!(a, sim(&fig7(BufferPolicy::EligibleRr, 4)));
}

#[test]
fn every_request_completes_or_is_counted_dropped() {
    for per_function in [false, true] {
        for node in [
            NodeModel::Immediate,
            NodeModel::Reassembled(PoolModel {
                buffers: 3,
                per_function,
                ..PoolModel::default()
            }),
        ] {
            let cfg = SimConfig {
                node,
                ..SimConfig::default()
            };
            let s = sim(&cfg);
            let all = s.row("all").unwrap_or_else(|| panic!("no all row"));
            assert_eq!(all.completed, cfg.clients as u64 * cfg.requests);
            assert_eq!(all.attempts, all.completed + all.drops);
            assert_eq!(all.other, 0);
            let by_fn: u64 = ["A", "B", "C"]
                .iter()
                .filter_map(|g| s.row(g))
                .map(|r| r.attempts)
                .sum();
            assert_eq!(by_fn, all.attempts);
        }
    }
}

#[test]
fn eligible_rr_drops_no_more_than_naive_rr_when_saturated() {
    let rate = |p| {
        let (d, a) = (1..=3).fold((0, 0), |(d, a), seed| {
            let s = sim(&fig7(p, seed));
            let r = s.row("all").unwrap_or_else(|| panic!("no all row"));
            (d + r.drops, a + r.attempts)
        });
        d as f64 / a as f64
    };
    let (naive, eligible) = (rate(BufferPolicy::NaiveRr), rate(BufferPolicy::EligibleRr));
    assert!(naive > 0.05, "not saturated: naive drop rate {naive}");
    assert!(eligible <= naive, "eligible {eligible} > naive {naive}");
}

#[test]
fn immediate_ingestion_idles_the_accelerator_while_fragments_arrive() {
    let cfg = |node, frags: &str| SimConfig {
        clients: 1,
        mix: vec![1.0],
        sizes: frags.parse().unwrap_or_else(|e| panic!("{e}")),
        gap: Delay::Uniform(30.0, 40.0),
        exec_us: vec![20.0],
        instances: vec![1],
        node,
        ..SimConfig::default()
    };
    let held = |node, frags| {
        sim(&cfg(node, frags))
            .row("A")
            .unwrap_or_else(|| panic!("no row"))
            .util_held
    };
    assert!((held(NodeModel::Immediate, "1") - 1.0).abs() < 1e-9);
    // 8 × 20 µs of work spread over 7 gaps of ~35 µs plus the last fragment.
    let imm8 = held(NodeModel::Immediate, "8");
    assert!((imm8 - 160.0 / 265.0).abs() < 0.03, "{imm8}");
    let re8 = held(NodeModel::Reassembled(PoolModel::default()), "8");
    assert!((re8 - 1.0).abs() < 1e-9);
}

#[test]
fn reassembly_wait_matches_kingman_for_erlang2_arrivals() {
    // One stream of two-fragment requests: each fragment after an Exp gap, so
    // complete requests arrive as an Erlang-2 renewal process into one slot
    // with deterministic service D = 10 µs.
    let (rho, d) = (0.8, 10.0);
    let stage = d / (2.0 * rho);
    let cfg = SimConfig {
        clients: 1,
        requests: 60_000,
        open_loop: true,
        mix: vec![1.0],
        sizes: "2".parse().unwrap_or_else(|e| panic!("{e}")),
        gap: Delay::Exp(stage),
        think: Delay::Exp(stage),
        exec_us: vec![d / 2.0],
        instances: vec![1],
        node: NodeModel::Reassembled(PoolModel {
            small_queue: false,
            slot_queue_frags: 1 << 30,
            ..PoolModel::default()
        }),
        seed: 11,
        ..SimConfig::default()
    };
    let s = sim(&cfg);
    let a = s.row("A").unwrap_or_else(|| panic!("no row"));
    assert_eq!(a.drops, 0);
    let k = kingman_erlang2_wait(rho, d);
    let err = (a.queue.mean - k).abs() / k;
    assert!(
        err < 0.15,
        "measured {} vs Kingman {k}: {err}",
        a.queue.mean
    );
}

mod fidelity {
    use super::*;
    use offrac_sim::OnRefusal;

    fn large(on_refusal: OnRefusal, seed: u64) -> SimConfig {
        SimConfig {
            clients: 8,
            requests: 200,
            sizes: "1:10,4:30,64:30,128:30".parse().unwrap(),
            node: NodeModel::Reassembled(PoolModel {
                buffer_frags: 128,
                ..PoolModel::default()
            }),
            on_refusal,
            seed,
            ..SimConfig::default()
        }
    }

    fn drop_rate(s: &Summary, group: &str) -> f64 {
        let r = s.row(group).unwrap();
        r.drops as f64 / r.attempts as f64
    }

    #[test]
    fn aborting_refused_large_requests_drops_more_as_in_the_paper() {
        // The paper's clients stop sending a refused request and retry sooner,
        // so they hit the full pool more often than clients that finish sending.
        for seed in 1..4 {
            let finish = sim(&large(OnRefusal::Finish, seed));
            let abort = sim(&large(OnRefusal::Abort, seed));
            let (f, a) = (drop_rate(&finish, "all"), drop_rate(&abort, "all"));
            assert!(a > 1.3 * f, "seed {seed}: abort {a} vs finish {f}");
            assert_eq!(abort.row("all").unwrap().completed, 8 * 200);
            assert_eq!(
                abort.row("all").unwrap().other,
                0,
                "an aborted request left a stall behind"
            );
        }
    }

    #[test]
    fn single_fragment_requests_have_nothing_to_abort() {
        let mut cfg = large(OnRefusal::Finish, 5);
        cfg.sizes = "1:1".parse().unwrap();
        let finish = sim(&cfg);
        cfg.on_refusal = OnRefusal::Abort;
        assert_eq!(finish, sim(&cfg));
    }

    #[test]
    fn a_workload_seed_fixes_the_request_sequence_across_timing_seeds() {
        let run = |timing: u64, workload: u64| {
            let mut c = large(OnRefusal::Abort, timing);
            c.workload_seed = Some(workload);
            sim(&c)
        };
        let completed = |s: &Summary| -> Vec<(String, u64)> {
            s.rows
                .iter()
                .map(|r| (r.group.clone(), r.completed))
                .collect()
        };
        let (a, b) = (run(1, 42), run(2, 42));
        assert_ne!(a, b, "the timing seed changes the run");
        // Every client completes the same requests in the same order, so each
        // function x size group completes the same number.
        assert_eq!(completed(&a), completed(&b));
        assert_ne!(completed(&a), completed(&run(1, 43)));
    }

    #[test]
    fn clients_can_start_together() {
        let cfg = |together| SimConfig {
            clients: 1,
            requests: 1,
            sizes: "1:1".parse().unwrap(),
            gap: Delay::Fixed(5.0),
            exec_us: vec![10.0, 10.0, 10.0],
            start_together: together,
            ..SimConfig::default()
        };
        assert_eq!(sim(&cfg(true)).sim_ns, 10_000);
        assert_eq!(sim(&cfg(false)).sim_ns, 15_000);
    }

    #[test]
    fn function_by_size_rows_add_up() {
        let s = sim(&large(OnRefusal::Abort, 7));
        for f in ["A", "B", "C"] {
            let whole = s.row(f).unwrap();
            let parts: Vec<_> = s
                .rows
                .iter()
                .filter(|r| r.group.starts_with(&format!("{f}/")))
                .collect();
            assert_eq!(parts.len(), 4);
            assert_eq!(
                parts.iter().map(|r| r.attempts).sum::<u64>(),
                whole.attempts
            );
            assert_eq!(parts.iter().map(|r| r.drops).sum::<u64>(), whole.drops);
            assert_eq!(
                parts.iter().map(|r| r.completed).sum::<u64>(),
                whole.completed
            );
        }
    }
}

#[test]
fn results_do_not_depend_on_the_bytes_per_fragment() {
    // Buffers, queues and the small-request limit all scale with frag_bytes.
    let with = |fb: u32, node: NodeModel| SimConfig {
        frag_bytes: fb,
        node,
        ..fig7(BufferPolicy::NaiveRr, 9)
    };
    let core = || NodeModel::Reassembled(PoolModel::default());
    let driven = || NodeModel::Driven {
        pool: PoolModel::default(),
        handoff_ns: 0,
    };
    assert_eq!(sim(&with(1024, core())), sim(&with(8, core())));
    assert_eq!(sim(&with(1024, driven())), sim(&with(8, driven())));
}
