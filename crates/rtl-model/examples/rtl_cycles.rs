//! Cycles per request through the Verilated request path (docs/rtl.md,
//! "The Verilated datapath"): one request at a time on an idle path, whole
//! 64-byte beats in back to back, the output always ready. Prints, per
//! function and payload size, the cycles from the first input beat to the
//! response header's beat and to the response's last beat, the header's
//! own reassembly, queue and exec cycles, and the same at 250 MHz in µs.
//!
//!   cargo run --release --features offrac-cli/rtl -p offrac-rtl-model --example rtl_cycles
//!   (or target/release/examples/rtl_cycles after `make build` with Verilator installed)

use offrac_accel::dlrm::state::{default_borders, default_dictionary_key, DEFAULT_DICTIONARY_KEYS};
use offrac_proto::{RequestHeader, ResponseHeader};
use offrac_rtl_model::Model;

fn main() {
    let mut m = Model::new();
    let keys: Vec<u32> = (0..DEFAULT_DICTIONARY_KEYS as u64)
        .map(default_dictionary_key)
        .collect();
    let t = std::time::Instant::now();
    let c0 = m.cycles();
    m.load_dictionary(&keys).expect("the dictionary loads");
    println!(
        "MapId dictionary: {} keys in {} cycles ({:.2} s of Verilator)",
        keys.len(),
        m.cycles() - c0,
        t.elapsed().as_secs_f64()
    );
    m.load_borders(&[default_borders()])
        .expect("the border set loads");
    println!("function,payload_bytes,cycles_to_header,cycles_to_last,reassembly_cycles,queue_cycles,exec_cycles,us_at_250mhz");
    let mut id = 1u64;
    let mut sim_cycles = 0u64;
    let t = std::time::Instant::now();
    let functions = [
        ("echo", 0u8, 0u64),
        ("topk", 1, 64),
        ("mapid", 6, 0),
        ("minmax", 3, 0),
        ("sparsetransform", 7, 16),
        ("bucketize", 8, 0),
    ];
    for (name, f, param) in functions {
        for size in [64usize, 1024, 4096, 16384, 2 << 20] {
            let payload: Vec<u8> = match f {
                6 => (0..size / 4)
                    .flat_map(|i| default_dictionary_key(i as u64 * 7).to_le_bytes())
                    .collect(),
                // float32 values, every other one zero (SparseTransform drops those)
                3 | 7 | 8 => (0..size / 4)
                    .flat_map(|i| {
                        let v = if i % 2 == 0 {
                            0.0
                        } else {
                            i as f32 * 0.37 - 50.0
                        };
                        v.to_le_bytes()
                    })
                    .collect(),
                _ => (0..size).map(|i| (i * 131 + 7) as u8).collect(),
            };
            let mut wire = RequestHeader::single(id, f, param, size as u32)
                .encode()
                .to_vec();
            wire.extend_from_slice(&payload);
            m.push(0, &wire);
            let start = m.cycles();
            let (mut to_header, mut out) = (None, Vec::new());
            loop {
                m.step(1);
                if let Some(b) = m.pop() {
                    to_header.get_or_insert(m.cycles() - start);
                    out.extend_from_slice(b.payload());
                    if b.last {
                        break;
                    }
                }
                assert!(m.cycles() - start < 10_000_000, "no answer");
            }
            let total = m.cycles() - start;
            sim_cycles += total;
            let h: [u8; 64] = out[..64].try_into().expect("a header");
            let h = ResponseHeader::decode(&h).expect("a response header");
            assert_eq!((h.request_id, h.status.code()), (id, 0), "{name} {size}");
            println!(
                "{name},{size},{},{total},{},{},{},{:.2}",
                to_header.unwrap_or(0),
                h.reassembly_ns,
                h.queue_ns,
                h.exec_ns,
                total as f64 / 250.0
            );
            id += 1;
        }
    }
    println!(
        "model speed: {:.0} cycles/s (this run's requests, {} cycles)",
        sim_cycles as f64 / t.elapsed().as_secs_f64(),
        sim_cycles
    );
}
