use crate::payload_text;
use crate::pipeline::StoreArgs;
use crate::CliError;
use offrac_client::{Client, FunctionId, Hop};
use offrac_proto::chain_spec;

#[derive(clap::Args)]
pub struct Args {
    /// Node address.
    #[arg(long, default_value = "127.0.0.1:7000")]
    addr: String,
    /// Function name (`offrac functions` lists them: echo, topk, mapid, sigridhash, …). A chain is a
    /// comma-separated list of NAME[:PARAM][@DEVICE], each hop's output the next
    /// one's input (e.g. minmax,logit or topk:64@1,topk:8); without @DEVICE a hop
    /// runs on the node addressed. A named-buffer hop is buffer.OP:NAME (OP: put, tee,
    /// get, drop; e.g. buffer.get:7@1,gemv:64@1).
    #[arg(required_unless_present = "pipeline")]
    function: Option<String>,
    /// Call the named pipeline stored in the cluster store instead (see `offrac pipeline`).
    #[arg(long, conflicts_with = "function")]
    pipeline: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
    /// Input in the function's layout: comma-separated numbers for arrays (uint32 also as 0x…
    /// hex), id lists as rows separated by ';' (1,2;;3), text for bytes. Negative numbers work
    /// as they are: --data -5,-1.
    #[arg(long, conflicts_with = "file", allow_hyphen_values = true)]
    data: Option<String>,
    /// Read the payload bytes from a file instead ("-": standard input).
    #[arg(long)]
    file: Option<String>,
    /// The raw 64-bit parameter of a single function (K for topk, X for firstx, …); --set packs
    /// named fields instead.
    #[arg(long, short = 'p')]
    param: Option<u64>,
    /// One named parameter field of a single function, e.g. --set max_value=1000 --set salt=7
    /// for sigridhash (repeatable; `offrac functions` lists each function's fields).
    #[arg(
        long = "set",
        value_name = "FIELD=VALUE",
        conflicts_with = "param",
        allow_hyphen_values = true
    )]
    set: Vec<String>,
    /// Give up after this many seconds without an answer (connect included).
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    #[command(flatten)]
    tenant: crate::tenant::TenantArgs,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let hops = match (&a.function, &a.pipeline) {
        (Some(spec), _) => parse_chain(spec, named_param(spec, &a.set)?.or(a.param))?,
        (None, Some(name)) => {
            if a.param.is_some() || !a.set.is_empty() {
                return Err(CliError::Usage(
                    "-p does not apply to a pipeline: its hops carry their parameters".into(),
                ));
            }
            a.store
                .connect()?
                .get_pipeline(name)?
                .ok_or_else(|| CliError::Usage(format!("no pipeline named {name:?}")))?
        }
        (None, None) => return Err(CliError::Usage("give a FUNCTION or --pipeline NAME".into())),
    };
    // Input encoded for the first hop, output decoded for the last; functions
    // this CLI does not know take and give bytes.
    let f = FunctionId::from_id(hops[0].function).unwrap_or(FunctionId::Echo);
    let last = FunctionId::from_id(hops[hops.len() - 1].function).unwrap_or(FunctionId::Echo);
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
        (Some(d), None) => payload_text::encode(f.spec().input, d)?,
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
    a.tenant.hello(&mut c)?;
    let t = std::time::Instant::now();
    let reply = c.call_chain(&hops, &payload).map_err(silent)?;
    let rtt = t.elapsed();
    println!(
        "{}",
        payload_text::decode(last.spec().output, &reply.payload)
    );
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

/// `NAME[:PARAM][@DEVICE],…` into hops; `-p` sets the parameter of a single function.
fn parse_chain(spec: &str, p: Option<u64>) -> Result<Vec<Hop>, CliError> {
    let usage = |m: String| CliError::Usage(m);
    let mut hops = chain_spec::parse(spec).map_err(|e| usage(e.to_string()))?;
    match (hops.len(), p) {
        (1, Some(p)) => hops[0].param = p,
        (_, Some(_)) => {
            return Err(usage(
                "-p applies to a single function; give each hop's parameter as NAME:PARAM".into(),
            ))
        }
        _ => {}
    }
    // A required parameter (topk's K, firstx's X, …) written without ":PARAM":
    // 0 is the node's to refuse, so say which one is missing here.
    if !(hops.len() == 1 && p.is_some()) {
        for (text, h) in spec.split(',').zip(&hops) {
            let needs = FunctionId::from_id(h.function)
                .and_then(|f| f.spec().params.iter().find(|f| f.required));
            if let (Some(field), false) = (needs, text.contains(':')) {
                return Err(usage(format!(
                    "{} needs {}: {} (-p for a single function, or {}:PARAM in a chain; `offrac functions` lists the fields)",
                    FunctionId::from_id(h.function).map_or("?", |f| f.name()),
                    field.name,
                    field.doc,
                    FunctionId::from_id(h.function).map_or("?", |f| f.name()),
                )));
            }
        }
    }
    Ok(hops)
}

/// The parameter `--set FIELD=VALUE …` packs for the single function `spec`
/// (None without `--set`).
fn named_param(spec: &str, set: &[String]) -> Result<Option<u64>, CliError> {
    if set.is_empty() {
        return Ok(None);
    }
    let usage = |m: String| CliError::Usage(m);
    let f = FunctionId::from_name(spec.trim()).ok_or_else(|| {
        usage(format!(
            "--set applies to one function by name, not {spec:?}"
        ))
    })?;
    let fields = f.spec().params;
    let mut param = 0u64;
    for kv in set {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| usage(format!("--set {kv:?}: want FIELD=VALUE")))?;
        let field = fields.iter().find(|p| p.name == k.trim()).ok_or_else(|| {
            let names: Vec<&str> = fields.iter().map(|p| p.name).collect();
            usage(format!(
                "{} has no parameter {k:?} (its fields: {})",
                f.name(),
                names.join(", ")
            ))
        })?;
        let bits = field.pack_text(v.trim()).ok_or_else(|| {
            usage(format!(
                "--set {kv}: {v:?} does not fit {} ({})",
                field.name, field.doc
            ))
        })?;
        param |= bits;
    }
    if let Some(missing) = fields.iter().find(|p| {
        p.required
            && !set
                .iter()
                .any(|kv| kv.split('=').next().map(str::trim) == Some(p.name))
    }) {
        return Err(usage(format!(
            "{} needs {}: {}",
            f.name(),
            missing.name,
            missing.doc
        )));
    }
    Ok(Some(param))
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
