//! The function library's home in the store (`docs/control.md`, "The
//! library in the cluster store"): module bytes by digest, each module's
//! owners and each node's slot assignment, so a node started with an empty
//! state directory gets them back and a module uploaded on one node can be
//! swapped in on another. This module only moves bytes; what to keep, show
//! and restore is decided by the node's control plane.
//!
//! Keys under `<prefix>/library/`:
//!
//! - `chunks/<hex digest>/<i>`: the module's bytes, in chunks of at most
//!   [`CHUNK_BYTES`] (etcd refuses a request above 1.5 MiB by default);
//! - `meta/<hex digest>` = `{"size": n, "chunks": k}`, written after the
//!   chunks and deleted before them: a module is in the store exactly when
//!   its meta is, so a writer that dies half way leaves no half module;
//! - `owners/<hex digest>` = `[tenant, ...]`: who uploaded it;
//! - `slots/<device>` = the node's slot assignment (`slots.json`'s text).

#[cfg(not(feature = "etcd"))]
pub use absent::{load_library, spawn_library_sync, LibrarySync};
#[cfg(feature = "etcd")]
pub use etcd::{load_library, spawn_library_sync, LibrarySync};

/// The largest chunk of a module's bytes in one store request.
pub const CHUNK_BYTES: usize = 1 << 20;

/// What the store holds for a node at start.
#[derive(Debug, Default)]
pub struct LibrarySnapshot {
    /// Every complete module's bytes (each checked against its digest).
    pub modules: Vec<Vec<u8>>,
    /// (hex digest, tenants) of every module with owners.
    pub owners: Vec<(String, Vec<u16>)>,
    /// The node's saved slot assignment (`slots.json`'s text), if any.
    pub slots: Option<String>,
}

/// A change another node (or this one) made to the library.
#[derive(Debug)]
pub enum LibraryEvent {
    /// A module's bytes (checked against its digest).
    Module(Vec<u8>),
    /// The owners of the module `hex` are now `tenants` (empty: none).
    Owners { hex: String, tenants: Vec<u16> },
    /// The module `hex` was unloaded.
    Removed { hex: String },
}

/// A write to the store.
#[derive(Debug)]
pub enum LibraryWrite {
    Module { hex: String, bytes: Vec<u8> },
    Owners { hex: String, tenants: Vec<u16> },
    Remove { hex: String },
    Slots { device: u8, json: String },
}

/// The store on etcd.
#[cfg(feature = "etcd")]
mod etcd {
    use super::{LibraryEvent, LibrarySnapshot, LibraryWrite, CHUNK_BYTES};
    use crate::{ClusterConfig, ClusterError};
    use etcd_client::{Client, DeleteOptions, EventType, GetOptions, WatchOptions};
    use std::collections::BTreeSet;
    use std::time::Duration;

    fn root(cfg: &ClusterConfig) -> String {
        format!("{}/library/", cfg.prefix.trim_end_matches('/'))
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Meta {
        size: usize,
        chunks: usize,
    }

    fn runtime() -> Result<tokio::runtime::Runtime, ClusterError> {
        Ok(tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?)
    }

    fn options() -> etcd_client::ConnectOptions {
        etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5))
    }

    fn hex_of(d: &[u8]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn sha256_hex(bytes: &[u8]) -> String {
        use sha2::Digest as _;
        hex_of(&sha2::Sha256::digest(bytes))
    }

    /// The module `hex`'s bytes as the store holds them, if complete and
    /// matching their digest.
    async fn fetch(
        c: &mut Client,
        root: &str,
        hex: &str,
        max: usize,
    ) -> Result<Option<Vec<u8>>, ClusterError> {
        let resp = c.get(format!("{root}meta/{hex}"), None).await?;
        let Some(meta) = resp
            .kvs()
            .first()
            .and_then(|kv| serde_json::from_slice::<Meta>(kv.value()).ok())
        else {
            return Ok(None);
        };
        if meta.size > max || meta.chunks > meta.size.div_ceil(CHUNK_BYTES) {
            tracing::warn!(
                digest = hex,
                size = meta.size,
                max,
                "module in the cluster store is larger than this node takes; skipped"
            );
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(meta.size);
        for i in 0..meta.chunks {
            let resp = c.get(format!("{root}chunks/{hex}/{i}"), None).await?;
            match resp.kvs().first() {
                Some(kv) => bytes.extend_from_slice(kv.value()),
                None => return Ok(None),
            }
        }
        if bytes.len() != meta.size || sha256_hex(&bytes) != hex {
            tracing::warn!(
                digest = hex,
                "module in the cluster store does not match its digest; skipped"
            );
            return Ok(None);
        }
        Ok(Some(bytes))
    }

    fn owners_of(value: &[u8]) -> Vec<u16> {
        serde_json::from_slice(value).unwrap_or_default()
    }

    /// Read the library (modules of at most `max` bytes) and `device`'s
    /// slot assignment from the store.
    pub fn load_library(
        cfg: &ClusterConfig,
        device: u8,
        max: usize,
    ) -> Result<LibrarySnapshot, ClusterError> {
        let rt = runtime()?;
        rt.block_on(async {
            let mut c = Client::connect(&cfg.endpoints, Some(options())).await?;
            let root = root(cfg);
            let metas = c
                .get(
                    format!("{root}meta/"),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                )
                .await?;
            let hexes: Vec<String> = metas
                .kvs()
                .iter()
                .filter_map(|kv| {
                    let k = std::str::from_utf8(kv.key()).ok()?;
                    Some(k.strip_prefix(&format!("{root}meta/"))?.to_string())
                })
                .collect();
            let mut snap = LibrarySnapshot::default();
            for hex in hexes {
                if let Some(b) = fetch(&mut c, &root, &hex, max).await? {
                    snap.modules.push(b);
                }
            }
            let owners = c
                .get(
                    format!("{root}owners/"),
                    Some(GetOptions::new().with_prefix()),
                )
                .await?;
            for kv in owners.kvs() {
                if let Some(hex) = std::str::from_utf8(kv.key())
                    .ok()
                    .and_then(|k| k.strip_prefix(&format!("{root}owners/")))
                {
                    snap.owners.push((hex.to_string(), owners_of(kv.value())));
                }
            }
            let slots = c.get(format!("{root}slots/{device}"), None).await?;
            snap.slots = slots
                .kvs()
                .first()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
            Ok(snap)
        })
    }

    async fn write(c: &mut Client, root: &str, w: &LibraryWrite) -> Result<(), ClusterError> {
        match w {
            LibraryWrite::Module { hex, bytes } => {
                let chunks: Vec<&[u8]> = bytes.chunks(CHUNK_BYTES).collect();
                for (i, chunk) in chunks.iter().enumerate() {
                    c.put(format!("{root}chunks/{hex}/{i}"), chunk.to_vec(), None)
                        .await?;
                }
                let meta = Meta {
                    size: bytes.len(),
                    chunks: chunks.len(),
                };
                let meta = serde_json::to_vec(&meta).unwrap_or_default();
                c.put(format!("{root}meta/{hex}"), meta, None).await?;
            }
            LibraryWrite::Owners { hex, tenants } if tenants.is_empty() => {
                c.delete(format!("{root}owners/{hex}"), None).await?;
            }
            LibraryWrite::Owners { hex, tenants } => {
                let v = serde_json::to_vec(tenants).unwrap_or_default();
                c.put(format!("{root}owners/{hex}"), v, None).await?;
            }
            LibraryWrite::Remove { hex } => {
                c.delete(format!("{root}meta/{hex}"), None).await?;
                c.delete(format!("{root}owners/{hex}"), None).await?;
                c.delete(
                    format!("{root}chunks/{hex}/"),
                    Some(DeleteOptions::new().with_prefix()),
                )
                .await?;
            }
            LibraryWrite::Slots { device, json } => {
                c.put(format!("{root}slots/{device}"), json.clone(), None)
                    .await?;
            }
        }
        Ok(())
    }

    /// A node's link to the library in the store: writes its changes there and
    /// reports the others' from a background thread.
    pub struct LibrarySync {
        tx: tokio::sync::mpsc::UnboundedSender<LibraryWrite>,
        stop: tokio::sync::watch::Sender<bool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl LibrarySync {
        /// Queue a write (done in order, retried while the store is unreachable).
        pub fn write(&self, w: LibraryWrite) {
            let _ = self.tx.send(w);
        }

        fn shutdown(&mut self) {
            let _ = self.stop.send(true);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    impl Drop for LibrarySync {
        fn drop(&mut self) {
            self.shutdown();
        }
    }

    /// Start the library's sync: writes queued with [`LibrarySync::write`] go
    /// to the store in order, and the others' changes are reported to
    /// `on_event`: each time it (re)connects, every module not in `known`
    /// (the hex digests this node has; it adds those it writes or is told
    /// of) and every owner list, then every change as it happens. Modules
    /// above `max` bytes are skipped. Queued writes wait (and are retried) while the store is
    /// unreachable; those still queued when the node stops are written
    /// before it goes, unless the store is unreachable then.
    pub fn spawn_library_sync(
        cfg: ClusterConfig,
        known: Vec<String>,
        max: usize,
        on_event: impl Fn(LibraryEvent) + Send + 'static,
    ) -> Result<LibrarySync, ClusterError> {
        let rt = runtime()?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<LibraryWrite>();
        let (stop, mut stop_rx) = tokio::sync::watch::channel(false);
        let thread =
            std::thread::Builder::new()
                .name("offrac-library".into())
                .spawn(move || {
                    rt.block_on(async move {
                    let root = root(&cfg);
                    let mut known: BTreeSet<String> = known.into_iter().collect();
                    let mut pending: Option<LibraryWrite> = None;
                    let mut backoff = Duration::from_millis(100);
                    loop {
                        if *stop_rx.borrow() {
                            return;
                        }
                        let r = sync_session(
                            &cfg, &root, max, &mut known, &mut pending, &mut rx, &mut stop_rx,
                            &on_event, &mut backoff,
                        )
                        .await;
                        match r {
                            Ok(()) => return,
                            Err(e) => {
                                tracing::warn!(error = %e, retry_ms = backoff.as_millis() as u64,
                                    "cluster store unavailable for the library; retrying");
                                tokio::select! {
                                    _ = tokio::time::sleep(backoff) => {}
                                    _ = stop_rx.changed() => return,
                                }
                                backoff = (backoff * 2).min(Duration::from_secs(5));
                            }
                        }
                    }
                })
                })?;
        Ok(LibrarySync {
            tx,
            stop,
            thread: Some(thread),
        })
    }

    /// One connection's worth of sync. Returns `Ok` only when asked to stop.
    #[allow(clippy::too_many_arguments)]
    async fn sync_session(
        cfg: &ClusterConfig,
        root: &str,
        max: usize,
        known: &mut BTreeSet<String>,
        pending: &mut Option<LibraryWrite>,
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<LibraryWrite>,
        stop: &mut tokio::sync::watch::Receiver<bool>,
        on_event: &impl Fn(LibraryEvent),
        backoff: &mut Duration,
    ) -> Result<(), ClusterError> {
        let mut c = Client::connect(&cfg.endpoints, Some(options())).await?;
        // What changed while this node was not watching: modules it lacks,
        // and every owner list (a watch cannot resume from a compacted
        // revision, so each session starts from a listing).
        let metas = c
            .get(
                format!("{root}meta/"),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await?;
        let from = metas.header().map_or(0, |h| h.revision()) + 1;
        let hexes: Vec<String> = metas
            .kvs()
            .iter()
            .filter_map(|kv| {
                let k = std::str::from_utf8(kv.key()).ok()?;
                Some(k.strip_prefix(&format!("{root}meta/"))?.to_string())
            })
            .filter(|h| !known.contains(h))
            .collect();
        for hex in hexes {
            if let Some(b) = fetch(&mut c, root, &hex, max).await? {
                known.insert(hex);
                on_event(LibraryEvent::Module(b));
            }
        }
        let owners = c
            .get(
                format!("{root}owners/"),
                Some(GetOptions::new().with_prefix().with_revision(from - 1)),
            )
            .await?;
        for kv in owners.kvs() {
            if let Some(hex) = std::str::from_utf8(kv.key())
                .ok()
                .and_then(|k| k.strip_prefix(&format!("{root}owners/")))
            {
                on_event(LibraryEvent::Owners {
                    hex: hex.to_string(),
                    tenants: owners_of(kv.value()),
                });
            }
        }
        let (_watcher, mut events) = c
            .watch(
                root,
                Some(WatchOptions::new().with_prefix().with_start_revision(from)),
            )
            .await?;
        *backoff = Duration::from_millis(100);
        loop {
            // A write that failed with the last connection goes first.
            if let Some(w) = pending.take() {
                if let LibraryWrite::Module { hex, .. } = &w {
                    known.insert(hex.clone());
                }
                if let Err(e) = write(&mut c, root, &w).await {
                    *pending = Some(w);
                    return Err(e);
                }
            }
            tokio::select! {
                _ = stop.changed() => {
                    // The node stops: what it queued goes out first.
                    while let Ok(w) = rx.try_recv() {
                        write(&mut c, root, &w).await?;
                    }
                    return Ok(());
                }
                w = rx.recv() => match w {
                    Some(w) => *pending = Some(w),
                    None => return Ok(()),
                },
                m = events.message() => {
                    let resp = m?.ok_or(ClusterError::WatchEnded)?;
                    if resp.canceled() {
                        return Err(ClusterError::WatchEnded);
                    }
                    for ev in resp.events() {
                        let Some(kv) = ev.kv() else { continue };
                        let Some(key) = std::str::from_utf8(kv.key()).ok().and_then(|k| k.strip_prefix(root)) else {
                            continue;
                        };
                        let put = ev.event_type() == EventType::Put;
                        if let Some(hex) = key.strip_prefix("meta/") {
                            if !put {
                                known.remove(hex);
                                on_event(LibraryEvent::Removed { hex: hex.to_string() });
                            } else if !known.contains(hex) {
                                if let Some(b) = fetch(&mut c, root, hex, max).await? {
                                    known.insert(hex.to_string());
                                    on_event(LibraryEvent::Module(b));
                                }
                            }
                        } else if let Some(hex) = key.strip_prefix("owners/") {
                            let tenants = if put { owners_of(kv.value()) } else { Vec::new() };
                            on_event(LibraryEvent::Owners { hex: hex.to_string(), tenants });
                        }
                    }
                }
            }
        }
    }
}

/// A build without etcd's client: a node configured with a cluster store
/// refuses to start (its membership says so) before it gets here.
#[cfg(not(feature = "etcd"))]
mod absent {
    use super::{LibraryEvent, LibrarySnapshot, LibraryWrite};
    use crate::{ClusterConfig, ClusterError};

    pub struct LibrarySync(());

    impl LibrarySync {
        pub fn write(&self, _w: LibraryWrite) {}
    }

    pub fn load_library(
        _cfg: &ClusterConfig,
        _device: u8,
        _max: usize,
    ) -> Result<LibrarySnapshot, ClusterError> {
        Err(ClusterError::NoStore)
    }

    pub fn spawn_library_sync(
        _cfg: ClusterConfig,
        _known: Vec<String>,
        _max: usize,
        _on_event: impl Fn(LibraryEvent) + Send + 'static,
    ) -> Result<LibrarySync, ClusterError> {
        Err(ClusterError::NoStore)
    }
}
