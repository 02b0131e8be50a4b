//! The autoscaler under virtual time, in the node's own driver: a function
//! whose load outgrows its one slot gets replicas in the spare slots, the
//! `BUSY` refusals stop once they are there, every request is answered
//! exactly once through the swaps, and the replicas go back after the load
//! falls. Seeded like the other simulation tests (`OFFRAC_SIM_SEED=N`).

mod common;

use common::{for_seeds, world, ECHO, MS, SPIN};
use offrac_control::{AutoscaleConfig, SlotRole};
use offrac_node::AutoscaleSettings;
use offrac_proto::{RequestHeader, Status};
use offrac_sim::world::World;
use std::time::Duration;

const US: u64 = 1_000;

/// Open-loop requests to SPIN from `clients`, one every `gap` until `end`,
/// ids from `next_id` (their send times recorded in `sent`); returns the
/// next free id.
fn drive(
    w: &mut World,
    sent: &mut Vec<u64>,
    clients: &[usize],
    next_id: u64,
    gap: u64,
    end: u64,
) -> u64 {
    let mut id = next_id;
    let mut t = w.now();
    while t < end {
        w.run_until(t);
        assert_eq!(sent.len() as u64, id);
        sent.push(w.now());
        let c = clients[id as usize % clients.len()];
        let mut b = RequestHeader::single(id, SPIN, 0, 4).encode().to_vec();
        b.extend_from_slice(b"spin");
        w.send(c, &b);
        id += 1;
        t += gap;
    }
    id
}

/// The longest time from send to answer of the requests `ids`.
fn worst_latency(w: &World, clients: &[usize], sent: &[u64], ids: std::ops::Range<u64>) -> u64 {
    clients
        .iter()
        .flat_map(|&c| w.clients[c].answers.iter())
        .filter(|a| ids.contains(&a.header.request_id))
        .map(|a| a.at - sent[a.header.request_id as usize])
        .max()
        .unwrap_or(0)
}

#[test]
fn replicas_follow_the_load_and_nothing_is_lost() {
    for_seeds(|seed| {
        let mut w = world(seed, |c| {
            // One fixed SPIN slot and three spare ones (configured as echo).
            c.engine.slots = vec![SPIN, ECHO, ECHO, ECHO];
            c.engine.slot_queue_depths = vec![Some(8); 4];
            c.driver = offrac_node::DriverConfig::new(
                [SPIN, ECHO, ECHO, ECHO]
                    .iter()
                    .map(|&function| offrac_node::SlotConfig {
                        function,
                        inline_max_bytes: 0,
                    })
                    .collect(),
            );
            c.exec.fixed = vec![(SPIN, 200 * US)];
            c.driver.autoscale = Some(AutoscaleSettings {
                policy: AutoscaleConfig {
                    target_utilisation: 0.7,
                    grow_periods: 2,
                    shrink_periods: 4,
                    max_step: 2,
                },
                period: Duration::from_millis(10),
                spare: vec![1, 2, 3],
            });
        });
        let clients: Vec<usize> = (0..4).map(|_| w.connect()).collect();
        w.run_for(MS);
        let roles = |w: &World| w.driver().autoscale_view().expect("autoscaler runs").0;
        assert_eq!(
            roles(&w),
            [
                SlotRole::Fixed(SPIN),
                SlotRole::Spare,
                SlotRole::Spare,
                SlotRole::Spare
            ]
        );
        // 10,000 requests/s of 200 µs: two slots' worth, three at ρ = 0.7.
        let hot_end = w.now() + 150 * MS;
        let mut sent = Vec::new();
        let first_end = w.now() + 20 * MS;
        let first = drive(&mut w, &mut sent, &clients, 0, 100 * US, first_end);
        let calm_from = drive(
            &mut w,
            &mut sent,
            &clients,
            first,
            100 * US,
            hot_end - 50 * MS,
        );
        let hot_ids = drive(&mut w, &mut sent, &clients, calm_from, 100 * US, hot_end);
        w.run_for(5 * MS);
        let r = roles(&w);
        let replicas = r.iter().filter(|x| **x == SlotRole::Replica(SPIN)).count();
        assert_eq!(replicas, 2, "{r:?}");
        // Before the replicas (two periods of 10 ms) one slot falls behind:
        // the excess waits in the pool and latency grows to milliseconds;
        // with them it is back near the 200 µs of work.
        let before = worst_latency(&w, &clients, &sent, 0..first);
        let after = worst_latency(&w, &clients, &sent, calm_from..hot_ids);
        assert!(before > 5 * MS, "one slot alone: worst {before} ns");
        assert!(after < MS, "with replicas: worst {after} ns");
        // 500 requests/s: one slot is plenty; the replicas go back.
        let quiet_end = w.now() + 200 * MS;
        let total = drive(&mut w, &mut sent, &clients, hot_ids, 2 * MS, quiet_end);
        w.run_for(20 * MS);
        assert_eq!(
            roles(&w),
            [
                SlotRole::Fixed(SPIN),
                SlotRole::Spare,
                SlotRole::Spare,
                SlotRole::Spare
            ]
        );
        let (_, stats) = w.driver().autoscale_view().unwrap();
        // The backlog of the first periods may have asked for a third
        // replica for a while; whatever was loaded went back.
        assert!(stats.replicated >= 2, "{stats:?}");
        assert_eq!(stats.reclaimed, stats.replicated, "{stats:?}");
        assert_eq!(stats.failed, 0, "{stats:?}");
        // Every request answered exactly once, OK (or BUSY, were the pool full).
        for id in 0..total {
            let answers: Vec<Status> = clients
                .iter()
                .flat_map(|&c| w.answers_to(c, id))
                .map(|a| a.header.status)
                .collect();
            assert!(
                answers == [Status::Ok] || answers == [Status::Busy],
                "request {id}: {answers:?}"
            );
        }
    });
}
