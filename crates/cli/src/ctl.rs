//! `offrac ctl`: control requests (`docs/control.md`) — upload a WebAssembly
//! module to a node's library, swap a slot's function, list, unload — and
//! `offrac ctl bench-swap`, which measures swap times and what a swap under
//! load does to requests.

use crate::CliError;
use offrac_client::{Client, ClientError, RetryPolicy};
use offrac_control::{examples, wire, Digest, Op, Target, FN_CONTROL};
use offrac_proto::FunctionId;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Args, Clone)]
struct Auth {
    /// The node's request address.
    #[arg(long, default_value = "127.0.0.1:7878")]
    addr: String,
    /// The tenant whose key signs the request.
    #[arg(long, default_value_t = 1, env = "OFFRAC_TENANT")]
    tenant: u16,
    /// The tenant's HMAC-SHA256 key, hex (as in the node's [[control.tenants]]).
    #[arg(long, env = "OFFRAC_KEY", hide_env_values = true)]
    key: String,
}

#[derive(clap::Subcommand)]
enum Sub {
    /// Store a module (.wasm, or WebAssembly text .wat) in the node's library; prints its digest.
    Upload {
        #[command(flatten)]
        auth: Auth,
        file: String,
    },
    /// Make a slot run a built-in (--builtin NAME) or a library module (--wasm DIGEST --function ID).
    Swap {
        #[command(flatten)]
        auth: Auth,
        #[arg(long)]
        slot: u16,
        #[arg(long, conflicts_with = "wasm", required_unless_present = "wasm")]
        builtin: Option<String>,
        #[arg(long, requires = "function")]
        wasm: Option<String>,
        /// The function id the module answers to (128..=251).
        #[arg(long)]
        function: Option<u8>,
    },
    /// The node's library and what each slot runs (JSON).
    List {
        #[command(flatten)]
        auth: Auth,
    },
    /// Remove a module from the library (no slot may run it, unless --force: then every slot
    /// running it is swapped to its configured built-in first).
    Unload {
        #[command(flatten)]
        auth: Auth,
        digest: String,
        #[arg(long)]
        force: bool,
    },
    /// Load N more instances of a built-in (--builtin NAME) or of a library module (--wasm DIGEST
    /// --function ID) into spare slots the node chooses (all or nothing).
    Replicate {
        #[command(flatten)]
        auth: Auth,
        #[arg(long, default_value_t = 1)]
        n: u16,
        #[arg(long, conflicts_with = "wasm", required_unless_present = "wasm")]
        builtin: Option<String>,
        #[arg(long, requires = "function")]
        wasm: Option<String>,
        /// The function id the module answers to (128..=250).
        #[arg(long)]
        function: Option<u8>,
    },
    /// Give the spare slots serving a function (--builtin NAME or --function ID) back to spare,
    /// all but --keep of them.
    Shrink {
        #[command(flatten)]
        auth: Auth,
        #[arg(long, default_value_t = 0)]
        keep: u16,
        #[arg(
            long,
            conflicts_with = "function",
            required_unless_present = "function"
        )]
        builtin: Option<String>,
        #[arg(long)]
        function: Option<u8>,
    },
    /// Move the node's slots to a template of its configuration ([[control.templates]]).
    Resize {
        #[command(flatten)]
        auth: Auth,
        name: String,
    },
    /// Assemble WebAssembly text (.wat) into a binary module (.wasm).
    Wat2wasm { input: String, output: String },
    /// Measure swap time (built-in, small and large module) and a swap under load, on a node
    /// started in this process.
    BenchSwap(BenchArgs),
    /// Measure a replicate of n = 2 and a forced unload under load (a swap as the baseline),
    /// on a node started in this process.
    BenchOps(crate::ctl_bench_ops::BenchOpsArgs),
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Swaps per kind.
    #[arg(long, default_value_t = 200)]
    pub swaps: usize,
    /// Extra functions in the large module.
    #[arg(long, default_value_t = 5000)]
    pub large_functions: usize,
    /// Swaps during the load phase.
    #[arg(long, default_value_t = 50)]
    pub load_swaps: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A client for control requests: never retries (a resent envelope is a replay).
pub struct Ctl {
    client: Client,
    tenant: u16,
    key: Vec<u8>,
    nonce: u64,
}

impl Ctl {
    pub fn connect(addr: &str, tenant: u16, key: Vec<u8>) -> Result<Ctl, CliError> {
        let client = Client::connect(addr)?.with_retry_policy(RetryPolicy::with_max_retries(0));
        // Nonces need only be unique per tenant within the window: start from the clock.
        let nonce = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        Ok(Ctl {
            client,
            tenant,
            key,
            nonce,
        })
    }

    /// Send `op`; the answer's payload (JSON or empty) or the node's refusal.
    pub fn request(&mut self, op: &Op) -> Result<Vec<u8>, ClientError> {
        self.nonce += 1;
        let env = wire::encode(self.tenant, now_ms(), self.nonce, op, &self.key);
        Ok(self.client.call(FN_CONTROL, 0, &env)?.payload)
    }
}

/// A built-in by name, or a module by digest and function id.
fn parse_target(
    builtin: Option<String>,
    wasm: Option<String>,
    function: Option<u8>,
) -> Result<Target, CliError> {
    match (builtin, wasm, function) {
        (Some(name), None, _) => Ok(Target::Builtin(
            FunctionId::from_name(&name)
                .ok_or_else(|| {
                    CliError::Usage(format!(
                        "unknown built-in {name:?} (known: {})",
                        FunctionId::known_names()
                    ))
                })?
                .id(),
        )),
        (None, Some(d), Some(function)) => Ok(Target::Wasm {
            function,
            digest: parse_digest(&d)?,
        }),
        _ => Err(CliError::Usage(
            "give --builtin NAME, or --wasm DIGEST --function ID".into(),
        )),
    }
}

fn connect(a: &Auth) -> Result<Ctl, CliError> {
    let key = hex::decode(&a.key).map_err(|_| CliError::Usage("--key is not hex".into()))?;
    Ctl::connect(&a.addr, a.tenant, key)
}

pub fn parse_digest(s: &str) -> Result<Digest, CliError> {
    hex::decode(s)
        .ok()
        .and_then(|d| d.try_into().ok())
        .ok_or_else(|| CliError::Usage(format!("{s:?} is not a 64-digit hex SHA-256 digest")))
}

/// A module file's bytes: `.wat` files are WebAssembly text.
pub fn read_module(path: &str) -> Result<Vec<u8>, CliError> {
    let bytes = std::fs::read(path).map_err(|source| CliError::Read {
        path: path.into(),
        source,
    })?;
    if path.ends_with(".wat") {
        let text = String::from_utf8(bytes)
            .map_err(|_| CliError::Usage(format!("{path} is not UTF-8 text")))?;
        return examples::compile_wat(&text).map_err(|e| CliError::Usage(format!("{path}: {e}")));
    }
    Ok(bytes)
}

fn print_answer(payload: &[u8]) {
    let text = String::from_utf8_lossy(payload);
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) => println!(
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| text.to_string())
        ),
        Err(_) if text.is_empty() => println!("ok"),
        Err(_) => println!("{text}"),
    }
}

pub fn run(a: Args) -> Result<(), CliError> {
    match a.command {
        Sub::Upload { auth, file } => {
            let bytes = read_module(&file)?;
            print_answer(&connect(&auth)?.request(&Op::Upload(bytes))?);
        }
        Sub::Swap {
            auth,
            slot,
            builtin,
            wasm,
            function,
        } => {
            let target = parse_target(builtin, wasm, function)?;
            print_answer(&connect(&auth)?.request(&Op::Swap { slot, target })?);
        }
        Sub::Replicate {
            auth,
            n,
            builtin,
            wasm,
            function,
        } => {
            if n == 0 {
                return Err(CliError::Usage("--n must be at least 1".into()));
            }
            let target = parse_target(builtin, wasm, function)?;
            print_answer(&connect(&auth)?.request(&Op::Replicate { n, target })?);
        }
        Sub::List { auth } => print_answer(&connect(&auth)?.request(&Op::List)?),
        Sub::Resize { auth, name } => {
            if name.is_empty() || name.len() > wire::MAX_TEMPLATE_NAME {
                return Err(CliError::Usage(format!(
                    "a template name is 1 to {} bytes",
                    wire::MAX_TEMPLATE_NAME
                )));
            }
            print_answer(&connect(&auth)?.request(&Op::Resize(name))?);
        }
        Sub::Shrink {
            auth,
            keep,
            builtin,
            function,
        } => {
            let function = match (builtin, function) {
                (Some(name), None) => parse_target(Some(name), None, None)?.function(),
                (None, Some(f)) => f,
                _ => {
                    return Err(CliError::Usage(
                        "give --builtin NAME or --function ID".into(),
                    ))
                }
            };
            print_answer(&connect(&auth)?.request(&Op::Shrink { keep, function })?);
        }
        Sub::Unload {
            auth,
            digest,
            force,
        } => print_answer(&connect(&auth)?.request(&Op::Unload {
            digest: parse_digest(&digest)?,
            force,
        })?),
        Sub::Wat2wasm { input, output } => {
            let bytes = read_module(&input)?;
            std::fs::write(&output, bytes)?;
        }
        Sub::BenchSwap(b) => crate::ctl_bench::run(b)?,
        Sub::BenchOps(b) => crate::ctl_bench_ops::run(b)?,
    }
    Ok(())
}
