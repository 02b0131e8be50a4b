//! `offrac collective`: one rank's call of a collective on its own node
//! (docs/collectives.md). Every rank runs the same command against its node
//! with the same tag; each prints its own result, one value per line.
//! With `--hop NAME` it runs nothing: it keeps the call's descriptor on the
//! node as named buffer NAME and prints the chain hop (`251:PARAM`) that runs
//! the collective inside an `offrac call` chain (docs/collectives.md,
//! "Collectives in a chain").

use crate::CliError;
use offrac_client::{Client, FunctionCode, Hop};
use offrac_collective::{Algorithm, Descriptor, Dtype, Members, Op, RedOp};
use offrac_proto::{
    buffer_param, collective_hop_param, BufferOp, DEVICE_SELF, FN_BUFFER, FN_COLLECTIVE,
};
use std::time::Duration;

#[derive(Clone, Copy, clap::ValueEnum)]
enum Collective {
    Bcast,
    Reduce,
    Allreduce,
    Gather,
    Scatter,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Type {
    Float32,
    Int32,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Reduction {
    Sum,
    Max,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Algo {
    Auto,
    OneToAll,
    Tree,
    Ring,
    RecursiveDoubling,
}

#[derive(clap::Args)]
pub struct Args {
    collective: Collective,
    /// This rank's node.
    #[arg(long, default_value = "127.0.0.1:7000")]
    addr: String,
    /// The communicator: comma-separated device ids (ranks in increasing id order).
    #[arg(long, value_delimiter = ',', required = true)]
    members: Vec<u8>,
    /// Names this collective: the same on every rank, a new one per collective
    /// (with --hop: the descriptor's tag, 0 by default; each chain adds its --hop-tag).
    #[arg(long)]
    tag: Option<u64>,
    #[arg(long, value_enum, default_value = "float32")]
    dtype: Type,
    /// Reduction of reduce and allreduce.
    #[arg(long = "op", value_enum, default_value = "sum")]
    reduction: Reduction,
    /// Rank of the root (bcast, reduce, gather, scatter).
    #[arg(long, default_value_t = 0)]
    root: u8,
    #[arg(long, value_enum, default_value = "auto")]
    algorithm: Algo,
    /// Elements per rank, for ranks that give no input (a bcast's or scatter's non-roots).
    #[arg(long)]
    count: Option<u32>,
    /// The collective's deadline.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u32,
    /// Take this rank's input from the node's named buffer NAME (`offrac buffer`)
    /// instead of the values.
    #[arg(long, value_name = "NAME")]
    from_buffer: Option<u32>,
    /// Keep this rank's output on its node as the named buffer NAME (printing nothing),
    /// for a later chain or collective to read.
    #[arg(long, value_name = "NAME")]
    keep: Option<u32>,
    /// Run nothing: keep this call's 64-byte descriptor on the node as named buffer NAME
    /// and print the chain hop `251:PARAM` that runs the collective in an `offrac call`
    /// chain (its input is the hop's input; give --count).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["from_buffer", "keep"])]
    hop: Option<u32>,
    /// With --hop: the number the printed hop adds to the descriptor's tag (param bits
    /// 32-63); every rank's chain must add the same, a new one per chain.
    #[arg(long, value_name = "N", requires = "hop")]
    hop_tag: Option<u32>,
    /// The requests' tenant (as `offrac buffer`; anonymous by default): it owns the named
    /// buffers of --hop, --from-buffer and --keep.
    #[arg(long)]
    tenant: Option<u16>,
    /// This rank's input values (a scatter's root: all ranks' blocks, in rank order).
    #[arg(allow_hyphen_values = true)]
    values: Vec<String>,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let dtype = match a.dtype {
        Type::Float32 => Dtype::F32,
        Type::Int32 => Dtype::I32,
    };
    let mut input = Vec::with_capacity(a.values.len() * 4);
    for v in &a.values {
        let bad = || CliError::Usage(format!("{v:?} is not a {} value", dtype.name()));
        match dtype {
            Dtype::F32 => input.extend(v.parse::<f32>().map_err(|_| bad())?.to_le_bytes()),
            Dtype::I32 => input.extend(v.parse::<i32>().map_err(|_| bad())?.to_le_bytes()),
        }
    }
    let op = match a.collective {
        Collective::Bcast => Op::Broadcast,
        Collective::Reduce => Op::Reduce,
        Collective::Allreduce => Op::AllReduce,
        Collective::Gather => Op::Gather,
        Collective::Scatter => Op::Scatter,
    };
    let n = {
        let mut m = a.members.clone();
        m.sort_unstable();
        m.dedup();
        m.len() as u32
    };
    let given = a.values.len() as u32;
    if a.hop.is_some() && given > 0 {
        return Err(CliError::Usage(
            "--hop runs nothing: its input is the chain hop's; give --count, not values".into(),
        ));
    }
    if a.hop.is_some() && a.count.is_none() {
        return Err(CliError::Usage(
            "--hop needs --count (elements per rank; a scatter root's input is that times the ranks)"
                .into(),
        ));
    }
    let tag = match (a.tag, a.hop) {
        (Some(t), _) => t,
        (None, Some(_)) => 0,
        (None, None) => {
            return Err(CliError::Usage(
                "--tag is required (the same on every rank)".into(),
            ))
        }
    };
    let count = match (op, a.count) {
        (_, Some(c)) => c,
        (Op::Scatter, None) if given.is_multiple_of(n.max(1)) => given / n.max(1),
        (Op::Scatter, None) => {
            return Err(CliError::Usage(format!(
                "scatter's root gives {given} values, not a multiple of {n} ranks"
            )))
        }
        (_, None) if given > 0 => given,
        _ => {
            return Err(CliError::Usage(
                "give the values, or --count (always with --from-buffer)".into(),
            ))
        }
    };
    let desc = Descriptor {
        redop: match (op.reduces(), a.reduction) {
            (false, _) => RedOp::None,
            (true, Reduction::Sum) => RedOp::Sum,
            (true, Reduction::Max) => RedOp::Max,
        },
        root: a.root,
        algorithm: match a.algorithm {
            Algo::Auto => Algorithm::Auto,
            Algo::OneToAll => Algorithm::OneToAll,
            Algo::Tree => Algorithm::Tree,
            Algo::Ring => Algorithm::Ring,
            Algo::RecursiveDoubling => Algorithm::RecursiveDoubling,
        },
        tag,
        timeout_ms: a.timeout_ms,
        ..Descriptor::call(op, dtype, count, Members::of(&a.members))
    };
    if a.from_buffer.is_some() && given > 0 {
        return Err(CliError::Usage(
            "give the values or --from-buffer, not both".into(),
        ));
    }
    if let Some(name) = a.hop {
        return keep_hop(&a.addr, a.tenant, name, a.hop_tag.unwrap_or(0), &desc);
    }
    let mut payload = desc.encode().to_vec();
    // Byte 7: bit 0 input from a named buffer (param bits 0-31), bit 1 keep the output (bits 32-63).
    payload[7] = u8::from(a.from_buffer.is_some()) | u8::from(a.keep.is_some()) << 1;
    let param = u64::from(a.from_buffer.unwrap_or(0)) | u64::from(a.keep.unwrap_or(0)) << 32;
    payload.extend_from_slice(&input);
    let wait = Duration::from_millis(a.timeout_ms as u64) + Duration::from_secs(5);
    let mut client = Client::connect_timeout(&a.addr, wait)?;
    client.set_retry_policy(offrac_client::RetryPolicy::NONE);
    if let Some(t) = a.tenant {
        client.set_tenant(t);
    }
    let reply = client.call(FunctionCode(FN_COLLECTIVE), param, &payload)?;
    let mut out = String::new();
    for w in reply.payload.chunks_exact(4) {
        let b = [w[0], w[1], w[2], w[3]];
        match dtype {
            Dtype::F32 => out.push_str(&format!("{}\n", f32::from_le_bytes(b))),
            Dtype::I32 => out.push_str(&format!("{}\n", i32::from_le_bytes(b))),
        }
    }
    print!("{out}");
    Ok(())
}

/// Keep `desc` (a call's descriptor, byte 7 = 0) on the node at `addr` as named
/// buffer `name` and print the chain hop that runs it with `hop_tag` added to its tag.
fn keep_hop(
    addr: &str,
    tenant: Option<u16>,
    name: u32,
    hop_tag: u32,
    desc: &Descriptor,
) -> Result<(), CliError> {
    let put = Hop {
        function: FN_BUFFER,
        device: DEVICE_SELF,
        param: buffer_param(BufferOp::Put, name),
    };
    let mut client = Client::connect(addr)?;
    if let Some(t) = tenant {
        client.set_tenant(t);
    }
    client.call_chain(&[put], &desc.encode())?;
    eprintln!("kept the descriptor as buffer {name}; the chain hop:");
    println!("{FN_COLLECTIVE}:{}", collective_hop_param(name, hop_tag));
    Ok(())
}
