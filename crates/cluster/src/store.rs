//! The store on etcd: a blocking handle for clients and the CLI ([`Store`]),
//! and a node's membership ([`spawn_membership`]).

use crate::{check_name, member_of, ClusterConfig, ClusterError, Member};
use etcd_client::{Client, ConnectOptions, EventType, GetOptions, PutOptions, WatchOptions};
use offrac_proto::{chain_spec, Hop};
use std::collections::BTreeMap;
use std::time::Duration;

fn options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5))
}

fn runtime() -> Result<tokio::runtime::Runtime, ClusterError> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// A blocking handle on the store, for clients and the CLI.
pub struct Store {
    rt: tokio::runtime::Runtime,
    client: Client,
    cfg: ClusterConfig,
}

impl Store {
    pub fn connect(cfg: ClusterConfig) -> Result<Store, ClusterError> {
        let rt = runtime()?;
        let client = rt.block_on(Client::connect(&cfg.endpoints, Some(options())))?;
        Ok(Store { rt, client, cfg })
    }

    /// Store `hops` as the pipeline `name` (replacing it).
    pub fn put_pipeline(&mut self, name: &str, hops: &[Hop]) -> Result<(), ClusterError> {
        check_name(name)?;
        let key = format!("{}{name}", self.cfg.pipelines_prefix());
        let value = chain_spec::format(hops);
        self.rt.block_on(self.client.put(key, value, None))?;
        Ok(())
    }

    pub fn get_pipeline(&mut self, name: &str) -> Result<Option<Vec<Hop>>, ClusterError> {
        check_name(name)?;
        let key = format!("{}{name}", self.cfg.pipelines_prefix());
        let resp = self.rt.block_on(self.client.get(key, None))?;
        resp.kvs()
            .first()
            .map(|kv| parse_pipeline(name, kv.value()))
            .transpose()
    }

    /// Every pipeline, by name.
    pub fn list_pipelines(&mut self) -> Result<Vec<(String, Vec<Hop>)>, ClusterError> {
        let prefix = self.cfg.pipelines_prefix();
        let resp = self.rt.block_on(
            self.client
                .get(prefix.clone(), Some(GetOptions::new().with_prefix())),
        )?;
        resp.kvs()
            .iter()
            .filter_map(|kv| {
                let name = std::str::from_utf8(kv.key()).ok()?.strip_prefix(&prefix)?;
                Some(parse_pipeline(name, kv.value()).map(|h| (name.to_string(), h)))
            })
            .collect()
    }

    /// Remove the pipeline `name`; false if there was none.
    pub fn delete_pipeline(&mut self, name: &str) -> Result<bool, ClusterError> {
        check_name(name)?;
        let key = format!("{}{name}", self.cfg.pipelines_prefix());
        let resp = self.rt.block_on(self.client.delete(key, None))?;
        Ok(resp.deleted() > 0)
    }

    /// The nodes registered now.
    pub fn members(&mut self) -> Result<Vec<Member>, ClusterError> {
        let prefix = self.cfg.nodes_prefix();
        let resp = self.rt.block_on(
            self.client
                .get(prefix.clone(), Some(GetOptions::new().with_prefix())),
        )?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| member_of(&prefix, kv.key(), kv.value()))
            .collect())
    }
}

fn parse_pipeline(name: &str, value: &[u8]) -> Result<Vec<Hop>, ClusterError> {
    let text = String::from_utf8_lossy(value);
    chain_spec::parse(&text).map_err(|source| ClusterError::BadPipeline {
        name: name.to_string(),
        source,
    })
}

/// A node's membership: registered under a lease, watching the others.
pub struct Membership {
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Membership {
    /// Leave the cluster (the lease is revoked, so others drop this node at
    /// once) and stop watching.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Register `me` and report the whole member table (`me` included) to
/// `on_change` at start and after every change, from a background thread.
/// While etcd is unreachable nothing is reported (the last table stands) and
/// the session is retried with a back-off of 100 ms doubling to 5 s.
pub fn spawn_membership(
    cfg: ClusterConfig,
    me: Member,
    on_change: impl Fn(Vec<Member>) + Send + 'static,
) -> Result<Membership, ClusterError> {
    let rt = runtime()?;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let thread = std::thread::Builder::new()
        .name("offrac-cluster".into())
        .spawn(move || {
            rt.block_on(membership_loop(cfg, me, on_change, stop_rx));
        })?;
    Ok(Membership {
        stop,
        thread: Some(thread),
    })
}

async fn membership_loop(
    cfg: ClusterConfig,
    me: Member,
    on_change: impl Fn(Vec<Member>),
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        if *stop.borrow() {
            return;
        }
        match session(&cfg, &me, &on_change, &mut stop, &mut backoff).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, retry_ms = backoff.as_millis() as u64,
                    "cluster store unavailable; serving with the last device table");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// One connection's worth of membership: register, list, watch, keep alive.
/// Returns `Ok` only when asked to stop.
async fn session(
    cfg: &ClusterConfig,
    me: &Member,
    on_change: &impl Fn(Vec<Member>),
    stop: &mut tokio::sync::watch::Receiver<bool>,
    backoff: &mut Duration,
) -> Result<(), ClusterError> {
    let mut c = Client::connect(&cfg.endpoints, Some(options())).await?;
    let ttl = cfg.lease_ttl_s.max(1);
    let lease = c.lease_grant(ttl, None).await?.id();
    let prefix = cfg.nodes_prefix();
    let key = format!("{prefix}{}", me.device);
    c.put(
        key,
        me.addr.clone(),
        Some(PutOptions::new().with_lease(lease)),
    )
    .await?;
    let (mut keeper, mut alive) = c.lease_keep_alive(lease).await?;
    let resp = c
        .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
        .await?;
    let revision = resp.header().map_or(0, |h| h.revision());
    let mut table: BTreeMap<u8, String> = resp
        .kvs()
        .iter()
        .filter_map(|kv| member_of(&prefix, kv.key(), kv.value()))
        .map(|m| (m.device, m.addr))
        .collect();
    let (_watcher, mut events) = c
        .watch(
            prefix.clone(),
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(revision + 1),
            ),
        )
        .await?;
    tracing::info!(
        device = me.device,
        members = table.len(),
        "joined the cluster"
    );
    *backoff = Duration::from_millis(100);
    let report = |t: &BTreeMap<u8, String>| {
        on_change(
            t.iter()
                .map(|(&device, addr)| Member {
                    device,
                    addr: addr.clone(),
                })
                .collect(),
        )
    };
    report(&table);
    let mut tick = tokio::time::interval(Duration::from_millis((ttl as u64 * 1000 / 3).max(200)));
    loop {
        tokio::select! {
            _ = stop.changed() => {
                let _ = c.lease_revoke(lease).await;
                return Ok(());
            }
            _ = tick.tick() => keeper.keep_alive().await?,
            m = alive.message() => match m? {
                Some(r) if r.ttl() > 0 => {}
                _ => return Err(ClusterError::LeaseLost),
            },
            m = events.message() => {
                let resp = m?.ok_or(ClusterError::WatchEnded)?;
                if resp.canceled() {
                    return Err(ClusterError::WatchEnded);
                }
                let mut changed = false;
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    match ev.event_type() {
                        EventType::Put => {
                            if let Some(m) = member_of(&prefix, kv.key(), kv.value()) {
                                changed |= table.insert(m.device, m.addr.clone()) != Some(m.addr);
                            }
                        }
                        EventType::Delete => {
                            let device = std::str::from_utf8(kv.key())
                                .ok()
                                .and_then(|k| k.strip_prefix(prefix.as_str()))
                                .and_then(|d| d.parse::<u8>().ok());
                            if let Some(d) = device {
                                changed |= table.remove(&d).is_some();
                            }
                        }
                    }
                }
                if changed {
                    report(&table);
                }
            }
        }
    }
}
