//! The TCP driver of `offrac serve --datapath rtl`: real connections in,
//! each given one of the RTL's connection indices, their bytes fed into the
//! model as beats (as a NIC's TCP stack would hand segments over), the clock
//! stepped, and each connection's response bytes written back. Every
//! decision about a request is the RTL's; this loop only moves bytes.
//!
//! The function state (MapId's dictionary, Bucketize's border sets) is the
//! caller's: the built-in one, or a `--config` file's once `check_settings`
//! has passed it.
//!
//! Each read of a connection is one segment: its beats carry the bytes of
//! the read from them on (s_axis_tseg), so that the RTL's single-fragment
//! FIFO knows a request whose payload came with its header's end, as the
//! core's small-request queue does with one `handle_bytes` call per read.
//!
//! A connection index is given back when its client has closed and that
//! connection's own work is done, whatever the other connections do: all its
//! bytes taken by the RTL, no answer owed to it (conn_owed) and none
//! waiting to be written; at once when the RTL holds no bytes of it (it
//! closed between requests), else once the RTL has taken its close
//! (s_abort_*: the partial request is dropped and its buffer freed, as the
//! core's `handle_close` does). With all indices taken, new clients wait in
//! the listen backlog.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::model::Model;
use crate::params::CONNECTIONS;
use crate::{RtlError, SlotPolicy};

/// Input bytes buffered per connection before reading pauses.
const IN_CAP: usize = 256 * 1024;
/// Response bytes buffered per connection before the RTL's output stalls.
const OUT_CAP: usize = 1024 * 1024;
/// Cycles run between looks at the sockets while work is in flight.
const BATCH: u64 = 4096;
/// Input beats queued for the model at once.
const QUEUE: usize = 256;

/// What the driver counted, for the log line at the end.
#[derive(Clone, Debug, Default)]
pub struct ServeStats {
    pub connections: u64,
    pub responses: u64,
    pub busy_cycles: u64,
    /// Clients gone in the middle of a request, whose close the RTL took.
    pub closes: u64,
    /// Per slot of `SLOT_FUNCS`: the hops it started (0 for a slot not configured).
    pub slot_hops: Vec<u64>,
}

enum Slot {
    Free,
    Active(Conn),
    /// The client closed with a partial request in the RTL: its close is
    /// queued; free once the model has taken it and owes the connection nothing.
    Closing(Conn),
}

struct Conn {
    stream: TcpStream,
    inbuf: Vec<u8>,
    in_pos: usize,
    /// The reads (segments) whose bytes are in `inbuf` from `in_pos` on, not yet all queued.
    segs: std::collections::VecDeque<usize>,
    outbuf: Vec<u8>,
    eof: bool,
}

/// Serve on `listener` until `stop` is set, loading the node's function
/// state first through the RTL's configuration ports: MapId's `dictionary`
/// (distinct keys in index order) and Bucketize's border `sets` (both checked
/// against the instance by `check_settings`; the node's built-in ones when
/// its configuration has none), on the slots of `slot_mask` (bit *i*: slot
/// *i* of `SLOT_FUNCS`, from [`crate::slot_mask`]) picked by `slot_policy`
/// (the node's `[selector] policy`). `ready` is called once
/// both are in and clients can be served.
pub fn serve(
    listener: TcpListener,
    stop: &AtomicBool,
    dictionary: &[u32],
    borders: &[Vec<f32>],
    slot_mask: u32,
    slot_policy: SlotPolicy,
    ready: impl FnOnce(),
) -> Result<ServeStats, RtlError> {
    let mut model = Model::with_slots(slot_mask, slot_policy);
    let d = model.load_dictionary(dictionary)?;
    let sets = model.load_borders(borders)?;
    tracing::info!(
        keys = d,
        border_sets = sets,
        slot_mask = format!("{slot_mask:#x}"),
        slot_policy = ?slot_policy,
        cycles = model.cycles(),
        "RTL datapath ready (MapId dictionary and Bucketize borders loaded)"
    );
    listener.set_nonblocking(true)?;
    ready();
    let mut slots: Vec<Slot> = (0..CONNECTIONS).map(|_| Slot::Free).collect();
    let mut stats = ServeStats::default();
    let mut next_in = 0usize; // round-robin over connections for the next input beat
    let mut scratch = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        let mut progress = false;
        // New clients, while an index is free.
        while let Some(i) = slots.iter().position(|s| matches!(s, Slot::Free)) {
            match listener.accept() {
                Ok((stream, peer)) => {
                    stream.set_nonblocking(true)?;
                    let _ = stream.set_nodelay(true);
                    tracing::debug!(%peer, conn = i, "client connected");
                    slots[i] = Slot::Active(Conn {
                        stream,
                        inbuf: Vec::new(),
                        in_pos: 0,
                        segs: std::collections::VecDeque::new(),
                        outbuf: Vec::new(),
                        eof: false,
                    });
                    stats.connections += 1;
                    progress = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        // Read what the clients sent.
        for s in slots.iter_mut() {
            if let Slot::Active(c) = s {
                while !c.eof && c.inbuf.len() - c.in_pos < IN_CAP {
                    match c.stream.read(&mut scratch) {
                        Ok(0) => c.eof = true,
                        Ok(n) => {
                            c.inbuf.extend_from_slice(&scratch[..n]);
                            c.segs.push_back(n);
                            progress = true;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => c.eof = true,
                    }
                }
            }
        }
        // Queue beats, one per connection with bytes in turn, up to QUEUE beats; a beat never
        // spans two reads, and carries the bytes of its read from it on.
        let mut any = true;
        while any && model.queued() < QUEUE {
            any = false;
            for k in 0..CONNECTIONS {
                let i = (next_in + k) % CONNECTIONS;
                if let Slot::Active(c) = &mut slots[i] {
                    if let Some(seg) = c.segs.front_mut() {
                        let rest = *seg;
                        let n = rest.min(64);
                        model.push_segment_beat(i as u8, &c.inbuf[c.in_pos..c.in_pos + n], rest);
                        c.in_pos += n;
                        *seg -= n;
                        if *seg == 0 {
                            c.segs.pop_front();
                        }
                        if c.in_pos == c.inbuf.len() {
                            c.inbuf.clear();
                            c.in_pos = 0;
                        }
                        any = true;
                    }
                }
            }
            next_in = (next_in + 1) % CONNECTIONS;
        }
        // Clock the model while it has work: until the queued beats are in
        // and its output is out, or BATCH cycles.
        let full = slots
            .iter()
            .any(|s| matches!(s, Slot::Active(c) if c.outbuf.len() >= OUT_CAP));
        model.out_ready = !full;
        let mut n = 0;
        while n < BATCH && !model.idle() {
            model.step(1);
            n += 1;
        }
        if n > 0 {
            stats.busy_cycles += n;
            progress = true;
        }
        while let Some(b) = model.pop() {
            if b.last {
                stats.responses += 1;
            }
            if let Slot::Active(c) | Slot::Closing(c) = &mut slots[b.conn as usize] {
                c.outbuf.extend_from_slice(b.payload());
            }
        }
        // Write back; retire clients that have gone.
        for (i, slot) in slots.iter_mut().enumerate() {
            if let Slot::Active(c) | Slot::Closing(c) = slot {
                while !c.outbuf.is_empty() {
                    match c.stream.write(&c.outbuf) {
                        Ok(0) => break,
                        Ok(n) => {
                            c.outbuf.drain(..n);
                            progress = true;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => {
                            c.eof = true;
                            c.outbuf.clear();
                        }
                    }
                }
            }
            let conn = i as u8;
            // Its own work done: it closed, all its bytes are in the RTL (its close too, when
            // Closing), no answer is owed to it and none waits to be written.
            let settled = |c: &Conn| {
                c.eof
                    && c.segs.is_empty()
                    && c.outbuf.is_empty()
                    && !model.queued_for(conn)
                    && !model.conn_owed(conn)
            };
            match slot {
                Slot::Active(c) if settled(c) => {
                    if model.conn_clean(conn) {
                        *slot = Slot::Free;
                    } else {
                        // a partial request (or a beat still being worked on): close it
                        model.close(conn);
                        stats.closes += 1;
                        tracing::debug!(
                            conn = i,
                            "client gone mid-request: its close goes to the RTL"
                        );
                        if let Slot::Active(c) = std::mem::replace(slot, Slot::Free) {
                            *slot = Slot::Closing(c);
                        }
                    }
                    progress = true;
                }
                // the close was taken: the RTL holds no bytes of it now
                Slot::Closing(c) if settled(c) && model.conn_clean(conn) => {
                    *slot = Slot::Free;
                    progress = true;
                }
                _ => {}
            }
        }
        if !progress {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    stats.slot_hops = model.slot_starts().to_vec();
    Ok(stats)
}
