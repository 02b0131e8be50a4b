//! Every knob of a simulated run (Appendix B / Table 3).

use crate::spec::{Delay, SizeDist};
use offrac_core::{BufferPolicy, SlotPolicy};

/// How the node takes a request's fragments.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeModel {
    /// The shipped datapath: reassembly (offrac_core::Engine).
    Reassembled(PoolModel),
    /// Fig. 4's baseline: fragments go straight to an accelerator, which is held
    /// from the first fragment to the end of the last one's processing.
    Immediate,
    /// The node's own driver around the same engine, in a virtual world, with
    /// this hand-off latency from the I/O thread to a slot's worker.
    Driven { pool: PoolModel, handoff_ns: u64 },
}

/// The reassembly pool and queues of the core, in fragments.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolModel {
    pub buffers: usize,
    /// Capacity of each buffer in fragments.
    pub buffer_frags: u64,
    pub policy: BufferPolicy,
    pub selector: SlotPolicy,
    /// The single-fragment queue (§3.3).
    pub small_queue: bool,
    /// Capacity of the single-fragment queue in fragments.
    pub small_queue_frags: u64,
    /// Per-accelerator buffers (§3.2): buffer i admits only function i mod F.
    pub per_function: bool,
    /// Capacity of each slot queue in fragments.
    pub slot_queue_frags: u64,
}

impl Default for PoolModel {
    fn default() -> Self {
        PoolModel {
            buffers: 4,
            buffer_frags: 16,
            policy: BufferPolicy::EligibleRr,
            selector: SlotPolicy::Rr,
            small_queue: true,
            small_queue_frags: 16,
            per_function: false,
            slot_queue_frags: 64,
        }
    }
}

/// What a closed-loop client does with a request refused (`BUSY`) while it
/// is still sending that request's fragments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnRefusal {
    /// Send the remaining fragments anyway (the node discards them), then
    /// retry after the back-off: what a client that cannot unsend does.
    #[default]
    Finish,
    /// Stop at once and reset the connection; the retry goes on a new
    /// connection after the back-off, counted from the refusal. The paper's
    /// simulator (OffRAC Appendix B) behaves this way.
    Abort,
}

impl std::str::FromStr for OnRefusal {
    type Err = String;
    fn from_str(s: &str) -> Result<OnRefusal, String> {
        match s {
            "finish" => Ok(OnRefusal::Finish),
            "abort" => Ok(OnRefusal::Abort),
            _ => Err(format!("--on-refusal is abort or finish, not {s:?}")),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub clients: usize,
    /// Closed loop: requests each client completes. Open loop: requests each client sends.
    pub requests: u64,
    /// Weight of each accelerator type (A, B, C, …) in the request mix.
    pub mix: Vec<f64>,
    pub sizes: SizeDist,
    /// Delay between a request's fragments.
    pub gap: Delay,
    /// Closed loop: delay after a response before the next request.
    /// Open loop: delay after a request's last fragment before the next one's first.
    pub think: Delay,
    pub open_loop: bool,
    /// Delay before a refused request is sent again (closed loop only).
    pub retry: Delay,
    /// Execution time of each accelerator type in µs per fragment.
    pub exec_us: Vec<f64>,
    /// Fixed per-request overhead added to each execution (T_oh of seed 001).
    pub overhead_us: f64,
    /// Instances (slots) of each accelerator type.
    pub instances: Vec<usize>,
    /// Payload bytes per fragment fed to the engine; the 64-byte header rides
    /// in the first one. Every size the model compares (buffers, queues, the
    /// small-request limit) is a multiple of it, so results do not depend on
    /// it (a test checks); a small value only saves copying.
    pub frag_bytes: u32,
    pub node: NodeModel,
    /// Timing seed: gaps, think times, back-offs, the node's choices.
    pub seed: u64,
    /// Workload seed: each client's sequence of (function, size). `None`:
    /// the timing seed. Fixing it replays one request sequence across timing
    /// seeds, as the paper did.
    pub workload_seed: Option<u64>,
    pub on_refusal: OnRefusal,
    /// Every client starts at t = 0 (else spread over one inter-fragment gap).
    pub start_together: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            clients: 8,
            requests: 100,
            mix: vec![1.0, 1.0, 1.0],
            sizes: SizeDist::new(&[(1, 25.0), (2, 25.0), (4, 25.0), (8, 25.0)])
                .expect("valid built-in distribution"),
            gap: Delay::Uniform(5.0, 15.0),
            think: Delay::Fixed(0.0),
            open_loop: false,
            retry: Delay::Uniform(80.0, 120.0),
            exec_us: vec![10.0, 10.0, 10.0],
            overhead_us: 0.0,
            instances: vec![1, 1, 1],
            frag_bytes: 8,
            node: NodeModel::Reassembled(PoolModel::default()),
            seed: 1,
            workload_seed: None,
            on_refusal: OnRefusal::Finish,
            start_together: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error(
        "mix, exec_us and instances must name the same number of accelerators ({0}, {1}, {2})"
    )]
    Accelerators(usize, usize, usize),
    #[error("at least one client and one accelerator instance are needed")]
    Empty,
    #[error("the largest request ({frags} fragments) does not fit a {buffer}-fragment buffer")]
    TooLarge { frags: u32, buffer: u64 },
    #[error("frag_bytes must be positive")]
    NoFragBytes,
    #[error(transparent)]
    Core(#[from] offrac_core::ConfigError),
    #[error("the node driver refused the configuration: {0}")]
    Driver(String),
    #[error("not supported: {0}")]
    Unsupported(&'static str),
}

impl SimConfig {
    pub fn validate(&self) -> Result<(), SimError> {
        let (m, e, i) = (self.mix.len(), self.exec_us.len(), self.instances.len());
        if m != e || e != i {
            return Err(SimError::Accelerators(m, e, i));
        }
        if self.clients == 0 || self.instances.iter().sum::<usize>() == 0 {
            return Err(SimError::Empty);
        }
        if self.frag_bytes == 0 {
            return Err(SimError::NoFragBytes);
        }
        if let NodeModel::Reassembled(p) | NodeModel::Driven { pool: p, .. } = &self.node {
            let frags = self.sizes.frags.iter().copied().max().unwrap_or(1);
            if u64::from(frags) > p.buffer_frags {
                return Err(SimError::TooLarge {
                    frags,
                    buffer: p.buffer_frags,
                });
            }
        }
        Ok(())
    }
}
