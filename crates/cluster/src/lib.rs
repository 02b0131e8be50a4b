//! The cluster store of offrac nodes, on etcd (its own v3 client, no home-made
//! store). Keys under a prefix (default `/offrac`):
//!
//! - `<prefix>/nodes/<device>` = `host:port`: a node's request listener,
//!   written under a lease the node keeps alive, so a node that dies
//!   disappears when its lease runs out ([`spawn_membership`]).
//! - `<prefix>/pipelines/<name>` = a chain in its text form
//!   (`minmax@0,logit@1`, see [`offrac_proto::chain_spec`]): a named pipeline
//!   any client can call ([`Store`]).
//!
//! - `<prefix>/library/...`: the function library, its owners and each
//!   node's slot assignment ([`library`], `docs/control.md`).
//!
//! When etcd is unreachable nodes keep the last device table they saw and
//! retry in the background.

use offrac_proto::chain_spec;

/// Where the store is and how nodes use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// etcd client endpoints, `host:port` (or `http://host:port`).
    pub endpoints: Vec<String>,
    /// Key prefix shared by a cluster's nodes and clients.
    pub prefix: String,
    /// A node's lease: it disappears from the table this long after it stops
    /// refreshing it (seconds, at least 1).
    pub lease_ttl_s: i64,
}

impl ClusterConfig {
    pub fn new(endpoints: Vec<String>) -> ClusterConfig {
        ClusterConfig {
            endpoints,
            prefix: DEFAULT_PREFIX.to_string(),
            lease_ttl_s: 5,
        }
    }

    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn nodes_prefix(&self) -> String {
        format!("{}/nodes/", self.prefix.trim_end_matches('/'))
    }

    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn pipelines_prefix(&self) -> String {
        format!("{}/pipelines/", self.prefix.trim_end_matches('/'))
    }
}

pub const DEFAULT_PREFIX: &str = "/offrac";

/// One node of the cluster: its device id and request listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub device: u8,
    pub addr: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[cfg(feature = "etcd")]
    #[error("etcd: {0}")]
    Etcd(Box<etcd_client::Error>),
    #[cfg(not(feature = "etcd"))]
    #[error("this build has no etcd client (offrac-cluster feature `etcd`)")]
    NoStore,
    #[error("cannot start the cluster store's runtime: {0}")]
    Runtime(#[from] std::io::Error),
    #[error("pipeline name {0:?}: use letters, digits, '-', '_' and '.' (1 to 128 of them)")]
    BadName(String),
    #[error("pipeline {name:?} holds a bad chain: {source}")]
    BadPipeline {
        name: String,
        source: chain_spec::SpecError,
    },
    #[error("the lease was lost")]
    LeaseLost,
    #[error("the watch ended")]
    WatchEnded,
}

#[cfg(feature = "etcd")]
impl From<etcd_client::Error> for ClusterError {
    fn from(e: etcd_client::Error) -> ClusterError {
        ClusterError::Etcd(Box::new(e))
    }
}

#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) fn check_name(name: &str) -> Result<(), ClusterError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ClusterError::BadName(name.to_string()))
    }
}

/// Members from `<prefix>/nodes/<device>` keys (others are ignored).
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) fn member_of(nodes_prefix: &str, key: &[u8], value: &[u8]) -> Option<Member> {
    let key = std::str::from_utf8(key).ok()?;
    let device = key.strip_prefix(nodes_prefix)?.parse::<u8>().ok()?;
    let addr = std::str::from_utf8(value).ok()?.to_string();
    Some(Member { device, addr })
}

// The store itself: etcd's client (feature `etcd`, on by default), or, in a
// build without it (the fuzz workspace), a stand-in that says so.
#[cfg(feature = "etcd")]
mod store;
#[cfg(feature = "etcd")]
pub use store::{spawn_membership, Membership, Store};
pub mod library;

#[cfg(not(feature = "etcd"))]
mod store_absent;
#[cfg(not(feature = "etcd"))]
pub use store_absent::{spawn_membership, Membership};
