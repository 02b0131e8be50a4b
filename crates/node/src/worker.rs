//! A slot: one thread running one accelerator to completion, request after request.

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

pub struct WorkerContext {
    pub slot: SlotId,
    pub device: u8,
    pub accel: Box<dyn Accelerator>,
    pub done: Sender<SlotId>,
    pub waker: Arc<IoWaker>,
    pub metrics: Arc<Metrics>,
    /// Busy-poll the queue this long after a job before sleeping (0 = never spin).
    pub spin: Duration,
}

pub fn spawn(ctx: WorkerContext) -> std::io::Result<SlotWorker> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let name = format!("slot-{}-{}", ctx.slot, ctx.accel.function().name());
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
    let mut out_buf = Vec::new();
    let function = ctx.accel.function().name();
    while let Some(Work { job, out }) = next(&rx, ctx.spin) {
        if let Some(out) = out.filter(|o| !o.is_closed()) {
            out_buf.clear();
            let hop = job.header.current_hop();
            let started = Instant::now();
            // A panicking function must not take the slot down with it.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                ctx.accel.run(hop.param, &job.payload, &mut out_buf)
            }))
            .unwrap_or_else(|_| Err(AccelError::Internal(format!("{function} panicked"))));
            let exec_ns = started.elapsed().as_nanos() as u64;
            let (status, message) = match &result {
                Ok(()) => (Status::Ok, None),
                Err(AccelError::BadInput(m)) => (Status::BadInput, Some(m.as_bytes())),
                Err(AccelError::Internal(m)) => (Status::Internal, Some(m.as_bytes())),
            };
            let payload: &[u8] = message.unwrap_or(&out_buf);
            let mut h = ResponseHeader::new(status, job.header.request_id, payload.len() as u32);
            h.tenant = job.header.tenant;
            h.hop_index = job.header.hop_index;
            h.device = ctx.device;
            h.reassembly_ns = job.reassembly_ns();
            h.queue_ns = job.queue_ns();
            h.exec_ns = exec_ns;
            out.send(&h.encode(), payload);
            ctx.metrics
                .record_completion(ctx.slot, job.function(), status, &h);
        }
        if ctx.done.send(ctx.slot).is_err() {
            return;
        }
        ctx.waker.wake_if_sleeping();
    }
}
