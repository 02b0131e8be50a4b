use std::io;

/// Everything the load generator and the baseline servers can fail with.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("protocol error: {0}")]
    Protocol(#[from] offrac_proto::ResponseError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("the server closed the connection")]
    Closed,
    #[error("cannot read trace {path}: {why}")]
    Trace { path: String, why: String },
    #[error(transparent)]
    Client(#[from] offrac_client::ClientError),
    #[error("a load thread panicked")]
    Panicked,
}
