use crate::{u16_at, u32_at, u64_at, Status, HEADER_LEN, RESPONSE_MAGIC, VERSION};

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
        b
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
        })
    }
}
