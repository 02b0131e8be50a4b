//! The transport floor: echo each request's payload under a response header,
//! doing nothing a TCP echo server would not (no header validation, no
//! queues, no timing).

use std::time::Instant;

use offrac_proto::{ResponseHeader, Status, HEADER_LEN};

use super::evloop::{serve, Handler, IoMode, ServerHandle};
use crate::BenchError;

/// Echoes payloads; answers `OK` with the request's id.
#[derive(Debug, Default)]
pub struct RawEcho;

impl Handler for RawEcho {
    fn handle(&mut self, request: &[u8], _first_byte: Instant, out: &mut Vec<u8>) {
        let mut id = [0u8; 8];
        id.copy_from_slice(&request[8..16]);
        let payload = &request[HEADER_LEN..];
        let h = ResponseHeader::new(
            Status::Ok,
            u64::from_le_bytes(id),
            payload.len() as u32, // < 64 MiB: checked by the event loop
        );
        out.extend_from_slice(&h.encode());
        out.extend_from_slice(payload);
    }
}

/// Start the raw echo floor on one I/O thread (like the node's).
pub fn serve_raw(listen: &str, mode: IoMode) -> Result<ServerHandle, BenchError> {
    serve(listen, 1, mode, || RawEcho)
}
