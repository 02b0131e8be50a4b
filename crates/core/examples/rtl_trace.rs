//! Traces of the core's reassembly pool and selector for the RTL to replay
//! (issue #12's co-verification; `rtl/tests/tb_pool_admit.py` and
//! `tb_slot_stage.py` read them, docs/rtl.md describes the format).
//!
//! ```sh
//! cargo run --release -p offrac-core --example rtl_trace -- pool 100 1 4 1000 jsb > pool.json
//! cargo run --release -p offrac-core --example rtl_trace -- slots 100 1 0,1,0 300 rr > slots.json
//! ```
//! Arguments: the kind, the number of traces, a seed, then the configuration
//! the RTL was built with (buffers, bytes each and policy; or the function
//! of each slot, queue bytes and policy). Each trace is a random sequence
//! of operations stamped with cycles, starting from reset; every
//! decision in it (which buffer a request is admitted to, or a refusal;
//! which slot a complete request goes to; what a slot starts) is what
//! `ReassemblyPool` / `Selector` + `SlotQueue` decide for that sequence.
//!
//! Cycles: operations run in the core one after another; the RTL takes at
//! most one admission (or pick) and one event of each kind per cycle, and
//! its decision in a cycle sees the state before that cycle's events. So a
//! decision always opens a new cycle and the events after it may share its
//! cycle, one of a kind and at most one per buffer or slot (the one the
//! decision chose included): the RTL's order within a cycle is then the
//! core's.

use offrac_core::{BufferPolicy, Job, ReassemblyPool, Selector, SlotPolicy, SlotQueue};
use offrac_proto::RequestHeader;
use serde_json::{json, Value};

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// Cycle stamps: a decision opens a cycle (after a random gap); an event
/// joins the current cycle if none of its kind is there yet.
struct Clock {
    cycle: u64,
    kinds: Vec<&'static str>,
    /// Buffers or slots the current cycle's decision chose (the RTL names
    /// it a cycle later) or an event touched: at most one thing happens to
    /// each in a cycle.
    touched: Vec<usize>,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            cycle: 0,
            kinds: Vec::new(),
            touched: Vec::new(),
        }
    }
    fn decision(&mut self, rng: &mut Rng, chosen: Option<usize>) -> u64 {
        self.cycle += 1 + if rng.chance(0.3) { rng.below(4) } else { 0 };
        self.kinds.clear();
        self.touched = chosen.into_iter().collect();
        self.cycle
    }
    fn event(&mut self, rng: &mut Rng, kind: &'static str, on: usize) -> u64 {
        if self.kinds.contains(&kind) || self.touched.contains(&on) || rng.chance(0.4) {
            self.cycle += 1 + rng.below(2);
            self.kinds.clear();
            self.touched.clear();
        }
        self.kinds.push(kind);
        self.touched.push(on);
        self.cycle
    }
}

fn job(cost: u64) -> Job {
    let h = RequestHeader::single(0, 0, 0, cost as u32);
    let t = offrac_core::Instant::default();
    Job::new(0, h, vec![0; cost as usize], t, t)
}

fn pool_trace(rng: &mut Rng, buffers: usize, capacity: u64, policy: BufferPolicy) -> Value {
    let mut pool = ReassemblyPool::new(buffers, capacity, policy);
    // The generator's own view: the request reassembling in each buffer, and the complete ones.
    let mut reassembling: Vec<Option<u64>> = vec![None; buffers];
    let mut clock = Clock::new();
    let mut ops = Vec::new();
    let steps = 20 + rng.below(180);
    for _ in 0..steps {
        let roll = rng.below(100);
        let busy: Vec<usize> = (0..buffers)
            .filter(|&b| reassembling[b].is_some())
            .collect();
        let held: Vec<usize> = (0..buffers)
            .filter(|&b| !pool.ready(b).is_empty())
            .collect();
        if roll < 2 {
            pool = ReassemblyPool::new(buffers, capacity, policy);
            reassembling = vec![None; buffers];
            let cycle = clock.decision(rng, None);
            clock.kinds.push("reset");
            ops.push(json!({"cycle": cycle, "op": "reset"}));
        } else if roll < 45 {
            let size = match rng.below(10) {
                0 => capacity,
                1 => capacity + 1 + rng.below(capacity),
                2 => 0,
                3..=5 => rng.below(capacity / 8 + 1),
                _ => rng.below(capacity + 1),
            };
            let got = pool.admit(size);
            if let Some(b) = got {
                reassembling[b] = Some(size);
            }
            let cycle = clock.decision(rng, got);
            ops.push(json!({"cycle": cycle, "op": "admit", "size": size,
                            "buffer": got.map_or(-1, |b| b as i64)}));
        } else if roll < 70 && !busy.is_empty() {
            let b = busy[rng.below(busy.len() as u64) as usize];
            let size = reassembling[b].take().expect("reassembling");
            pool.finish(b, job(size));
            let cycle = clock.event(rng, "finish", b);
            ops.push(json!({"cycle": cycle, "op": "finish", "buffer": b}));
        } else if roll < 78 && !busy.is_empty() {
            let b = busy[rng.below(busy.len() as u64) as usize];
            let size = reassembling[b].take().expect("reassembling");
            pool.abort(b, size);
            let cycle = clock.event(rng, "abort", b);
            ops.push(json!({"cycle": cycle, "op": "abort", "buffer": b, "size": size}));
        } else if !held.is_empty() {
            let b = held[rng.below(held.len() as u64) as usize];
            let i = rng.below(pool.ready(b).len() as u64) as usize;
            let size = pool.take(b, i).expect("held").cost();
            let cycle = clock.event(rng, "release", b);
            ops.push(json!({"cycle": cycle, "op": "release", "buffer": b, "size": size}));
        }
    }
    json!({"buffers": buffers, "capacity": capacity, "policy": policy.name(), "ops": ops})
}

/// The RTL slot queue holds at most this many descriptors; the core counts
/// only bytes, so the generator never fills a queue by count (the count
/// limit is the slot queue testbench's).
const SLOT_DEPTH: usize = 8;

fn slot_trace(rng: &mut Rng, funcs: &[u8], capacity: u64, policy: SlotPolicy) -> Value {
    let nslots = funcs.len();
    let make = |funcs: &[u8]| -> (Vec<SlotQueue>, Selector) {
        let slots: Vec<SlotQueue> = funcs.iter().map(|&f| SlotQueue::new(f, capacity)).collect();
        let sel = Selector::new(&slots, policy);
        (slots, sel)
    };
    let (mut slots, mut sel) = make(funcs);
    let mut clock = Clock::new();
    let mut ops = Vec::new();
    let steps = 20 + rng.below(180);
    for _ in 0..steps {
        let roll = rng.below(100);
        if roll < 2 {
            (slots, sel) = make(funcs);
            let cycle = clock.decision(rng, None);
            clock.kinds.push("reset");
            ops.push(json!({"cycle": cycle, "op": "reset"}));
        } else if roll < 55 {
            // one function past the largest hosted is hosted by no slot
            let f = rng.below(u64::from(*funcs.iter().max().expect("slots")) + 2) as u8;
            if sel.hosts(f).iter().any(|&s| slots[s].depth() >= SLOT_DEPTH) {
                continue;
            }
            let cost = match rng.below(8) {
                0 => 0,
                1 => capacity,
                2 => capacity + 1,
                _ => rng.below(capacity / 2 + 1),
            };
            let got = sel.pick(f, cost, &slots);
            if let Some(s) = got {
                slots[s].push(job(cost));
            }
            let cycle = clock.decision(rng, got);
            ops.push(
                json!({"cycle": cycle, "op": "pick", "function": f, "cost": cost,
                            "slot": got.map_or(-1, |s| s as i64)}),
            );
        } else if roll < 80 {
            let s = rng.below(nslots as u64) as usize;
            let got = slots[s].start_next().map(|j| j.cost());
            let cycle = clock.event(rng, "start", s);
            ops.push(json!({"cycle": cycle, "op": "start", "slot": s,
                            "cost": got.map_or(-1, |c| c as i64)}));
        } else {
            let busy: Vec<usize> = (0..nslots).filter(|&s| slots[s].is_busy()).collect();
            if busy.is_empty() {
                continue;
            }
            let s = busy[rng.below(busy.len() as u64) as usize];
            slots[s].finish();
            let cycle = clock.event(rng, "done", s);
            ops.push(json!({"cycle": cycle, "op": "done", "slot": s}));
        }
    }
    json!({"slots": funcs, "capacity": capacity, "depth": SLOT_DEPTH,
           "policy": policy.name(), "ops": ops})
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: rtl_trace pool COUNT SEED BUFFERS CAPACITY naive-rr|eligible-rr|jsb\n       \
                 rtl_trace slots COUNT SEED FUNCTIONS(e.g. 0,1,0) CAPACITY rr|jsq";
    if args.len() != 6 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let num = |i: usize| -> u64 { args[i].parse().expect(usage) };
    let (count, seed, capacity) = (num(1), num(2), num(4));
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let traces: Vec<Value> = match args[0].as_str() {
        "pool" => {
            let policy: BufferPolicy = args[5].parse().expect(usage);
            let buffers = num(3) as usize;
            (0..count)
                .map(|_| pool_trace(&mut rng, buffers, capacity, policy))
                .collect()
        }
        "slots" => {
            let policy: SlotPolicy = args[5].parse().expect(usage);
            let funcs: Vec<u8> = args[3]
                .split(',')
                .map(|f| f.parse().expect(usage))
                .collect();
            (0..count)
                .map(|_| slot_trace(&mut rng, &funcs, capacity, policy))
                .collect()
        }
        _ => panic!("{usage}"),
    };
    println!("{}", Value::Array(traces));
}
