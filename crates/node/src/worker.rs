//! A slot: one thread running one accelerator to completion, request after
//! request. Short requests of cheap functions are run by the I/O thread
//! itself through the same [`execute`].

use crate::clock::NodeClock;
use crate::conn_out::ConnOut;
use crate::metrics::Metrics;
use crate::wake::IoWaker;
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use offrac_accel::{AccelError, Accelerator};
use offrac_core::{ConnId, Job, SlotId};
use offrac_proto::{ResponseHeader, Status};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A job and where its answer goes.
pub struct Work {
    pub job: Job,
    /// The connection the job came on (`None`: gone).
    pub sender: Option<Arc<ConnOut>>,
    /// A reply endpoint that gets the answer instead of the sender, if it
    /// is still open when the answer is written.
    pub endpoint: Option<Arc<ConnOut>>,
    /// The request id the answer carries at `endpoint` (the caller's).
    pub endpoint_id: u64,
    /// The sender is a node, owed a receipt when the answer goes to `endpoint`.
    pub receipt: bool,
}

impl Work {
    /// Where the answer is written now, and who gets a receipt for it
    /// (`None`: nobody is left to answer).
    /// `endpoint`: whether the answer goes to the endpoint.
    fn destination(
        sender: Option<Arc<ConnOut>>,
        endpoint: Option<Arc<ConnOut>>,
        receipt: bool,
    ) -> Option<(Arc<ConnOut>, bool, Option<Arc<ConnOut>>)> {
        let sender = sender.filter(|o| !o.is_closed());
        match endpoint.filter(|o| !o.is_closed()) {
            Some(e) => Some((e, true, sender.filter(|_| receipt))),
            None => sender.map(|s| (s, false, None)),
        }
    }
}

/// What a worker tells the I/O thread: for each job `SlotFree` then
/// `Answered`, or `Hop` alone when the job's chain goes on.
#[derive(Debug, Clone, PartialEq)]
pub enum Done {
    /// The slot's function returned: the slot is free.
    /// The slot is free; its function ran for this many ns (its tenant's
    /// DRR charge).
    SlotFree(SlotId, u64),
    /// The job's answer has been written (or dropped: the client was gone).
    Answered(ConnId),
    /// The slot ran a hop and is free; the job, advanced to its next hop,
    /// goes back to the driver.
    Hop(SlotId, Box<Job>),
}

pub struct SlotWorker {
    pub tx: Sender<Work>,
    pub thread: JoinHandle<()>,
}

/// Everything needed to run one slot's function, on whichever thread.
pub struct Executor {
    pub slot: SlotId,
    pub device: u8,
    pub accel: Box<dyn Accelerator>,
    pub metrics: Arc<Metrics>,
    /// Runs on the I/O thread (counted apart in the metrics).
    pub inline: bool,
    clock: NodeClock,
    scratch: Vec<u8>,
}

impl Executor {
    pub fn new(
        slot: SlotId,
        device: u8,
        accel: Box<dyn Accelerator>,
        metrics: Arc<Metrics>,
        inline: bool,
        clock: NodeClock,
    ) -> Executor {
        Executor {
            inline,
            slot,
            device,
            accel,
            metrics,
            clock,
            scratch: Vec::new(),
        }
    }

    /// Run `work` to completion and answer its client. `release` frees the
    /// slot; it runs before the answer is written, because the answer may
    /// prompt the client's next request, which must find the slot free
    /// (otherwise it can be refused BUSY although there is room).
    /// A successful hop that is not its chain's last writes nothing and does
    /// not call `release`: the job, advanced to its next hop, is returned.
    pub fn execute(&mut self, work: Work, release: impl FnOnce(u64)) -> Option<Job> {
        let began = Instant::now();
        let Work {
            mut job,
            sender,
            endpoint,
            endpoint_id,
            receipt,
        } = work;
        if sender.as_ref().is_none_or(|o| o.is_closed())
            && endpoint.as_ref().is_none_or(|o| o.is_closed())
        {
            release(0);
            return None;
        }
        self.scratch.clear();
        let hop = job.header.current_hop();
        // Queueing ends when the function starts: the hand-off to this
        // thread is part of it.
        let started_at = self.clock.now();
        let started = Instant::now();
        let accel = &mut self.accel;
        let scratch = &mut self.scratch;
        let joined_before = offrac_accel::bytes_joined_on_this_thread();
        // A panicking function must not take the slot (or the I/O thread) down with it.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // A load hop's kept buffer comes apart from the request's own
            // bytes: the function reads it in place (or joins the two).
            let (head, tail) = job.payload.parts();
            accel.run_parts(hop.param, head, tail, scratch)
        }))
        .unwrap_or_else(|_| {
            tracing::error!(
                slot = self.slot,
                function = accel.function().name(),
                request = job.header.request_id,
                "accelerator panicked; answered INTERNAL, the slot goes on serving"
            );
            Err(AccelError::Internal(format!(
                "{} panicked",
                accel.function().name()
            )))
        });
        let exec_ns = started.elapsed().as_nanos() as u64;
        let joined = offrac_accel::bytes_joined_on_this_thread() - joined_before;
        self.metrics.record_joined(self.slot, joined);
        let queue_ns = offrac_core::nanos(started_at.saturating_since(job.complete_at));
        if result.is_ok() && !job.is_last_hop() {
            let in_bytes = job.payload.len();
            self.metrics.record_run(
                self.slot,
                job.function(),
                in_bytes,
                exec_ns,
                Status::Ok,
                self.inline,
            );
            self.record_overhead(began, exec_ns);
            let output = std::mem::take(&mut self.scratch);
            let input = job.advance(output, self.clock.now(), queue_ns, exec_ns, self.device);
            self.scratch = input.into_spare();
            return Some(job);
        }
        let (status, payload): (Status, &[u8]) = match &result {
            Ok(()) => (Status::Ok, &self.scratch),
            Err(e) => (e.status(), e.message().as_bytes()),
        };
        let mut h = ResponseHeader::answer(&job.header, status, self.device, payload.len() as u32);
        job.time_answer(&mut h, self.device, queue_ns, exec_ns);
        release(exec_ns);
        // Decided now, not at dispatch: an endpoint closed meanwhile leaves
        // the answer to the sender (which relays it towards the caller).
        if let Some((out, to_endpoint, receipt_to)) = Work::destination(sender, endpoint, receipt) {
            let receipt = ResponseHeader::receipt_of(&h);
            if to_endpoint {
                h.request_id = endpoint_id;
            }
            out.send(&h.encode_wire()[..h.wire_len()], payload);
            if let Some(r) = receipt_to {
                r.send(&receipt.encode(), &[]);
            }
        }
        self.metrics.record_run(
            self.slot,
            job.function(),
            job.payload.len(),
            exec_ns,
            status,
            self.inline,
        );
        self.metrics.record_answer(job.function(), &h);
        self.record_overhead(began, exec_ns);
        None
    }
}

impl Executor {
    /// A slot thread's time around a run (hand-off, encoding, writing the
    /// answer) is per-request overhead; the I/O thread's is measured by the
    /// reactor as a whole.
    fn record_overhead(&self, began: Instant, exec_ns: u64) {
        if !self.inline {
            let total = began.elapsed().as_nanos() as u64;
            self.metrics
                .provision
                .record_slot_overhead(total.saturating_sub(exec_ns));
        }
    }
}

pub struct WorkerContext {
    pub executor: Executor,
    pub done: Sender<Done>,
    pub waker: Arc<IoWaker>,
    /// Busy-poll the queue this long after a job before sleeping (0 = never spin).
    pub spin: Duration,
}

pub fn spawn(ctx: WorkerContext) -> std::io::Result<SlotWorker> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let name = format!(
        "slot-{}-{}",
        ctx.executor.slot,
        ctx.executor.accel.function().name()
    );
    let thread = std::thread::Builder::new()
        .name(name)
        .spawn(move || run(ctx, rx))?;
    Ok(SlotWorker { tx, thread })
}

fn next(rx: &Receiver<Work>, spin: Duration) -> Option<Work> {
    if !spin.is_zero() {
        let start = Instant::now();
        loop {
            match rx.try_recv() {
                Ok(w) => return Some(w),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) if start.elapsed() > spin => break,
                // Yield rather than burn: on few cores the client may need this CPU.
                Err(TryRecvError::Empty) => std::thread::yield_now(),
            }
        }
    }
    rx.recv().ok()
}

fn run(mut ctx: WorkerContext, rx: Receiver<Work>) {
    while let Some(work) = next(&rx, ctx.spin) {
        let slot = ctx.executor.slot;
        let conn = work.job.conn;
        let mut io_gone = false;
        if let Some(next) = ctx.executor.execute(work, |exec_ns| {
            io_gone = ctx.done.send(Done::SlotFree(slot, exec_ns)).is_err();
            ctx.waker.wake_if_sleeping();
        }) {
            // The next hop waits on the I/O thread: wake it.
            let gone = ctx.done.send(Done::Hop(slot, Box::new(next))).is_err();
            ctx.waker.wake_if_sleeping();
            if gone {
                return;
            }
            continue;
        }
        // Not worth a wake-up: the I/O thread needs it only to close a
        // retired connection or to finish a shutdown, and sees it within its
        // sleep cap.
        if io_gone || ctx.done.send(Done::Answered(conn)).is_err() {
            return;
        }
    }
}
