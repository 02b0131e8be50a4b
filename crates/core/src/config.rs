use serde::Deserialize;
use std::time::Duration;

/// How a new request's first segment picks a reassembly buffer (OffRAC §3.4).
/// Spelled `naive-rr`, `eligible-rr`, `jsb` everywhere: TOML, CLI, experiments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BufferPolicy {
    /// Round robin over all buffers; refuse if the one whose turn it is is ineligible.
    NaiveRr,
    /// Round robin over eligible buffers only.
    #[default]
    EligibleRr,
    /// Join the eligible buffer holding the fewest bytes.
    Jsb,
}

/// How a complete request picks among the slots hosting its function (OffRAC §3.6).
/// Spelled `rr`, `jsq` everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlotPolicy {
    #[default]
    Rr,
    /// Join the slot queue with the least queued bytes.
    Jsq,
}

/// The one spelling of each policy, for parsers and messages.
macro_rules! names {
    ($t:ty, $($v:ident = $n:literal),+) => {
        impl $t {
            pub const ALL: &'static [$t] = &[$(<$t>::$v),+];
            pub fn name(self) -> &'static str {
                match self { $(<$t>::$v => $n),+ }
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<$t, String> {
                <$t>::ALL.iter().copied().find(|p| p.name() == s).ok_or_else(|| {
                    let all: Vec<&str> = <$t>::ALL.iter().map(|p| p.name()).collect();
                    format!("unknown policy {s:?} (one of: {})", all.join(", "))
                })
            }
        }
    };
}
names!(
    BufferPolicy,
    NaiveRr = "naive-rr",
    EligibleRr = "eligible-rr",
    Jsb = "jsb"
);
names!(SlotPolicy, Rr = "rr", Jsq = "jsq");

/// Everything the engine needs to know; the node reads it from TOML.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Number of reassembly buffers (B).
    pub buffers: usize,
    /// Payload bytes each buffer holds (S).
    pub buffer_bytes: u64,
    pub buffer_policy: BufferPolicy,
    /// Largest payload accepted; larger requests get `TOO_LARGE`. At most `buffer_bytes`.
    pub max_payload: u64,
    /// Requests (header + payload) at most this big that arrive whole skip the pool.
    /// 0 disables the small-request queue.
    pub small_request_max: u64,
    /// Payload bytes the small-request queue holds.
    pub small_queue_bytes: u64,
    pub slot_policy: SlotPolicy,
    /// Payload bytes each slot queue holds (not counting the job executing).
    pub slot_queue_bytes: u64,
    /// A partial request with no progress for this long is collected.
    pub stall_timeout: Duration,
    /// A request still incomplete this long after its first byte, plus the
    /// credit its received payload earns (`reassembly_min_rate`), is answered
    /// `TIMEOUT` and its buffer freed, however steadily it trickles in.
    pub reassembly_timeout: Duration,
    /// Bytes per second of received payload that extend a request's
    /// reassembly deadline: it must be complete `reassembly_timeout` +
    /// received bytes / this rate after its first byte. A sender at least
    /// this fast never runs out of time; a slower one does, a trickle of a
    /// few bytes at about `reassembly_timeout`. 0: the deadline does not move.
    pub reassembly_min_rate: u64,
    /// The function id hosted by each slot, in slot order.
    pub slots: Vec<u8>,
    /// Per slot (in slot order), the most requests its queue holds besides
    /// the one running, on top of `slot_queue_bytes`; `None` (or no entry):
    /// bounded by bytes only; entries beyond `slots` are ignored. The
    /// default is each function's `default_queue_depth`. A large slot (the CNN)
    /// keeps a short queue so a burst waits in the pool, where BUSY
    /// back-pressure applies, not behind milliseconds of queued work.
    pub slot_queue_depths: Vec<Option<usize>>,
    /// This node's device id, stamped on responses.
    pub device_id: u8,
    /// The other devices this node can forward a chain hop to (its device
    /// table); a hop on any other device is answered `UNREACHABLE`.
    pub peers: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("pool.buffers must be at least 1")]
    NoBuffers,
    #[error("max_payload ({max}) exceeds pool.buffer_bytes ({buffer}): such a request could never be admitted")]
    PayloadOverBuffer { max: u64, buffer: u64 },
    #[error("selector.slot_queue_bytes ({queue}) is below max_payload ({max}): a large request could never enter a slot queue")]
    QueueBelowPayload { queue: u64, max: u64 },
    #[error("pool.small_queue_bytes ({queue}) is below pool.small_request_max ({small})")]
    SmallQueueTooSmall { queue: u64, small: u64 },
    #[error("at least one slot must be configured")]
    NoSlots,
    #[error("slot {0}: queue_depth must be at least 1")]
    ZeroQueueDepth(usize),
    #[error("stall_timeout_ms must be positive")]
    NoStallTimeout,
    #[error("reassembly_timeout_ms must be positive")]
    NoReassemblyTimeout,
    #[error("{owners} buffer owners given for {buffers} buffers")]
    OwnersMismatch { owners: usize, buffers: usize },
    #[error("function {0} is hosted by a slot but no reassembly buffer admits it")]
    NoBufferForFunction(u8),
    #[error(
        "device {0} in the device table is this node's own id (or 255, which means \"this node\")"
    )]
    PeerIsSelf(u8),
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            buffers: 4,
            // 2 MiB: the largest built-in request (matmul n = 512, two 512x512 f32 matrices).
            buffer_bytes: 2 << 20,
            buffer_policy: BufferPolicy::EligibleRr,
            max_payload: 2 << 20,
            small_request_max: 1500,
            small_queue_bytes: 1 << 20,
            slot_policy: SlotPolicy::Rr,
            slot_queue_bytes: 2 << 20,
            stall_timeout: Duration::from_secs(5),
            reassembly_timeout: Duration::from_secs(2),
            reassembly_min_rate: 1 << 20,
            slots: offrac_proto::FunctionId::ALL
                .iter()
                .map(|f| f.id())
                .collect(),
            slot_queue_depths: offrac_proto::FunctionId::ALL
                .iter()
                .map(|f| f.default_queue_depth())
                .collect(),
            device_id: 0,
            peers: Vec::new(),
        }
    }
}

impl EngineConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.buffers == 0 {
            return Err(ConfigError::NoBuffers);
        }
        if let Some(&d) = self
            .peers
            .iter()
            .find(|&&d| d == self.device_id || d == offrac_proto::DEVICE_SELF)
        {
            return Err(ConfigError::PeerIsSelf(d));
        }
        if self.max_payload > self.buffer_bytes {
            return Err(ConfigError::PayloadOverBuffer {
                max: self.max_payload,
                buffer: self.buffer_bytes,
            });
        }
        if self.slot_queue_bytes < self.max_payload {
            return Err(ConfigError::QueueBelowPayload {
                queue: self.slot_queue_bytes,
                max: self.max_payload,
            });
        }
        if self.small_request_max > 0 && self.small_queue_bytes < self.small_request_max {
            return Err(ConfigError::SmallQueueTooSmall {
                queue: self.small_queue_bytes,
                small: self.small_request_max,
            });
        }
        if self.slots.is_empty() {
            return Err(ConfigError::NoSlots);
        }
        let depths = &self.slot_queue_depths[..self.slot_queue_depths.len().min(self.slots.len())];
        if let Some(slot) = depths.iter().position(|&d| d == Some(0)) {
            return Err(ConfigError::ZeroQueueDepth(slot));
        }
        if self.stall_timeout.is_zero() {
            return Err(ConfigError::NoStallTimeout);
        }
        if self.reassembly_timeout.is_zero() {
            return Err(ConfigError::NoReassemblyTimeout);
        }
        Ok(())
    }
}
