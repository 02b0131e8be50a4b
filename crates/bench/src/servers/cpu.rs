//! The paper's CPU baseline (OffRAC Appendix G): each connection belongs to
//! one of `k` workers, which reassembles the connection's requests and runs
//! the function itself. Each worker has its own instance of every built-in.

use std::time::Instant;

use offrac_accel::Accelerator;
use offrac_proto::{FunctionId, RequestHeader, ResponseHeader, Status, HEADER_LEN};

use super::evloop::{serve, Handler, IoMode, ServerHandle};
use crate::BenchError;

/// Runs built-in functions on the worker that read the request.
pub struct CpuWorker {
    accels: Vec<Option<Box<dyn Accelerator>>>,
    result: Vec<u8>,
}

impl Default for CpuWorker {
    fn default() -> CpuWorker {
        let mut accels: Vec<Option<Box<dyn Accelerator>>> = Vec::new();
        for f in FunctionId::ALL {
            let i = usize::from(f.id());
            if accels.len() <= i {
                accels.resize_with(i + 1, || None);
            }
            accels[i] = Some(offrac_accel::builtin(f));
        }
        CpuWorker {
            accels,
            result: Vec::new(),
        }
    }
}

fn answer(out: &mut Vec<u8>, h: &ResponseHeader, payload: &[u8]) {
    out.extend_from_slice(&h.encode());
    out.extend_from_slice(payload);
}

impl Handler for CpuWorker {
    fn handle(&mut self, request: &[u8], first_byte: Instant, out: &mut Vec<u8>) {
        let complete = Instant::now();
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(&request[..HEADER_LEN]);
        let id = RequestHeader::peek_request_id(&hb);
        let header = match RequestHeader::decode(&hb) {
            Ok(h) => h,
            Err(e) => {
                let msg = e.to_string();
                answer(
                    out,
                    &ResponseHeader::new(Status::Malformed, id, msg.len() as u32),
                    msg.as_bytes(),
                );
                return;
            }
        };
        let hop = header.current_hop();
        let Some(accel) = self
            .accels
            .get_mut(usize::from(hop.function))
            .and_then(Option::as_mut)
        else {
            let mut h = ResponseHeader::new(Status::UnknownFunction, id, 0);
            h.detail = u64::from(hop.function);
            answer(out, &h, &[]);
            return;
        };
        self.result.clear();
        let started = Instant::now();
        let r = accel.run(hop.param, &request[HEADER_LEN..], &mut self.result);
        let exec_ns = started.elapsed().as_nanos() as u64;
        let (status, payload): (Status, &[u8]) = match &r {
            Ok(()) => (Status::Ok, &self.result),
            Err(e) => (e.status(), e.message().as_bytes()),
        };
        let mut h = ResponseHeader::new(status, id, payload.len() as u32);
        h.reassembly_ns = complete.saturating_duration_since(first_byte).as_nanos() as u64;
        h.exec_ns = exec_ns;
        answer(out, &h, payload);
    }
}

/// Start the CPU baseline with `workers` workers.
pub fn serve_cpu(listen: &str, workers: usize, mode: IoMode) -> Result<ServerHandle, BenchError> {
    serve(listen, workers, mode, CpuWorker::default)
}
