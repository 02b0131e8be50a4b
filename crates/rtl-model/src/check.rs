//! What of a node's configuration (`offrac serve --datapath rtl --config
//! FILE`) the Verilated instance can host. Its sizes are Verilog parameters,
//! fixed when it is built (`params.rs`); the function state (MapId's
//! dictionary, Bucketize's border sets) goes in through its configuration
//! ports at start-up. Everything else it cannot host is refused before it
//! starts, naming the setting and the limit.

use crate::params::{
    BUCKET_BORDERS_MAX, BUCKET_SETS_MAX, BUF_BYTES, BUF_COUNT, DEVICE_ID, HOSTED, MAPID_DICT_MAX,
    MAPID_TABLE_BITS, MAX_PAYLOAD, SLOT_FUNCS, SMALL_QUEUE_BYTES, SMALL_REQUEST_MAX,
};
use crate::RtlError;

/// The selector's policy (`[selector] policy`), which the instance takes at
/// reset on `cfg_slot_policy` (it is built with `SLOT_POLICY` 2, run time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SlotPolicy {
    /// Round robin over a function's slots (`cfg_slot_policy` 0).
    #[default]
    Rr,
    /// Join the shortest queue (`cfg_slot_policy` 1).
    Jsq,
}

impl SlotPolicy {
    /// The value of `cfg_slot_policy`.
    pub fn code(self) -> u8 {
        match self {
            SlotPolicy::Rr => 0,
            SlotPolicy::Jsq => 1,
        }
    }
}

/// The parts of a node configuration that matter to the RTL, as plain data
/// (the CLI fills it from `offrac_node::NodeConfig`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RtlSettings {
    pub device_id: u8,
    /// `[[devices]]`: the peers chain hops may be forwarded to.
    pub peers: Vec<u8>,
    /// `[[slots]]` in order: the function's id and name, and `spare`.
    pub slots: Vec<(u8, String, bool)>,
    /// `[selector] policy`.
    pub slot_policy: SlotPolicy,
    /// `[pool] buffers`, `buffer_bytes`, and `max_payload`.
    pub buffers: usize,
    pub buffer_bytes: u64,
    pub max_payload: u64,
    /// `[pool] small_request_max` and `small_queue_bytes` (the single-fragment FIFO's).
    pub small_request_max: u64,
    pub small_queue_bytes: u64,
    /// MapId's distinct keys in index order (the dictionary to load).
    pub dictionary: Vec<u32>,
    /// Bucketize's border sets (each already checked finite and ascending).
    pub borders: Vec<Vec<f32>>,
    /// Other sections the RTL has no counterpart for, by name, when given
    /// (`[[attach]]`, `[cluster]`, `[control]` tenants, `[autoscale]`).
    pub other: Vec<String>,
}

fn unsupported(setting: impl Into<String>, value: impl ToString, limit: String) -> RtlError {
    RtlError::Unsupported {
        setting: setting.into(),
        value: value.to_string(),
        limit,
    }
}

/// `HOSTED` by name, for the messages.
const HOSTED_NAMES: &str =
    "echo (0), topk (1), minmax (3), mapid (6), sparsetransform (7), bucketize (8)";

/// A hosted function's name, for the messages.
fn name_of(id: u8) -> &'static str {
    match id {
        0 => "echo",
        1 => "topk",
        3 => "minmax",
        6 => "mapid",
        7 => "sparsetransform",
        8 => "bucketize",
        _ => "?",
    }
}

/// The instance's slots by name (`SLOT_FUNCS`), for the messages.
fn slot_names() -> String {
    SLOT_FUNCS
        .iter()
        .map(|&f| name_of(f))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The slot mask (`cfg_slot_mask`: bit *i* for slot *i* of `SLOT_FUNCS`)
/// that hosts a node's `[[slots]]` (function id, name, `spare`, in order):
/// each configured slot takes the instance's next free slot of its
/// function, the others stay idle. Refused, naming what and why: a `spare`
/// slot, a function the instance lacks, more slots of a function than it
/// has, and a hosted function with no slot (the dispatcher's `HOSTED` is
/// fixed when it is built, so it would admit requests no slot runs).
pub fn slot_mask(slots: &[(u8, String, bool)]) -> Result<u32, RtlError> {
    let mut mask = 0u32;
    for (id, name, spare) in slots {
        if *spare {
            return Err(unsupported(
                format!("[[slots]] function {name:?} spare"),
                true,
                "the RTL's slots are chosen at reset from [[slots]]; a spare slot a function \
                 takes at run time is not built: leave spare out"
                    .into(),
            ));
        }
        if !HOSTED.contains(id) {
            return Err(unsupported(
                "[[slots]] function",
                format!("{name:?} ({id})"),
                format!("the RTL hosts only {HOSTED_NAMES}"),
            ));
        }
        let Some(free) =
            (0..SLOT_FUNCS.len()).find(|&i| SLOT_FUNCS[i] == *id && mask >> i & 1 == 0)
        else {
            let have = SLOT_FUNCS.iter().filter(|&&f| f == *id).count();
            let asked = slots.iter().filter(|s| s.0 == *id).count();
            return Err(unsupported(
                "[[slots]] function",
                format!("{name:?} {asked} times"),
                format!(
                    "the instance has {have} {name} slot{} (SLOT_FUNCS: {}), fixed when it is built",
                    if have == 1 { "" } else { "s" },
                    slot_names()
                ),
            ));
        };
        mask |= 1 << free;
    }
    if let Some(id) = HOSTED
        .iter()
        .find(|&&id| !(0..SLOT_FUNCS.len()).any(|i| SLOT_FUNCS[i] == id && mask >> i & 1 == 1))
    {
        return Err(unsupported(
            "[[slots]]",
            format!("without function {} ({id})", name_of(*id)),
            format!(
                "the RTL admits {HOSTED_NAMES} whatever the file says (HOSTED, fixed when it is \
                 built): list each at least once"
            ),
        ));
    }
    Ok(mask)
}

/// Whether the instance can host `s`: `Ok` with the warnings to log (what it
/// keeps its own way), or the first setting it cannot host.
pub fn check_settings(s: &RtlSettings) -> Result<Vec<String>, RtlError> {
    let mut warnings = Vec::new();
    if let Some(name) = s.other.first() {
        return Err(unsupported(
            name.clone(),
            "(given)",
            "the RTL request path has no such part; leave it out".into(),
        ));
    }
    if s.device_id != DEVICE_ID {
        return Err(unsupported(
            "device_id",
            s.device_id,
            format!("the instance's DEVICE_ID is {DEVICE_ID}, fixed when it is built"),
        ));
    }
    if let Some(p) = s.peers.first() {
        return Err(unsupported(
            "[[devices]] id",
            p,
            "the instance is built with no peers (PEERS 0): no forwarding".into(),
        ));
    }
    // Slots: each hosted function at least once, at most as many as the instance has.
    slot_mask(&s.slots)?;
    if s.buffers > BUF_COUNT {
        return Err(unsupported(
            "[pool] buffers",
            s.buffers,
            format!("the instance has BUF_COUNT {BUF_COUNT} reassembly buffers"),
        ));
    }
    if s.buffer_bytes > BUF_BYTES as u64 {
        return Err(unsupported(
            "[pool] buffer_bytes",
            s.buffer_bytes,
            format!("the instance's buffers hold BUF_BYTES {BUF_BYTES} bytes"),
        ));
    }
    if s.max_payload != MAX_PAYLOAD as u64 {
        return Err(unsupported(
            "max_payload",
            s.max_payload,
            format!(
                "the instance answers TOO_LARGE above MAX_PAYLOAD {MAX_PAYLOAD}, fixed when it is built: \
                 set max_payload = {MAX_PAYLOAD} (buffer_bytes at least that)"
            ),
        ));
    }
    if s.buffers < BUF_COUNT || s.buffer_bytes < BUF_BYTES as u64 {
        warnings.push(format!(
            "[pool] {} buffers of {} bytes: the RTL keeps its {BUF_COUNT} of {BUF_BYTES} (BUSY decisions may differ)",
            s.buffers, s.buffer_bytes
        ));
    }
    if s.small_request_max != SMALL_REQUEST_MAX as u64
        || s.small_queue_bytes != SMALL_QUEUE_BYTES as u64
    {
        warnings.push(format!(
            "[pool] small_request_max {} and small_queue_bytes {}: the RTL's single-fragment FIFO keeps              its {SMALL_REQUEST_MAX} and {SMALL_QUEUE_BYTES} (BUSY decisions may differ)",
            s.small_request_max, s.small_queue_bytes
        ));
    }
    if s.dictionary.len() > MAPID_DICT_MAX {
        return Err(unsupported(
            "[functions.mapid] dictionary",
            format!("{} distinct keys", s.dictionary.len()),
            format!(
                "MapId's table (MAPID_TABLE_BITS {MAPID_TABLE_BITS}: {} slots) holds at most {MAPID_DICT_MAX} distinct keys",
                1usize << MAPID_TABLE_BITS
            ),
        ));
    }
    if s.borders.len() > BUCKET_SETS_MAX {
        return Err(unsupported(
            "[functions.bucketize] borders",
            format!("{} sets", s.borders.len()),
            format!("Bucketize holds at most BUCKET_SETS_MAX {BUCKET_SETS_MAX} border sets"),
        ));
    }
    if let Some((i, set)) = s
        .borders
        .iter()
        .enumerate()
        .find(|(_, b)| b.len() > BUCKET_BORDERS_MAX)
    {
        return Err(unsupported(
            format!("[functions.bucketize] border set {i}"),
            format!("{} borders", set.len()),
            format!(
                "Bucketize holds at most BUCKET_BORDERS_MAX {BUCKET_BORDERS_MAX} borders a set"
            ),
        ));
    }
    Ok(warnings)
}
