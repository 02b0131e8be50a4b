//! The safe interface over the Verilated model (csrc/shim.cpp).

use std::collections::VecDeque;
use std::ffi::c_void;

use crate::params::{CONNECTIONS, DEFAULT_SLOT_MASK, SLOT_FUNCS};
use crate::{RtlError, SlotPolicy};

#[repr(C)]
struct RpIn {
    data: [u8; 64],
    keep: u64,
    conn: u8,
    valid: u8,
    out_ready: u8,
    seg: u32,
    cfg_valid: u8,
    cfg_data: u32,
    cfg_last: u8,
    bcfg_valid: u8,
    bcfg_data: u32,
    bcfg_last: u8,
    abort_valid: u8,
    abort_conn: u8,
    rst: u8,
    slot_mask: u32,
    slot_policy: u8,
}

#[repr(C)]
struct RpOut {
    in_taken: u8,
    out_taken: u8,
    cfg_taken: u8,
    bcfg_taken: u8,
    abort_taken: u8,
    conn: u8,
    last: u8,
    keep: u64,
    data: [u8; 64],
    slot_start: u32,
}

extern "C" {
    fn rp_new() -> *mut c_void;
    fn rp_free(p: *mut c_void);
    fn rp_cycle(p: *mut c_void, input: *const RpIn, out: *mut RpOut);
    fn rp_cycles(p: *mut c_void) -> u64;
    fn rp_idle(p: *mut c_void) -> u8;
    fn rp_conn_clean(p: *mut c_void) -> u64;
    fn rp_conn_owed(p: *mut c_void) -> u64;
    fn rp_dict_size(p: *mut c_void) -> u32;
    fn rp_cfg_overflow(p: *mut c_void) -> u8;
    fn rp_bcfg_sets(p: *mut c_void) -> u8;
    fn rp_bcfg_error(p: *mut c_void) -> u8;
}

/// One output beat: the response bytes of one connection (`bytes` of them
/// valid in `data`), `last` on a response's last beat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutBeat {
    pub conn: u8,
    pub data: [u8; 64],
    pub bytes: usize,
    pub last: bool,
}

impl OutBeat {
    pub fn payload(&self) -> &[u8] {
        &self.data[..self.bytes]
    }
}

/// What waits to go into the RTL, in order.
enum Input {
    /// Bytes of a connection, one beat, and the bytes of its segment from
    /// it on (s_axis_tseg: this beat's and the segment's later beats').
    Beat(u8, Vec<u8>, u32),
    /// The connection closed (s_abort_*).
    Close(u8),
}

/// The request path, clocked by the caller. Input beats and closes wait in
/// one queue and go in, in order, as the RTL takes them (a beat once offered
/// stays offered until taken, as AXI-Stream requires); output beats are
/// collected as they come.
pub struct Model {
    raw: *mut c_void,
    input: VecDeque<Input>,
    output: VecDeque<OutBeat>,
    /// Whether the sink takes output beats (backpressure when false).
    pub out_ready: bool,
    /// The configured slots (`cfg_slot_mask`, taken at reset).
    slot_mask: u32,
    /// The selector's policy (`cfg_slot_policy`, taken at reset).
    slot_policy: SlotPolicy,
    /// Per slot ([`SLOT_FUNCS`]): the hops it has started.
    slot_starts: [u64; SLOT_FUNCS.len()],
}

// The model is owned by one thread at a time; the C++ object has no thread affinity.
unsafe impl Send for Model {}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

impl Model {
    /// A fresh model, held in reset for 4 cycles (the MapId table is then
    /// cleared by the RTL itself, 32,768 cycles at the default size), with
    /// the default slots: the first of each function ([`DEFAULT_SLOT_MASK`]).
    pub fn new() -> Self {
        Self::with_slot_mask(DEFAULT_SLOT_MASK)
    }

    /// A fresh model whose configured slots are `mask` (bit *i*: slot *i* of
    /// [`SLOT_FUNCS`]; [`crate::slot_mask`] makes it from a node's `[[slots]]`
    /// and checks it). A slot outside it is never chosen and stays idle.
    pub fn with_slot_mask(mask: u32) -> Self {
        Self::with_slots(mask, SlotPolicy::Rr)
    }

    /// A fresh model whose configured slots are `mask` (as
    /// [`Model::with_slot_mask`]) and whose selector picks among them by
    /// `policy` (the node's `[selector] policy`, `cfg_slot_policy`).
    pub fn with_slots(mask: u32, policy: SlotPolicy) -> Self {
        // SAFETY: rp_new allocates a model that only rp_free releases (in Drop).
        let raw = unsafe { rp_new() };
        assert!(!raw.is_null(), "rp_new returned null");
        let mut m = Model {
            raw,
            input: VecDeque::new(),
            output: VecDeque::new(),
            out_ready: true,
            slot_mask: mask,
            slot_policy: policy,
            slot_starts: [0; SLOT_FUNCS.len()],
        };
        m.reset(4);
        m
    }

    fn cycle_raw(&mut self, input: &RpIn) -> RpOut {
        let mut out = RpOut {
            in_taken: 0,
            out_taken: 0,
            cfg_taken: 0,
            bcfg_taken: 0,
            abort_taken: 0,
            conn: 0,
            last: 0,
            keep: 0,
            data: [0; 64],
            slot_start: 0,
        };
        // SAFETY: raw is live (freed only in Drop); both structs match the C layout.
        unsafe { rp_cycle(self.raw, input, &mut out) };
        if out.slot_start != 0 {
            for (s, n) in self.slot_starts.iter_mut().enumerate() {
                *n += u64::from(out.slot_start >> s & 1);
            }
        }
        out
    }

    fn idle_input(&self) -> RpIn {
        RpIn {
            data: [0; 64],
            keep: 0,
            conn: 0,
            valid: 0,
            out_ready: self.out_ready as u8,
            seg: 0,
            cfg_valid: 0,
            cfg_data: 0,
            cfg_last: 0,
            bcfg_valid: 0,
            bcfg_data: 0,
            bcfg_last: 0,
            abort_valid: 0,
            abort_conn: 0,
            rst: 0,
            slot_mask: self.slot_mask,
            slot_policy: self.slot_policy.code(),
        }
    }

    /// Hold reset for `cycles` cycles: every request, buffer and connection
    /// state is gone (queued input too); MapId's dictionary survives.
    pub fn reset(&mut self, cycles: u32) {
        self.input.clear();
        let mut i = self.idle_input();
        i.rst = 1;
        for _ in 0..cycles.max(1) {
            self.cycle_raw(&i);
        }
    }

    /// Queue `bytes` of connection `conn` (< CONNECTIONS) as one segment
    /// (one read: the core's one `handle_bytes` call), in beats of up to 64 bytes.
    pub fn push(&mut self, conn: u8, bytes: &[u8]) {
        assert!(
            (conn as usize) < CONNECTIONS,
            "connection {conn} out of range"
        );
        let mut rest = bytes.len();
        for chunk in bytes.chunks(64) {
            let seg = u32::try_from(rest).unwrap_or(u32::MAX);
            self.input.push_back(Input::Beat(conn, chunk.to_vec(), seg));
            rest -= chunk.len();
        }
    }

    /// Queue one beat of 1..=64 bytes as it is, a segment of its own.
    pub fn push_beat(&mut self, conn: u8, beat: &[u8]) {
        self.push_segment_beat(conn, beat, beat.len());
    }

    /// Queue one beat of 1..=64 bytes of a segment (a read) of which
    /// `seg_rest` bytes, this beat's included, are still to be queued.
    pub fn push_segment_beat(&mut self, conn: u8, beat: &[u8], seg_rest: usize) {
        assert!(
            (conn as usize) < CONNECTIONS,
            "connection {conn} out of range"
        );
        assert!(
            !beat.is_empty() && beat.len() <= 64 && beat.len() <= seg_rest,
            "a beat has 1..=64 bytes of its segment"
        );
        let seg = u32::try_from(seg_rest).unwrap_or(u32::MAX);
        self.input.push_back(Input::Beat(conn, beat.to_vec(), seg));
    }

    /// Queue the close of connection `conn` (< CONNECTIONS), after its beats
    /// queued before: the RTL drops its partial request, if any, and frees
    /// what that held (the core's `handle_close`); the connection is then
    /// between requests with no bytes held ([`Model::conn_clean`]).
    pub fn close(&mut self, conn: u8) {
        assert!(
            (conn as usize) < CONNECTIONS,
            "connection {conn} out of range"
        );
        self.input.push_back(Input::Close(conn));
    }

    /// Beats and closes queued and not yet taken.
    pub fn queued(&self) -> usize {
        self.input.len()
    }

    /// Whether a beat or the close of connection `conn` is queued and not yet taken.
    pub fn queued_for(&self, conn: u8) -> bool {
        self.input.iter().any(|i| match i {
            Input::Beat(c, ..) | Input::Close(c) => *c == conn,
        })
    }

    /// Run `n` cycles; returns how many input beats the RTL took.
    pub fn step(&mut self, n: u64) -> usize {
        let mut taken = 0;
        for _ in 0..n {
            let mut i = self.idle_input();
            match self.input.front() {
                Some(Input::Beat(conn, bytes, seg)) => {
                    i.seg = *seg;
                    i.data[..bytes.len()].copy_from_slice(bytes);
                    i.keep = if bytes.len() == 64 {
                        u64::MAX
                    } else {
                        (1u64 << bytes.len()) - 1
                    };
                    i.conn = *conn;
                    i.valid = 1;
                }
                Some(Input::Close(conn)) => {
                    i.abort_conn = *conn;
                    i.abort_valid = 1;
                }
                None => {}
            }
            let o = self.cycle_raw(&i);
            if o.abort_taken != 0 {
                self.input.pop_front();
            }
            if o.in_taken != 0 {
                self.input.pop_front();
                taken += 1;
            }
            if o.out_taken != 0 {
                self.output.push_back(OutBeat {
                    conn: o.conn,
                    data: o.data,
                    bytes: o.keep.count_ones() as usize,
                    last: o.last != 0,
                });
            }
        }
        taken
    }

    /// The configured slots (bit *i*: slot *i* of [`SLOT_FUNCS`]).
    pub fn slot_mask(&self) -> u32 {
        self.slot_mask
    }

    /// The selector's policy (taken at reset).
    pub fn slot_policy(&self) -> SlotPolicy {
        self.slot_policy
    }

    /// Per slot of [`SLOT_FUNCS`]: the hops it has started (its queue's
    /// heads and chained hops) since the model was made.
    pub fn slot_starts(&self) -> [u64; SLOT_FUNCS.len()] {
        self.slot_starts
    }

    /// The oldest output beat not yet popped.
    pub fn pop(&mut self) -> Option<OutBeat> {
        self.output.pop_front()
    }

    /// Cycles since the model was made (the RTL's own counter, reset excluded).
    pub fn cycles(&self) -> u64 {
        // SAFETY: raw is live.
        unsafe { rp_cycles(self.raw) }
    }

    /// Nothing in flight anywhere in the RTL (and no input queued here).
    pub fn idle(&self) -> bool {
        // SAFETY: raw is live.
        self.input.is_empty() && unsafe { rp_idle(self.raw) } != 0
    }

    /// Per connection: answers still to come out for requests the RTL has
    /// refused or taken whole (a partial request owes none).
    pub fn conn_owed(&self, conn: u8) -> bool {
        // SAFETY: raw is live.
        (unsafe { rp_conn_owed(self.raw) } >> conn) & 1 == 1
    }

    /// Per connection: its own work is done (no bytes queued or held, no
    /// answer owed): its index may go to a new client.
    pub fn conn_done(&self, conn: u8) -> bool {
        !self.queued_for(conn) && self.conn_clean(conn) && !self.conn_owed(conn)
    }

    /// Per connection: between requests with no bytes held.
    pub fn conn_clean(&self, conn: u8) -> bool {
        // SAFETY: raw is live.
        (unsafe { rp_conn_clean(self.raw) } >> conn) & 1 == 1
    }

    /// Load MapId's dictionary (keys in list order; the first occurrence of
    /// a key gives its index) and wait until the RTL has inserted them all.
    /// Returns the number of distinct keys.
    pub fn load_dictionary(&mut self, keys: &[u32]) -> Result<u32, RtlError> {
        let beats: Vec<(u32, bool)> = if keys.is_empty() {
            vec![(0, true)]
        } else {
            keys.iter()
                .enumerate()
                .map(|(i, &k)| (k, i + 1 == keys.len()))
                .collect()
        };
        let mut distinct: Vec<u32> = keys.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let mut bi = 0;
        let limit = 200_000u64 + 16 * beats.len() as u64;
        for _ in 0..limit {
            let mut i = self.idle_input();
            if let Some(&(k, last)) = beats.get(bi) {
                i.cfg_valid = 1;
                i.cfg_data = k;
                i.cfg_last = last as u8;
                if keys.is_empty() {
                    i.cfg_valid = 1;
                }
            }
            let o = self.cycle_raw(&i);
            if o.cfg_taken != 0 {
                bi += 1;
            }
            // SAFETY: raw is live.
            let size = unsafe { rp_dict_size(self.raw) };
            if bi == beats.len() && size as usize == distinct.len() {
                // SAFETY: raw is live.
                if unsafe { rp_cfg_overflow(self.raw) } != 0 {
                    return Err(RtlError::Dictionary(
                        "more keys than the table keeps".into(),
                    ));
                }
                return Ok(size);
            }
        }
        Err(RtlError::Dictionary(format!(
            "{bi} of {} keys taken, dictionary size not {} after {limit} cycles",
            beats.len(),
            distinct.len()
        )))
    }
}

impl Model {
    /// Load Bucketize's border sets (each ascending, finite: the node checks
    /// them before, as `check_borders` does) as one configuration packet: the
    /// number of sets, then per set its border count and borders (float32
    /// bits). Returns the number of sets the RTL holds.
    pub fn load_borders(&mut self, sets: &[Vec<f32>]) -> Result<u8, RtlError> {
        let mut words = vec![sets.len() as u32];
        for s in sets {
            words.push(s.len() as u32);
            words.extend(s.iter().map(|b| b.to_bits()));
        }
        let mut bi = 0;
        let limit = 10_000u64 + 4 * words.len() as u64;
        for _ in 0..limit {
            let mut i = self.idle_input();
            if let Some(&w) = words.get(bi) {
                i.bcfg_valid = 1;
                i.bcfg_data = w;
                i.bcfg_last = (bi + 1 == words.len()) as u8;
            }
            let o = self.cycle_raw(&i);
            if o.bcfg_taken != 0 {
                bi += 1;
            }
            if bi == words.len() {
                break;
            }
        }
        if bi == words.len() {
            let (mut n, mut error) = (0, 0);
            for _ in 0..100 {
                let idle = self.idle_input();
                self.cycle_raw(&idle);
                // SAFETY: raw is live.
                (n, error) = unsafe { (rp_bcfg_sets(self.raw), rp_bcfg_error(self.raw)) };
                if error == 0 && n as usize == sets.len() {
                    return Ok(n);
                }
            }
            return Err(RtlError::Borders(format!(
                "{} sets sent, the RTL holds {n} (error {error}): outside its SETS_MAX / BORDERS_MAX",
                sets.len()
            )));
        }
        Err(RtlError::Borders(format!(
            "{bi} of {} words taken after {limit} cycles",
            words.len()
        )))
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: raw came from rp_new and is freed once.
        unsafe { rp_free(self.raw) };
    }
}
