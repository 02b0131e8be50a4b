use crate::{u16_at, u32_at, u64_at, Status, HEADER_LEN, MAX_HOPS, RESPONSE_MAGIC, VERSION};

/// Response `flags` bit 0: a 64-byte block of per-hop timings follows the
/// header (before the payload; `payload_len` does not count it). Sent for
/// requests flagged [`crate::FLAG_TRACE`].
pub const RESP_FLAG_HOP_TIMES: u8 = 0x01;
/// Response `flags` bit 1: a receipt, not an answer — the answer to this
/// request was written to its direct reply endpoint on device `device`
/// (status, hop and detail are the answer's; `payload_len` is 0). Sent only to
/// nodes, on hops flagged [`crate::FLAG_FORWARDED`].
pub const RESP_FLAG_RECEIPT: u8 = 0x02;
/// Length of the per-hop timings block.
pub const HOP_TIMES_LEN: usize = 64;

/// What one hop of a chain cost: which device ran it, how long it waited
/// and how long it ran. 8 bytes on the wire: device u8, ran u8 (1 if the
/// hop ran), queue µs u16 (saturating), exec ns u32 (saturating).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HopTime {
    pub device: u8,
    pub ran: bool,
    pub queue_ns: u64,
    pub exec_ns: u64,
}

impl HopTime {
    fn encode(&self, b: &mut [u8]) {
        b[0] = self.device;
        b[1] = u8::from(self.ran);
        let q = (self.queue_ns / 1000).min(u16::MAX as u64) as u16;
        b[2..4].copy_from_slice(&q.to_le_bytes());
        let e = self.exec_ns.min(u32::MAX as u64) as u32;
        b[4..8].copy_from_slice(&e.to_le_bytes());
    }

    fn decode(b: &[u8]) -> HopTime {
        HopTime {
            device: b[0],
            ran: b[1] != 0,
            queue_ns: u16::from_le_bytes([b[2], b[3]]) as u64 * 1000,
            exec_ns: u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as u64,
        }
    }
}

/// A decoded response header, including the node's timing of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    pub status: Status,
    pub hop_index: u8,
    pub device: u8,
    pub request_id: u64,
    pub payload_len: u32,
    pub tenant: u16,
    pub reassembly_ns: u64,
    pub queue_ns: u64,
    pub exec_ns: u64,
    pub detail: u64,
    /// Per-hop timings (hop *i* at index *i*), sent after the header when
    /// set; [`ResponseHeader::decode`] only says they follow
    /// ([`ResponseHeader::has_hop_times`]), [`ResponseHeader::decode_hop_times`]
    /// reads them.
    pub hop_times: Option<[HopTime; MAX_HOPS]>,
    /// The decoded header announced the block (until it is read).
    pending_times: bool,
    /// A receipt for an answer delivered elsewhere ([`RESP_FLAG_RECEIPT`]).
    pub receipt: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("bad response magic 0x{0:04x}")]
    BadMagic(u16),
    #[error("unsupported response version {0}")]
    BadVersion(u8),
    #[error("unknown status code {0}")]
    UnknownStatus(u16),
}

impl ResponseHeader {
    /// A response with no timing, e.g. a refusal.
    pub fn new(status: Status, request_id: u64, payload_len: u32) -> ResponseHeader {
        ResponseHeader {
            status,
            hop_index: 0,
            device: crate::DEVICE_SELF,
            request_id,
            payload_len,
            tenant: 0,
            reassembly_ns: 0,
            queue_ns: 0,
            exec_ns: 0,
            detail: 0,
            hop_times: None,
            pending_times: false,
            receipt: false,
        }
    }

    /// The receipt for `answer`, delivered to a direct reply endpoint: the
    /// same header without payload or timings block, flagged a receipt.
    pub fn receipt_of(answer: &ResponseHeader) -> ResponseHeader {
        ResponseHeader {
            payload_len: 0,
            hop_times: None,
            pending_times: false,
            receipt: true,
            ..*answer
        }
    }

    /// The response to `req`: its id, tenant and hop index, from `device`.
    /// Every answer a node writes — result or refusal — starts here.
    pub fn answer(
        req: &crate::RequestHeader,
        status: Status,
        device: u8,
        payload_len: u32,
    ) -> ResponseHeader {
        let mut h = ResponseHeader::new(status, req.request_id, payload_len);
        h.tenant = req.tenant;
        h.hop_index = req.hop_index;
        h.device = device;
        h
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&RESPONSE_MAGIC.to_le_bytes());
        b[2] = VERSION;
        b[4..6].copy_from_slice(&self.status.code().to_le_bytes());
        b[6] = self.hop_index;
        b[7] = self.device;
        b[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.payload_len.to_le_bytes());
        b[20..22].copy_from_slice(&self.tenant.to_le_bytes());
        b[24..32].copy_from_slice(&self.reassembly_ns.to_le_bytes());
        b[32..40].copy_from_slice(&self.queue_ns.to_le_bytes());
        b[40..48].copy_from_slice(&self.exec_ns.to_le_bytes());
        b[48..56].copy_from_slice(&self.detail.to_le_bytes());
        if self.hop_times.is_some() {
            b[3] |= RESP_FLAG_HOP_TIMES;
        }
        if self.receipt {
            b[3] |= RESP_FLAG_RECEIPT;
        }
        b
    }

    /// Bytes before the payload: 64, or 128 with the per-hop timings.
    pub fn wire_len(&self) -> usize {
        if self.hop_times.is_some() {
            HEADER_LEN + HOP_TIMES_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The header and, when set, the timings block: the first
    /// [`ResponseHeader::wire_len`] bytes go before the payload.
    pub fn encode_wire(&self) -> [u8; HEADER_LEN + HOP_TIMES_LEN] {
        let mut b = [0u8; HEADER_LEN + HOP_TIMES_LEN];
        b[..HEADER_LEN].copy_from_slice(&self.encode());
        if let Some(times) = &self.hop_times {
            for (i, t) in times.iter().enumerate() {
                t.encode(&mut b[HEADER_LEN + i * 8..]);
            }
        }
        b
    }

    /// The decoded header says a timings block follows it.
    pub fn has_hop_times(&self) -> bool {
        self.pending_times || self.hop_times.is_some()
    }

    /// Read the timings block that followed this header.
    pub fn decode_hop_times(&mut self, b: &[u8; HOP_TIMES_LEN]) {
        let mut times = [HopTime::default(); MAX_HOPS];
        for (i, t) in times.iter_mut().enumerate() {
            *t = HopTime::decode(&b[i * 8..]);
        }
        self.hop_times = Some(times);
        self.pending_times = false;
    }

    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<ResponseHeader, ResponseError> {
        let magic = u16_at(b, 0);
        if magic != RESPONSE_MAGIC {
            return Err(ResponseError::BadMagic(magic));
        }
        if b[2] != VERSION {
            return Err(ResponseError::BadVersion(b[2]));
        }
        let code = u16_at(b, 4);
        let status = Status::from_code(code).ok_or(ResponseError::UnknownStatus(code))?;
        Ok(ResponseHeader {
            status,
            hop_index: b[6],
            device: b[7],
            request_id: u64_at(b, 8),
            payload_len: u32_at(b, 16),
            tenant: u16_at(b, 20),
            reassembly_ns: u64_at(b, 24),
            queue_ns: u64_at(b, 32),
            exec_ns: u64_at(b, 40),
            detail: u64_at(b, 48),
            hop_times: None,
            pending_times: b[3] & RESP_FLAG_HOP_TIMES != 0,
            receipt: b[3] & RESP_FLAG_RECEIPT != 0,
        })
    }
}
