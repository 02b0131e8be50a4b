//! Who a request belongs to, and what each tenant may have
//! (`docs/control.md`, "Tenants"). The tenant of a data connection is set by
//! an authenticated hello (the driver verifies it, then calls
//! [`crate::Engine::attribute`]); until then the connection is anonymous.

use std::collections::BTreeMap;

/// The tenant a request is charged to: an authenticated tenant id, or
/// `None` for the anonymous class (every connection without a hello).
pub type TenantKey = Option<u16>;

/// One tenant's share and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantPolicy {
    /// Its weight in the DRR of a shared slot (≥ 1).
    pub weight: u32,
    /// Most complete requests admitted and not yet answered (`None`: no limit).
    pub max_inflight: Option<u32>,
    /// Most reassembly-pool bytes its requests hold, partial or complete
    /// (`None`: no limit beyond the pool's own).
    pub max_pool_bytes: Option<u64>,
    /// Most slots its WebAssembly modules may occupy, checked when it swaps
    /// one in (`None`: no limit).
    pub max_slots: Option<u32>,
    /// Most bytes its named buffers keep (`None`: only the node's budget).
    pub max_buffer_bytes: Option<u64>,
}

impl Default for TenantPolicy {
    fn default() -> TenantPolicy {
        TenantPolicy {
            weight: 1,
            max_inflight: None,
            max_pool_bytes: None,
            max_slots: None,
            max_buffer_bytes: None,
        }
    }
}

/// The node's tenants. The default — no tenants, anonymous allowed, no
/// quotas — behaves as a node without tenancy (one class, FIFO).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenancy {
    pub tenants: BTreeMap<u16, TenantPolicy>,
    /// The policy of the anonymous class.
    pub anonymous: TenantPolicy,
    /// Refuse data requests of anonymous connections (`UNAUTHORIZED`).
    pub refuse_anonymous: bool,
    /// DRR credit per round of a weight-1 tenant, nanoseconds of execution.
    pub quantum_ns: u64,
    /// Links between nodes say an authenticated hello (a node key is
    /// configured): a forwarded hop is refused from any other connection.
    pub authenticated_links: bool,
}

impl Default for Tenancy {
    fn default() -> Tenancy {
        Tenancy {
            tenants: BTreeMap::new(),
            anonymous: TenantPolicy::default(),
            refuse_anonymous: false,
            quantum_ns: 100_000,
            authenticated_links: false,
        }
    }
}

impl Tenancy {
    /// The policy `key` is held to (a tenant not listed gets the defaults).
    pub fn policy(&self, key: TenantKey) -> TenantPolicy {
        match key {
            None => self.anonymous,
            Some(t) => self.tenants.get(&t).copied().unwrap_or_default(),
        }
    }
}

/// What one tenant holds now (for quotas and metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantUsage {
    pub inflight: u32,
    pub pool_bytes: u64,
}
