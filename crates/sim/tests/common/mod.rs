//! Seeds, worlds and data shared by the simulation tests (each test crate
//! uses a part of it).
#![allow(dead_code)]

use offrac_collective::{Algorithm, Descriptor, Dtype, Members, Op};
use offrac_core::EngineConfig;
use offrac_proto::{FunctionId, RequestHeader, FN_COLLECTIVE};

pub const MS: u64 = 1_000_000;
pub const ECHO: u8 = FunctionId::Echo as u8;
pub const TOPK: u8 = FunctionId::TopK as u8;
pub const LOGIT: u8 = FunctionId::Logit as u8;
pub const MINMAX: u8 = FunctionId::MinMax as u8;
pub const SPIN: u8 = FunctionId::Spin as u8;
use offrac_node::PeerConfig;
use offrac_sim::world::{node_addr, World, WorldConfig};

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

/// `n` nodes, node `i` being device `i`, each with every other in its device
/// table (engine and driver), node `i`'s configuration adjusted by `tweak`.
pub fn cluster(seed: u64, n: usize, tweak: impl Fn(usize, &mut WorldConfig)) -> World {
    let cfgs = (0..n)
        .map(|i| {
            let mut e = EngineConfig {
                device_id: i as u8,
                ..EngineConfig::default()
            };
            e.peers = (0..n).filter(|&j| j != i).map(|j| j as u8).collect();
            let mut c = WorldConfig::new(e, seed);
            c.driver.peers = (0..n)
                .filter(|&j| j != i)
                .map(|j| PeerConfig {
                    device: j as u8,
                    addr: node_addr(j),
                })
                .collect();
            tweak(i, &mut c);
            c
        })
        .collect();
    World::cluster(cfgs).expect("valid configuration")
}

/// The functions run one after another, outside any node.
pub fn one_by_one(hops: &[(u8, u64)], payload: &[u8]) -> Vec<u8> {
    let mut data = payload.to_vec();
    for &(f, param) in hops {
        let f = FunctionId::from_id(f).expect("built-in");
        let mut out = Vec::new();
        offrac_accel::builtin(f)
            .run(param, &data, &mut out)
            .expect("valid input");
        data = out;
    }
    data
}

/// Deterministic pseudo-random floats in (0, 1) from `seed`.
pub fn floats(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = ((x >> 40) as f32 + 1.0) / (16_777_217.0);
            v.to_le_bytes()
        })
        .collect()
}

/// A broadcast call of `count` i32 from rank 0 of devices 0..`n`.
pub fn bcast_descriptor(
    tag: u64,
    n: usize,
    count: usize,
    algorithm: Algorithm,
    timeout_ms: u32,
) -> Descriptor {
    let devices: Vec<u8> = (0..n as u8).collect();
    Descriptor {
        algorithm,
        tag,
        timeout_ms,
        ..Descriptor::call(
            Op::Broadcast,
            Dtype::I32,
            count as u32,
            Members::of(&devices),
        )
    }
}

/// A client's collective request `id`: the descriptor with `flags` in byte
/// 7 (bit 0: the input is named buffer `param`), then `input`.
pub fn collective_request(
    id: u64,
    d: &Descriptor,
    flags: u8,
    param: u64,
    input: &[i32],
) -> Vec<u8> {
    let mut payload = d.encode().to_vec();
    payload[7] = flags;
    payload.extend(input.iter().flat_map(|x| x.to_le_bytes()));
    let mut b = RequestHeader::single(id, FN_COLLECTIVE, param, payload.len() as u32)
        .encode()
        .to_vec();
    b.extend(payload);
    b
}
