//! An HTTP/1.1 request head as the gate reads it from a client (parsed by
//! `httparse`): how its body is framed, whether the connection stays open,
//! its bearer token, and the head to forward to the backend without the
//! hop-by-hop headers. Sans-IO.

/// Headers one request may carry.
const MAX_HEADERS: usize = 100;

/// Why a request head is answered by the node with an error; each maps to
/// one status and closes the connection (the rest of the stream cannot be
/// trusted to be framed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("malformed request: {0}")]
    Bad(&'static str),
    #[error("request header fields too large")]
    TooLarge,
    #[error("request body too large")]
    BodyTooLarge,
    #[error("chunked request bodies are not supported; send Content-Length")]
    Chunked,
    #[error("unsupported expectation")]
    Expectation,
}

impl HeadError {
    pub fn status(self) -> (u16, &'static str) {
        match self {
            HeadError::Bad(_) => (400, "Bad Request"),
            HeadError::TooLarge => (431, "Request Header Fields Too Large"),
            HeadError::BodyTooLarge => (413, "Content Too Large"),
            HeadError::Chunked => (411, "Length Required"),
            HeadError::Expectation => (417, "Expectation Failed"),
        }
    }
}

/// The `Authorization` header as the gate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    Missing,
    Bearer(String),
    /// Another scheme, or `Bearer` without a token.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes the head took in the client's stream.
    pub len: usize,
    pub body_len: usize,
    pub is_head_method: bool,
    pub http10: bool,
    /// The client may send another request on this connection.
    pub keep_alive: bool,
    pub expect_continue: bool,
    pub auth: Auth,
    /// The head for the backend: same method, target and end-to-end headers,
    /// without hop-by-hop ones (Connection and those it names, Keep-Alive,
    /// TE, Trailer, Upgrade, Expect, Proxy-Connection).
    pub forward: Vec<u8>,
}

fn is_hop_by_hop(name: &str, named: &[String]) -> bool {
    const HOP: [&str; 8] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
    ];
    HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
        || named.iter().any(|n| name.eq_ignore_ascii_case(n))
}

fn tokens(value: &[u8]) -> impl Iterator<Item = String> + '_ {
    value
        .split(|&b| b == b',')
        .map(|t| String::from_utf8_lossy(t).trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
}

fn parse_auth(value: &[u8]) -> Auth {
    let Ok(v) = std::str::from_utf8(value) else {
        return Auth::Other;
    };
    let v = v.trim();
    match v.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
            let token = token.trim();
            if token.is_empty() || token.contains(' ') {
                Auth::Other
            } else {
                Auth::Bearer(token.to_string())
            }
        }
        _ => Auth::Other,
    }
}

/// Parses the request head at the start of `buf`: `Ok(None)` while it is
/// incomplete (and under `max_head` bytes).
pub fn parse(
    buf: &[u8],
    max_head: usize,
    max_body: usize,
) -> Result<Option<RequestHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= max_head => n,
        Ok(httparse::Status::Complete(_)) => return Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) if buf.len() > max_head => return Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(httparse::Error::Version) => return Err(HeadError::Bad("not HTTP/1.x")),
        Err(_) => return Err(HeadError::Bad("request line or header syntax")),
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(HeadError::Bad("incomplete request line"));
    };
    let http10 = version == 0;
    let mut content_length: Option<usize> = None;
    let mut keep_alive = !http10;
    let mut named = Vec::new();
    let mut hosts = 0;
    let mut auth = Auth::Missing;
    let mut expect_continue = false;
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value)
                .ok()
                .map(str::trim)
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<usize>().ok())
                .ok_or(HeadError::Bad("Content-Length is not a number"))?;
            if content_length.is_some_and(|c| c != v) {
                return Err(HeadError::Bad("conflicting Content-Length"));
            }
            content_length = Some(v);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked (or any coding) framing of a request body is refused:
            // the body's length must be known before it is forwarded.
            return Err(if tokens(h.value).last().as_deref() == Some("chunked") {
                HeadError::Chunked
            } else {
                HeadError::Bad("unknown Transfer-Encoding")
            });
        } else if name.eq_ignore_ascii_case("connection") {
            for t in tokens(h.value) {
                match t.as_str() {
                    "close" => keep_alive = false,
                    "keep-alive" if http10 => keep_alive = true,
                    _ => named.push(t),
                }
            }
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case("authorization") {
            if auth != Auth::Missing {
                return Err(HeadError::Bad("more than one Authorization header"));
            }
            auth = parse_auth(h.value);
        } else if name.eq_ignore_ascii_case("expect") {
            if h.value.eq_ignore_ascii_case(b"100-continue") {
                expect_continue = true;
            } else {
                return Err(HeadError::Expectation);
            }
        }
    }
    if (!http10 && hosts != 1) || hosts > 1 {
        return Err(HeadError::Bad("HTTP/1.1 needs exactly one Host header"));
    }
    let body_len = content_length.unwrap_or(0);
    if body_len > max_body {
        return Err(HeadError::BodyTooLarge);
    }
    let mut forward = Vec::with_capacity(len + 32);
    forward.extend_from_slice(method.as_bytes());
    forward.push(b' ');
    forward.extend_from_slice(target.as_bytes());
    forward.extend_from_slice(if http10 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
    for h in req.headers.iter() {
        if is_hop_by_hop(h.name, &named) || h.name.eq_ignore_ascii_case("content-length") {
            continue;
        }
        forward.extend_from_slice(h.name.as_bytes());
        forward.extend_from_slice(b": ");
        forward.extend_from_slice(h.value);
        forward.extend_from_slice(b"\r\n");
    }
    if content_length.is_some() {
        forward.extend_from_slice(format!("Content-Length: {body_len}\r\n").as_bytes());
    }
    if http10 {
        // The backend connection is the node's, kept open between requests.
        forward.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    forward.extend_from_slice(b"\r\n");
    Ok(Some(RequestHead {
        len,
        body_len,
        is_head_method: method == "HEAD",
        http10,
        keep_alive,
        expect_continue: expect_continue && body_len > 0,
        auth,
        forward,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Option<RequestHead>, HeadError> {
        parse(s.as_bytes(), 8192, 1000)
    }

    #[test]
    fn a_request_head_is_read_and_rewritten_for_the_backend() {
        let r = p(
            "POST /x?a=1 HTTP/1.1\r\nHost: h\r\nAuthorization: bearer abc.def.ghi\r\n\
                   Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nContent-Length: 3\r\n\
                   Expect: 100-continue\r\nUpgrade: h2c\r\nX-Keep: y\r\n\r\nabc",
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.body_len, 3);
        assert!(r.keep_alive && r.expect_continue && !r.http10 && !r.is_head_method);
        assert_eq!(r.auth, Auth::Bearer("abc.def.ghi".into()));
        assert_eq!(
            String::from_utf8(r.forward).unwrap(),
            "POST /x?a=1 HTTP/1.1\r\nHost: h\r\nAuthorization: bearer abc.def.ghi\r\n\
             X-Keep: y\r\nContent-Length: 3\r\n\r\n"
        );
        let all = "POST /x?a=1 HTTP/1.1\r\nHost: h\r\nAuthorization: bearer abc.def.ghi\r\n\
                   Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nContent-Length: 3\r\n\
                   Expect: 100-continue\r\nUpgrade: h2c\r\nX-Keep: y\r\n\r\n";
        assert_eq!(r.len, all.len());
    }

    #[test]
    fn connection_persistence_follows_the_version() {
        let r = p("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(r.http10 && !r.keep_alive);
        assert!(String::from_utf8(r.forward)
            .unwrap()
            .ends_with("Connection: keep-alive\r\n\r\n"));
        let r = p("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(r.keep_alive);
        let r = p("HEAD / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!r.keep_alive && r.is_head_method);
        assert_eq!(r.auth, Auth::Missing);
    }

    #[test]
    fn partial_heads_wait_and_bad_ones_are_named() {
        assert_eq!(p("GET / HTTP/1.1\r\nHost: h\r\n"), Ok(None));
        assert_eq!(
            parse(&[b'a'; 100], 64, 10),
            Err(HeadError::TooLarge),
            "an endless line is bounded"
        );
        for (bad, want) in [
            ("GET / HTTP/1.1\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            ("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 400),
            ("G@T / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
            ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1001\r\n\r\n", 413),
            ("POST / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n", 417),
        ] {
            assert_eq!(p(bad).map(|_| 0).unwrap_or_else(|e| e.status().0), want, "{bad:?}");
        }
        let many: String = (0..200).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(
            parse(
                format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n").as_bytes(),
                1 << 20,
                0
            ),
            Err(HeadError::TooLarge)
        );
    }

    #[test]
    fn authorization_schemes() {
        assert_eq!(parse_auth(b"Bearer  t.o.k "), Auth::Bearer("t.o.k".into()));
        assert_eq!(parse_auth(b"Basic dXNlcjpwdw=="), Auth::Other);
        assert_eq!(parse_auth(b"Bearer"), Auth::Other);
        assert_eq!(parse_auth(b"Bearer a b"), Auth::Other);
    }
}
