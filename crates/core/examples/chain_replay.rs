//! What the software node does after a hop of a chain has run, for the RTL
//! chain router to be replayed against (issue #12's co-verification of
//! `offrac_chain_router.v` against `Engine` itself; `rtl/tests/tb_chain_router.py`
//! writes the input and reads the output, docs/rtl.md describes both).
//!
//! ```sh
//! cargo run --release -p offrac-core --example chain_replay < hops.json > answers.json
//! ```
//! Input: `{"config": {"device_id", "hosted": [function ids], "peers": [device ids],
//! "max_payload"}, "hops": [...]}`, each hop `{"conn", "header": the request's header and
//! extension as on the wire (hex, `hop_index` the hop that runs), "payload": its input (hex),
//! "reassembly_ns", "queue_ns", "exec_ns", "status", "detail", "message", "output" (hex)}`.
//!
//! Per hop, a fresh engine (a slot per hosted function) reads the request
//! (the header at 1 µs, the payload `reassembly_ns` later) and dispatches
//! it. The hop then ends as the worker ends it (`crates/node/src/worker.rs`):
//! a failed hop (`status` ≠ 0, `message` its text) or the chain's last one
//! is answered there (`ResponseHeader::answer`, `Job::time_answer`);
//! otherwise `Job::advance` and `Engine::handle_hop_done`, and what the
//! engine does next is the decision: a `Dispatch` (the next local hop), a
//! `Reply` (`Engine::route`'s refusals, or the orphans' `UNKNOWN_FUNCTION`)
//! or a `Forward`, which the driver turns into the forwarded header, or
//! `UNREACHABLE` for a device without a link (`forward` and
//! `fail_forwarded` in `crates/node/src/driver/links.rs`, the few lines of
//! them this crate cannot call written out below).
//!
//! A request whose answer goes to a reply endpoint (`reply_device`, not a
//! direct reply) is sent after another connection registered the endpoint
//! (the engine refuses it otherwise); its answer is then written there, the
//! router's on the hop's connection (the response path's routing is not
//! the router's): `conn` is the hop's.
//!
//! The engine admits only chains it can run, so the refusals the router
//! makes after an OK hop (its guard: a next function no slot hosts, a device
//! not in the table) are reached the way the software reaches them after
//! admission: the engine is told every other device is a peer (the
//! driver's device table, `peers` here, decides `UNREACHABLE`), and each
//! local function of the chain that no slot hosts gets a slot of its own
//! that is paused before the hop ends and then swapped to a hosted
//! function (`pause_slot`, `resume_slot`), as a reconfiguration does.
//!
//! Output, per hop: `inputs` (the timing sums and the per-hop timings block
//! the router is given: this hop's record in it) and `out`: `port`
//! (`resp`, `net` or `next`), `conn`, and the header bytes then the payload
//! (hex) of the response, the forwarded request (`dest` its device) or the
//! next hop's request (`times` the sums it carries; `header_payload_len`
//! what the in-memory header still says).

use std::time::Duration;

use offrac_core::{Action, BufferPolicy, Engine, EngineConfig, Instant, Job, SlotPolicy};
use offrac_proto::{
    HopTime, RequestHeader, ResponseHeader, Status, DEVICE_SELF, EXT_LEN, FN_REGISTER_REPLY,
    HEADER_LEN, MAX_BUDGET_US, MAX_HOPS,
};
use serde_json::{json, Value};

fn num(v: &Value, name: &str) -> Result<u64, String> {
    v[name]
        .as_u64()
        .ok_or_else(|| format!("{name} missing or not a number"))
}

fn bytes_of(v: &Value, name: &str) -> Result<Vec<u8>, String> {
    hex::decode(v[name].as_str().ok_or_else(|| format!("{name} missing"))?)
        .map_err(|e| format!("hex: {e}"))
}

fn ids(v: &Value, name: &str) -> Result<Vec<u8>, String> {
    v[name]
        .as_array()
        .ok_or_else(|| format!("config.{name} missing"))?
        .iter()
        .map(|f| f.as_u64().and_then(|f| u8::try_from(f).ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("config.{name}: ids 0..=255"))
}

struct Config {
    device_id: u8,
    hosted: Vec<u8>,
    peers: Vec<u8>,
    max_payload: u64,
}

/// The per-hop timings block (docs/protocol.md), as a response carries it.
fn times_block(times: &[HopTime; MAX_HOPS]) -> Vec<u8> {
    let mut h = ResponseHeader::new(Status::Ok, 0, 0);
    h.hop_times = Some(*times);
    h.encode_wire()[HEADER_LEN..].to_vec()
}

fn response(h: &ResponseHeader, payload: &[u8]) -> Value {
    let wire = h.encode_wire();
    json!({"port": "resp", "header": hex::encode(&wire[..h.wire_len()]), "payload": hex::encode(payload)})
}

fn replay(cfg: &Config, hop: &Value) -> Result<Value, String> {
    let local = |d: u8| d == DEVICE_SELF || d == cfg.device_id;
    let wire = bytes_of(hop, "header")?;
    let payload = bytes_of(hop, "payload")?;
    let output = bytes_of(hop, "output")?;
    let status_code = u16::try_from(num(hop, "status")?).map_err(|e| e.to_string())?;
    let status = Status::from_code(status_code).ok_or("status: not a status code")?;
    let head: &[u8; HEADER_LEN] = wire
        .get(..HEADER_LEN)
        .and_then(|b| b.try_into().ok())
        .ok_or("header: 64 bytes at least")?;
    let mut header = RequestHeader::decode(head).map_err(|e| e.to_string())?;
    if header.has_ext() {
        let ext: &[u8; EXT_LEN] = wire
            .get(HEADER_LEN..HEADER_LEN + EXT_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or("header: the extension missing")?;
        header.decode_ext(ext).map_err(|e| e.to_string())?;
    }
    // A slot per hosted function, and one (swapped out later) per other local function of the chain.
    let mut slots = cfg.hosted.clone();
    let mut extra = Vec::new();
    for h in &header.hops[header.hop_index as usize..header.hop_count as usize] {
        if local(h.device) && !slots.contains(&h.function) {
            extra.push(slots.len());
            slots.push(h.function);
        }
    }
    let engine_cfg = EngineConfig {
        buffers: 2,
        buffer_bytes: 1 << 16,
        buffer_policy: BufferPolicy::EligibleRr,
        max_payload: cfg.max_payload,
        small_request_max: 0,
        small_queue_bytes: 0,
        slot_policy: SlotPolicy::Rr,
        // The chain queue's BUSY is the request path's chain buffer's, not the router's.
        slot_queue_bytes: 1 << 20,
        stall_timeout: Duration::from_secs(3600),
        reassembly_timeout: Duration::from_secs(3600),
        reassembly_min_rate: 0,
        slot_queue_depths: vec![None; slots.len()],
        slots,
        device_id: cfg.device_id,
        peers: Vec::new(),
    };
    let mut engine = Engine::new(engine_cfg).map_err(|e| e.to_string())?;
    let first = Instant::from_nanos(1_000);
    // A reply endpoint the answer is for (not a direct reply's, which may be on another node) is
    // registered first, by another connection, as a caller does.
    if header.reply_device != DEVICE_SELF && !header.direct_reply() {
        let endpoint = engine.open(first);
        let mut reg = RequestHeader::single(0, FN_REGISTER_REPLY, header.reply_device as u64, 0);
        reg.tenant = header.tenant;
        engine.handle_bytes(first, endpoint, &reg.encode());
        match engine.poll_action() {
            Some(Action::Reply { header: h, .. }) if h.status == Status::Ok => {}
            other => return Err(format!("reply endpoint not registered: {other:?}")),
        }
    }
    engine.set_peers((0..=254u8).filter(|&d| !local(d)).collect());
    let complete = first + Duration::from_nanos(num(hop, "reassembly_ns")?);
    let conn = engine.open(first);
    engine.handle_bytes(first, conn, &wire[..header.wire_len()]);
    engine.handle_bytes(complete, conn, &payload);
    let (slot, mut job) = match engine.poll_action() {
        Some(Action::Dispatch { slot, job }) => (slot, job),
        other => return Err(format!("the request was not dispatched: {other:?}")),
    };
    let queue_ns = num(hop, "queue_ns")?;
    let exec_ns = num(hop, "exec_ns")?;
    let done = complete + Duration::from_nanos(queue_ns.saturating_add(exec_ns).min(1 << 40));
    let ran = job.header.hop_index as usize % MAX_HOPS;
    let mut times = job.times;
    times[ran] = HopTime {
        device: cfg.device_id,
        ran: true,
        queue_ns,
        exec_ns,
    };
    let inputs = json!({
        "reassembly": job.reassembly_ns(),
        "queue": job.earlier_queue_ns + queue_ns,
        "exec": job.earlier_exec_ns + exec_ns,
        "times": hex::encode(times_block(&times)),
    });
    // The worker: a failed or last hop is answered where it ran.
    if status != Status::Ok || job.is_last_hop() {
        let message = hop["message"].as_str().unwrap_or("").as_bytes().to_vec();
        let body = if status == Status::Ok {
            &output
        } else {
            &message
        };
        let mut h = ResponseHeader::answer(&job.header, status, cfg.device_id, body.len() as u32);
        job.time_answer(&mut h, cfg.device_id, queue_ns, exec_ns);
        let mut out = response(&h, body);
        out["conn"] = json!(hop["conn"]);
        return Ok(json!({"inputs": inputs, "out": out}));
    }
    job.advance(output, done, queue_ns, exec_ns, cfg.device_id);
    for &s in &extra {
        engine.pause_slot(done, s);
    }
    engine.handle_hop_done(done, slot, job);
    for &s in &extra {
        engine.resume_slot(done, s, cfg.hosted.first().copied().unwrap_or(0));
    }
    let mut out = None;
    while let Some(action) = engine.poll_action() {
        if out.is_some() {
            return Err(format!("a second action after the hop: {action:?}"));
        }
        out = Some(match action {
            Action::Dispatch { job, .. } => {
                let w = job.header.encode_wire();
                json!({
                    "port": "next",
                    "header": hex::encode(&w[..job.header.wire_len()]),
                    "header_payload_len": job.header.payload_len,
                    "payload": hex::encode(job.payload.bytes()),
                    "times": [job.reassembly_ns(), job.earlier_queue_ns, job.earlier_exec_ns],
                })
            }
            Action::Reply {
                header, message, ..
            } => response(&header, message.as_bytes()),
            Action::Forward { job } => forward(cfg, done, &engine, conn, job),
            other => {
                return Err(format!(
                    "the router's configuration cannot produce {other:?}"
                ))
            }
        });
    }
    let mut out = out.ok_or("nothing happened after the hop")?;
    out["conn"] = json!(hop["conn"]);
    Ok(json!({"inputs": inputs, "out": out}))
}

/// The driver's `forward` (crates/node/src/driver/links.rs) with a link to
/// every device in `peers`, up, and empty: the forwarded header, or the
/// `UNREACHABLE` answer of `fail_forwarded`.
fn forward(cfg: &Config, now: Instant, engine: &Engine, conn: u64, job: Job) -> Value {
    let device = job.header.current_hop().device;
    if !cfg.peers.contains(&device) {
        let msg = format!("device {device} is not in this node's device table");
        let mut h = ResponseHeader::answer(&job.header, Status::Unreachable, cfg.device_id, 0);
        h.payload_len = msg.len() as u32;
        h.detail = device as u64;
        if job.header.traced() {
            h.hop_times = Some(job.times);
        }
        h.request_id = engine.answer_route(conn, &job.header).request_id;
        return response(&h, msg.as_bytes());
    }
    let mut header = job.header.for_link(1, job.payload.len() as u32); // the link's first id
    if let Some(d) = job.deadline {
        let left = d.saturating_since(now).as_micros().max(1);
        header.budget_us = left.min(MAX_BUDGET_US as u128) as u32;
    }
    let w = header.encode_wire();
    json!({
        "port": "net",
        "dest": device,
        "header": hex::encode(&w[..header.wire_len()]),
        "payload": hex::encode(job.payload.bytes()),
    })
}

fn main() -> Result<(), String> {
    let input: Value =
        serde_json::from_reader(std::io::stdin().lock()).map_err(|e| e.to_string())?;
    let c = &input["config"];
    let cfg = Config {
        device_id: u8::try_from(num(c, "device_id")?).map_err(|e| e.to_string())?,
        hosted: ids(c, "hosted")?,
        peers: ids(c, "peers")?,
        max_payload: num(c, "max_payload")?,
    };
    let hops = input["hops"].as_array().ok_or("hops missing")?;
    let answers = hops
        .iter()
        .enumerate()
        .map(|(i, h)| replay(&cfg, h).map_err(|e| format!("hop {i}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    println!("{}", Value::Array(answers));
    Ok(())
}
