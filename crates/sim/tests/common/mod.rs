//! Seeds and worlds shared by the simulation tests.

use offrac_core::EngineConfig;
use offrac_sim::world::{World, WorldConfig};

/// The seeds to run: 0..24, or the one in `OFFRAC_SIM_SEED` to replay a failure.
pub fn seeds() -> Vec<u64> {
    match std::env::var("OFFRAC_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("OFFRAC_SIM_SEED is a number")],
        Err(_) => (0..24).collect(),
    }
}

/// Run `f` for every seed; a failure says which seed to replay.
pub fn for_seeds(f: impl Fn(u64) + std::panic::RefUnwindSafe) {
    for seed in seeds() {
        if let Err(e) = std::panic::catch_unwind(|| f(seed)) {
            eprintln!("failed with seed {seed}: replay with OFFRAC_SIM_SEED={seed}");
            std::panic::resume_unwind(e);
        }
    }
}

/// A world of the default engine configuration, adjusted by `tweak`.
pub fn world(seed: u64, tweak: impl FnOnce(&mut WorldConfig)) -> World {
    let mut cfg = WorldConfig::new(EngineConfig::default(), seed);
    tweak(&mut cfg);
    World::new(cfg).expect("valid configuration")
}
