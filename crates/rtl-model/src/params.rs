// The parameters of the Verilated instance `offrac serve --datapath rtl` runs
// (docs/rtl.md, "The Verilated datapath"). build.rs passes them to Verilator
// and the crate checks a node configuration against them, so both read this
// one file (`include!`d by build.rs, a module of the crate).

/// Connections the instance keeps (`CONN_COUNT`): more than the buffers, so
/// that with every buffer held by a partial request a client can still send
/// a small request (the single-fragment FIFO's case).
pub const CONNECTIONS: usize = 32;
/// Reassembly buffers (`BUF_COUNT`): half the connections (a client gone in
/// the middle of a request gives its buffer back through its close, and a
/// small request needs none); the software's default is 4.
pub const BUF_COUNT: usize = 16;
/// Bytes per reassembly buffer (`BUF_BYTES`): the software's default `[pool] buffer_bytes`.
pub const BUF_BYTES: usize = 2 * 1024 * 1024;
/// The largest payload admitted (`MAX_PAYLOAD`); more is TOO_LARGE with this
/// as the detail: the software node's default `max_payload`.
pub const MAX_PAYLOAD: usize = 2 * 1024 * 1024;
/// Complete requests queued for the executor (`DESC_DEPTH`).
pub const DESC_DEPTH: usize = 16;
/// The single-fragment FIFO (`SMALL_MAX`): a request of at most this many
/// bytes with its header whose payload came in the read its header ended in
/// skips the pool, as the core's small-request queue does: the software's
/// default `[pool] small_request_max`.
pub const SMALL_REQUEST_MAX: usize = 1500;
/// Payload bytes the single-fragment FIFO holds (`SMALL_BYTES`; its ring is
/// a buffer's size, so at most `BUF_BYTES`): the software's default
/// `[pool] small_queue_bytes`.
pub const SMALL_QUEUE_BYTES: usize = 1024 * 1024;
/// The device id stamped on responses (`DEVICE_ID`).
pub const DEVICE_ID: u8 = 0;
/// Top-k's sorted array (`TOPK_K_MAX`): min(K, n) above it is UNSUPPORTED
/// (the software has no limit).
pub const TOPK_K_MAX: usize = 256;
/// MapId's hash table has 2^`MAPID_TABLE_BITS` slots and keeps at most half
/// of them as distinct keys.
pub const MAPID_TABLE_BITS: u32 = 16;
/// The most distinct keys MapId's table holds (`DICT_MAX`).
pub const MAPID_DICT_MAX: usize = 1 << (MAPID_TABLE_BITS - 1);
/// Bucketize's border sets (`BUCKET_SETS_MAX`) ...
pub const BUCKET_SETS_MAX: usize = 4;
/// ... of at most this many borders each (`BUCKET_BORDERS_MAX`).
pub const BUCKET_BORDERS_MAX: usize = 32;
/// The functions the top hosts (its `HOSTED` bitmap, the set of
/// [`SLOT_FUNCS`]): echo, top-k, min-max, MapId, SparseTransform, Bucketize.
pub const HOSTED: [u8; 6] = [0, 1, 3, 6, 7, 8];
/// The instance's slots (`SLOT_FUNCS`, slot *i*'s function): two top-k and
/// two echo slots, then one min-max, MapId, SparseTransform and Bucketize
/// slot (at most one MapId and one Bucketize: their state is loaded once).
/// Which of them run is chosen at reset by the slot mask (`cfg_slot_mask`)
/// from the node's `[[slots]]`; the others stay idle.
pub const SLOT_FUNCS: [u8; 8] = [1, 1, 0, 0, 3, 6, 7, 8];
/// The slot mask without a configuration file: the first slot of each
/// hosted function (one slot a function, as before the spare slots).
pub const DEFAULT_SLOT_MASK: u32 = 0b1111_0101;
/// The selector's policy is a run-time input (`SLOT_POLICY` 2): the node's
/// `[selector] policy` goes in on `cfg_slot_policy` at reset (0 RR, 1 JSQ),
/// as the slot mask does, so one build serves either.
pub const SLOT_POLICY_RUNTIME: u32 = 2;

/// The `-G` parameters Verilator gets for the top.
pub fn verilator_parameters() -> Vec<String> {
    vec![
        format!("-GCONN_COUNT={CONNECTIONS}"),
        format!("-GBUF_COUNT={BUF_COUNT}"),
        format!("-GBUF_BYTES={BUF_BYTES}"),
        format!("-GMAX_PAYLOAD={MAX_PAYLOAD}"),
        format!("-GDESC_DEPTH={DESC_DEPTH}"),
        format!("-GSMALL_MAX={SMALL_REQUEST_MAX}"),
        format!("-GSMALL_BYTES={SMALL_QUEUE_BYTES}"),
        format!("-GDEVICE_ID={DEVICE_ID}"),
        format!("-GTOPK_K_MAX={TOPK_K_MAX}"),
        format!("-GMAPID_TABLE_BITS={MAPID_TABLE_BITS}"),
        // MapId's result buffer takes the largest payload, as the other units' do
        format!("-GMAPID_MAX_BEATS={}", MAX_PAYLOAD / 64),
        format!("-GBUCKET_SETS_MAX={BUCKET_SETS_MAX}"),
        format!("-GBUCKET_BORDERS_MAX={BUCKET_BORDERS_MAX}"),
        format!("-GSLOT_COUNT={}", SLOT_FUNCS.len()),
        format!("-GSLOT_POLICY={SLOT_POLICY_RUNTIME}"),
        format!(
            "-GSLOT_FUNCS={}'h{}",
            8 * SLOT_FUNCS.len(),
            SLOT_FUNCS
                .iter()
                .rev()
                .map(|f| format!("{f:02x}"))
                .collect::<String>()
        ),
    ]
}
