//! A slot: one thread running one accelerator to completion, request after
//! request. Short requests of cheap functions are run by the I/O thread
//! itself through the same [`execute`].

use crate::conn_out::ConnOut;
use crate::metrics::Metrics;
use crate::wake::IoWaker;
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use offrac_accel::{AccelError, Accelerator};
use offrac_core::{Job, SlotId};
use offrac_proto::{ResponseHeader, Status};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A job and where its answer goes (`None`: the client is gone, skip it).
pub struct Work {
    pub job: Job,
    pub out: Option<Arc<ConnOut>>,
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
    scratch: Vec<u8>,
}

impl Executor {
    pub fn new(
        slot: SlotId,
        device: u8,
        accel: Box<dyn Accelerator>,
        metrics: Arc<Metrics>,
        inline: bool,
    ) -> Executor {
        Executor {
            inline,
            slot,
            device,
            accel,
            metrics,
            scratch: Vec::new(),
        }
    }

    /// Run `work` to completion and answer its client. `release` frees the
    /// slot; it runs before the answer is written, because the answer may
    /// prompt the client's next request, which must find the slot free
    /// (otherwise it can be refused BUSY although there is room).
    pub fn execute(&mut self, work: Work, release: impl FnOnce()) {
        let Work { job, out } = work;
        let Some(out) = out.filter(|o| !o.is_closed()) else {
            release();
            return;
        };
        self.scratch.clear();
        let hop = job.header.current_hop();
        let started = Instant::now();
        let accel = &mut self.accel;
        let scratch = &mut self.scratch;
        // A panicking function must not take the slot (or the I/O thread) down with it.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            accel.run(hop.param, &job.payload, scratch)
        }))
        .unwrap_or_else(|_| {
            Err(AccelError::Internal(format!(
                "{} panicked",
                accel.function().name()
            )))
        });
        let exec_ns = started.elapsed().as_nanos() as u64;
        let (status, payload): (Status, &[u8]) = match &result {
            Ok(()) => (Status::Ok, &self.scratch),
            Err(AccelError::BadInput(m)) => (Status::BadInput, m.as_bytes()),
            Err(AccelError::Internal(m)) => (Status::Internal, m.as_bytes()),
        };
        let mut h = ResponseHeader::new(status, job.header.request_id, payload.len() as u32);
        h.tenant = job.header.tenant;
        h.hop_index = job.header.hop_index;
        h.device = self.device;
        h.reassembly_ns = job.reassembly_ns();
        h.queue_ns = job.queue_ns();
        h.exec_ns = exec_ns;
        release();
        out.send(&h.encode(), payload);
        self.metrics
            .record_completion(self.slot, job.function(), status, &h, self.inline);
    }
}

pub struct WorkerContext {
    pub executor: Executor,
    pub done: Sender<SlotId>,
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
        let mut io_gone = false;
        ctx.executor.execute(work, || {
            io_gone = ctx.done.send(slot).is_err();
            ctx.waker.wake_if_sleeping();
        });
        if io_gone {
            return;
        }
    }
}
