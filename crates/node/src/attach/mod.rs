//! Inline acceleration of an unmodified server (NICA's "attach an ikernel to
//! a socket"): the node listens on an address of its own in front of a real
//! server, a function attached to that address sees every request, answers
//! those it can and forwards the rest to the server, relaying its answers.
//!
//! Two functions: `memcached_cache`, a look-through cache in front of a
//! stock memcached (text protocol over TCP; the sans-IO [`machine::Machine`]
//! over [`text`], [`reply`] and [`cache`]), and `jwt`, an HS256 JWT verifier
//! in front of an unmodified HTTP/1.1 server ([`http::Gate`]). Both implement
//! [`inline::InlineMachine`]; one or more event loops per attached address
//! share its machine behind a lock (`io.rs`, `loops`). See docs/inline.md.

pub mod cache;
pub mod http;
pub mod inline;
mod io;
pub mod machine;
pub mod reply;
pub mod text;
pub mod udp;

pub use machine::{Machine, Settings, Stats};

use crate::spin_gate::SpinWhen;
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The functions an address can be attached to, with their settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachFunction {
    /// Look-through cache in front of memcached (text protocol).
    MemcachedCache(Settings),
    /// HS256 JWT verifier in front of an HTTP/1.1 server.
    Jwt(http::GateSettings),
}

impl AttachFunction {
    pub const NAMES: &'static str = "memcached_cache, jwt";

    pub fn name(&self) -> &'static str {
        match self {
            AttachFunction::MemcachedCache(_) => "memcached_cache",
            AttachFunction::Jwt(_) => "jwt",
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
    /// Event loops (threads) serving the address, sharing its machine
    /// (None: one per CPU the node may use, at most [`DEFAULT_MAX_LOOPS`]; see [`loops_for`]).
    pub loops: Option<usize>,
    /// How long a loop polls without sleeping after a turn with work (0: never).
    pub spin: Duration,
    /// How long a loop polls without sleeping while the backend owes an
    /// answer (a miss in flight), after the turn that forwarded it (0: never).
    pub backend_spin: Duration,
    /// When a loop may spin inside those windows.
    pub spin_when: SpinWhen,
    /// Also serve memcached's UDP framing on the same host:port (memcached_cache only).
    pub udp: bool,
    /// UDP requests in flight at once; a datagram beyond it is dropped (counted).
    pub udp_max_requests: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum AttachConfigError {
    #[error("unknown attach function {0:?} (known: {known})", known = AttachFunction::NAMES)]
    UnknownFunction(String),
    #[error("{field} = {value:?} is not host:port")]
    BadAddr { field: &'static str, value: String },
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error("{field} must be at most {max}")]
    TooLarge { field: &'static str, max: usize },
    #[error("{field} does not apply to function {function:?}")]
    NotFor {
        field: &'static str,
        function: &'static str,
    },
    #[error("function \"jwt\" needs exactly one of secret and secret_file")]
    NoSecret,
    #[error("secret_file {path:?}: {source}")]
    SecretFile {
        path: String,
        source: std::io::Error,
    },
    #[error("the HS256 secret must not be empty")]
    EmptySecret,
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
    #[serde(default = "default_timeout")]
    backend_timeout_ms: u64,
    #[serde(default = "default_max_connections")]
    max_connections: usize,
    #[serde(default)]
    loops: Option<usize>,
    /// Microseconds a loop busy-polls after a turn with work before sleeping.
    #[serde(default = "default_spin_us")]
    spin_us: u64,
    /// Microseconds a loop busy-polls while the backend owes an answer.
    #[serde(default = "default_backend_spin_us")]
    backend_spin_us: u64,
    /// When a loop may spin in those windows: "cpu_idle" or "always".
    #[serde(default = "default_spin_when")]
    spin_when: SpinWhen,
    // memcached_cache
    capacity_bytes: Option<usize>,
    max_value_bytes: Option<usize>,
    /// 0: items are kept until evicted or invalidated.
    max_age_ms: Option<u64>,
    /// Also serve UDP on the listen address.
    udp: Option<bool>,
    udp_max_requests: Option<usize>,
    // jwt
    /// The HS256 key, as the bytes of this string.
    secret: Option<String>,
    /// A file holding the HS256 key (its bytes; one trailing newline dropped).
    secret_file: Option<String>,
    issuer: Option<String>,
    audience: Option<String>,
    leeway_s: Option<u64>,
    require_exp: Option<bool>,
    max_header_bytes: Option<usize>,
    max_body_bytes: Option<usize>,
}

fn default_timeout() -> u64 {
    Settings::default().backend_timeout.as_millis() as u64
}
fn default_max_connections() -> usize {
    1024
}
/// Event loops per attached address when `loops` is not set: one per CPU the
/// node may use, up to this many (memcached's default of worker threads). One
/// loop is a serial server: on two CPUs it was the bottleneck of the cache's
/// hits (docs/inline.md, "Several event loops").
pub const DEFAULT_MAX_LOOPS: usize = 4;
/// More loops than this gains nothing and costs a thread each.
pub const MAX_LOOPS: usize = 64;
/// Busy-polling longer than this is a core given away, not a wake-up saved.
pub const MAX_SPIN_US: u64 = 10_000;
/// UDP requests in flight per attached address unless `udp_max_requests` says otherwise.
pub const DEFAULT_UDP_MAX_REQUESTS: usize = 1024;

/// The event loops an attached address gets: `configured`, or one per CPU
/// the node may use (`usable_cpus`), at least one and at most
/// [`DEFAULT_MAX_LOOPS`].
pub fn loops_for(configured: Option<usize>, usable_cpus: u32) -> usize {
    configured.unwrap_or_else(|| (usable_cpus as usize).clamp(1, DEFAULT_MAX_LOOPS))
}
/// A loop polls this long after a turn with work (when a CPU is free,
/// `DEFAULT_SPIN_WHEN`): a miss's answer from memcached and a client's next
/// request are then read without a wake-up of the loop, which on a VM is the
/// larger part of a miss's cost (docs/inline.md, "Polling instead of sleeping").
pub const DEFAULT_SPIN_US: u64 = 50;
fn default_spin_us() -> u64 {
    DEFAULT_SPIN_US
}
/// Off: on the shared, loaded 2-CPU machine polling for memcached's answer
/// did not measurably shorten a miss (docs/results.md, "Syscalls per hit and
/// per miss, and polling for memcached's answer"); worth trying where the
/// node has a core to itself.
pub const DEFAULT_BACKEND_SPIN_US: u64 = 0;
fn default_backend_spin_us() -> u64 {
    DEFAULT_BACKEND_SPIN_US
}
/// Spin only while a CPU would otherwise idle (`spin_gate.rs`).
pub const DEFAULT_SPIN_WHEN: SpinWhen = SpinWhen::CpuIdle;
fn default_spin_when() -> SpinWhen {
    DEFAULT_SPIN_WHEN
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

fn at_least_one(name: &'static str, v: usize) -> Result<usize, AttachConfigError> {
    if v == 0 {
        Err(AttachConfigError::Zero(name))
    } else {
        Ok(v)
    }
}

impl RawAttach {
    /// Fields that belong to the other function, if any is set.
    fn foreign_field(&self, function: &'static str) -> Result<(), AttachConfigError> {
        let set: &[(&'static str, bool)] = if function == "jwt" {
            &[
                ("capacity_bytes", self.capacity_bytes.is_some()),
                ("max_value_bytes", self.max_value_bytes.is_some()),
                ("max_age_ms", self.max_age_ms.is_some()),
                ("udp", self.udp.is_some()),
                ("udp_max_requests", self.udp_max_requests.is_some()),
            ]
        } else {
            &[
                ("secret", self.secret.is_some()),
                ("secret_file", self.secret_file.is_some()),
                ("issuer", self.issuer.is_some()),
                ("audience", self.audience.is_some()),
                ("leeway_s", self.leeway_s.is_some()),
                ("require_exp", self.require_exp.is_some()),
                ("max_header_bytes", self.max_header_bytes.is_some()),
                ("max_body_bytes", self.max_body_bytes.is_some()),
            ]
        };
        match set.iter().find(|(_, on)| *on) {
            Some((field, _)) => Err(AttachConfigError::NotFor { field, function }),
            None => Ok(()),
        }
    }

    fn memcached(&self, backend_timeout: Duration) -> Result<Settings, AttachConfigError> {
        let d = Settings::default();
        Ok(Settings {
            capacity_bytes: at_least_one(
                "capacity_bytes",
                self.capacity_bytes.unwrap_or(d.capacity_bytes),
            )?,
            max_value_bytes: at_least_one(
                "max_value_bytes",
                self.max_value_bytes.unwrap_or(d.max_value_bytes),
            )?,
            backend_timeout,
            max_age: self
                .max_age_ms
                .filter(|&ms| ms > 0)
                .map(Duration::from_millis),
            ..d
        })
    }

    fn jwt(&self, backend_timeout: Duration) -> Result<http::GateSettings, AttachConfigError> {
        let secret = match (&self.secret, &self.secret_file) {
            (Some(s), None) => s.as_bytes().to_vec(),
            (None, Some(path)) => {
                let mut b =
                    std::fs::read(path).map_err(|source| AttachConfigError::SecretFile {
                        path: path.clone(),
                        source,
                    })?;
                if b.last() == Some(&b'\n') {
                    b.pop();
                }
                b
            }
            _ => return Err(AttachConfigError::NoSecret),
        };
        if secret.is_empty() {
            return Err(AttachConfigError::EmptySecret);
        }
        let d = http::GateSettings::new(secret.clone());
        Ok(http::GateSettings {
            policy: http::Policy {
                secret,
                issuer: self.issuer.clone(),
                audience: self.audience.clone(),
                leeway_s: self.leeway_s.unwrap_or(d.policy.leeway_s),
                require_exp: self.require_exp.unwrap_or(d.policy.require_exp),
            },
            max_header_bytes: at_least_one(
                "max_header_bytes",
                self.max_header_bytes.unwrap_or(d.max_header_bytes),
            )?,
            max_body_bytes: self.max_body_bytes.unwrap_or(d.max_body_bytes),
            backend_timeout,
            ..d
        })
    }

    pub fn validate(self) -> Result<AttachConfig, AttachConfigError> {
        host_port("listen", &self.listen)?;
        host_port("backend", &self.backend)?;
        at_least_one("max_connections", self.max_connections)?;
        if let Some(loops) = self.loops {
            at_least_one("loops", loops)?;
        }
        if self.loops.is_some_and(|n| n > MAX_LOOPS) {
            return Err(AttachConfigError::TooLarge {
                field: "loops",
                max: MAX_LOOPS,
            });
        }
        if self.spin_us > MAX_SPIN_US {
            return Err(AttachConfigError::TooLarge {
                field: "spin_us",
                max: MAX_SPIN_US as usize,
            });
        }
        if self.backend_spin_us > MAX_SPIN_US {
            return Err(AttachConfigError::TooLarge {
                field: "backend_spin_us",
                max: MAX_SPIN_US as usize,
            });
        }
        if self.backend_timeout_ms == 0 {
            return Err(AttachConfigError::Zero("backend_timeout_ms"));
        }
        let timeout = Duration::from_millis(self.backend_timeout_ms);
        let function = match self.function.as_str() {
            "memcached_cache" => {
                self.foreign_field("memcached_cache")?;
                AttachFunction::MemcachedCache(self.memcached(timeout)?)
            }
            "jwt" => {
                self.foreign_field("jwt")?;
                AttachFunction::Jwt(self.jwt(timeout)?)
            }
            other => return Err(AttachConfigError::UnknownFunction(other.to_string())),
        };
        Ok(AttachConfig {
            listen: self.listen,
            function,
            backend: self.backend,
            max_connections: self.max_connections,
            loops: self.loops,
            spin: Duration::from_micros(self.spin_us),
            backend_spin: Duration::from_micros(self.backend_spin_us),
            spin_when: self.spin_when,
            udp: self.udp.unwrap_or(false),
            udp_max_requests: at_least_one(
                "udp_max_requests",
                self.udp_max_requests.unwrap_or(DEFAULT_UDP_MAX_REQUESTS),
            )?,
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
            let value = if let Ok(n) = v.parse::<i64>() {
                toml::Value::Integer(n)
            } else if let Ok(b) = v.parse::<bool>() {
                toml::Value::Boolean(b)
            } else {
                toml::Value::String(v.to_string())
            };
            table.insert(k.trim().to_string(), value);
        }
        let raw: RawAttach = table
            .try_into()
            .map_err(|e: toml::de::Error| bad(e.message().to_string()))?;
        raw.validate()
    }
}

/// Reads an attached address's counters (for /metrics).
pub type CounterSource = Arc<dyn Fn() -> Vec<inline::Counter> + Send + Sync>;

/// A running attached address; stopping (or dropping) it closes its connections.
pub struct AttachHandle {
    pub addr: SocketAddr,
    pub function: &'static str,
    /// Its counters now.
    pub counters: CounterSource,
    stop: Arc<AtomicBool>,
    wakers: Vec<Arc<mio::Waker>>,
    threads: Vec<JoinHandle<()>>,
}

impl AttachHandle {
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for w in &self.wakers {
            let _ = w.wake();
        }
        for t in self.threads.drain(..) {
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
    match &cfg.function {
        AttachFunction::MemcachedCache(s) => spawn(cfg, Machine::new(s.clone())),
        AttachFunction::Jwt(s) => spawn(cfg, http::Gate::new(s.clone())),
    }
}

fn spawn<M: inline::InlineMachine + Send + 'static>(
    cfg: &AttachConfig,
    machine: M,
) -> std::io::Result<AttachHandle> {
    let listen = resolve(&cfg.listen)?;
    let backend = resolve(&cfg.backend)?;
    let (poll, listener, waker) = io::bind(listen)?;
    let addr = listener.local_addr()?;
    let mut polls = vec![poll];
    let mut wakers = vec![waker];
    let loops = loops_for(cfg.loops, crate::runnable::cpus().0);
    for _ in 1..loops {
        let (p, w) = io::poll_with_waker()?;
        polls.push(p);
        wakers.push(w);
    }
    // UDP on the port the TCP listener got (so port 0 gives one port for
    // both), one socket per loop (SO_REUSEPORT when there are several).
    let mut udp = Vec::new();
    if cfg.udp {
        for p in &polls {
            udp.push(Some(io::bind_udp(p, addr, polls.len() > 1)?));
        }
    }
    let shared = Arc::new(io::Shared::new(machine, wakers.clone()));
    if cfg.udp {
        shared.serve_udp(cfg.udp_max_requests);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut listener = Some(listener);
    let source = shared.clone();
    let mut handle = AttachHandle {
        addr,
        function: cfg.function.name(),
        counters: Arc::new(move || source.counters()),
        stop: stop.clone(),
        wakers,
        threads: Vec::new(),
    };
    for (i, poll) in polls.into_iter().enumerate() {
        let driver = io::Driver::new(
            poll,
            listener.take(),
            shared.clone(),
            i,
            io::LoopSettings {
                backend,
                max_connections: cfg.max_connections,
                spin: cfg.spin,
                backend_spin: cfg.backend_spin,
                spin_when: cfg.spin_when,
            },
            stop.clone(),
            udp.get_mut(i).and_then(Option::take),
        );
        // On failure the handle, dropped, stops the loops already started.
        let thread = std::thread::Builder::new()
            .name(format!("offrac-attach-{i}"))
            .spawn(move || driver.run())?;
        handle.threads.push(thread);
    }
    let function = cfg.function.name();
    let udp = cfg.udp;
    tracing::info!(%addr, %backend, function, loops, udp, "attached function listening");
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_default_to_one_per_usable_cpu_up_to_four() {
        assert_eq!(loops_for(None, 1), 1);
        assert_eq!(loops_for(None, 2), 2);
        assert_eq!(loops_for(None, 4), 4);
        assert_eq!(loops_for(None, 64), DEFAULT_MAX_LOOPS);
        assert_eq!(loops_for(None, 0), 1);
        // A configured count is taken as it is, whatever the CPUs.
        assert_eq!(loops_for(Some(1), 8), 1);
        assert_eq!(loops_for(Some(6), 2), 6);
    }

    #[test]
    fn loops_unset_stays_unset_and_bad_counts_are_refused() {
        let parse = |extra: &str| {
            let text = format!(
                "listen = \"127.0.0.1:0\"\nfunction = \"memcached_cache\"\nbackend = \"127.0.0.1:1\"\n{extra}"
            );
            toml::from_str::<RawAttach>(&text).expect("toml").validate()
        };
        assert_eq!(parse("").expect("valid").loops, None);
        assert_eq!(parse("loops = 3").expect("valid").loops, Some(3));
        assert!(matches!(
            parse("loops = 0"),
            Err(AttachConfigError::Zero("loops"))
        ));
        assert!(matches!(
            parse("loops = 65"),
            Err(AttachConfigError::TooLarge { field: "loops", .. })
        ));
    }
}
