//! The 64-byte collective descriptor that starts the payload of every
//! request for function 251 (`FN_COLLECTIVE`): a client's call, and the
//! messages nodes exchange (data, ready-to-receive, abort). Layout in
//! `docs/protocol.md`, "Collectives".

/// Bytes of the descriptor; the data (or an abort's reason) follows it.
pub const DESCRIPTOR_LEN: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A client's call on its own node: the payload after the descriptor is
    /// this rank's input.
    Call = 1,
    /// Node to node: a segment of a transfer, at `offset` of the work buffer.
    Data = 2,
    /// Node to node (rendezvous): the receiver has entered `step` and takes
    /// the sender's large transfer now.
    Ready = 3,
    /// Node to node: the sender's rank failed the collective; UTF-8 reason follows.
    Abort = 4,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Broadcast = 1,
    Reduce = 2,
    AllReduce = 3,
    Gather = 4,
    Scatter = 5,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    F32 = 1,
    I32 = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedOp {
    None = 0,
    Sum = 1,
    Max = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Chosen by the node from size and rank count (calls only).
    Auto = 0,
    /// Root to every rank (broadcast, scatter) or every rank to root
    /// (reduce, gather) in one step.
    OneToAll = 1,
    /// Binomial tree: ⌈log2 n⌉ steps (broadcast, reduce).
    Tree = 2,
    /// Ring reduce-scatter then all-gather: 2(n−1) steps of 1/n of the data (all-reduce).
    Ring = 3,
    /// Pairwise exchange of everything, log2 n steps, n a power of two (all-reduce).
    RecursiveDoubling = 4,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Broadcast => "broadcast",
            Op::Reduce => "reduce",
            Op::AllReduce => "allreduce",
            Op::Gather => "gather",
            Op::Scatter => "scatter",
        }
    }
    pub fn reduces(self) -> bool {
        matches!(self, Op::Reduce | Op::AllReduce)
    }
}

impl Dtype {
    pub fn size(self) -> usize {
        4
    }
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::I32 => "int32",
        }
    }
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Auto => "auto",
            Algorithm::OneToAll => "one-to-all",
            Algorithm::Tree => "tree",
            Algorithm::Ring => "ring",
            Algorithm::RecursiveDoubling => "recursive-doubling",
        }
    }
}

/// The members of a communicator: a set of device ids (bit `d` of byte
/// `d / 8`). Rank = position among the members in increasing device id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Members(pub [u8; 32]);

impl Members {
    pub fn of(devices: &[u8]) -> Members {
        let mut m = Members::default();
        for &d in devices {
            m.0[d as usize / 8] |= 1 << (d % 8);
        }
        m
    }
    pub fn contains(&self, device: u8) -> bool {
        self.0[device as usize / 8] & (1 << (device % 8)) != 0
    }
    /// Member devices in rank order.
    pub fn devices(&self) -> Vec<u8> {
        (0..=255u8).filter(|&d| self.contains(d)).collect()
    }
    pub fn rank_of(&self, device: u8) -> Option<usize> {
        self.contains(device)
            .then(|| (0..device).filter(|&d| self.contains(d)).count())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    pub kind: Kind,
    pub op: Op,
    pub dtype: Dtype,
    pub redop: RedOp,
    /// Rank of the root (broadcast, reduce, gather, scatter); 0 otherwise.
    pub root: u8,
    pub algorithm: Algorithm,
    /// Rank of the sending node (node-to-node messages); 0 in calls.
    pub src: u8,
    /// Names one collective of a communicator: every rank's call uses the same tag.
    pub tag: u64,
    /// Elements per rank (the block of gather/scatter, the vector otherwise).
    pub count: u32,
    pub step: u32,
    /// Byte offset of a data segment in the work buffer.
    pub offset: u32,
    /// Calls: the deadline in ms (0: the node's default).
    pub timeout_ms: u32,
    pub members: Members,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("collective payload of {0} bytes is shorter than its 64-byte descriptor")]
    Short(usize),
    #[error("unknown collective message kind {0}")]
    Kind(u8),
    #[error("unknown collective {0} (1 broadcast, 2 reduce, 3 allreduce, 4 gather, 5 scatter)")]
    Op(u8),
    #[error("unknown element type {0} (1 float32, 2 int32)")]
    Dtype(u8),
    #[error("unknown reduction {0} (1 sum, 2 max)")]
    RedOp(u8),
    #[error("unknown algorithm {0} (0 auto, 1 one-to-all, 2 tree, 3 ring, 4 recursive doubling)")]
    Algorithm(u8),
    #[error("{0} needs a reduction (sum or max)")]
    NeedsRedOp(&'static str),
    #[error("{0} takes no reduction")]
    NoRedOp(&'static str),
    #[error("reserved byte 7 of the collective descriptor is {0}, must be 0")]
    Reserved(u8),
    #[error("byte 7 of a node-to-node collective message is {0:#x}: only bit 0 (answer this message) is defined")]
    MessageFlags(u8),
}

/// Byte 7 of a node-to-node message (`DATA`, `READY`, `ABORT`), bit 0: the
/// receiver answers this message with an empty `OK` once it has handled it
/// (and every message the link carried before it). A message without it is
/// answered only if it is refused (`docs/protocol.md`, "Collectives").
pub const MSG_ANSWER: u8 = 1;

/// The flags in byte 7 of a node-to-node message, cleared so that
/// [`Descriptor::decode`] reads the rest; `Ok(0)` and nothing changed for a
/// call (whose byte 7 the driver reads) or a payload too short or of an
/// unknown kind (left to [`Descriptor::decode`] to refuse).
pub fn take_message_flags(payload: &mut [u8]) -> Result<u8, WireError> {
    if payload.len() < DESCRIPTOR_LEN || !matches!(payload[0], 2..=4) {
        return Ok(0);
    }
    let flags = payload[7];
    if flags & !MSG_ANSWER != 0 {
        return Err(WireError::MessageFlags(flags));
    }
    payload[7] = 0;
    Ok(flags)
}

impl Descriptor {
    /// A client's call: `op` over `count` elements of `dtype` per rank among
    /// `members`, with the defaults a caller changes by struct update: the
    /// root rank 0, the algorithm chosen by the node, a sum for the ops that
    /// reduce, tag 0 and the node's default deadline.
    pub fn call(op: Op, dtype: Dtype, count: u32, members: Members) -> Descriptor {
        Descriptor {
            kind: Kind::Call,
            op,
            dtype,
            redop: if op.reduces() {
                RedOp::Sum
            } else {
                RedOp::None
            },
            root: 0,
            algorithm: Algorithm::Auto,
            src: 0,
            tag: 0,
            count,
            step: 0,
            offset: 0,
            timeout_ms: 0,
            members,
        }
    }

    pub fn encode(&self) -> [u8; DESCRIPTOR_LEN] {
        let mut b = [0u8; DESCRIPTOR_LEN];
        b[0] = self.kind as u8;
        b[1] = self.op as u8;
        b[2] = self.dtype as u8;
        b[3] = self.redop as u8;
        b[4] = self.root;
        b[5] = self.algorithm as u8;
        b[6] = self.src;
        b[8..16].copy_from_slice(&self.tag.to_le_bytes());
        b[16..20].copy_from_slice(&self.count.to_le_bytes());
        b[20..24].copy_from_slice(&self.step.to_le_bytes());
        b[24..28].copy_from_slice(&self.offset.to_le_bytes());
        b[28..32].copy_from_slice(&self.timeout_ms.to_le_bytes());
        b[32..64].copy_from_slice(&self.members.0);
        b
    }

    /// The descriptor at the start of `payload`, and what follows it.
    pub fn decode(payload: &[u8]) -> Result<(Descriptor, &[u8]), WireError> {
        if payload.len() < DESCRIPTOR_LEN {
            return Err(WireError::Short(payload.len()));
        }
        let b = &payload[..DESCRIPTOR_LEN];
        let kind = match b[0] {
            1 => Kind::Call,
            2 => Kind::Data,
            3 => Kind::Ready,
            4 => Kind::Abort,
            k => return Err(WireError::Kind(k)),
        };
        let op = match b[1] {
            1 => Op::Broadcast,
            2 => Op::Reduce,
            3 => Op::AllReduce,
            4 => Op::Gather,
            5 => Op::Scatter,
            o => return Err(WireError::Op(o)),
        };
        let dtype = match b[2] {
            1 => Dtype::F32,
            2 => Dtype::I32,
            d => return Err(WireError::Dtype(d)),
        };
        let redop = match b[3] {
            0 => RedOp::None,
            1 => RedOp::Sum,
            2 => RedOp::Max,
            r => return Err(WireError::RedOp(r)),
        };
        if op.reduces() && redop == RedOp::None {
            return Err(WireError::NeedsRedOp(op.name()));
        }
        if !op.reduces() && redop != RedOp::None {
            return Err(WireError::NoRedOp(op.name()));
        }
        let algorithm = match b[5] {
            0 => Algorithm::Auto,
            1 => Algorithm::OneToAll,
            2 => Algorithm::Tree,
            3 => Algorithm::Ring,
            4 => Algorithm::RecursiveDoubling,
            a => return Err(WireError::Algorithm(a)),
        };
        if b[7] != 0 {
            return Err(WireError::Reserved(b[7]));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let d = Descriptor {
            kind,
            op,
            dtype,
            redop,
            root: b[4],
            algorithm,
            src: b[6],
            tag: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            count: u32_at(16),
            step: u32_at(20),
            offset: u32_at(24),
            timeout_ms: u32_at(28),
            members: Members(b[32..64].try_into().expect("32 bytes")),
        };
        Ok((d, &payload[DESCRIPTOR_LEN..]))
    }

    /// This descriptor as a node-to-node message of `kind` from rank `src`.
    pub fn message(&self, kind: Kind, src: u8, step: u32, offset: u32, body: &[u8]) -> Vec<u8> {
        let d = Descriptor {
            kind,
            src,
            step,
            offset,
            timeout_ms: 0,
            ..*self
        };
        let mut m = Vec::with_capacity(DESCRIPTOR_LEN + body.len());
        m.extend_from_slice(&d.encode());
        m.extend_from_slice(body);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Descriptor {
        Descriptor {
            kind: Kind::Call,
            op: Op::AllReduce,
            dtype: Dtype::F32,
            redop: RedOp::Sum,
            root: 0,
            algorithm: Algorithm::Auto,
            src: 0,
            tag: 7,
            count: 256,
            step: 0,
            offset: 0,
            timeout_ms: 5000,
            members: Members::of(&[0, 1, 2, 3]),
        }
    }

    #[test]
    fn round_trips_and_ranks() {
        let d = sample();
        let mut bytes = d.encode().to_vec();
        bytes.extend_from_slice(b"xy");
        let (back, rest) = Descriptor::decode(&bytes).unwrap();
        assert_eq!(back, d);
        assert_eq!(rest, b"xy");
        let m = Members::of(&[9, 3, 200]);
        assert_eq!(m.devices(), vec![3, 9, 200]);
        assert_eq!(m.rank_of(200), Some(2));
        assert_eq!(m.rank_of(4), None);
    }

    #[test]
    fn refuses_bad_fields() {
        let mut b = sample().encode();
        b[3] = 0;
        assert_eq!(
            Descriptor::decode(&b).unwrap_err(),
            WireError::NeedsRedOp("allreduce")
        );
        b[3] = 9;
        assert_eq!(Descriptor::decode(&b).unwrap_err(), WireError::RedOp(9));
        assert_eq!(
            Descriptor::decode(&b[..10]).unwrap_err(),
            WireError::Short(10)
        );
        let mut b = sample().encode();
        b[0] = 0;
        assert_eq!(Descriptor::decode(&b).unwrap_err(), WireError::Kind(0));
    }

    #[test]
    fn message_flags_are_read_and_cleared_for_node_to_node_messages_only() {
        let d = sample();
        let mut m = d.message(Kind::Data, 1, 0, 0, b"ab");
        m[7] = MSG_ANSWER;
        assert_eq!(take_message_flags(&mut m), Ok(MSG_ANSWER));
        assert_eq!(m[7], 0);
        assert_eq!(Descriptor::decode(&m).unwrap().0.kind, Kind::Data);
        let mut m = d.message(Kind::Ready, 1, 0, 0, b"");
        assert_eq!(take_message_flags(&mut m), Ok(0));
        m[7] = 2;
        assert_eq!(take_message_flags(&mut m), Err(WireError::MessageFlags(2)));
        // A call's byte 7 is not a message's: left for the driver.
        let mut c = d.encode();
        c[7] = 3;
        assert_eq!(take_message_flags(&mut c), Ok(0));
        assert_eq!(c[7], 3);
    }
}
