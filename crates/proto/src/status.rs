/// Response status codes (`docs/protocol.md`, "Status codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    Ok = 0,
    Busy = 1,
    UnknownFunction = 2,
    TooLarge = 3,
    Malformed = 4,
    BadInput = 5,
    Internal = 6,
    UnsupportedVersion = 7,
    Timeout = 8,
    ShuttingDown = 9,
    Unsupported = 10,
    /// A chain hop's device cannot be reached: no route to it, or the link
    /// to it is down or broke before the hop's answer came back.
    Unreachable = 11,
    /// A control request whose authentication failed: unknown tenant, bad
    /// MAC, a timestamp outside the window, or a replayed nonce.
    Unauthorized = 12,
    /// The slot's WebAssembly module trapped (the slot goes on serving).
    Trapped = 13,
    /// The slot's WebAssembly module used up its fuel and was stopped.
    FuelExhausted = 14,
    /// The request's tenant is over one of its quotas (in-flight requests,
    /// reassembly-pool bytes): retry once some of its requests are answered.
    QuotaExceeded = 15,
    /// A named buffer the request reads does not exist on the node (for
    /// its tenant); `detail` = the name.
    UnknownBuffer = 16,
    /// A buffer `CREATE` named a buffer the tenant already keeps (nothing
    /// changed); `detail` = the name.
    BufferExists = 17,
}

impl Status {
    pub const ALL: [Status; 18] = [
        Status::Ok,
        Status::Busy,
        Status::UnknownFunction,
        Status::TooLarge,
        Status::Malformed,
        Status::BadInput,
        Status::Internal,
        Status::UnsupportedVersion,
        Status::Timeout,
        Status::ShuttingDown,
        Status::Unsupported,
        Status::Unreachable,
        Status::Unauthorized,
        Status::Trapped,
        Status::FuelExhausted,
        Status::QuotaExceeded,
        Status::UnknownBuffer,
        Status::BufferExists,
    ];

    pub fn from_code(code: u16) -> Option<Status> {
        Status::ALL.get(code as usize).copied()
    }

    pub fn code(self) -> u16 {
        self as u16
    }

    /// Upper-case name as written in the spec, also used as a metrics label.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Busy => "BUSY",
            Status::UnknownFunction => "UNKNOWN_FUNCTION",
            Status::TooLarge => "TOO_LARGE",
            Status::Malformed => "MALFORMED",
            Status::BadInput => "BAD_INPUT",
            Status::Internal => "INTERNAL",
            Status::UnsupportedVersion => "UNSUPPORTED_VERSION",
            Status::Timeout => "TIMEOUT",
            Status::ShuttingDown => "SHUTTING_DOWN",
            Status::Unsupported => "UNSUPPORTED",
            Status::Unreachable => "UNREACHABLE",
            Status::Unauthorized => "UNAUTHORIZED",
            Status::Trapped => "TRAPPED",
            Status::FuelExhausted => "FUEL_EXHAUSTED",
            Status::QuotaExceeded => "QUOTA_EXCEEDED",
            Status::UnknownBuffer => "UNKNOWN_BUFFER",
            Status::BufferExists => "BUFFER_EXISTS",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
