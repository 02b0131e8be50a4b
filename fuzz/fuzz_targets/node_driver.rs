//! The node's driver under arbitrary socket events: the random-fault
//! scenario of `offrac_sim::faults` (well-behaved clients beside stalling,
//! garbage, hanging-up and non-reading ones, with or without a shutdown),
//! every choice drawn from the fuzzer's input instead of a seeded generator.
//! The scenario checks: exactly one answer per request a well-behaved client
//! sent, none twice or unasked, none after the close, the node's unread
//! output bounded, the engine idle (or the shutdown finished) at the end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use offrac_fuzz::Draws;

fuzz_target!(|data: &[u8]| {
    let mut d = Draws::new(data);
    let seed = d.u64();
    let mut next = |m: u64| d.below(m);
    // Segments of at least 64 bytes: tinier ones cost seconds a run here
    // (the seeded test and the core_engine target cut streams anywhere).
    let out = offrac_sim::faults::run_scenario(seed, 64, &mut next);
    assert!(out.answers > 0 || out.requests == 0, "{out:?}");
});
