//! The offrac node: a TCP server hosting accelerator slots around the shared core.
//!
//! Every decision is made by the sans-IO [`Driver`] (around the core's
//! engine); the I/O thread (`reactor.rs`) owns it and every socket's read
//! side; one thread per slot runs its accelerator and writes results straight
//! back to the client. Start one with [`start`].

pub mod attach;
mod clock;
mod compile;
mod config;
mod conn_out;
pub mod control;
pub mod driver;
mod metrics;
pub mod provision;
mod ratelog;
mod reactor;
mod runnable;
pub mod spin_gate;
mod wake;
mod worker;

pub use config::{ConfigError, IoMode, NodeConfig, SlotSettings, DEFAULT_CONFIG};
pub use control::ControlSettings;
pub use driver::{
    AutoscaleSettings, AutoscaleStats, Driver, DriverConfig, DriverError, Io, LinkId, LinkState,
    LinkStats, PeerConfig, SlotConfig,
};
pub use metrics::Metrics;

use mio::net::TcpListener;
use mio::{Interest, Poll, Waker};
use offrac_proto::FunctionId;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use wake::IoWaker;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("invalid listen address {0:?}")]
    BadAddress(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("function {0} has no built-in implementation")]
    NoAccelerator(u8),
    #[error("cannot start an accelerator: {0}")]
    Accelerator(String),
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("the node thread panicked")]
    Panicked,
    #[error("cluster store: {0}")]
    Cluster(#[from] offrac_cluster::ClusterError),
    #[error("listening on {0}: other nodes cannot reach that; set [cluster] advertise")]
    NoAdvertise(SocketAddr),
    #[error("control plane: {0}")]
    Control(String),
}

/// Asks a running node to shut down gracefully; cheap to clone.
#[derive(Clone)]
pub struct ShutdownHandle {
    flag: Arc<AtomicBool>,
    waker: Arc<IoWaker>,
}

impl ShutdownHandle {
    pub fn shutdown(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.waker.wake();
    }
}

/// A running node.
pub struct NodeHandle {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub metrics: Arc<Metrics>,
    shutdown: ShutdownHandle,
    io: JoinHandle<std::io::Result<()>>,
    http: Option<JoinHandle<()>>,
    /// Tells the HTTP thread the node has stopped.
    exited: Arc<AtomicBool>,
    /// Registered in the cluster store: left when the node has stopped.
    membership: Option<offrac_cluster::Membership>,
    /// The attached addresses (`[[attach]]`), in configuration order.
    pub attached: Vec<SocketAddr>,
    attach: Vec<attach::AttachHandle>,
}

impl NodeHandle {
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Refuse new requests, answer the held ones, then stop.
    pub fn shutdown(self) -> Result<(), NodeError> {
        self.shutdown.shutdown();
        self.join()
    }

    /// Wait until the node stops (after a shutdown request).
    pub fn join(self) -> Result<(), NodeError> {
        let r = self.io.join().map_err(|_| NodeError::Panicked)?;
        if let Some(m) = self.membership {
            m.stop();
        }
        for a in self.attach {
            a.stop();
        }
        self.exited.store(true, Ordering::SeqCst);
        if let Some(h) = self.http {
            let _ = h.join();
        }
        Ok(r?)
    }
}

fn resolve(addr: &str) -> Result<SocketAddr, NodeError> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| NodeError::BadAddress(addr.to_string()))
}

/// Start a node listening on `listen` ("host:port"; port 0 picks one).
pub fn start(cfg: NodeConfig, listen: &str) -> Result<NodeHandle, NodeError> {
    let clock = clock::NodeClock::start();
    let addr = resolve(listen)?;
    let mut listener = TcpListener::bind(addr).map_err(|source| NodeError::Listen {
        addr: listen.to_string(),
        source,
    })?;
    let addr = listener.local_addr()?;
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, reactor::LISTENER, Interest::READABLE)?;
    let waker = Arc::new(IoWaker::new(Waker::new(poll.registry(), reactor::WAKER)?));
    let metrics = Arc::new(Metrics::new(&cfg.engine.slots));
    let flag = Arc::new(AtomicBool::new(false));
    let (spin, worker_spin) = match cfg.io_mode {
        IoMode::Poll => (
            Duration::from_micros(cfg.spin_us),
            Duration::from_micros(cfg.worker_spin_us),
        ),
        IoMode::Yield => (Duration::from_micros(cfg.spin_us), Duration::ZERO),
        IoMode::Blocking => (Duration::ZERO, Duration::ZERO),
    };

    if cfg.engine.slots.contains(&FunctionId::Cnn.id()) {
        // Parse and optimise the model before listening, not on the first request.
        offrac_accel::cnn_warm_up().map_err(|e| NodeError::Accelerator(e.to_string()))?;
    }
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let mut workers = Vec::new();
    let mut inline = Vec::new();
    let mut slot_configs = Vec::new();
    // The control plane: its library, and the slot assignment the last swap
    // saved (which overrides the configured one, `docs/control.md`).
    let mut plane = control::ControlPlane::open(&cfg.control, cfg.state.clone())
        .map_err(|e| NodeError::Control(e.to_string()))?;
    // With a cluster store, the library's home is the store: its modules,
    // owners and this node's slot assignment come first.
    if let Some(c) = &cfg.cluster {
        let snap = offrac_cluster::library::load_library(
            &c.store,
            cfg.engine.device_id,
            cfg.control.max_module_bytes,
        )
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the library from the cluster store; starting from the state directory");
            Default::default()
        });
        plane.absorb(snap, cfg.engine.device_id);
    }
    let mut engine_cfg = cfg.engine.clone();
    let targets = plane
        .saved_targets(engine_cfg.slots.len())
        .unwrap_or_else(|| {
            engine_cfg
                .slots
                .iter()
                .map(|&f| offrac_control::Target::Builtin(f))
                .collect()
        });
    for (slot, &f) in cfg.engine.slots.iter().enumerate() {
        let function = FunctionId::from_id(f).ok_or(NodeError::NoAccelerator(f))?;
        let device = cfg.engine.device_id;
        let target = targets[slot];
        engine_cfg.slots[slot] = target.function();
        let cell = plane
            .new_cell(function, target)
            .map_err(|e| NodeError::Control(format!("slot {slot}: {e}")))?;
        let executor =
            worker::Executor::new(slot, device, Box::new(cell), metrics.clone(), false, clock);
        workers.push(worker::spawn(worker::WorkerContext {
            executor,
            done: done_tx.clone(),
            waker: waker.clone(),
            spin: worker_spin,
        })?);
        // A second instance, run by the I/O thread for requests small enough to finish in microseconds.
        let accel = offrac_accel::builtin_with(function, &cfg.state);
        let limit = cfg
            .slots
            .get(slot)
            .and_then(|s| s.inline_max_bytes)
            .unwrap_or(accel.inline_max_bytes());
        inline.push(
            (limit > 0)
                .then(|| worker::Executor::new(slot, device, accel, metrics.clone(), true, clock)),
        );
        slot_configs.push(SlotConfig {
            function: f,
            // A slot restored to another function runs it on its worker.
            inline_max_bytes: if target.function() == f { limit } else { 0 },
        });
    }
    let mut driver_cfg = DriverConfig::new(slot_configs);
    driver_cfg.shutdown_grace = Duration::from_millis(cfg.shutdown_grace_ms);
    driver_cfg.close_linger = Duration::from_millis(cfg.close_linger_ms);
    driver_cfg.forward_timeout = Duration::from_millis(cfg.forward_timeout_ms);
    driver_cfg.collectives = cfg.collectives.clone();
    driver_cfg.named_buffer_bytes = cfg.named_buffer_bytes;
    driver_cfg.peers = cfg.devices.clone();
    driver_cfg.owners = plane.saved_owners(&targets);
    driver_cfg.targets = targets;
    driver_cfg.swap_drain_timeout = Duration::from_millis(cfg.control.drain_timeout_ms);
    driver_cfg.autoscale = cfg.autoscale.clone();
    driver_cfg.tenancy = cfg.control.tenancy.clone();
    driver_cfg.link_hello = cfg.control.node_key.is_some();
    driver_cfg.templates = cfg.control.templates.clone();

    let attach = cfg
        .attach
        .iter()
        .map(|a| {
            attach::start(a).map_err(|source| NodeError::Listen {
                addr: a.listen.clone(),
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for a in &attach {
        metrics.add_attach(a.addr, a.function, a.counters.clone());
    }
    let exited = Arc::new(AtomicBool::new(false));
    let (http, metrics_addr) = match &cfg.metrics_listen {
        Some(m) => {
            let (h, a) = serve_metrics(m, metrics.clone(), flag.clone(), exited.clone())?;
            (Some(h), Some(a))
        }
        None => (None, None),
    };
    driver_cfg.metrics_addr = metrics_addr.map(|a| a.to_string());
    let driver = Driver::new(engine_cfg, driver_cfg).inspect_err(|_| {
        exited.store(true, Ordering::SeqCst); // stop the metrics thread
    })?;

    let mut reactor = reactor::Reactor::new(
        poll,
        listener,
        driver,
        workers,
        inline,
        done_rx,
        waker.clone(),
        metrics.clone(),
        cfg.io_mode,
        spin,
        cfg.spin_when,
        flag.clone(),
        clock,
    );
    if let Some(c) = &cfg.cluster {
        use control::StoreEvent;
        use offrac_cluster::library::LibraryEvent;
        let (tx, rx) = crossbeam_channel::unbounded();
        let compiler = plane.compiler();
        let waker = waker.clone();
        let sync = offrac_cluster::library::spawn_library_sync(
            c.store.clone(),
            plane.module_hexes(),
            cfg.control.max_module_bytes,
            move |ev| {
                // Another node's module is compiled here, off the I/O thread.
                let ev = match ev {
                    LibraryEvent::Module(bytes) => StoreEvent::Module(compiler.prepare(&bytes)),
                    LibraryEvent::Owners { hex, tenants } => StoreEvent::Owners { hex, tenants },
                    LibraryEvent::Removed { hex } => StoreEvent::Removed { hex },
                };
                let _ = tx.send(ev);
                waker.wake();
            },
        )?;
        plane.attach_store(sync);
        reactor.set_store_events(rx);
    }
    reactor.set_control(plane);
    let membership = match &cfg.cluster {
        Some(c) => {
            let (tx, rx) = crossbeam_channel::unbounded();
            reactor.set_membership(rx, cfg.devices.clone());
            let advertise = match &c.advertise {
                Some(a) => a.clone(),
                None if addr.ip().is_unspecified() => return Err(NodeError::NoAdvertise(addr)),
                None => addr.to_string(),
            };
            let me = offrac_cluster::Member {
                device: cfg.engine.device_id,
                addr: advertise,
            };
            let waker = waker.clone();
            Some(offrac_cluster::spawn_membership(
                c.store.clone(),
                me,
                move |members| {
                    let peers = members
                        .into_iter()
                        .map(|m| PeerConfig {
                            device: m.device,
                            addr: m.addr,
                        })
                        .collect();
                    let _ = tx.send(peers);
                    waker.wake();
                },
            )?)
        }
        None => None,
    };
    let io = std::thread::Builder::new()
        .name("offrac-io".into())
        .spawn(move || reactor.run())?;
    let metrics_at = metrics_addr.map_or_else(|| "off".to_string(), |a| a.to_string());
    let mode = match cfg.io_mode {
        IoMode::Poll => "poll",
        IoMode::Blocking => "blocking",
        IoMode::Yield => "yield",
    };
    tracing::info!(%addr, metrics = %metrics_at, mode, slots = cfg.engine.slots.len(), "node listening");
    Ok(NodeHandle {
        addr,
        metrics_addr,
        metrics,
        shutdown: ShutdownHandle { flag, waker },
        io,
        http: Some(http).flatten(),
        exited,
        membership,
        attached: attach.iter().map(|a| a.addr).collect(),
        attach,
    })
}

/// `GET /metrics` (Prometheus text), `/healthz` (200 while the process
/// serves), `/readyz` (200 while it accepts work, 503 once it shuts down).
fn serve_metrics(
    listen: &str,
    metrics: Arc<Metrics>,
    shutting_down: Arc<AtomicBool>,
    exited: Arc<AtomicBool>,
) -> Result<(JoinHandle<()>, SocketAddr), NodeError> {
    let addr = resolve(listen)?;
    let server = tiny_http::Server::http(addr).map_err(|e| NodeError::Listen {
        addr: listen.to_string(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| NodeError::BadAddress(listen.to_string()))?;
    let text = |body: String, code: u16| {
        let ct = tiny_http::Header::from_bytes("Content-Type", "text/plain; charset=utf-8")
            .expect("static header is valid");
        tiny_http::Response::from_string(body)
            .with_status_code(code)
            .with_header(ct)
    };
    let h = std::thread::Builder::new()
        .name("offrac-metrics".into())
        .spawn(move || {
            while !exited.load(Ordering::SeqCst) {
                let Ok(Some(req)) = server.recv_timeout(Duration::from_millis(100)) else {
                    continue;
                };
                let resp = match req.url() {
                    "/metrics" => {
                        let ct = tiny_http::Header::from_bytes(
                            "Content-Type",
                            "text/plain; version=0.0.4; charset=utf-8",
                        )
                        .expect("static header is valid");
                        tiny_http::Response::from_string(metrics.render()).with_header(ct)
                    }
                    "/healthz" => text("ok\n".into(), 200),
                    "/readyz" if shutting_down.load(Ordering::SeqCst) => {
                        text("shutting down\n".into(), 503)
                    }
                    "/readyz" => text("ready\n".into(), 200),
                    _ => text("see /metrics, /healthz, /readyz\n".into(), 404),
                };
                let _ = req.respond(resp);
            }
        })?;
    Ok((h, bound))
}
