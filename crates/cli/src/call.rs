use crate::CliError;
use offrac_client::{Client, FunctionId};

#[derive(clap::Args)]
pub struct Args {
    /// Node address.
    #[arg(long, default_value = "127.0.0.1:7000")]
    addr: String,
    /// Function name: echo, topk, logit, minmax, matmul, spin.
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
    let f = FunctionId::from_name(&a.function)
        .ok_or_else(|| CliError::Usage(format!("unknown function {:?}", a.function)))?;
    let param = match (f, a.param) {
        (FunctionId::TopK, None) => {
            return Err(CliError::Usage(
                "topk needs -p K: how many of the largest values to return".into(),
            ))
        }
        (_, p) => p.unwrap_or(0),
    };
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
    let reply = c.call(f, param, &payload).map_err(silent)?;
    let rtt = t.elapsed();
    println!("{}", decode(f, &reply.payload));
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
