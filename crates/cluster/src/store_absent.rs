//! A build without etcd's client: membership is refused at start-up with a
//! clear error, so a node configured with a cluster store says what is missing.

use crate::{ClusterConfig, ClusterError, Member};

/// Never made in this build.
pub struct Membership(());

impl Membership {
    pub fn stop(self) {}
}

pub fn spawn_membership(
    _cfg: ClusterConfig,
    _me: Member,
    _on_change: impl Fn(Vec<Member>) + Send + 'static,
) -> Result<Membership, ClusterError> {
    Err(ClusterError::NoStore)
}
