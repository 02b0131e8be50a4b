use crate::CliError;
use offrac_client::{Client, FunctionId};

#[derive(clap::Args)]
pub struct Args {
    /// Node address.
    #[arg(long, default_value = "127.0.0.1:7000")]
    addr: String,
    /// Function name: echo, topk, logit, minmax, matmul, spin.
    function: String,
    /// Comma-separated input values (int32 for topk, float32 for logit/minmax/matmul; text for echo/spin).
    #[arg(long, conflicts_with = "file")]
    data: Option<String>,
    /// Read the payload bytes from a file instead.
    #[arg(long)]
    file: Option<String>,
    /// The per-hop parameter: K for topk, n for matmul, microseconds for spin.
    #[arg(long, short = 'p', default_value_t = 0)]
    param: u64,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let f = FunctionId::from_name(&a.function)
        .ok_or_else(|| CliError::Usage(format!("unknown function {:?}", a.function)))?;
    let payload = match (&a.data, &a.file) {
        (_, Some(path)) => std::fs::read(path).map_err(|source| CliError::Read {
            path: path.clone(),
            source,
        })?,
        (Some(d), None) => encode(f, d)?,
        (None, None) => Vec::new(),
    };
    let mut c = Client::connect(&a.addr)?;
    let t = std::time::Instant::now();
    let reply = c.call(f, a.param, &payload)?;
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
