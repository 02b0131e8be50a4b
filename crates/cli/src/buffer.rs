//! `offrac buffer`: named buffers on a node (docs/protocol.md, "Named
//! buffers"). `put` keeps a file's bytes (or stdin's) under a name (`create`
//! only if no buffer of that name is kept: `BUFFER_EXISTS` else), `get`
//! writes a buffer's bytes to stdout or a file, `drop` removes one. With
//! `--device` the buffer hop is forwarded to that device of the node's
//! device table.

use crate::CliError;
use offrac_client::{Client, Hop};
use offrac_proto::{buffer_param, BufferOp, DEVICE_SELF, FN_BUFFER};
use std::io::{Read, Write};

#[derive(Clone, Copy, clap::ValueEnum)]
enum Action {
    /// Keep the input (--file, or stdin) under NAME, replacing a buffer of that name.
    Put,
    /// As put, but only if no buffer NAME is kept (else BUFFER_EXISTS, nothing changed).
    Create,
    /// Write buffer NAME's bytes to --file, or stdout.
    Get,
    /// Remove buffer NAME.
    Drop,
}

#[derive(clap::Args)]
pub struct Args {
    action: Action,
    /// The buffer's name, 0..=4294967295.
    name: u32,
    /// The node to ask.
    #[arg(long, default_value = "127.0.0.1:7000")]
    addr: String,
    /// The device that keeps the buffer (default: the node at --addr).
    #[arg(long)]
    device: Option<u8>,
    /// put: read the bytes from this file; get: write them to it.
    #[arg(long)]
    file: Option<String>,
    /// The request's tenant (after a hello, see `offrac ctl`; anonymous by default).
    #[arg(long)]
    tenant: Option<u16>,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let op = match a.action {
        Action::Put => BufferOp::Put,
        Action::Create => BufferOp::Create,
        Action::Get => BufferOp::Get,
        Action::Drop => BufferOp::Drop,
    };
    let input = match (a.action, &a.file) {
        (Action::Put | Action::Create, Some(path)) => {
            std::fs::read(path).map_err(|source| CliError::Read {
                path: path.clone(),
                source,
            })?
        }
        (Action::Put | Action::Create, None) => {
            let mut b = Vec::new();
            std::io::stdin().read_to_end(&mut b)?;
            b
        }
        _ => Vec::new(),
    };
    let hop = Hop {
        function: FN_BUFFER,
        device: a.device.unwrap_or(DEVICE_SELF),
        param: buffer_param(op, a.name),
    };
    let mut client = Client::connect(&a.addr)?;
    if let Some(t) = a.tenant {
        client.set_tenant(t);
    }
    let reply = client.call_chain(&[hop], &input)?;
    match (a.action, &a.file) {
        (Action::Get, Some(path)) => std::fs::write(path, &reply.payload)?,
        (Action::Get, None) => std::io::stdout().write_all(&reply.payload)?,
        (Action::Put | Action::Create, _) => {
            eprintln!("kept {} bytes as buffer {}", input.len(), a.name)
        }
        (Action::Drop, _) => eprintln!("dropped buffer {}", a.name),
    }
    Ok(())
}
