//! The node's TOML configuration and its translation to the engine's.

use crate::driver::{DriverConfig, PeerConfig};
use crate::spin_gate::SpinWhen;
use offrac_accel::dlrm::state::{check_borders, Dictionary};
use offrac_accel::FunctionState;
use offrac_core::{BufferPolicy, EngineConfig, SlotPolicy};
use offrac_proto::FunctionId;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// The configuration used when none is given.
pub const DEFAULT_CONFIG: &str = include_str!("../default.toml");

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot parse configuration: {0}")]
    Parse(#[from] toml::de::Error),
    #[error("unknown function {0:?} in [[slots]] (known: {known})", known = FunctionId::known_names())]
    UnknownFunction(String),
    #[error("[functions.{function}]: {message}")]
    BadFunctionState {
        function: &'static str,
        message: String,
    },
    #[error("io.mode must be \"poll\", \"yield\" or \"blocking\", not {0:?}")]
    BadIoMode(String),
    #[error("[[devices]] entry {id}: addr {addr:?} is not host:port")]
    BadDeviceAddr { id: u8, addr: String },
    #[error("[[devices]]: device {0} is listed twice")]
    DuplicateDevice(u8),
    #[error("[cluster]: {0}")]
    BadCluster(String),
    #[error("[control]: {0}")]
    BadControl(String),
    #[error("[autoscale]: {0}")]
    BadAutoscale(String),
    #[error("[collectives]: {0}")]
    BadCollectives(String),
    #[error(transparent)]
    Engine(#[from] offrac_core::ConfigError),
    #[error("[[attach]]: {0}")]
    Attach(#[from] crate::attach::AttachConfigError),
}

/// The I/O thread's gate on spinning (`[io] spin_when`): poll only while a
/// CPU is free. With two busy threads more than CPUs, polling nodes took
/// 0.20-0.81x the time per small collective with the gate than without
/// (docs/results.md, "Polling while a CPU is free").
pub const DEFAULT_IO_SPIN_WHEN: SpinWhen = SpinWhen::CpuIdle;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// Busy-poll for up to `spin_us` of idleness before sleeping.
    Poll,
    /// Sleep in the kernel whenever there is nothing to do.
    Blocking,
    /// For up to `spin_us` of idleness, poll (`epoll_wait` with no
    /// timeout) and give the core away (`sched_yield`) between empty
    /// polls, as MPI ranks with `mpi_yield_when_idle` do; then sleep. A
    /// message that lands meanwhile is seen without a kernel wake-up, and
    /// the other threads on a shared core still run.
    Yield,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    device_id: u8,
    max_payload: Option<u64>,
    #[serde(default = "default_stall")]
    stall_timeout_ms: u64,
    #[serde(default = "default_reassembly")]
    reassembly_timeout_ms: u64,
    #[serde(default = "default_reassembly_rate")]
    reassembly_min_rate: u64,
    #[serde(default = "default_grace")]
    shutdown_grace_ms: u64,
    #[serde(default = "default_linger")]
    close_linger_ms: u64,
    #[serde(default = "default_forward_timeout")]
    forward_timeout_ms: u64,
    #[serde(default)]
    devices: Vec<RawDevice>,
    cluster: Option<RawCluster>,
    #[serde(default)]
    io: RawIo,
    #[serde(default)]
    metrics: RawMetrics,
    #[serde(default)]
    pool: RawPool,
    #[serde(default)]
    selector: RawSelector,
    slots: Option<Vec<RawSlot>>,
    #[serde(default)]
    functions: RawFunctions,
    #[serde(default)]
    attach: Vec<crate::attach::RawAttach>,
    control: Option<RawControl>,
    autoscale: Option<RawAutoscale>,
    collectives: Option<RawCollectives>,
    #[serde(default)]
    named_buffers: RawNamedBuffers,
}

/// `[named_buffers]`: the node's budget for named buffers (`docs/protocol.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNamedBuffers {
    #[serde(default = "default_named_buffer_bytes")]
    max_bytes: u64,
}

impl Default for RawNamedBuffers {
    fn default() -> RawNamedBuffers {
        RawNamedBuffers {
            max_bytes: default_named_buffer_bytes(),
        }
    }
}

fn default_named_buffer_bytes() -> u64 {
    offrac_core::DEFAULT_BUFFER_BUDGET
}

/// `[autoscale]`: the autoscaler (`docs/control.md`); spare slots are the
/// `[[slots]]` entries with `spare = true`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAutoscale {
    #[serde(default = "default_autoscale_period")]
    period_ms: u64,
    target_utilisation: Option<f64>,
    grow_periods: Option<u32>,
    shrink_periods: Option<u32>,
    max_step: Option<usize>,
}

fn default_autoscale_period() -> u64 {
    1_000
}

fn autoscale_settings(
    raw: Option<RawAutoscale>,
    slots: &[SlotSettings],
) -> Result<Option<crate::driver::AutoscaleSettings>, ConfigError> {
    let spare: Vec<usize> = (0..slots.len()).filter(|&i| slots[i].spare).collect();
    let Some(raw) = raw else {
        if spare.is_empty() {
            return Ok(None);
        }
        return Err(ConfigError::BadAutoscale(
            "[[slots]] with spare = true need an [autoscale] section".into(),
        ));
    };
    if spare.is_empty() {
        return Err(ConfigError::BadAutoscale(
            "no spare slot to load replicas into: mark [[slots]] entries spare = true".into(),
        ));
    }
    if raw.period_ms == 0 {
        return Err(ConfigError::BadAutoscale(
            "period_ms must be at least 1".into(),
        ));
    }
    let d = offrac_control::AutoscaleConfig::default();
    let policy = offrac_control::AutoscaleConfig {
        target_utilisation: raw.target_utilisation.unwrap_or(d.target_utilisation),
        grow_periods: raw.grow_periods.unwrap_or(d.grow_periods),
        shrink_periods: raw.shrink_periods.unwrap_or(d.shrink_periods),
        max_step: raw.max_step.unwrap_or(d.max_step),
    };
    offrac_control::Autoscaler::new(policy.clone(), Vec::new())
        .map_err(|e| ConfigError::BadAutoscale(e.to_string()))?;
    Ok(Some(crate::driver::AutoscaleSettings {
        policy,
        period: Duration::from_millis(raw.period_ms),
        spare,
    }))
}

/// `[collectives]`: thresholds and limits of collectives (`docs/collectives.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCollectives {
    eager_max_bytes: Option<usize>,
    segment_bytes: Option<usize>,
    ring_min_bytes: Option<usize>,
    tree_min_ranks: Option<usize>,
    tree_min_bytes: Option<usize>,
    timeout_ms: Option<u64>,
    max_timeout_ms: Option<u64>,
    early_max_bytes: Option<usize>,
    max_work_bytes: Option<usize>,
    ack_window: Option<usize>,
}

fn collective_settings(
    raw: Option<RawCollectives>,
    max_payload: u64,
) -> Result<offrac_collective::Config, ConfigError> {
    let mut c = offrac_collective::Config::default();
    let Some(r) = raw else {
        c.segment_bytes = c.segment_bytes.min(max_payload as usize - 64);
        return Ok(c);
    };
    let t = &mut c.thresholds;
    t.ring_min_bytes = r.ring_min_bytes.unwrap_or(t.ring_min_bytes);
    t.tree_min_ranks = r.tree_min_ranks.unwrap_or(t.tree_min_ranks);
    t.tree_min_bytes = r.tree_min_bytes.unwrap_or(t.tree_min_bytes);
    c.eager_max_bytes = r.eager_max_bytes.unwrap_or(c.eager_max_bytes);
    c.segment_bytes = r
        .segment_bytes
        .unwrap_or(c.segment_bytes.min(max_payload as usize - 64));
    if let Some(ms) = r.timeout_ms {
        c.default_timeout = Duration::from_millis(ms);
    }
    if let Some(ms) = r.max_timeout_ms {
        c.max_timeout = Duration::from_millis(ms);
    }
    c.early_max_bytes = r.early_max_bytes.unwrap_or(c.early_max_bytes);
    c.max_work_bytes = r.max_work_bytes.unwrap_or(c.max_work_bytes);
    c.ack_window = r.ack_window.unwrap_or(c.ack_window);
    if c.ack_window == 0 {
        return Err(ConfigError::BadCollectives(
            "ack_window must be at least 1 (1: every node-to-node message is answered)".into(),
        ));
    }
    if c.segment_bytes < 4 || c.segment_bytes as u64 + 64 > max_payload {
        return Err(ConfigError::BadCollectives(format!(
            "segment_bytes {} must be at least 4 and fit a request with its 64-byte descriptor (max_payload {max_payload})",
            c.segment_bytes
        )));
    }
    Ok(c)
}

/// `[control]`: the control plane (`docs/control.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawControl {
    state_dir: Option<String>,
    window_ms: Option<u64>,
    drain_timeout_ms: Option<u64>,
    max_module_bytes: Option<usize>,
    fuel: Option<u64>,
    max_memory_bytes: Option<usize>,
    #[serde(default)]
    tenants: Vec<RawTenant>,
    /// The cluster's node key (hex): links between nodes say a hello with it.
    node_key: Option<String>,
    /// "allow" (default) or "refuse" data requests of connections without a hello.
    anonymous: Option<String>,
    /// DRR credit per round of a weight-1 tenant.
    quantum_us: Option<u64>,
    /// Weight and quotas of the anonymous class.
    anonymous_weight: Option<u32>,
    anonymous_max_inflight: Option<u32>,
    anonymous_max_pool_bytes: Option<u64>,
    anonymous_max_buffer_bytes: Option<u64>,
    /// Named slot arrangements RESIZE moves the node to.
    #[serde(default)]
    templates: Vec<RawTemplate>,
}

/// `[[control.templates]]`: a named slot arrangement (OffRAC App. F's
/// nested-reconfiguration templates): one built-in per slot.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTemplate {
    name: String,
    slots: Vec<String>,
}

/// `[[control.tenants]]`: a tenant's id and HMAC-SHA256 key (hex).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    id: u16,
    key: String,
    weight: Option<u32>,
    max_inflight: Option<u32>,
    max_pool_bytes: Option<u64>,
    max_slots: Option<u32>,
    max_buffer_bytes: Option<u64>,
}

fn control_settings(raw: Option<RawControl>) -> Result<crate::ControlSettings, ConfigError> {
    let mut c = crate::ControlSettings::default();
    let Some(raw) = raw else {
        return Ok(c);
    };
    c.state_dir = raw.state_dir.map(Into::into);
    c.window_ms = raw.window_ms.unwrap_or(c.window_ms);
    c.drain_timeout_ms = raw.drain_timeout_ms.unwrap_or(c.drain_timeout_ms);
    c.max_module_bytes = raw.max_module_bytes.unwrap_or(c.max_module_bytes);
    c.fuel = raw.fuel.unwrap_or(c.fuel);
    c.max_memory_bytes = raw.max_memory_bytes.unwrap_or(c.max_memory_bytes);
    let bad = |m: String| ConfigError::BadControl(m);
    for t in raw.templates {
        if t.name.is_empty() || t.name.len() > offrac_control::wire::MAX_TEMPLATE_NAME {
            return Err(bad(format!(
                "template {:?}: a name is 1 to {} bytes",
                t.name,
                offrac_control::wire::MAX_TEMPLATE_NAME
            )));
        }
        let functions = t
            .slots
            .iter()
            .map(|n| {
                FunctionId::from_name(n)
                    .map(|f| f.id())
                    .ok_or_else(|| bad(format!("template {:?}: no built-in {n:?}", t.name)))
            })
            .collect::<Result<Vec<u8>, _>>()?;
        if c.templates.iter().any(|(n, _)| *n == t.name) {
            return Err(bad(format!("template {:?} is listed twice", t.name)));
        }
        c.templates.push((t.name, functions));
    }
    c.tenancy.refuse_anonymous = match raw.anonymous.as_deref() {
        None | Some("allow") => false,
        Some("refuse") => true,
        Some(o) => return Err(bad(format!("anonymous = {o:?}: \"allow\" or \"refuse\""))),
    };
    if let Some(q) = raw.quantum_us {
        c.tenancy.quantum_ns = q.max(1) * 1000;
    }
    let policy = |id: &str, w: Option<u32>, i: Option<u32>, p: Option<u64>, b: Option<u64>| {
        if w == Some(0) {
            return Err(bad(format!("{id}: weight must be at least 1")));
        }
        Ok(offrac_core::TenantPolicy {
            weight: w.unwrap_or(1),
            max_inflight: i,
            max_pool_bytes: p,
            max_slots: None,
            max_buffer_bytes: b,
        })
    };
    c.tenancy.anonymous = policy(
        "anonymous",
        raw.anonymous_weight,
        raw.anonymous_max_inflight,
        raw.anonymous_max_pool_bytes,
        raw.anonymous_max_buffer_bytes,
    )?;
    if let Some(k) = &raw.node_key {
        let key = hex::decode(k)
            .ok()
            .filter(|k| k.len() >= 16)
            .ok_or_else(|| bad("node_key must be at least 16 bytes of hex".into()))?;
        c.node_key = Some(key);
        c.tenancy.authenticated_links = true;
    }
    for t in raw.tenants {
        if t.id == offrac_proto::TENANT_NODE {
            return Err(bad(format!(
                "tenant id {} is reserved for the nodes' own hellos",
                t.id
            )));
        }
        let p = policy(
            &format!("tenant {}", t.id),
            t.weight,
            t.max_inflight,
            t.max_pool_bytes,
            t.max_buffer_bytes,
        )?;
        c.tenancy.tenants.insert(
            t.id,
            offrac_core::TenantPolicy {
                max_slots: t.max_slots,
                ..p
            },
        );
        let key = hex::decode(&t.key)
            .ok()
            .filter(|k| k.len() >= 16)
            .ok_or_else(|| {
                ConfigError::BadControl(format!(
                    "tenant {}: key must be at least 16 bytes of hex",
                    t.id
                ))
            })?;
        if c.keys.insert(t.id, key).is_some() {
            return Err(ConfigError::BadControl(format!(
                "tenant {} is listed twice",
                t.id
            )));
        }
    }
    Ok(c)
}

/// `[functions.NAME]`: the state of the functions that hold some
/// (`SlotState` in the registry).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFunctions {
    mapid: Option<RawMapId>,
    bucketize: Option<RawBucketize>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMapId {
    /// A file of keys, one per line in hex (Criteo's form, `0x` optional).
    dictionary: Option<String>,
    /// Or the keys inline.
    keys: Option<Vec<u32>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBucketize {
    borders: Vec<Vec<f32>>,
}

fn default_stall() -> u64 {
    EngineConfig::default().stall_timeout.as_millis() as u64
}
fn default_reassembly() -> u64 {
    EngineConfig::default().reassembly_timeout.as_millis() as u64
}
fn default_reassembly_rate() -> u64 {
    EngineConfig::default().reassembly_min_rate
}
fn default_grace() -> u64 {
    DriverConfig::new(Vec::new()).shutdown_grace.as_millis() as u64
}
fn default_linger() -> u64 {
    DriverConfig::new(Vec::new()).close_linger.as_millis() as u64
}
fn default_forward_timeout() -> u64 {
    DriverConfig::new(Vec::new()).forward_timeout.as_millis() as u64
}

/// The cluster store: nodes register there and learn the others.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    etcd: Vec<String>,
    #[serde(default = "default_prefix")]
    prefix: String,
    #[serde(default = "default_lease")]
    lease_ttl_s: i64,
    advertise: Option<String>,
}
fn default_prefix() -> String {
    offrac_cluster::DEFAULT_PREFIX.to_string()
}
fn default_lease() -> i64 {
    5
}

/// What the TOML says about the cluster store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    pub store: offrac_cluster::ClusterConfig,
    /// The address other nodes reach this one at (default: the listen address).
    pub advertise: Option<String>,
}

/// One row of the device table: a peer node chain hops can be forwarded to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    id: u8,
    addr: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawIo {
    mode: String,
    spin_us: u64,
    spin_when: SpinWhen,
    worker_spin_us: u64,
}
impl Default for RawIo {
    fn default() -> Self {
        RawIo {
            mode: "poll".into(),
            spin_us: 100,
            spin_when: DEFAULT_IO_SPIN_WHEN,
            worker_spin_us: 0,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawMetrics {
    listen: String,
}
impl Default for RawMetrics {
    fn default() -> Self {
        RawMetrics {
            listen: "127.0.0.1:0".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawPool {
    buffers: usize,
    buffer_bytes: u64,
    policy: BufferPolicy,
    small_request_max: u64,
    small_queue_bytes: u64,
}
impl Default for RawPool {
    fn default() -> Self {
        let e = EngineConfig::default();
        RawPool {
            buffers: e.buffers,
            buffer_bytes: e.buffer_bytes,
            policy: e.buffer_policy,
            small_request_max: e.small_request_max,
            small_queue_bytes: e.small_queue_bytes,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawSelector {
    policy: SlotPolicy,
    slot_queue_bytes: u64,
}
impl Default for RawSelector {
    fn default() -> Self {
        let e = EngineConfig::default();
        RawSelector {
            policy: e.slot_policy,
            slot_queue_bytes: e.slot_queue_bytes,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSlot {
    function: String,
    inline_max_bytes: Option<usize>,
    queue_depth: Option<usize>,
    #[serde(default)]
    spare: bool,
}

/// A validated node configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    pub engine: EngineConfig,
    pub io_mode: IoMode,
    pub spin_us: u64,
    /// Whether the I/O thread may spin inside `spin_us` only while a CPU
    /// would otherwise idle, or always.
    pub spin_when: SpinWhen,
    /// How long an idle slot worker busy-polls its queue before sleeping (poll mode only).
    pub worker_spin_us: u64,
    /// Where to serve metrics, if anywhere.
    pub metrics_listen: Option<String>,
    /// On shutdown, how long held work may still run before what is still
    /// queued is answered `SHUTTING_DOWN`.
    pub shutdown_grace_ms: u64,
    /// How long a closed connection lingers for its peer to read the last answer.
    pub close_linger_ms: u64,
    /// A hop forwarded to a peer with no answer this long is answered `TIMEOUT`.
    pub forward_timeout_ms: u64,
    /// The device table: peers chain hops can be forwarded to.
    pub devices: Vec<PeerConfig>,
    /// Register in a cluster store and learn the other nodes from it.
    pub cluster: Option<ClusterSettings>,
    /// One per slot, in slot order (the engine's `slots` lists their functions).
    pub slots: Vec<SlotSettings>,
    /// What the functions hold (MapId's dictionary, Bucketize's borders).
    pub state: FunctionState,
    /// Addresses the node fronts for a real server (`[[attach]]`, docs/inline.md).
    pub attach: Vec<crate::attach::AttachConfig>,
    /// The control plane: tenants' keys, the library's state directory, limits.
    pub control: crate::ControlSettings,
    /// The autoscaler, when `[autoscale]` is given.
    pub autoscale: Option<crate::driver::AutoscaleSettings>,
    /// Collectives across the device table: thresholds and limits.
    pub collectives: offrac_collective::Config,
    /// `[named_buffers] max_bytes`: what the node's named buffers may keep.
    pub named_buffer_bytes: u64,
}

/// Reads a MapId key file: one hex key per line (`a73ee510` or
/// `0xa73ee510`), blank lines and `#` comments ignored.
pub fn read_key_file(path: &str) -> Result<Vec<u32>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path:?}: {e}"))?;
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.split('#').next().unwrap_or("").trim();
        if t.is_empty() {
            continue;
        }
        let h = t
            .strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .unwrap_or(t);
        keys.push(
            u32::from_str_radix(h, 16)
                .map_err(|_| format!("{path}:{}: {t:?} is not a 32-bit hex key", i + 1))?,
        );
    }
    Ok(keys)
}

fn function_state(raw: &RawFunctions) -> Result<FunctionState, ConfigError> {
    let mut state = FunctionState::default();
    if let Some(m) = &raw.mapid {
        let bad = |message: String| ConfigError::BadFunctionState {
            function: "mapid",
            message,
        };
        let keys = match (&m.dictionary, &m.keys) {
            (Some(path), None) => read_key_file(path).map_err(bad)?,
            (None, Some(keys)) => keys.clone(),
            _ => {
                return Err(bad(
                    "give exactly one of dictionary = FILE or keys = [...]".into()
                ))
            }
        };
        if keys.is_empty() {
            return Err(bad("the dictionary holds no key".into()));
        }
        state.dictionary = Arc::new(Dictionary::from_keys(keys));
    }
    if let Some(b) = &raw.bucketize {
        for (i, set) in b.borders.iter().enumerate() {
            check_borders(set).map_err(|m| ConfigError::BadFunctionState {
                function: "bucketize",
                message: format!("border set {i}: {m}"),
            })?;
        }
        if b.borders.is_empty() {
            return Err(ConfigError::BadFunctionState {
                function: "bucketize",
                message: "borders lists no set".into(),
            });
        }
        state.borders = Arc::new(b.borders.clone());
    }
    Ok(state)
}

/// What the TOML says about one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotSettings {
    pub function: FunctionId,
    /// Run requests up to this many bytes on the I/O thread (`None`: the
    /// function's own default, see `Accelerator::inline_max_bytes`).
    pub inline_max_bytes: Option<usize>,
    /// Most requests waiting in the slot's queue besides the running one
    /// (`None`: bounded by `selector.slot_queue_bytes` only).
    pub queue_depth: Option<usize>,
    /// A spare slot of the autoscaler: it serves nothing until a replica
    /// is loaded into it.
    pub spare: bool,
}

fn cluster_settings(raw: RawCluster) -> Result<ClusterSettings, ConfigError> {
    if raw.etcd.is_empty() {
        return Err(ConfigError::BadCluster("etcd lists no endpoint".into()));
    }
    if raw.lease_ttl_s < 1 {
        return Err(ConfigError::BadCluster(
            "lease_ttl_s must be at least 1".into(),
        ));
    }
    if !raw.prefix.starts_with('/') {
        return Err(ConfigError::BadCluster(format!(
            "prefix {:?} must start with '/'",
            raw.prefix
        )));
    }
    Ok(ClusterSettings {
        store: offrac_cluster::ClusterConfig {
            endpoints: raw.etcd,
            prefix: raw.prefix,
            lease_ttl_s: raw.lease_ttl_s,
        },
        advertise: raw.advertise,
    })
}

impl NodeConfig {
    pub fn parse(text: &str) -> Result<NodeConfig, ConfigError> {
        let raw: Raw = toml::from_str(text)?;
        // No [[slots]]: one slot per built-in function.
        let slot_settings = match &raw.slots {
            Some(list) => list
                .iter()
                .map(|s| {
                    let function = FunctionId::from_name(&s.function)
                        .ok_or_else(|| ConfigError::UnknownFunction(s.function.clone()))?;
                    Ok(SlotSettings {
                        function,
                        inline_max_bytes: s.inline_max_bytes,
                        queue_depth: s.queue_depth.or(function.default_queue_depth()),
                        spare: s.spare,
                    })
                })
                .collect::<Result<Vec<_>, ConfigError>>()?,
            None => FunctionId::ALL
                .iter()
                .map(|&function| SlotSettings {
                    function,
                    inline_max_bytes: None,
                    queue_depth: function.default_queue_depth(),
                    spare: false,
                })
                .collect(),
        };
        let slots = slot_settings.iter().map(|s| s.function.id()).collect();
        let io_mode = match raw.io.mode.as_str() {
            "poll" => IoMode::Poll,
            "blocking" => IoMode::Blocking,
            "yield" => IoMode::Yield,
            other => return Err(ConfigError::BadIoMode(other.into())),
        };
        let engine = EngineConfig {
            buffers: raw.pool.buffers,
            buffer_bytes: raw.pool.buffer_bytes,
            buffer_policy: raw.pool.policy,
            max_payload: raw.max_payload.unwrap_or(raw.pool.buffer_bytes),
            small_request_max: raw.pool.small_request_max,
            small_queue_bytes: raw.pool.small_queue_bytes,
            slot_policy: raw.selector.policy,
            slot_queue_bytes: raw.selector.slot_queue_bytes,
            stall_timeout: Duration::from_millis(raw.stall_timeout_ms),
            reassembly_timeout: Duration::from_millis(raw.reassembly_timeout_ms),
            reassembly_min_rate: raw.reassembly_min_rate,
            slots,
            slot_queue_depths: slot_settings.iter().map(|s| s.queue_depth).collect(),
            device_id: raw.device_id,
            peers: raw.devices.iter().map(|d| d.id).collect(),
        };
        let mut seen = [false; 256];
        for d in &raw.devices {
            if std::mem::replace(&mut seen[d.id as usize], true) {
                return Err(ConfigError::DuplicateDevice(d.id));
            }
            let port_ok = d
                .addr
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !port_ok {
                return Err(ConfigError::BadDeviceAddr {
                    id: d.id,
                    addr: d.addr.clone(),
                });
            }
        }
        engine.validate()?;
        let collectives = collective_settings(raw.collectives, engine.max_payload)?;
        let metrics_listen = Some(raw.metrics.listen).filter(|s| !s.is_empty());
        let autoscale = autoscale_settings(raw.autoscale, &slot_settings)?;
        let control = control_settings(raw.control)?;
        if let Some((name, f)) = control
            .templates
            .iter()
            .find(|(_, f)| f.len() != slot_settings.len())
        {
            return Err(ConfigError::BadControl(format!(
                "template {name:?} names {} slots, the node has {}",
                f.len(),
                slot_settings.len()
            )));
        }
        Ok(NodeConfig {
            engine,
            io_mode,
            spin_us: raw.io.spin_us,
            spin_when: raw.io.spin_when,
            worker_spin_us: raw.io.worker_spin_us,
            metrics_listen,
            shutdown_grace_ms: raw.shutdown_grace_ms,
            close_linger_ms: raw.close_linger_ms,
            forward_timeout_ms: raw.forward_timeout_ms,
            devices: raw
                .devices
                .iter()
                .map(|d| PeerConfig {
                    device: d.id,
                    addr: d.addr.clone(),
                })
                .collect(),
            cluster: raw.cluster.map(cluster_settings).transpose()?,
            slots: slot_settings,
            state: function_state(&raw.functions)?,
            attach: raw
                .attach
                .into_iter()
                .map(|a| a.validate())
                .collect::<Result<_, _>>()?,
            control,
            autoscale,
            collectives,
            named_buffer_bytes: raw.named_buffers.max_bytes,
        })
    }

    pub fn default_config() -> NodeConfig {
        NodeConfig::parse(DEFAULT_CONFIG).expect("embedded default configuration is valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_hosts_every_builtin_function() {
        let c = NodeConfig::default_config();
        let all: Vec<u8> = FunctionId::ALL.iter().map(|f| f.id()).collect();
        assert_eq!(c.engine.slots, all);
        assert_eq!(c.io_mode, IoMode::Poll);
        assert_eq!(c.engine.max_payload, c.engine.buffer_bytes);
    }

    #[test]
    fn cnn_slots_get_a_short_queue_unless_configured() {
        let c = NodeConfig::parse(
            "[[slots]]\nfunction = \"cnn\"\n[[slots]]\nfunction = \"cnn\"\nqueue_depth = 9\n\
             [[slots]]\nfunction = \"topk\"\n",
        )
        .unwrap();
        assert_eq!(c.engine.slot_queue_depths, [Some(4), Some(9), None]);
        let zero = NodeConfig::parse("[[slots]]\nfunction = \"topk\"\nqueue_depth = 0\n");
        assert!(
            matches!(
                zero,
                Err(ConfigError::Engine(
                    offrac_core::ConfigError::ZeroQueueDepth(0)
                ))
            ),
            "{zero:?}"
        );
    }

    #[test]
    fn ack_window_is_read_and_zero_is_refused() {
        let c = NodeConfig::parse("[collectives]\nack_window = 4\n").unwrap();
        assert_eq!(c.collectives.ack_window, 4);
        let d = NodeConfig::parse("").unwrap();
        assert_eq!(d.collectives.ack_window, 16);
        let zero = NodeConfig::parse("[collectives]\nack_window = 0\n");
        assert!(
            matches!(&zero, Err(ConfigError::BadCollectives(m)) if m.contains("ack_window")),
            "{zero:?}"
        );
    }

    #[test]
    fn empty_file_means_defaults() {
        let c = NodeConfig::parse("").unwrap();
        assert_eq!(c.engine.slots.len(), FunctionId::ALL.len());
    }

    #[test]
    fn the_embedded_default_file_says_exactly_the_defaults() {
        // The file documents the defaults; the code owns them. They must agree.
        let file = NodeConfig::default_config();
        let mut code = NodeConfig::parse("").unwrap();
        assert_eq!(file, code);
        assert_eq!(file.engine, EngineConfig::default());
        let d = DriverConfig::new(Vec::new());
        assert_eq!(
            Duration::from_millis(file.shutdown_grace_ms),
            d.shutdown_grace
        );
        assert_eq!(Duration::from_millis(file.close_linger_ms), d.close_linger);
        assert_eq!(
            Duration::from_millis(file.forward_timeout_ms),
            d.forward_timeout
        );
        // And it is not vacuous: a changed value is seen.
        code.engine.buffers += 1;
        assert_ne!(file, code);
    }

    #[test]
    fn policies_have_one_spelling() {
        let c = NodeConfig::parse("[pool]\npolicy = \"naive-rr\"\n[selector]\npolicy = \"jsq\"")
            .unwrap();
        assert_eq!(c.engine.buffer_policy, BufferPolicy::NaiveRr);
        assert_eq!(c.engine.slot_policy, SlotPolicy::Jsq);
        assert!(NodeConfig::parse("[pool]\npolicy = \"naive_rr\"").is_err());
        for p in BufferPolicy::ALL {
            assert_eq!(p.name().parse::<BufferPolicy>(), Ok(*p));
        }
    }

    #[test]
    fn function_state_is_read_and_checked() {
        let c = NodeConfig::parse("[functions.mapid]\nkeys = [5, 9]\n[functions.bucketize]\nborders = [[1.0, 2.0], [0.5]]").unwrap();
        assert_eq!(c.state.dictionary.lookup(9), 1);
        assert_eq!(c.state.dictionary.missing(), 2);
        assert_eq!(c.state.borders.len(), 2);
        let dir = std::env::temp_dir().join(format!("offrac-keys-{}", std::process::id()));
        std::fs::write(&dir, "# Criteo C9\na73ee510\n\n0x7e0ccccf  # second\n").unwrap();
        let text = format!(
            "[functions.mapid]\ndictionary = {:?}",
            dir.display().to_string()
        );
        let c = NodeConfig::parse(&text).unwrap();
        assert_eq!(c.state.dictionary.lookup(0xa73e_e510), 0);
        assert_eq!(c.state.dictionary.lookup(0x7e0c_cccf), 1);
        std::fs::write(&dir, "zz\n").unwrap();
        let e = NodeConfig::parse(&text).unwrap_err().to_string();
        assert!(e.contains(":1: \"zz\" is not a 32-bit hex key"), "{e}");
        std::fs::remove_file(&dir).ok();
        for (bad, want) in [
            (
                "[functions.bucketize]\nborders = [[2.0, 1.0]]",
                "border set 0: borders must be strictly ascending",
            ),
            ("[functions.bucketize]\nborders = []", "no set"),
            ("[functions.mapid]\n", "exactly one of"),
            ("[functions.mapid]\nkeys = []", "holds no key"),
            ("[functions.topk]\nk = 1", "topk"),
        ] {
            let e = NodeConfig::parse(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn errors_are_clear() {
        let e = NodeConfig::parse("[[slots]]\nfunction = \"fft\"").unwrap_err();
        assert!(e.to_string().contains("unknown function \"fft\""), "{e}");
        let e = NodeConfig::parse("bogus = 1").unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = NodeConfig::parse("max_payload = 5000000").unwrap_err();
        assert!(e.to_string().contains("exceeds pool.buffer_bytes"), "{e}");
        let e = NodeConfig::parse("[io]\nmode = \"turbo\"").unwrap_err();
        assert!(e.to_string().contains("turbo"), "{e}");
        let y = NodeConfig::parse("[io]\nmode = \"yield\"\nspin_us = 2000").expect("yield");
        assert_eq!((y.io_mode, y.spin_us), (IoMode::Yield, 2000));
        assert_eq!(y.spin_when, SpinWhen::CpuIdle, "the default");
        let a = NodeConfig::parse("[io]\nspin_when = \"always\"").expect("always");
        assert_eq!(a.spin_when, SpinWhen::Always);
        let e = NodeConfig::parse("[io]\nspin_when = \"often\"").unwrap_err();
        assert!(e.to_string().contains("often"), "{e}");
        let e = NodeConfig::parse("[[devices]]\nid = 3\naddr = \"10.0.0.2\"").unwrap_err();
        assert!(e.to_string().contains("not host:port"), "{e}");
        let two = "[[devices]]\nid = 3\naddr = \"a:1\"\n[[devices]]\nid = 3\naddr = \"b:1\"";
        let e = NodeConfig::parse(two).unwrap_err();
        assert!(e.to_string().contains("listed twice"), "{e}");
        let e = NodeConfig::parse("[[devices]]\nid = 0\naddr = \"a:1\"").unwrap_err();
        assert!(e.to_string().contains("own id"), "{e}");
    }

    #[test]
    fn the_node_key_and_its_reserved_tenant_id() {
        let key = "000102030405060708090a0b0c0d0e0f";
        let c = NodeConfig::parse(&format!("[control]\nnode_key = \"{key}\"")).unwrap();
        assert_eq!(c.control.node_key.as_deref().map(<[u8]>::len), Some(16));
        assert!(c.control.tenancy.authenticated_links);
        let e = NodeConfig::parse("[control]\nnode_key = \"0011\"").unwrap_err();
        assert!(e.to_string().contains("node_key"), "{e}");
        let reserved = format!("[[control.tenants]]\nid = 65535\nkey = \"{key}\"");
        let e = NodeConfig::parse(&format!("[control]\n{reserved}")).unwrap_err();
        assert!(e.to_string().contains("reserved"), "{e}");
    }

    #[test]
    fn templates_name_built_ins_for_every_slot() {
        let base = "[[slots]]\nfunction = \"echo\"\n[[slots]]\nfunction = \"logit\"\n[control]\n";
        let with = |t: &str| NodeConfig::parse(&format!("{base}{t}"));
        let ok = with("[[control.templates]]\nname = \"a\"\nslots = [\"topk\", \"spin\"]\n")
            .expect("valid template");
        assert_eq!(ok.control.templates, vec![("a".to_string(), vec![1, 5])]);
        for bad in [
            "[[control.templates]]\nname = \"a\"\nslots = [\"topk\"]\n",
            "[[control.templates]]\nname = \"a\"\nslots = [\"topk\", \"nope\"]\n",
            "[[control.templates]]\nname = \"\"\nslots = [\"topk\", \"spin\"]\n",
            "[[control.templates]]\nname = \"a\"\nslots = [\"echo\", \"echo\"]\n\
             [[control.templates]]\nname = \"a\"\nslots = [\"echo\", \"echo\"]\n",
        ] {
            assert!(
                matches!(with(bad), Err(ConfigError::BadControl(_))),
                "{bad}"
            );
        }
    }
}
