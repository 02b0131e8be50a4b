//! A tiny fake node for testing the client without `offrac-node`.
//!
//! Per connection, one thread reads requests and answers:
//! - functions 0..=5: validate the payload shape like the real functions
//!   (BAD_INPUT otherwise), then answer OK echoing the payload, with fixed
//!   node timings (reassembly 1 µs, queue 2 µs, exec 3 µs);
//! - 7: BUSY for the first two requests on the connection, then OK echo;
//! - 9: hold; once `param` requests are held, answer them all OK (echo) in
//!   REVERSED arrival order;
//! - 10: like 9 but in arrival order;
//! - 11: close the connection without answering;
//! - anything else: UNKNOWN_FUNCTION, detail = the id, message "no such function".

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use offrac_proto::{RequestHeader, ResponseHeader, Status, HEADER_LEN};

pub const REASSEMBLY_NS: u64 = 1_000;
pub const QUEUE_NS: u64 = 2_000;
pub const EXEC_NS: u64 = 3_000;

pub struct FakeNode {
    pub addr: SocketAddr,
    /// Requests fully read, over all connections.
    pub requests: Arc<AtomicU64>,
}

impl FakeNode {
    pub fn start() -> FakeNode {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&requests);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let counter = Arc::clone(&counter);
                thread::spawn(move || serve(stream, &counter));
            }
        });
        FakeNode { addr, requests }
    }

    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

fn respond(out: &mut TcpStream, status: Status, id: u64, detail: u64, payload: &[u8]) -> bool {
    let mut h = ResponseHeader::new(status, id, payload.len() as u32);
    h.detail = detail;
    if status == Status::Ok {
        h.reassembly_ns = REASSEMBLY_NS;
        h.queue_ns = QUEUE_NS;
        h.exec_ns = EXEC_NS;
    }
    let mut buf = h.encode().to_vec();
    buf.extend_from_slice(payload);
    out.write_all(&buf).is_ok()
}

fn validate(function: u8, param: u64, p: &[u8]) -> Result<(), &'static str> {
    let f32s = || {
        p.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    };
    match function {
        0 | 5 => Ok(()),
        1..=3 if p.is_empty() || !p.len().is_multiple_of(4) => {
            Err("length not a positive multiple of 4")
        }
        1 if param == 0 => Err("K must be >= 1"),
        1 => Ok(()),
        2 if f32s().all(|x| x > 0.0 && x < 1.0) => Ok(()),
        2 => Err("logit input outside (0, 1)"),
        3 if f32s().all(f32::is_finite) => Ok(()),
        3 => Err("non-finite minmax input"),
        4 => {
            let n = if param == 0 {
                ((p.len() / 8) as f64).sqrt() as usize
            } else {
                param as usize
            };
            if n >= 1 && p.len() == 2 * n * n * 4 && f32s().all(f32::is_finite) {
                Ok(())
            } else {
                Err("matmul length does not match n")
            }
        }
        _ => Ok(()),
    }
}

fn serve(mut s: TcpStream, counter: &AtomicU64) {
    let _ = s.set_nodelay(true);
    let mut busy_left = 2u32;
    let mut held: Vec<(u64, Vec<u8>)> = Vec::new();
    loop {
        let mut hb = [0u8; HEADER_LEN];
        if s.read_exact(&mut hb).is_err() {
            return;
        }
        let Ok(h) = RequestHeader::decode(&hb) else {
            return;
        };
        let mut payload = vec![0u8; h.payload_len as usize];
        if s.read_exact(&mut payload).is_err() {
            return;
        }
        counter.fetch_add(1, Ordering::SeqCst);
        let hop = h.current_hop();
        let id = h.request_id;
        let ok = match hop.function {
            0..=5 => match validate(hop.function, hop.param, &payload) {
                Ok(()) => respond(&mut s, Status::Ok, id, 0, &payload),
                Err(msg) => respond(&mut s, Status::BadInput, id, 0, msg.as_bytes()),
            },
            7 if busy_left > 0 => {
                busy_left -= 1;
                respond(&mut s, Status::Busy, id, 0, b"busy")
            }
            7 => respond(&mut s, Status::Ok, id, 0, &payload),
            9 | 10 => {
                held.push((id, payload));
                if held.len() as u64 >= hop.param {
                    if hop.function == 9 {
                        held.reverse();
                    }
                    held.drain(..)
                        .all(|(id, p)| respond(&mut s, Status::Ok, id, 0, &p))
                } else {
                    true
                }
            }
            11 => return,
            f => respond(
                &mut s,
                Status::UnknownFunction,
                id,
                u64::from(f),
                b"no such function",
            ),
        };
        if !ok {
            return;
        }
    }
}
