//! The control envelope: the payload of a request to [`FN_CONTROL`]
//! (`docs/protocol.md`, "Control requests"; `docs/control.md`).
//!
//! ```text
//! off len  field
//!   0   1  op          1 UPLOAD, 2 SWAP, 3 LIST, 4 UNLOAD, 5 HELLO, 6 REPLICATE, 7 SHRINK, 8 RESIZE
//!   1   1  reserved    0
//!   2   2  tenant      whose key signs the envelope (u16 LE)
//!   4   4  body_len    (u32 LE)
//!   8   8  timestamp   sender's clock, milliseconds since the Unix epoch (u64 LE)
//!  16   8  nonce       never reused by a tenant within the replay window (u64 LE)
//!  24   8  reserved    0
//!  32   n  body        op-specific (below)
//! 32+n 32  mac         HMAC-SHA256(tenant key, bytes 0 .. 32+n)
//! ```
//!
//! Bodies: UPLOAD — the module's bytes (`.wasm`); SWAP — `u16 slot`,
//! `u8 function`, `u8 kind` (0 built-in, 1 WebAssembly), then for kind 1 the
//! module's 32-byte SHA-256 digest; LIST — empty; UNLOAD — a 32-byte digest,
//! then optionally a flags byte `1` (force: swap the slots running it out
//! first); HELLO — empty (it attributes the connection it arrives on to the
//! tenant); REPLICATE — `u16 n`, `u8 function`, `u8 kind`, then for kind 1
//! the digest (load `n` more instances into spare slots); SHRINK — `u16 keep`,
//! `u8 function`, `u8` 0 (give spare slots serving it back, all but `keep`);
//! RESIZE — a template's name, UTF-8, 1 to 64 bytes.

use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// The reserved function id of control requests (OffRAC App. F proposes a
/// reserved accelerator id for them).
pub use offrac_proto::FN_CONTROL;
/// Fixed part before the body.
pub const ENVELOPE_HEADER: usize = 32;
/// Length of the trailing MAC.
pub const MAC_LEN: usize = 32;
/// Longest template name of a RESIZE.
pub const MAX_TEMPLATE_NAME: usize = 64;

type HmacSha256 = hmac::Hmac<Sha256>;

/// A SHA-256 digest naming a module.
pub type Digest = [u8; 32];

/// What a slot is to run after a swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// A built-in function of the registry.
    Builtin(u8),
    /// A WebAssembly module of the library, served under function id `function`.
    Wasm { function: u8, digest: Digest },
}

impl Target {
    /// The function id the slot answers to with this target.
    pub fn function(&self) -> u8 {
        match *self {
            Target::Builtin(f) => f,
            Target::Wasm { function, .. } => function,
        }
    }
}

/// One control operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Upload(Vec<u8>),
    Swap {
        slot: u16,
        target: Target,
    },
    List,
    /// Remove a module from the library; `force`: swap every slot running
    /// it out to the slot's configured built-in first (`docs/control.md`).
    Unload {
        digest: Digest,
        force: bool,
    },
    /// Load `n` more instances of `target` into spare slots chosen by the
    /// node (`docs/control.md`, "Replicate").
    Replicate {
        n: u16,
        target: Target,
    },
    /// Give the spare slots serving `function` back to spare, all but
    /// `keep` of them (`docs/control.md`, "Replicate").
    Shrink {
        keep: u16,
        function: u8,
    },
    /// Move the node's slots to the arrangement of a configured template
    /// (`docs/control.md`, "Resize").
    Resize(String),
    /// Attribute the data connection this arrives on to the envelope's
    /// tenant (`docs/protocol.md`, "Tenants").
    Hello,
}

impl Op {
    pub fn code(&self) -> u8 {
        match self {
            Op::Upload(_) => 1,
            Op::Swap { .. } => 2,
            Op::List => 3,
            Op::Unload { .. } => 4,
            Op::Hello => 5,
            Op::Replicate { .. } => 6,
            Op::Shrink { .. } => 7,
            Op::Resize(_) => 8,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Op::Upload(_) => "upload",
            Op::Swap { .. } => "swap",
            Op::List => "list",
            Op::Unload { .. } => "unload",
            Op::Hello => "hello",
            Op::Replicate { .. } => "replicate",
            Op::Shrink { .. } => "shrink",
            Op::Resize(_) => "resize",
        }
    }

    fn body(&self) -> Vec<u8> {
        match self {
            Op::Upload(m) => m.clone(),
            Op::Swap { slot: n, target } | Op::Replicate { n, target } => {
                let mut b = n.to_le_bytes().to_vec();
                match target {
                    Target::Builtin(f) => b.extend_from_slice(&[*f, 0]),
                    Target::Wasm { function, digest } => {
                        b.extend_from_slice(&[*function, 1]);
                        b.extend_from_slice(digest);
                    }
                }
                b
            }
            Op::List | Op::Hello => Vec::new(),
            Op::Resize(name) => name.as_bytes().to_vec(),
            Op::Shrink { keep, function } => {
                let mut b = keep.to_le_bytes().to_vec();
                b.extend_from_slice(&[*function, 0]);
                b
            }
            Op::Unload { digest, force } => {
                let mut b = digest.to_vec();
                if *force {
                    b.push(1);
                }
                b
            }
        }
    }
}

/// A decoded, not yet authenticated, control envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub tenant: u16,
    pub timestamp_ms: u64,
    pub nonce: u64,
    pub op: Op,
    /// The MAC as received.
    pub mac: [u8; MAC_LEN],
    /// Bytes `0 .. 32+n`, the ones the MAC covers.
    signed_len: usize,
}

/// Why an envelope cannot be decoded (answered `MALFORMED`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("control payload of {0} bytes is shorter than its 64-byte minimum")]
    Short(usize),
    #[error("control payload of {got} bytes does not match its body length {body} (+64)")]
    Length { got: usize, body: usize },
    #[error("unknown control op {0}")]
    UnknownOp(u8),
    #[error("reserved control bytes are not zero")]
    Reserved,
    #[error("bad {op} body: {why}")]
    Body { op: &'static str, why: &'static str },
}

/// Encode and sign an envelope with `key`.
pub fn encode(tenant: u16, timestamp_ms: u64, nonce: u64, op: &Op, key: &[u8]) -> Vec<u8> {
    let body = op.body();
    let mut b = Vec::with_capacity(ENVELOPE_HEADER + body.len() + MAC_LEN);
    b.push(op.code());
    b.push(0);
    b.extend_from_slice(&tenant.to_le_bytes());
    b.extend_from_slice(&(body.len() as u32).to_le_bytes());
    b.extend_from_slice(&timestamp_ms.to_le_bytes());
    b.extend_from_slice(&nonce.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&body);
    let mac = mac_of(key, &b);
    b.extend_from_slice(&mac);
    b
}

/// HMAC-SHA256 of `bytes` under `key`.
pub fn mac_of(key: &[u8], bytes: &[u8]) -> [u8; MAC_LEN] {
    // HMAC takes keys of any length.
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(bytes);
    m.finalize().into_bytes().into()
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

impl Envelope {
    /// Decode `payload` (no authentication yet: see [`crate::auth`]).
    pub fn decode(payload: &[u8]) -> Result<Envelope, WireError> {
        if payload.len() < ENVELOPE_HEADER + MAC_LEN {
            return Err(WireError::Short(payload.len()));
        }
        let body_len =
            u32::from_le_bytes([payload[4], payload[5], payload[6], payload[7]]) as usize;
        if payload.len() != ENVELOPE_HEADER + body_len + MAC_LEN {
            return Err(WireError::Length {
                got: payload.len(),
                body: body_len,
            });
        }
        if payload[1] != 0 || payload[24..32].iter().any(|&b| b != 0) {
            return Err(WireError::Reserved);
        }
        let body = &payload[ENVELOPE_HEADER..ENVELOPE_HEADER + body_len];
        let digest = |op: &'static str, b: &[u8]| -> Result<Digest, WireError> {
            b.try_into().map_err(|_| WireError::Body {
                op,
                why: "a digest is 32 bytes",
            })
        };
        // SWAP and REPLICATE: `u16`, `u8 function`, `u8 kind`, [digest].
        let targeted = |op: &'static str| -> Result<(u16, Target), WireError> {
            let bad = |why| WireError::Body { op, why };
            if body.len() < 4 {
                return Err(bad("shorter than 4 bytes"));
            }
            let n = u16::from_le_bytes([body[0], body[1]]);
            let function = body[2];
            let target = match (body[3], body.len()) {
                (0, 4) => Target::Builtin(function),
                (1, 36) => Target::Wasm {
                    function,
                    digest: digest(op, &body[4..])?,
                },
                (0 | 1, _) => return Err(bad("length does not match its kind")),
                _ => return Err(bad("kind is neither 0 (built-in) nor 1 (WebAssembly)")),
            };
            Ok((n, target))
        };
        let op =
            match payload[0] {
                1 => Op::Upload(body.to_vec()),
                2 => {
                    let (slot, target) = targeted("swap")?;
                    Op::Swap { slot, target }
                }
                6 => match targeted("replicate")? {
                    (0, _) => {
                        return Err(WireError::Body {
                            op: "replicate",
                            why: "n must be at least 1",
                        })
                    }
                    (n, target) => Op::Replicate { n, target },
                },
                3 if body.is_empty() => Op::List,
                3 => {
                    return Err(WireError::Body {
                        op: "list",
                        why: "the body must be empty",
                    })
                }
                8 => match std::str::from_utf8(body) {
                    Ok(name) if !name.is_empty() && name.len() <= MAX_TEMPLATE_NAME => {
                        Op::Resize(name.to_string())
                    }
                    _ => {
                        return Err(WireError::Body {
                            op: "resize",
                            why: "a template name is 1 to 64 bytes of UTF-8",
                        })
                    }
                },
                7 => match body {
                    [k0, k1, function, 0] => Op::Shrink {
                        keep: u16::from_le_bytes([*k0, *k1]),
                        function: *function,
                    },
                    _ => {
                        return Err(WireError::Body {
                            op: "shrink",
                            why: "the body is u16 keep, u8 function, u8 0",
                        })
                    }
                },
                4 => match body.len() {
                    32 => Op::Unload {
                        digest: digest("unload", body)?,
                        force: false,
                    },
                    33 if body[32] == 1 => Op::Unload {
                        digest: digest("unload", &body[..32])?,
                        force: true,
                    },
                    33 => return Err(WireError::Body {
                        op: "unload",
                        why: "the flags byte must be 1 (force); without force send the digest only",
                    }),
                    _ => {
                        return Err(WireError::Body {
                            op: "unload",
                            why: "a digest is 32 bytes (33 with the force flag)",
                        })
                    }
                },
                5 if body.is_empty() => Op::Hello,
                5 => {
                    return Err(WireError::Body {
                        op: "hello",
                        why: "the body must be empty",
                    })
                }
                other => return Err(WireError::UnknownOp(other)),
            };
        let signed_len = ENVELOPE_HEADER + body_len;
        let mut mac = [0u8; MAC_LEN];
        mac.copy_from_slice(&payload[signed_len..]);
        Ok(Envelope {
            tenant: u16::from_le_bytes([payload[2], payload[3]]),
            timestamp_ms: u64_at(payload, 8),
            nonce: u64_at(payload, 16),
            op,
            mac,
            signed_len,
        })
    }

    /// Whether the MAC is right for `key` over the signed bytes of `payload`
    /// (the one this envelope was decoded from); constant time.
    pub fn mac_ok(&self, payload: &[u8], key: &[u8]) -> bool {
        let Some(signed) = payload.get(..self.signed_len) else {
            return false;
        };
        let mut m =
            <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC accepts any key length");
        m.update(signed);
        m.verify_slice(&self.mac).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_round_trips_and_verifies() {
        let key = b"k1";
        let ops = [
            Op::Upload(vec![0, 0x61, 0x73, 0x6d]),
            Op::Swap {
                slot: 3,
                target: Target::Builtin(2),
            },
            Op::Swap {
                slot: 1,
                target: Target::Wasm {
                    function: 130,
                    digest: [7; 32],
                },
            },
            Op::List,
            Op::Unload {
                digest: [9; 32],
                force: false,
            },
            Op::Unload {
                digest: [9; 32],
                force: true,
            },
            Op::Hello,
            Op::Replicate {
                n: 2,
                target: Target::Builtin(1),
            },
            Op::Shrink {
                keep: 1,
                function: 5,
            },
            Op::Resize("dlrm".into()),
            Op::Replicate {
                n: 1,
                target: Target::Wasm {
                    function: 131,
                    digest: [4; 32],
                },
            },
        ];
        for op in ops {
            let b = encode(5, 1_700_000_000_000, 42, &op, key);
            let e = Envelope::decode(&b).unwrap();
            assert_eq!(
                (e.tenant, e.timestamp_ms, e.nonce),
                (5, 1_700_000_000_000, 42)
            );
            assert_eq!(e.op, op);
            assert!(e.mac_ok(&b, key));
            assert!(!e.mac_ok(&b, b"k2"));
        }
    }

    #[test]
    fn any_flipped_signed_bit_fails_the_mac() {
        let b = encode(1, 2, 3, &Op::List, b"key");
        for i in 0..ENVELOPE_HEADER {
            let mut c = b.clone();
            c[i] ^= 1;
            // Either it no longer decodes, or it decodes and the MAC fails.
            if let Ok(e) = Envelope::decode(&c) {
                assert!(!e.mac_ok(&c, b"key"), "byte {i}");
            }
        }
    }

    #[test]
    fn bad_envelopes_are_errors_not_panics() {
        assert_eq!(Envelope::decode(&[0; 10]), Err(WireError::Short(10)));
        let mut b = encode(1, 2, 3, &Op::List, b"key");
        b[0] = 9;
        assert_eq!(Envelope::decode(&b), Err(WireError::UnknownOp(9)));
        let mut b = encode(1, 2, 3, &Op::List, b"key");
        b.push(0);
        assert!(matches!(
            Envelope::decode(&b),
            Err(WireError::Length { .. })
        ));
        let b = encode(
            1,
            2,
            3,
            &Op::Unload {
                digest: [0; 32],
                force: false,
            },
            b"key",
        );
        let mut short = b[..ENVELOPE_HEADER].to_vec();
        short[4] = 3;
        short.extend_from_slice(&[0; 3 + MAC_LEN]);
        assert!(matches!(
            Envelope::decode(&short),
            Err(WireError::Body { .. })
        ));
        // An unload flags byte other than 1, and a replicate of 0 instances.
        let mut b = encode(
            1,
            2,
            3,
            &Op::Unload {
                digest: [0; 32],
                force: true,
            },
            b"key",
        );
        b[ENVELOPE_HEADER + 32] = 2;
        assert!(matches!(
            Envelope::decode(&b),
            Err(WireError::Body { op: "unload", .. })
        ));
        let b = encode(
            1,
            2,
            3,
            &Op::Replicate {
                n: 0,
                target: Target::Builtin(1),
            },
            b"key",
        );
        assert!(matches!(
            Envelope::decode(&b),
            Err(WireError::Body {
                op: "replicate",
                ..
            })
        ));
    }
}
