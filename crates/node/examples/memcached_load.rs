//! A closed-loop load generator for memcached's text protocol (NICA's
//! workloads: 16 B keys and values): `clients` threads, one connection and
//! one request in flight each. Prints one JSON line: rate, p50/p99 (µs).
//!
//! ```text
//! memcached_load --addr 127.0.0.1:11211 --keys 100000 --workload zipf --seconds 3 [--preload] [--warm]
//! ```
//! `--preload` stores every key first; `--warm` then reads every key once
//! (100 per multi-get), which fills a look-through cache.
//! Workloads: `hits` (uniform GETs of preloaded keys), `zipf` (Zipf(0.99)
//! GETs, 0.2 % SETs), `misses` (GETs of keys never stored).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

struct Args {
    addr: String,
    keys: usize,
    clients: usize,
    workload: String,
    seconds: f64,
    warmup: f64,
    preload: bool,
    warm: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:11211".into(),
        keys: 100_000,
        clients: 4,
        workload: "hits".into(),
        seconds: 3.0,
        warmup: 0.5,
        preload: false,
        warm: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--preload" || flag == "--warm" {
            a.preload |= flag == "--preload";
            a.warm |= flag == "--warm";
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--addr" => a.addr = v,
            "--keys" => a.keys = num(&v)? as usize,
            "--clients" => a.clients = num(&v)? as usize,
            "--workload" => a.workload = v,
            "--seconds" => a.seconds = num(&v)?,
            "--warmup" => a.warmup = num(&v)?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if !["hits", "zipf", "misses"].contains(&a.workload.as_str()) || a.keys == 0 || a.clients == 0 {
        return Err("--workload hits|zipf|misses, --keys and --clients >= 1".into());
    }
    Ok(a)
}

/// 16-byte keys and values.
fn key(i: usize) -> String {
    format!("k{i:015}")
}
fn value(i: usize, v: u64) -> String {
    format!("{:08}{:08}", i % 100_000_000, v % 100_000_000)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Reads until the buffer ends with `end` (answers here never hold it inside a value).
fn read_until(s: &mut TcpStream, buf: &mut Vec<u8>, end: &[u8]) -> std::io::Result<()> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    while !buf.ends_with(end) {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn preload(a: &Args) -> std::io::Result<()> {
    let mut s = connect(&a.addr)?;
    let mut buf = Vec::new();
    for chunk in (0..a.keys).collect::<Vec<_>>().chunks(100) {
        if !a.preload {
            break;
        }
        let mut req = String::new();
        for &i in chunk {
            req.push_str(&format!(
                "set {} 0 0 16 noreply\r\n{}\r\n",
                key(i),
                value(i, 0)
            ));
        }
        s.write_all(req.as_bytes())?;
    }
    s.write_all(b"version\r\n")?;
    read_until(&mut s, &mut buf, b"\r\n")?;
    if a.warm {
        for chunk in (0..a.keys).collect::<Vec<_>>().chunks(100) {
            let keys: Vec<String> = chunk.iter().map(|&i| key(i)).collect();
            s.write_all(format!("get {}\r\n", keys.join(" ")).as_bytes())?;
            read_until(&mut s, &mut buf, b"END\r\n")?;
        }
    }
    Ok(())
}

struct Result_ {
    lat_ns: Vec<u32>,
    ops: u64,
    gets: u64,
    hits: u64,
}

fn client(a: &Args, seed: u64, cdf: &[f64], start: Instant) -> std::io::Result<Result_> {
    let mut s = connect(&a.addr)?;
    let mut rng = Rng(seed | 1);
    let mut buf = Vec::with_capacity(256);
    let warm_end = start + Duration::from_secs_f64(a.warmup);
    let end = warm_end + Duration::from_secs_f64(a.seconds);
    let mut r = Result_ {
        lat_ns: Vec::with_capacity(1 << 20),
        ops: 0,
        gets: 0,
        hits: 0,
    };
    let mut version = seed << 20;
    loop {
        let t0 = Instant::now();
        if t0 >= end {
            return Ok(r);
        }
        let (i, set) = match a.workload.as_str() {
            "zipf" => {
                let u = rng.unit();
                (
                    cdf.partition_point(|&c| c < u).min(a.keys - 1),
                    rng.unit() < 0.002,
                )
            }
            _ => ((rng.next() % a.keys as u64) as usize, false),
        };
        if set {
            version += 1;
            let req = format!("set {} 0 0 16\r\n{}\r\n", key(i), value(i, version));
            s.write_all(req.as_bytes())?;
            read_until(&mut s, &mut buf, b"\r\n")?;
        } else {
            let k = if a.workload == "misses" {
                format!("m{:015}", i)
            } else {
                key(i)
            };
            s.write_all(format!("get {k}\r\n").as_bytes())?;
            read_until(&mut s, &mut buf, b"END\r\n")?;
        }
        if t0 >= warm_end {
            let dt = t0.elapsed().as_nanos().min(u32::MAX as u128) as u32;
            r.lat_ns.push(dt);
            r.ops += 1;
            if !set {
                r.gets += 1;
                r.hits += u64::from(buf.starts_with(b"VALUE"));
            }
        }
    }
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("memcached_load: {e}");
            std::process::exit(2);
        }
    };
    if a.preload || a.warm {
        if let Err(e) = preload(&a) {
            eprintln!("memcached_load: preload: {e}");
            std::process::exit(1);
        }
    }
    // Zipf(0.99) over the keys, as a cumulative distribution.
    let mut cdf: Vec<f64> = (1..=a.keys).map(|r| 1.0 / (r as f64).powf(0.99)).collect();
    let total: f64 = cdf.iter().sum();
    let mut acc = 0.0;
    for c in &mut cdf {
        acc += *c / total;
        *c = acc;
    }
    let start = Instant::now();
    let results: Vec<std::io::Result<Result_>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..a.clients)
            .map(|c| {
                let (a, cdf) = (&a, &cdf);
                sc.spawn(move || client(a, 0x9e37_79b9 * (c as u64 + 1), cdf, start))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("client panicked")))
            })
            .collect()
    });
    let mut lat = Vec::new();
    let (mut ops, mut gets, mut hits) = (0, 0, 0);
    for r in results {
        match r {
            Ok(r) => {
                lat.extend(r.lat_ns);
                ops += r.ops;
                gets += r.gets;
                hits += r.hits;
            }
            Err(e) => {
                eprintln!("memcached_load: client failed: {e}");
                std::process::exit(1);
            }
        }
    }
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |&n| n as f64 / 1e3)
    };
    println!(
        "{{\"workload\":\"{}\",\"ops\":{ops},\"rate\":{:.1},\"p50_us\":{:.2},\"p99_us\":{:.2},\"gets\":{gets},\"hits\":{hits}}}",
        a.workload,
        ops as f64 / a.seconds,
        pct(0.5),
        pct(0.99)
    );
}
