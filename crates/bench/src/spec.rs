//! What load to apply: the mix, the arrival process, sizes and fragments.

use std::time::Duration;

use offrac_proto::FunctionId;

use crate::BenchError;

/// One kind of request in the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MixItem {
    pub function: FunctionId,
    /// The function id sent on the wire: `function`'s, unless the run
    /// addresses another id (a WebAssembly module serving the same layout,
    /// `offrac bench load --function-id`).
    pub wire_id: u8,
    pub param: u64,
    /// Payload bytes (the 64-byte header comes on top).
    pub bytes: usize,
}

impl MixItem {
    pub fn new(function: FunctionId, param: u64, bytes: usize) -> MixItem {
        MixItem {
            function,
            wire_id: function.id(),
            param,
            bytes,
        }
    }

    /// The report row this item is recorded under, e.g. `topk/1024`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.function.name(), self.bytes)
    }
}

/// Parse `FUNCTION:BYTES[:PARAM]` items, comma-separated (top-k's param
/// defaults to 16, the others' to 0), e.g. `echo:4096,topk:1024:16`.
pub fn parse_mix(text: &str) -> Result<Vec<MixItem>, BenchError> {
    let bad = |item: &str, why: &str| {
        BenchError::Config(format!(
            "mix item {item:?}: {why} (want FUNCTION:BYTES[:PARAM])"
        ))
    };
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mut parts = item.split(':');
        let name = parts.next().unwrap_or_default();
        let function = FunctionId::from_name(name).ok_or_else(|| bad(item, "unknown function"))?;
        let bytes = parts
            .next()
            .ok_or_else(|| bad(item, "missing size"))?
            .parse::<usize>()
            .map_err(|_| bad(item, "size is not a number"))?;
        let param = match parts.next() {
            Some(p) => p
                .parse::<u64>()
                .map_err(|_| bad(item, "param is not a number"))?,
            None if function == FunctionId::TopK => 16,
            None => 0,
        };
        if parts.next().is_some() {
            return Err(bad(item, "too many fields"));
        }
        out.push(MixItem::new(function, param, bytes));
    }
    if out.is_empty() {
        return Err(BenchError::Config("the mix is empty".into()));
    }
    Ok(out)
}

/// A load run. Closed loop when `rate` is `None` (`clients` connections, one
/// request outstanding each); open loop otherwise (Poisson arrivals at `rate`
/// requests/s in total, spread over `clients` connections, any number
/// outstanding). Each request picks a mix item uniformly at random.
#[derive(Debug, Clone)]
pub struct BenchSpec {
    /// `host:port` of the server under test.
    pub addr: String,
    pub clients: usize,
    /// Open loop: total offered requests per second.
    pub rate: Option<f64>,
    pub duration: Duration,
    /// Sent but not recorded.
    pub warmup: Duration,
    pub mix: Vec<MixItem>,
    /// Writes each request is split into (≥ 1; the header rides in the first).
    pub fragments: usize,
    /// Busy-wait between fragments.
    pub fragment_gap: Duration,
    /// Spin on non-blocking sockets instead of sleeping in the kernel.
    pub busy_poll: bool,
    pub seed: u64,
    /// Show a progress bar (on a terminal) when the run lasts more than 3 s.
    pub progress: bool,
    /// A response slower than this counts as a connection error (0 = none).
    pub call_timeout: Duration,
    /// Free-form label copied into the report (e.g. "node", "raw-echo").
    pub label: String,
    /// Closed loop: client `i` always sends mix item `i % mix.len()` instead
    /// of picking one at random per request.
    pub item_per_client: bool,
    /// Send each request as this chain, with its mix item's payload (empty:
    /// the mix item's function alone, on the node addressed).
    pub chain: Vec<offrac_proto::Hop>,
    /// Closed loop: each client registers a direct reply endpoint on this
    /// node (the one that ends the chain) and gets its answers there.
    pub reply_at: Option<String>,
    /// Each connection says hello as this tenant with this key first.
    pub tenant: Option<(u16, Vec<u8>)>,
    /// Open loop from a schedule instead of Poisson arrivals: each entry is
    /// a send time (from the start) and a mix row; entry `j` goes on
    /// connection `j % clients`; nothing is warm-up (a trace replayed open
    /// loop, `bench replay --open-loop`).
    pub schedule: Option<std::sync::Arc<Vec<(Duration, usize)>>>,
}

impl BenchSpec {
    pub fn new(addr: impl Into<String>, clients: usize, mix: Vec<MixItem>) -> BenchSpec {
        BenchSpec {
            addr: addr.into(),
            clients,
            rate: None,
            duration: Duration::from_secs(5),
            warmup: Duration::from_secs(1),
            mix,
            fragments: 1,
            fragment_gap: Duration::ZERO,
            busy_poll: false,
            seed: 0x0ff7_ac00,
            progress: false,
            call_timeout: Duration::from_secs(10),
            label: String::new(),
            item_per_client: false,
            chain: Vec::new(),
            reply_at: None,
            tenant: None,
            schedule: None,
        }
    }

    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |s: &str| Err(BenchError::Config(s.into()));
        if self.clients == 0 {
            return bad("need at least one client");
        }
        if self.mix.is_empty() {
            return bad("the mix is empty");
        }
        if self.fragments == 0 {
            return bad("fragments must be at least 1");
        }
        if self.duration.is_zero() {
            return bad("duration must be positive");
        }
        if let Some(s) = &self.schedule {
            if s.iter().any(|&(_, row)| row >= self.mix.len()) {
                return bad("a schedule entry names a mix row that does not exist");
            }
        }
        if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0) {
                return bad("rate must be a positive number of requests/s");
            }
            if self.reply_at.is_some() {
                return bad("a direct reply endpoint (reply_at) needs the closed loop (no rate)");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_parses_with_defaults_and_rejects_junk() {
        let m = parse_mix("echo:4096, topk:1024").unwrap();
        assert_eq!(m[0], MixItem::new(FunctionId::Echo, 0, 4096));
        assert_eq!(m[1], MixItem::new(FunctionId::TopK, 16, 1024));
        assert_eq!(m[1].label(), "topk/1024");
        for bad in ["fft:1", "echo", "echo:x", "echo:1:2:3", ","] {
            assert!(parse_mix(bad).is_err(), "{bad}");
        }
    }
}
