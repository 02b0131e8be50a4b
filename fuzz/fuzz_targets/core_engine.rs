//! The core engine under arbitrary event sequences — bytes of four
//! connections in any segmentation, completions, timeouts, closes, shutdown
//! and abort — checked by `offrac_core::oracle` (the same harness as the
//! property tests): every request leaves exactly once with an outcome its
//! function and size allow, no buffer or queue over-fills, every refusal is
//! counted, nothing is left behind.
#![no_main]

use libfuzzer_sys::fuzz_target;
use offrac_core::oracle::{small_config, Harness, Op};
use offrac_core::{BufferPolicy, SlotPolicy};
use offrac_fuzz::Draws;

const CONNS: u64 = 4;

fn op(d: &mut Draws) -> Op {
    match d.below(13) {
        0..=5 => Op::Bytes {
            conn: d.below(CONNS) as usize,
            n: 1 + d.below(3000) as usize,
        },
        6..=8 => Op::Done {
            slot: d.below(4) as usize,
        },
        9 => Op::Tick {
            dt: d.below(2_000_000),
        },
        10 => Op::Close {
            conn: d.below(CONNS) as usize,
        },
        11 => Op::Shutdown,
        _ => match d.below(4) {
            0 => Op::Abort,
            _ => Op::Tick { dt: 0 },
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let mut d = Draws::new(data);
    let bp = [
        BufferPolicy::NaiveRr,
        BufferPolicy::EligibleRr,
        BufferPolicy::Jsb,
    ][d.below(3) as usize];
    let sp = [SlotPolicy::Rr, SlotPolicy::Jsq][d.below(2) as usize];
    let small = d.below(2) == 1;
    let owners = match d.below(3) {
        0 => None,
        1 => Some(vec![Some(0u8), Some(1), Some(2)]),
        _ => Some(vec![Some(1u8), None, Some(0)]),
    };
    let reqs: Vec<Vec<(u8, u32)>> = (0..CONNS)
        .map(|_| {
            (0..d.below(12))
                .map(|_| ([0u8, 1, 2, 9][d.below(4) as usize], d.below(2600) as u32))
                .collect()
        })
        .collect();
    let mut h = Harness::with_owners(small_config(bp, sp, small), owners, reqs);
    let mut ops = 0;
    while !d.is_empty() && ops < 400 {
        h.apply(&op(&mut d));
        ops += 1;
    }
    h.finish();
    h.check_outcomes();
});
