//! Inline acceleration of an unmodified server (NICA's "attach an ikernel to
//! a socket"): the node listens on an address of its own in front of a real
//! server, a function attached to that address sees every request, answers
//! those it can and forwards the rest to the server, relaying its answers.
//!
//! One function so far, `memcached_cache`: a look-through cache in front of
//! a stock memcached (text protocol over TCP). Its decisions live in the
//! sans-IO [`machine::Machine`] (over [`text`], [`reply`] and [`cache`]); one
//! thread per attached address drives it (`io.rs`). See docs/inline.md.

pub mod cache;
mod io;
pub mod machine;
pub mod reply;
pub mod text;

pub use machine::{Machine, Settings, Stats};

use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The functions an address can be attached to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachFunction {
    /// Look-through cache in front of memcached (text protocol).
    MemcachedCache,
}

impl AttachFunction {
    pub const NAMES: &'static str = "memcached_cache";

    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "memcached_cache" => Some(AttachFunction::MemcachedCache),
            _ => None,
        }
    }
}

/// One `[[attach]]` entry, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachConfig {
    /// Where clients connect ("host:port"; port 0 picks one).
    pub listen: String,
    pub function: AttachFunction,
    /// The real server ("host:port").
    pub backend: String,
    /// Client connections at once (each with its own backend connection).
    pub max_connections: usize,
    pub settings: Settings,
}

#[derive(Debug, thiserror::Error)]
pub enum AttachConfigError {
    #[error("unknown attach function {0:?} (known: {known})", known = AttachFunction::NAMES)]
    UnknownFunction(String),
    #[error("{field} = {value:?} is not host:port")]
    BadAddr { field: &'static str, value: String },
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error("--attach {spec:?}: {message}")]
    BadSpec { spec: String, message: String },
}

/// `[[attach]]` as written in the TOML.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawAttach {
    listen: String,
    function: String,
    backend: String,
    #[serde(default = "default_capacity")]
    capacity_bytes: usize,
    #[serde(default = "default_max_value")]
    max_value_bytes: usize,
    #[serde(default = "default_timeout")]
    backend_timeout_ms: u64,
    /// 0: items are kept until evicted or invalidated.
    #[serde(default)]
    max_age_ms: u64,
    #[serde(default = "default_max_connections")]
    max_connections: usize,
}

fn default_capacity() -> usize {
    Settings::default().capacity_bytes
}
fn default_max_value() -> usize {
    Settings::default().max_value_bytes
}
fn default_timeout() -> u64 {
    Settings::default().backend_timeout.as_millis() as u64
}
fn default_max_connections() -> usize {
    1024
}

fn host_port(field: &'static str, value: &str) -> Result<(), AttachConfigError> {
    let ok = value
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
    if ok {
        Ok(())
    } else {
        Err(AttachConfigError::BadAddr {
            field,
            value: value.to_string(),
        })
    }
}

impl RawAttach {
    pub fn validate(self) -> Result<AttachConfig, AttachConfigError> {
        let function = AttachFunction::from_name(&self.function)
            .ok_or_else(|| AttachConfigError::UnknownFunction(self.function.clone()))?;
        host_port("listen", &self.listen)?;
        host_port("backend", &self.backend)?;
        for (name, v) in [
            ("capacity_bytes", self.capacity_bytes),
            ("max_value_bytes", self.max_value_bytes),
            ("max_connections", self.max_connections),
        ] {
            if v == 0 {
                return Err(AttachConfigError::Zero(name));
            }
        }
        if self.backend_timeout_ms == 0 {
            return Err(AttachConfigError::Zero("backend_timeout_ms"));
        }
        Ok(AttachConfig {
            listen: self.listen,
            function,
            backend: self.backend,
            max_connections: self.max_connections,
            settings: Settings {
                capacity_bytes: self.capacity_bytes,
                max_value_bytes: self.max_value_bytes,
                backend_timeout: Duration::from_millis(self.backend_timeout_ms),
                max_age: (self.max_age_ms > 0).then(|| Duration::from_millis(self.max_age_ms)),
                ..Settings::default()
            },
        })
    }
}

impl AttachConfig {
    /// `--attach "listen=HOST:PORT,function=memcached_cache,backend=HOST:PORT[,capacity_bytes=N,...]"`:
    /// the `[[attach]]` keys as comma-separated `key=value` pairs.
    pub fn from_spec(spec: &str) -> Result<AttachConfig, AttachConfigError> {
        let bad = |message: String| AttachConfigError::BadSpec {
            spec: spec.to_string(),
            message,
        };
        let mut table = toml::Table::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
            let value = match v.parse::<i64>() {
                Ok(n) => toml::Value::Integer(n),
                Err(_) => toml::Value::String(v.to_string()),
            };
            table.insert(k.trim().to_string(), value);
        }
        let raw: RawAttach = table
            .try_into()
            .map_err(|e: toml::de::Error| bad(e.message().to_string()))?;
        raw.validate()
    }
}

/// A running attached address; stopping (or dropping) it closes its connections.
pub struct AttachHandle {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<mio::Waker>,
    thread: Option<JoinHandle<()>>,
}

impl AttachHandle {
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AttachHandle {
    fn drop(&mut self) {
        self.halt();
    }
}

fn resolve(what: &str) -> std::io::Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    what.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what:?} resolves to nothing"),
        )
    })
}

/// Listen on `cfg.listen` and serve it on a thread of its own.
pub fn start(cfg: &AttachConfig) -> std::io::Result<AttachHandle> {
    let listen = resolve(&cfg.listen)?;
    let backend = resolve(&cfg.backend)?;
    let (poll, listener, waker) = io::bind(listen)?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let driver = io::Driver::new(
        poll,
        listener,
        Machine::new(cfg.settings.clone()),
        backend,
        cfg.max_connections,
        stop.clone(),
    );
    let thread = std::thread::Builder::new()
        .name("offrac-attach".into())
        .spawn(move || driver.run())?;
    tracing::info!(%addr, %backend, function = "memcached_cache", "attached function listening");
    Ok(AttachHandle {
        addr,
        stop,
        waker,
        thread: Some(thread),
    })
}
