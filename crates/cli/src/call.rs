use crate::CliError;
use offrac_client::{Client, FunctionId, Hop};

#[derive(clap::Args)]
pub struct Args {
    /// Node address.
    #[arg(long, default_value = "127.0.0.1:7000")]
    addr: String,
    /// Function name: echo, topk, logit, minmax, matmul, spin. A chain is a
    /// comma-separated list of NAME or NAME:PARAM, run in order on this node,
    /// each hop's output the next one's input (e.g. minmax,logit or topk:64,topk:8).
    function: String,
    /// Comma-separated input values (int32 for topk, float32 for logit/minmax/matmul; text for
    /// echo/spin). Negative numbers work as they are: --data -5,-1.
    #[arg(long, conflicts_with = "file", allow_hyphen_values = true)]
    data: Option<String>,
    /// Read the payload bytes from a file instead ("-": standard input).
    #[arg(long)]
    file: Option<String>,
    /// The per-hop parameter: K for topk (required), n for matmul, microseconds for spin.
    #[arg(long, short = 'p')]
    param: Option<u64>,
    /// Give up after this many seconds without an answer (connect included).
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let hops = parse_chain(&a.function, a.param)?;
    let first = hops[0].0;
    let last = hops[hops.len() - 1].0;
    let hops: Vec<Hop> = hops.iter().map(|&(f, p)| Hop::local(f.id(), p)).collect();
    let f = first;
    let payload = match (&a.data, &a.file) {
        (_, Some(path)) if path == "-" => {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut b).map_err(|source| {
                CliError::Read {
                    path: "standard input".into(),
                    source,
                }
            })?;
            b
        }
        (_, Some(path)) => std::fs::read(path).map_err(|source| CliError::Read {
            path: path.clone(),
            source,
        })?,
        (Some(d), None) => encode(f, d)?,
        (None, None) => Vec::new(),
    };
    let timeout = timeout_arg(a.timeout)?;
    let silent = |e: offrac_client::ClientError| match e {
        offrac_client::ClientError::Io(io) if is_timeout(&io) => CliError::Usage(format!(
            "no answer from {} within {} s (--timeout)",
            a.addr, a.timeout
        )),
        e => e.into(),
    };
    let mut c = Client::connect_timeout(&a.addr, timeout).map_err(silent)?;
    c.set_read_timeout(Some(timeout))?;
    let t = std::time::Instant::now();
    let reply = c.call_chain(&hops, &payload).map_err(silent)?;
    let rtt = t.elapsed();
    println!("{}", decode(last, &reply.payload));
    let h = reply.header;
    eprintln!(
        "round trip {:.1} µs (node: reassembly {:.1} µs, queue {:.1} µs, exec {:.1} µs)",
        rtt.as_nanos() as f64 / 1e3,
        h.reassembly_ns as f64 / 1e3,
        h.queue_ns as f64 / 1e3,
        h.exec_ns as f64 / 1e3
    );
    Ok(())
}

/// `NAME[:PARAM],…` into (function, param) hops; `-p` sets the parameter of
/// a single function.
fn parse_chain(spec: &str, p: Option<u64>) -> Result<Vec<(FunctionId, u64)>, CliError> {
    let usage = |m: String| CliError::Usage(m);
    let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
    if parts.len() > 1 && p.is_some() {
        return Err(usage(
            "-p applies to a single function; give each hop's parameter as NAME:PARAM".into(),
        ));
    }
    if parts.len() > offrac_proto::MAX_HOPS {
        return Err(usage(format!(
            "a chain has at most {} hops, not {}",
            offrac_proto::MAX_HOPS,
            parts.len()
        )));
    }
    parts
        .iter()
        .map(|part| {
            let (name, param) = match part.split_once(':') {
                Some((n, v)) => {
                    let v = v
                        .parse::<u64>()
                        .map_err(|_| usage(format!("{part:?}: the parameter after ':' is not a u64")))?;
                    (n, Some(v))
                }
                None => (*part, p),
            };
            let f = FunctionId::from_name(name).ok_or_else(|| usage(format!("unknown function {name:?}")))?;
            match (f, param) {
                (FunctionId::TopK, None) => Err(usage(
                    "topk needs K: how many of the largest values to return (-p K, or topk:K in a chain)"
                        .into(),
                )),
                (_, param) => Ok((f, param.unwrap_or(0))),
            }
        })
        .collect()
}

/// `--timeout` seconds as a duration (positive).
pub fn timeout_arg(secs: f64) -> Result<std::time::Duration, CliError> {
    std::time::Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| CliError::Usage(format!("--timeout {secs}: want positive seconds")))
}

/// A read or connect that ran out of time (sockets say WouldBlock or TimedOut).
pub fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

fn encode(f: FunctionId, data: &str) -> Result<Vec<u8>, CliError> {
    let items = || data.split(',').map(str::trim).filter(|s| !s.is_empty());
    let bad = |s: &str| CliError::Usage(format!("cannot parse {s:?} as a number"));
    Ok(match f {
        FunctionId::TopK => items()
            .map(|s| s.parse::<i32>().map(i32::to_le_bytes).map_err(|_| bad(s)))
            .collect::<Result<Vec<_>, _>>()?
            .concat(),
        FunctionId::Logit | FunctionId::MinMax | FunctionId::MatMul => items()
            .map(|s| s.parse::<f32>().map(f32::to_le_bytes).map_err(|_| bad(s)))
            .collect::<Result<Vec<_>, _>>()?
            .concat(),
        FunctionId::Echo | FunctionId::Spin => data.as_bytes().to_vec(),
    })
}

fn decode(f: FunctionId, b: &[u8]) -> String {
    let words = b.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
    match f {
        FunctionId::TopK => words
            .map(|w| i32::from_le_bytes(w).to_string())
            .collect::<Vec<_>>()
            .join(","),
        FunctionId::Logit | FunctionId::MinMax | FunctionId::MatMul => words
            .map(|w| f32::from_le_bytes(w).to_string())
            .collect::<Vec<_>>()
            .join(","),
        FunctionId::Echo | FunctionId::Spin => String::from_utf8_lossy(b).into_owned(),
    }
}
