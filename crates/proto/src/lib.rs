//! The offrac wire format (see `docs/protocol.md`, the single source of truth).
//!
//! Every request and response starts with a fixed 64-byte little-endian header
//! followed by `payload_len` bytes of payload.

mod buffer;
pub mod chain_spec;
mod function;
mod request;
mod response;
mod status;

pub use buffer::{
    buffer_param, collective_hop_param, decode_buffer_param, decode_collective_hop_param, BufferOp,
    BufferParamError,
};
pub use function::{
    Elem, FunctionId, FunctionSpec, Granularity, Layout, ParamField, ParamKind, SlotState,
    FUNCTIONS,
};
pub use request::{
    HeaderError, Hop, RequestHeader, EXT_LEN, FLAG_DIRECT_REPLY, FLAG_FORWARDED, FLAG_HOP_EXT,
    FLAG_TRACE, HEADER_HOPS, MAX_BUDGET_US, MAX_HOPS,
};
pub use response::{
    HopTime, ResponseError, ResponseHeader, HOP_TIMES_LEN, RESP_FLAG_HOP_TIMES, RESP_FLAG_RECEIPT,
};
pub use status::Status;

/// Size of every header, request or response: one 512-bit beat.
pub const HEADER_LEN: usize = 64;
/// The protocol version this crate speaks.
pub const VERSION: u8 = 1;
/// Request magic (bytes `51 4F` on the wire).
pub const REQUEST_MAGIC: u16 = 0x4F51;
/// Response magic (bytes `52 53` on the wire).
pub const RESPONSE_MAGIC: u16 = 0x5352;
/// Device id meaning "this node" in a hop, or "the caller" as reply device.
pub const DEVICE_SELF: u8 = 0xFF;
/// The tenant id reserved for nodes: a node signs the hello on its links to
/// other nodes as this tenant (with the cluster's `node_key`), and a hop
/// forwarded on such a link whose origin connection was anonymous carries
/// it in the header's `tenant` (`docs/protocol.md`, "Node links").
pub const TENANT_NODE: u16 = 0xFFFF;
/// Control function: register the connection this request arrives on as a
/// reply endpoint. `param`: the endpoint id wanted (0..=254), or 255 for any
/// free one; answered `OK` with the endpoint id in `detail`. Requests whose
/// `reply_device` names the endpoint get their answers there.
pub const FN_REGISTER_REPLY: u8 = 0xFE;
/// Control function: describe the node (its functions, slots, peers and
/// metrics address) as a UTF-8 JSON payload; no input. Also a ping.
pub const FN_DESCRIBE: u8 = 0xFD;
/// Control function: a control request (upload a module, swap a slot's
/// function, list, unload), its payload an authenticated envelope
/// (`docs/protocol.md`, "Control requests"; `docs/control.md`). Handed to
/// the node's control plane, never to a slot.
pub const FN_CONTROL: u8 = 0xFC;
/// Control function: a collective (`docs/collectives.md`): a client's call
/// on its own node, or a message between the nodes of a communicator; the
/// payload starts with a 64-byte collective descriptor. Handled by the
/// node's collectives, never by a slot. In a chain of two or more hops it
/// is a collective hop (`docs/protocol.md`, "Collective hops"; `param`:
/// [`collective_hop_param`]).
pub const FN_COLLECTIVE: u8 = 0xFB;
/// Node function: a named buffer (`docs/protocol.md`, "Named buffers"):
/// keep the hop's input on the node under a name, or read a kept buffer as
/// the next hop's input. May be any hop of a chain; run by the node itself,
/// never by a slot. `param`: [`buffer_param`].
pub const FN_BUFFER: u8 = 0xFF;
/// Request id of a response that answers no request the node could identify
/// (a wrong magic, or a stall before the id's bytes arrived). Clients must not
/// use it for requests; a response carrying it is about the connection.
pub const REQUEST_ID_NONE: u64 = u64::MAX;

pub(crate) fn u16_at(b: &[u8; HEADER_LEN], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
pub(crate) fn u32_at(b: &[u8; HEADER_LEN], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}
pub(crate) fn u64_at(b: &[u8; HEADER_LEN], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}
