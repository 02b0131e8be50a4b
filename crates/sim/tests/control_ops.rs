//! Control operations over several slots under virtual time, in the node's
//! own driver (`docs/control.md`, "Forced unload", "Replicate"): a forced
//! unload of a module two slots run, under a load that keeps both busy,
//! answers every request exactly once and refuses a concurrent swap of one
//! of its slots; a replicate is all or nothing over the spare slots, keeps
//! to the tenant's slot quota, and a forced unload gives a spare slot back.
//! Seeded: `OFFRAC_SIM_SEED=N` replays one seed.

mod common;

use common::{for_seeds, world, ECHO, MS, SPIN};
use offrac_control::{AutoscaleConfig, Op, SlotRole, Target};
use offrac_core::{Tenancy, TenantPolicy};
use offrac_node::AutoscaleSettings;
use offrac_proto::{RequestHeader, Status};
use offrac_sim::world::{Received, World, WorldConfig};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

const US: u64 = 1_000;
const KEY: &[u8] = b"tenant-one-key-0";
const M: [u8; 32] = [7; 32];
const MODULE: Target = Target::Wasm {
    function: 140,
    digest: M,
};

fn tenancy(max_slots: Option<u32>) -> Tenancy {
    let mut t = Tenancy::default();
    t.tenants.insert(
        1,
        TenantPolicy {
            max_slots,
            ..TenantPolicy::default()
        },
    );
    t
}

/// The world's node: slots running `functions` on their workers (queues 8
/// deep), tenant 1 with its key and slot quota `max_slots`, no real results.
fn slots(c: &mut WorldConfig, functions: &[u8], max_slots: Option<u32>) {
    c.engine.slots = functions.to_vec();
    c.engine.slot_queue_depths = vec![Some(8); functions.len()];
    c.driver = offrac_node::DriverConfig::new(
        functions
            .iter()
            .map(|&function| offrac_node::SlotConfig {
                function,
                inline_max_bytes: 0,
            })
            .collect(),
    );
    c.driver.tenancy = tenancy(max_slots);
    c.exec.real_results = false;
    c.tenant_keys = HashMap::from([(1, KEY.to_vec())]);
}

/// The autoscaler over the `spare` slots, looking every 10 ms.
fn autoscale(c: &mut WorldConfig, policy: AutoscaleConfig, spare: Vec<usize>) {
    c.driver.autoscale = Some(AutoscaleSettings {
        policy,
        period: Duration::from_millis(10),
        spare,
    });
}

/// A policy that never acts (its grow streak is too long): the spare slots
/// are the operator's ops' alone.
fn never_acts() -> AutoscaleConfig {
    AutoscaleConfig {
        grow_periods: 1_000_000,
        shrink_periods: 1_000_000,
        ..AutoscaleConfig::default()
    }
}

/// A policy that grows after two busy periods over ρ = 0.7, two slots at a
/// step, and all but never shrinks.
fn grows_only() -> AutoscaleConfig {
    AutoscaleConfig {
        target_utilisation: 0.7,
        grow_periods: 2,
        shrink_periods: 1_000_000,
        max_step: 2,
    }
}

/// Every answer `clients` got has a request id no other has and a status
/// in `allowed`; how many there were.
fn answered_once(w: &mut World, clients: &[usize], allowed: &[Status], seed: u64) -> u64 {
    let mut seen = HashSet::new();
    for &c in clients {
        for a in w.drain_answers(c) {
            assert!(seen.insert(a.header.request_id), "seed {seed}: twice");
            assert!(
                allowed.contains(&a.header.status),
                "seed {seed}: {:?}",
                a.header.status
            );
        }
    }
    seen.len() as u64
}

/// Send `op` signed by tenant 1 on `client`, as request `id`.
fn control(w: &mut World, client: usize, op: &Op, id: u64) {
    let env = w.control_envelope(1, KEY, id, op);
    let h = RequestHeader::single(id, offrac_proto::FN_CONTROL, 0, env.len() as u32);
    let mut b = h.encode().to_vec();
    b.extend(env);
    w.send(client, &b);
}

/// The one answer of `client` (a control client), after `run` ns.
fn answer(w: &mut World, client: usize, run: u64) -> Received {
    w.run_for(run);
    let mut a = w.drain_answers(client);
    assert_eq!(a.len(), 1, "one answer: {a:?}");
    a.remove(0)
}

fn hello(w: &mut World, client: usize) {
    let env = w.hello_envelope(1, KEY, 1_000_000 + client as u64);
    let mut h = RequestHeader::single(u64::MAX - 1, offrac_proto::FN_CONTROL, 0, env.len() as u32);
    h.tenant = 1;
    let mut b = h.encode().to_vec();
    b.extend(env);
    w.send(client, &b);
    assert_eq!(answer(w, client, MS).header.status, Status::Ok);
}

fn call(w: &mut World, client: usize, id: u64, function: u8) {
    let mut h = RequestHeader::single(id, function, 0, 4);
    h.tenant = 1;
    let mut b = h.encode().to_vec();
    b.extend_from_slice(b"load");
    w.send(client, &b);
}

#[test]
fn a_forced_unload_under_load_answers_every_request_once() {
    for_seeds(|seed| {
        let mut w = world(seed, |c| {
            slots(c, &[SPIN, SPIN, SPIN], None);
            c.exec.fixed = vec![(SPIN, 200 * US), (140, 200 * US)];
        });
        let (ctl, other, third) = (w.connect(), w.connect(), w.connect());
        for (i, slot) in [1u16, 2].into_iter().enumerate() {
            let op = Op::Swap {
                slot,
                target: MODULE,
            };
            control(&mut w, ctl, &op, 10 + i as u64);
            assert_eq!(answer(&mut w, ctl, MS).header.status, Status::Ok);
        }
        // Three callers of the module, one every 60 µs: 3.3 slots' worth
        // on two slots, so both stay busy (the excess is refused BUSY).
        let loaders: Vec<usize> = (0..3).map(|_| w.connect()).collect();
        for &l in &loaders {
            hello(&mut w, l);
        }
        let end = w.now() + 20 * MS;
        let unload_at = w.now() + 8 * MS;
        let mut sent: Vec<(usize, u64)> = Vec::new();
        let mut unload_sent = false;
        let mut t = w.now();
        while t < end {
            w.run_until(t);
            if !unload_sent && w.now() >= unload_at {
                unload_sent = true;
                let op = Op::Unload {
                    digest: M,
                    force: true,
                };
                control(&mut w, ctl, &op, 20);
                // Once slot 1 is being swapped out, a swap of it is refused.
                for _ in 0..100 {
                    if w.driver().slot_targets()[1].1 {
                        break;
                    }
                    w.run_for(US);
                }
                assert!(w.driver().slot_targets()[1].1, "seed {seed}: swapping");
                let op = Op::Swap {
                    slot: 1,
                    target: Target::Builtin(ECHO),
                };
                control(&mut w, other, &op, 21);
                // A swap of another slot to the module being unloaded too.
                let op = Op::Swap {
                    slot: 0,
                    target: MODULE,
                };
                control(&mut w, third, &op, 22);
            }
            let id = sent.len() as u64;
            let l = loaders[id as usize % loaders.len()];
            call(&mut w, l, id, 140);
            sent.push((l, id));
            t += 60 * US;
        }
        w.run_for(10 * MS);
        let unload = w.drain_answers(ctl);
        assert_eq!(unload.len(), 1, "seed {seed}");
        assert_eq!(unload[0].header.status, Status::Ok, "seed {seed}");
        let body: serde_json::Value = serde_json::from_slice(&unload[0].payload).unwrap();
        assert_eq!(body["swapped_out"].as_array().unwrap().len(), 2, "{body}");
        let busy = w.drain_answers(other);
        assert_eq!(busy.len(), 1);
        assert_eq!(busy[0].header.status, Status::Busy, "seed {seed}");
        let busy = w.drain_answers(third);
        assert_eq!(busy.len(), 1);
        assert_eq!(
            busy[0].header.status,
            Status::Busy,
            "seed {seed}: unloading"
        );
        // Every request answered exactly once: run, refused BUSY (queue
        // full, or handed off with no replica), or UNKNOWN_FUNCTION after.
        let mut seen = HashSet::new();
        let mut by_status: HashMap<Status, usize> = HashMap::new();
        for &l in &loaders {
            for a in w.drain_answers(l) {
                assert!(seen.insert(a.header.request_id), "seed {seed}: twice");
                *by_status.entry(a.header.status).or_default() += 1;
            }
        }
        assert_eq!(seen.len(), sent.len(), "seed {seed}: {by_status:?}");
        for s in by_status.keys() {
            assert!(
                matches!(s, Status::Ok | Status::Busy | Status::UnknownFunction),
                "seed {seed}: {by_status:?}"
            );
        }
        assert!(by_status[&Status::Ok] > 50, "seed {seed}: {by_status:?}");
        assert!(by_status[&Status::UnknownFunction] > 10, "{by_status:?}");
        // Both slots back on their configured built-in, the id nobody's.
        let targets: Vec<Target> = w.driver().slot_targets().iter().map(|t| t.0).collect();
        assert_eq!(targets, vec![Target::Builtin(SPIN); 3], "seed {seed}");
        assert_eq!(w.driver().function_owner(140), None);
    });
}

#[test]
fn replicate_takes_spare_slots_all_or_nothing_within_the_quota() {
    for_seeds(|seed| {
        let mut w = world(seed, |c| {
            slots(c, &[SPIN, ECHO, ECHO, ECHO], Some(1));
            autoscale(c, never_acts(), vec![1, 2, 3]);
            c.exec.fixed = vec![(SPIN, 200 * US), (140, 200 * US)];
        });
        let ctl = w.connect();
        let roles = |w: &World| w.driver().autoscale_view().expect("autoscaler").0;
        let replicate = |n: u16, target: Target| Op::Replicate { n, target };
        // Four asked, three spare: nothing happens.
        control(&mut w, ctl, &replicate(4, Target::Builtin(SPIN)), 1);
        let a = answer(&mut w, ctl, MS);
        assert_eq!((a.header.status, a.header.detail), (Status::Busy, 3));
        assert_eq!(roles(&w)[1..], [SlotRole::Spare; 3]);
        // Two of tenant 1's module: over its quota of one slot.
        control(&mut w, ctl, &replicate(2, MODULE), 2);
        let a = answer(&mut w, ctl, MS);
        assert_eq!(
            (a.header.status, a.header.detail),
            (Status::QuotaExceeded, 1)
        );
        // Two SPIN replicas while SPIN is busy: both loaded, reported.
        let caller = w.connect();
        for id in 0..8 {
            call(&mut w, caller, id, SPIN);
        }
        control(&mut w, ctl, &replicate(2, Target::Builtin(SPIN)), 3);
        let a = answer(&mut w, ctl, MS);
        assert_eq!(a.header.status, Status::Ok, "seed {seed}");
        let body: serde_json::Value = serde_json::from_slice(&a.payload).unwrap();
        assert_eq!(body["slots"], serde_json::json!([1, 2]), "{body}");
        assert_eq!(body["swaps"].as_array().unwrap().len(), 2);
        assert_eq!(
            roles(&w)[..3],
            [
                SlotRole::Fixed(SPIN),
                SlotRole::Fixed(SPIN),
                SlotRole::Fixed(SPIN)
            ]
        );
        // One module instance into the last spare; then none is left.
        control(&mut w, ctl, &replicate(1, MODULE), 4);
        let a = answer(&mut w, ctl, MS);
        assert_eq!(a.header.status, Status::Ok, "seed {seed}");
        assert_eq!(roles(&w)[3], SlotRole::Fixed(140));
        assert_eq!(w.driver().function_owner(140), Some(1));
        control(&mut w, ctl, &replicate(1, Target::Builtin(SPIN)), 5);
        let a = answer(&mut w, ctl, MS);
        assert_eq!((a.header.status, a.header.detail), (Status::Busy, 0));
        // SPIN now runs on three slots: the queued calls spread over them.
        for id in 8..32 {
            call(&mut w, caller, id, SPIN);
        }
        w.run_for(20 * MS);
        let answers = w.drain_answers(caller);
        assert_eq!(answers.len(), 32, "seed {seed}");
        assert!(answers.iter().all(|a| a.header.status == Status::Ok));
        // A forced unload gives the module's slot back as spare.
        let op = Op::Unload {
            digest: M,
            force: true,
        };
        control(&mut w, ctl, &op, 6);
        assert_eq!(answer(&mut w, ctl, MS).header.status, Status::Ok);
        assert_eq!(roles(&w)[3], SlotRole::Spare);
        assert_eq!(w.driver().slot_targets()[3].0, Target::Builtin(ECHO));
        // A spare serves nothing: echo still has no slot.
        call(&mut w, caller, 99, ECHO);
        w.run_for(MS);
        let a = w.drain_answers(caller);
        assert_eq!(a[0].header.status, Status::Busy, "seed {seed}");
        // SPIN shrunk to one spare slot: the highest goes back; its
        // configured slot 0 is never counted nor touched.
        control(
            &mut w,
            ctl,
            &Op::Shrink {
                keep: 1,
                function: SPIN,
            },
            7,
        );
        let a = answer(&mut w, ctl, MS);
        assert_eq!(a.header.status, Status::Ok, "seed {seed}");
        let body: serde_json::Value = serde_json::from_slice(&a.payload).unwrap();
        assert_eq!(body["slots"], serde_json::json!([2]), "{body}");
        assert_eq!(
            roles(&w),
            [
                SlotRole::Fixed(SPIN),
                SlotRole::Fixed(SPIN),
                SlotRole::Spare,
                SlotRole::Spare
            ]
        );
        control(
            &mut w,
            ctl,
            &Op::Shrink {
                keep: 0,
                function: SPIN,
            },
            8,
        );
        assert_eq!(answer(&mut w, ctl, MS).header.status, Status::Ok);
        assert_eq!(roles(&w)[1..], [SlotRole::Spare; 3]);
        assert_eq!(roles(&w)[0], SlotRole::Fixed(SPIN));
    });
}

/// Forty rounds of replicate (n = 2) and forced unload of a module while
/// three clients call it with requests of mixed cost: the two slots of a
/// batch end their runs at different times, so one is often idle while the
/// other still has a queue to hand off. The world checks that no slot is
/// installed while it runs, nor given a job while it installs (a job handed
/// to the batch's other slot before that slot stopped would meet the new
/// function); every call is answered exactly once.
#[test]
fn repeated_replicates_and_forced_unloads_never_run_a_job_on_the_wrong_function() {
    for_seeds(|seed| {
        let mut w = world(seed, |c| {
            slots(c, &[SPIN, ECHO, ECHO], None);
            autoscale(c, never_acts(), vec![1, 2]);
            c.exec.base_ns = 20 * US;
            c.exec.per_kib_ns = 100 * US;
        });
        let ctl = w.connect();
        let loaders: Vec<usize> = (0..3).map(|_| w.connect()).collect();
        for &l in &loaders {
            hello(&mut w, l);
        }
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut sent = 0u64;
        let mut ctl_answers = Vec::new();
        for round in 0..40u64 {
            control(
                &mut w,
                ctl,
                &Op::Replicate {
                    n: 2,
                    target: MODULE,
                },
                100 + 2 * round,
            );
            let unload = Op::Unload {
                digest: M,
                force: true,
            };
            for step in 0..40 {
                if step == 25 {
                    control(&mut w, ctl, &unload, 101 + 2 * round);
                }
                let len = 512 + (next() % 6144) as usize;
                let mut h = RequestHeader::single(sent, 140, 1, len as u32);
                h.tenant = 1;
                let mut b = h.encode().to_vec();
                b.extend(std::iter::repeat_n(1u8, len));
                w.send(loaders[sent as usize % 3], &b);
                sent += 1;
                // From heavy to light load, round by round.
                w.run_for((round % 6 + 1) * 50 * US + next() % (100 * US));
            }
            w.run_for(3 * MS);
            ctl_answers.extend(w.drain_answers(ctl));
        }
        w.run_for(10 * MS);
        assert_eq!(ctl_answers.len(), 80, "seed {seed}");
        for a in &ctl_answers {
            assert_eq!(a.header.status, Status::Ok, "seed {seed}: {a:?}");
            if std::env::var("DBG").is_ok() {
                eprintln!("{}", String::from_utf8_lossy(&a.payload));
            }
        }
        let allowed = [Status::Ok, Status::Busy, Status::UnknownFunction];
        assert_eq!(
            answered_once(&mut w, &loaders, &allowed, seed),
            sent,
            "seed {seed}: every call answered once"
        );
    });
}

/// RESIZE to configured templates under a SPIN load that keeps the slots
/// busy: only the slots that differ are swapped, a second resize meanwhile
/// is refused `BUSY`, every request is answered exactly once; an unknown
/// template, a template of the wrong size, and a slot running another
/// tenant's module are refused `BAD_INPUT` and change nothing.
#[test]
fn resize_moves_the_slots_to_a_template_under_load() {
    use common::MINMAX;
    for_seeds(|seed| {
        let mut w = world(seed, |c| {
            slots(c, &[SPIN, ECHO, ECHO], None);
            c.driver.tenancy.tenants.insert(2, TenantPolicy::default());
            c.driver.templates = vec![
                ("spin3".into(), vec![SPIN, SPIN, SPIN]),
                ("mixed".into(), vec![ECHO, SPIN, MINMAX]),
                ("short".into(), vec![SPIN]),
            ];
            c.exec.fixed = vec![(SPIN, 200 * US)];
            c.tenant_keys = HashMap::from([(1, KEY.to_vec()), (2, b"tenant-two-key-0".to_vec())]);
        });
        let (ctl, other) = (w.connect(), w.connect());
        let resize = |name: &str| Op::Resize(name.into());
        for (i, bad) in ["nope", "short"].into_iter().enumerate() {
            control(&mut w, ctl, &resize(bad), 1 + i as u64);
            let a = answer(&mut w, ctl, MS);
            assert_eq!(a.header.status, Status::BadInput, "seed {seed}: {bad}");
        }
        control(&mut w, ctl, &resize("spin3"), 3);
        let a = answer(&mut w, ctl, MS);
        assert_eq!(a.header.status, Status::Ok, "seed {seed}");
        let body: serde_json::Value = serde_json::from_slice(&a.payload).unwrap();
        assert_eq!(body["slots"], serde_json::json!([1, 2]), "{body}");
        // Load: SPIN from three clients, 3 slots' worth and more.
        let loaders: Vec<usize> = (0..3).map(|_| w.connect()).collect();
        let mut sent = 0u64;
        for _ in 0..60 {
            let l = loaders[sent as usize % 3];
            call(&mut w, l, sent, SPIN);
            sent += 1;
            w.run_for(50 * US);
        }
        // To "mixed": slots 0 and 2 change (both busy), slot 1 keeps SPIN.
        control(&mut w, ctl, &resize("mixed"), 4);
        w.run_for(20 * US);
        control(&mut w, ctl, &resize("spin3"), 5);
        for _ in 0..60 {
            let l = loaders[sent as usize % 3];
            call(&mut w, l, sent, SPIN);
            sent += 1;
            w.run_for(50 * US);
        }
        w.run_for(20 * MS);
        let a = w.drain_answers(ctl);
        assert_eq!(a.len(), 2, "seed {seed}");
        let (first, second) = if a[0].header.request_id == 4 {
            (&a[0], &a[1])
        } else {
            (&a[1], &a[0])
        };
        assert_eq!(first.header.status, Status::Ok, "seed {seed}");
        let body: serde_json::Value = serde_json::from_slice(&first.payload).unwrap();
        assert_eq!(body["slots"].as_array().unwrap().len(), 2, "{body}");
        assert_eq!(
            second.header.status,
            Status::Busy,
            "seed {seed}: concurrent"
        );
        let targets: Vec<Target> = w.driver().slot_targets().iter().map(|t| t.0).collect();
        assert_eq!(
            targets,
            vec![
                Target::Builtin(ECHO),
                Target::Builtin(SPIN),
                Target::Builtin(MINMAX)
            ],
            "seed {seed}"
        );
        assert_eq!(
            answered_once(&mut w, &loaders, &[Status::Ok, Status::Busy], seed),
            sent,
            "seed {seed}: every call answered once"
        );
        // Tenant 2's module in slot 2: tenant 1 may not resize it away.
        let env = w.control_envelope(
            2,
            b"tenant-two-key-0",
            50,
            &Op::Swap {
                slot: 2,
                target: MODULE,
            },
        );
        let h = RequestHeader::single(50, offrac_proto::FN_CONTROL, 0, env.len() as u32);
        let mut b = h.encode().to_vec();
        b.extend(env);
        w.send(other, &b);
        assert_eq!(answer(&mut w, other, MS).header.status, Status::Ok);
        control(&mut w, ctl, &resize("spin3"), 6);
        let a = answer(&mut w, ctl, MS);
        assert_eq!((a.header.status, a.header.detail), (Status::BadInput, 2));
        assert_eq!(w.driver().slot_targets()[2].0, MODULE);
    });
}

/// The autoscaler replicates a function served by a tenant's module (not
/// only built-ins): the replica loads that module, counts toward the
/// tenant's slot quota, and a tenant at its quota gets none. Before, the
/// policy's decision for a module's id became a swap to a built-in of that
/// id, refused and counted as failed.
#[test]
fn the_autoscaler_replicates_a_module_within_its_tenants_quota() {
    // Unlimited: two or three replicas (the backlog of the first periods
    // may ask for a third); a quota of 2: slot 0 holds one, one replica.
    for (max_slots, want) in [(None, 2..=3), (Some(2), 1..=1)] {
        for_seeds(|seed| {
            let mut w = world(seed, |c| {
                slots(c, &[SPIN, ECHO, ECHO, ECHO], max_slots);
                autoscale(c, grows_only(), vec![1, 2, 3]);
                c.exec.fixed = vec![(SPIN, 200 * US), (140, 200 * US)];
            });
            let ctl = w.connect();
            let op = Op::Swap {
                slot: 0,
                target: MODULE,
            };
            control(&mut w, ctl, &op, 1);
            assert_eq!(answer(&mut w, ctl, MS).header.status, Status::Ok);
            // 10,000 calls/s of 200 µs: three slots' worth at ρ = 0.7.
            let loaders: Vec<usize> = (0..4).map(|_| w.connect()).collect();
            for &l in &loaders {
                hello(&mut w, l);
            }
            let end = w.now() + 80 * MS;
            let (mut id, mut t) = (0u64, w.now());
            while t < end {
                w.run_until(t);
                call(&mut w, loaders[id as usize % loaders.len()], id, 140);
                id += 1;
                t += 100 * US;
            }
            w.run_for(200 * MS);
            let (roles, stats) = w.driver().autoscale_view().expect("autoscaler");
            let replicas: Vec<usize> = (1..4)
                .filter(|&s| roles[s] == SlotRole::Replica(140))
                .collect();
            assert!(
                want.contains(&replicas.len()),
                "seed {seed} {max_slots:?}: {roles:?} {stats:?}"
            );
            for &s in &replicas {
                assert_eq!(w.driver().slot_targets()[s].0, MODULE, "seed {seed}");
            }
            if max_slots.is_none() {
                assert_eq!(stats.failed, 0, "seed {seed}: {stats:?}");
            } else {
                assert!(
                    stats.failed > 0,
                    "seed {seed}: the quota was hit: {stats:?}"
                );
            }
            // Every call answered once, OK or BUSY (a full queue).
            let allowed = [Status::Ok, Status::Busy];
            assert_eq!(
                answered_once(&mut w, &loaders, &allowed, seed),
                id,
                "seed {seed}"
            );
        });
    }
}

/// An operator's SWAP of a spare slot makes it the operator's: the
/// autoscaler sees it `Fixed` to its new function and does not take it for
/// a replica. Before, the slot kept the role `Spare` and the policy, with a
/// hot function, swapped the operator's function away.
#[test]
fn an_operators_swap_of_a_spare_slot_is_not_taken_back_as_spare() {
    for_seeds(|seed| {
        let mut w = world(seed, |c| {
            slots(c, &[SPIN, ECHO, ECHO], None);
            autoscale(c, grows_only(), vec![1, 2]);
            c.exec.fixed = vec![(SPIN, 200 * US), (ECHO, 10 * US)];
        });
        let ctl = w.connect();
        let op = Op::Swap {
            slot: 2,
            target: Target::Builtin(ECHO),
        };
        control(&mut w, ctl, &op, 1);
        assert_eq!(answer(&mut w, ctl, MS).header.status, Status::Ok);
        let roles = |w: &World| w.driver().autoscale_view().expect("autoscaler").0;
        assert_eq!(
            roles(&w),
            [
                SlotRole::Fixed(SPIN),
                SlotRole::Spare,
                SlotRole::Fixed(ECHO)
            ],
            "seed {seed}"
        );
        // SPIN three slots' worth of load for 80 ms: it may take slot 1 only.
        let caller = w.connect();
        let end = w.now() + 80 * MS;
        let (mut id, mut t) = (0u64, w.now());
        while t < end {
            w.run_until(t);
            call(&mut w, caller, id, SPIN);
            id += 1;
            t += 100 * US;
        }
        w.run_for(10 * MS);
        assert_eq!(
            roles(&w),
            [
                SlotRole::Fixed(SPIN),
                SlotRole::Replica(SPIN),
                SlotRole::Fixed(ECHO)
            ],
            "seed {seed}"
        );
        assert_eq!(w.driver().slot_targets()[2].0, Target::Builtin(ECHO));
        let echo = w.connect();
        call(&mut w, echo, 1, ECHO);
        w.run_for(MS);
        assert_eq!(
            w.drain_answers(echo)[0].header.status,
            Status::Ok,
            "seed {seed}"
        );
    });
}
