use crate::{u16_at, u32_at, u64_at, DEVICE_SELF, HEADER_LEN, REQUEST_MAGIC, VERSION};

/// Hops a request can carry: four in the 64-byte header, four more in the
/// hop extension (a second 64-byte beat right after the header).
pub const MAX_HOPS: usize = 8;
/// Hops the 64-byte header itself carries (the fast path).
pub const HEADER_HOPS: usize = 4;
/// `flags` bit 0: a 64-byte hop extension follows the header (hops 4..8).
pub const FLAG_HOP_EXT: u8 = 0x01;
/// Length of the hop extension.
pub const EXT_LEN: usize = 64;
/// `flags` bit 1: answer with per-hop timings (the response's timings block).
pub const FLAG_TRACE: u8 = 0x02;
/// `flags` bit 2: `reply_device` names a reply endpoint the caller registered
/// (with this request's tenant) on the nodes of the chain: the node that
/// produces the answer writes it to that endpoint directly when the endpoint
/// is registered there, instead of sending it back along the path.
pub const FLAG_DIRECT_REPLY: u8 = 0x04;
/// `flags` bit 3: set by a node on every hop it forwards — the sender is a
/// node, owed a receipt when the answer is delivered to a direct reply
/// endpoint instead of to it.
pub const FLAG_FORWARDED: u8 = 0x08;
/// Every flag a request may carry.
const KNOWN_FLAGS: u8 = FLAG_HOP_EXT | FLAG_TRACE | FLAG_DIRECT_REPLY | FLAG_FORWARDED;
const HOPS_OFFSET: usize = 24;
/// Where the caller's request id sits in the hop extension.
const ORIGIN_OFFSET: usize = (MAX_HOPS - HEADER_HOPS) * HOP_LEN;
const HOP_LEN: usize = 10;

/// One step of a function chain: which function, on which device, with what parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hop {
    pub function: u8,
    pub device: u8,
    pub param: u64,
}

impl Hop {
    pub fn local(function: u8, param: u64) -> Hop {
        Hop {
            function,
            device: DEVICE_SELF,
            param,
        }
    }
}

/// A decoded request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u8,
    pub tenant: u16,
    pub hop_count: u8,
    pub hop_index: u8,
    pub request_id: u64,
    pub payload_len: u32,
    pub reply_device: u8,
    /// Time budget in microseconds, counted from the first byte of the
    /// request reaching a node (0: none, at most [`MAX_BUDGET_US`]); a hop
    /// not started within it is answered `TIMEOUT`.
    pub budget_us: u32,
    pub hops: [Hop; MAX_HOPS],
    /// The caller's own request id, on a hop a node forwards with a direct
    /// reply (`request_id` is then the link's): the id the answer carries
    /// when it is written to the caller's endpoint. Travels in the hop
    /// extension (bytes 40..48); 0 otherwise.
    pub origin_id: u64,
}

/// Largest budget the 24-bit field holds (about 16.8 s).
pub const MAX_BUDGET_US: u32 = (1 << 24) - 1;

/// Why a request header was refused. The variant says whether the stream can
/// still be trusted: after `BadMagic` / `BadVersion` the payload length is
/// meaningless and the connection must close.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("bad magic 0x{0:04x} (expected 0x4f51)")]
    BadMagic(u16),
    #[error("unsupported protocol version {version} (this node speaks 1)")]
    BadVersion { version: u8, request_id: u64 },
    #[error("reserved flag bits set: 0x{0:02x}")]
    ReservedFlags(u8),
    #[error("hop_count {0} outside 1..=4 (5..=8 need the hop extension, flags bit 0)")]
    BadHopCount(u8),
    #[error("the hop extension flag is set but hop_count {0} fits the header (1..=4)")]
    NeedlessExtension(u8),
    #[error("hop_index {index} not below hop_count {count}")]
    BadHopIndex { index: u8, count: u8 },
    #[error("reserved bytes are not zero")]
    ReservedBytes,
    #[error("hop {0} beyond hop_count is not zero")]
    UnusedHop(usize),
}

impl HeaderError {
    /// True when the rest of the stream cannot be parsed after this error.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            HeaderError::BadMagic(_) | HeaderError::BadVersion { .. }
        )
    }
}

impl RequestHeader {
    /// A single-hop request for `function` with `param`, to be answered to the caller.
    pub fn single(request_id: u64, function: u8, param: u64, payload_len: u32) -> RequestHeader {
        let mut hops = [Hop::default(); MAX_HOPS];
        hops[0] = Hop::local(function, param);
        RequestHeader {
            flags: 0,
            tenant: 0,
            hop_count: 1,
            hop_index: 0,
            request_id,
            payload_len,
            reply_device: DEVICE_SELF,
            budget_us: 0,
            hops,
            origin_id: 0,
        }
    }

    /// A request running `hops` in order, the last one's result answered to
    /// the caller; `None` if there are none or more than a header carries.
    pub fn chain(request_id: u64, hops: &[Hop], payload_len: u32) -> Option<RequestHeader> {
        if hops.is_empty() || hops.len() > MAX_HOPS {
            return None;
        }
        let mut h = RequestHeader::single(request_id, 0, 0, payload_len);
        h.hop_count = hops.len() as u8;
        h.hops[..hops.len()].copy_from_slice(hops);
        if hops.len() > HEADER_HOPS {
            h.flags |= FLAG_HOP_EXT;
        }
        Some(h)
    }

    /// The hop extension follows this header on the wire.
    pub fn has_ext(&self) -> bool {
        self.flags & FLAG_HOP_EXT != 0
    }

    /// The answer is to carry per-hop timings.
    pub fn traced(&self) -> bool {
        self.flags & FLAG_TRACE != 0
    }

    /// `reply_device` is an endpoint to deliver to on whichever node answers.
    pub fn direct_reply(&self) -> bool {
        self.flags & FLAG_DIRECT_REPLY != 0
    }

    /// A node forwarded this hop (the sender is owed receipts).
    pub fn forwarded(&self) -> bool {
        self.flags & FLAG_FORWARDED != 0
    }

    /// A forwarded direct-reply hop: it carries the caller's request id in
    /// the extension, whatever its hop count.
    pub fn carries_origin(&self) -> bool {
        self.forwarded() && self.direct_reply()
    }

    /// The id the caller gave this request (what its answer carries when
    /// written to the caller's reply endpoint).
    pub fn caller_id(&self) -> u64 {
        if self.carries_origin() {
            self.origin_id
        } else {
            self.request_id
        }
    }

    /// This hop as a node forwards it to a peer (`docs/protocol.md`,
    /// "Forwarding"): the link's request id `link_id`, the length of the
    /// payload it carries now (an earlier hop's output), [`FLAG_FORWARDED`],
    /// the caller's id as `origin_id`, and the answer back on the link
    /// unless the reply is direct (the node that answers writes to the
    /// caller's endpoint then). Tenant and budget stay the caller's to set.
    pub fn for_link(&self, link_id: u64, payload_len: u32) -> RequestHeader {
        let mut h = *self;
        h.request_id = link_id;
        h.payload_len = payload_len;
        if !h.direct_reply() {
            h.reply_device = DEVICE_SELF;
        }
        h.origin_id = self.caller_id();
        h.flags |= FLAG_FORWARDED;
        h.set_ext_flag();
        h
    }

    /// Set or clear [`FLAG_HOP_EXT`] as the hops and flags need it.
    pub fn set_ext_flag(&mut self) {
        if self.hop_count as usize > HEADER_HOPS || self.carries_origin() {
            self.flags |= FLAG_HOP_EXT;
        } else {
            self.flags &= !FLAG_HOP_EXT;
        }
    }

    /// Bytes before the payload on the wire: the header, and the extension if any.
    pub fn wire_len(&self) -> usize {
        if self.has_ext() {
            HEADER_LEN + EXT_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The header and, when flagged, the extension: the first
    /// [`RequestHeader::wire_len`] bytes are what goes before the payload.
    pub fn encode_wire(&self) -> [u8; HEADER_LEN + EXT_LEN] {
        let mut b = [0u8; HEADER_LEN + EXT_LEN];
        b[..HEADER_LEN].copy_from_slice(&self.encode());
        if self.has_ext() {
            b[HEADER_LEN..].copy_from_slice(&self.encode_ext());
        }
        b
    }

    /// The hop extension: hops 4..8 as 10-byte records, the caller's
    /// request id on a forwarded direct-reply hop (else 0), 16 zero bytes.
    pub fn encode_ext(&self) -> [u8; EXT_LEN] {
        let mut b = [0u8; EXT_LEN];
        for (i, hop) in self.hops[HEADER_HOPS..].iter().enumerate() {
            write_hop(&mut b[i * HOP_LEN..], hop);
        }
        if self.carries_origin() {
            b[ORIGIN_OFFSET..ORIGIN_OFFSET + 8].copy_from_slice(&self.origin_id.to_le_bytes());
        }
        b
    }

    /// Fill hops 4..8 from the extension that followed a header flagged
    /// [`FLAG_HOP_EXT`], and validate it (reserved bytes zero, hops beyond
    /// `hop_count` zero). Errors are not fatal: the payload length is known.
    pub fn decode_ext(&mut self, b: &[u8; EXT_LEN]) -> Result<(), HeaderError> {
        for i in 0..MAX_HOPS - HEADER_HOPS {
            self.hops[HEADER_HOPS + i] = read_hop(&b[i * HOP_LEN..]);
        }
        let reserved = if self.carries_origin() {
            self.origin_id = u64_at(b, ORIGIN_OFFSET);
            ORIGIN_OFFSET + 8
        } else {
            ORIGIN_OFFSET
        };
        if b[reserved..].iter().any(|&x| x != 0) {
            return Err(HeaderError::ReservedBytes);
        }
        if let Some(i) =
            (self.hop_count as usize..MAX_HOPS).find(|&i| self.hops[i] != Hop::default())
        {
            return Err(HeaderError::UnusedHop(i));
        }
        Ok(())
    }

    /// The hop to run next.
    pub fn current_hop(&self) -> Hop {
        self.hops[self.hop_index as usize % MAX_HOPS]
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&REQUEST_MAGIC.to_le_bytes());
        b[2] = VERSION;
        b[3] = self.flags;
        b[4..6].copy_from_slice(&self.tenant.to_le_bytes());
        b[6] = self.hop_count;
        b[7] = self.hop_index;
        b[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.payload_len.to_le_bytes());
        b[20] = self.reply_device;
        b[21..24].copy_from_slice(&self.budget_us.min(MAX_BUDGET_US).to_le_bytes()[..3]);
        for (i, hop) in self.hops[..HEADER_HOPS].iter().enumerate() {
            write_hop(&mut b[HOPS_OFFSET + i * HOP_LEN..], hop);
        }
        b
    }

    /// Decode and validate a header; see [`HeaderError::is_fatal`].
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<RequestHeader, HeaderError> {
        let magic = u16_at(b, 0);
        if magic != REQUEST_MAGIC {
            return Err(HeaderError::BadMagic(magic));
        }
        let request_id = u64_at(b, 8);
        if b[2] != VERSION {
            return Err(HeaderError::BadVersion {
                version: b[2],
                request_id,
            });
        }
        let mut hops = [Hop::default(); MAX_HOPS];
        for (i, hop) in hops[..HEADER_HOPS].iter_mut().enumerate() {
            *hop = read_hop(&b[HOPS_OFFSET + i * HOP_LEN..]);
        }
        let h = RequestHeader {
            flags: b[3],
            tenant: u16_at(b, 4),
            hop_count: b[6],
            hop_index: b[7],
            request_id,
            payload_len: u32_at(b, 16),
            reply_device: b[20],
            budget_us: u32::from_le_bytes([b[21], b[22], b[23], 0]),
            hops,
            origin_id: 0,
        };
        if h.flags & !KNOWN_FLAGS != 0 {
            return Err(HeaderError::ReservedFlags(h.flags & !KNOWN_FLAGS));
        }
        let max = if h.has_ext() { MAX_HOPS } else { HEADER_HOPS };
        if h.hop_count == 0 || h.hop_count as usize > max {
            return Err(HeaderError::BadHopCount(h.hop_count));
        }
        if h.has_ext() && h.hop_count as usize <= HEADER_HOPS && !h.carries_origin() {
            return Err(HeaderError::NeedlessExtension(h.hop_count));
        }
        if h.hop_index >= h.hop_count {
            return Err(HeaderError::BadHopIndex {
                index: h.hop_index,
                count: h.hop_count,
            });
        }
        // Hops past the header's four are checked with the extension.
        if let Some(i) = (h.hop_count as usize..HEADER_HOPS).find(|&i| h.hops[i] != Hop::default())
        {
            return Err(HeaderError::UnusedHop(i));
        }
        Ok(h)
    }

    /// Request id at its fixed offset, readable even from a header that fails to decode.
    pub fn peek_request_id(b: &[u8; HEADER_LEN]) -> u64 {
        u64_at(b, 8)
    }
}

fn read_hop(b: &[u8]) -> Hop {
    let mut p = [0u8; 8];
    p.copy_from_slice(&b[2..10]);
    Hop {
        function: b[0],
        device: b[1],
        param: u64::from_le_bytes(p),
    }
}

fn write_hop(b: &mut [u8], hop: &Hop) {
    b[0] = hop.function;
    b[1] = hop.device;
    b[2..10].copy_from_slice(&hop.param.to_le_bytes());
}
