//! A backend's HTTP/1.x response as the gate relays it: the head (parsed by
//! `httparse`, rewritten for the client without hop-by-hop headers) and
//! where the body ends (Content-Length, chunked, or the backend's close).
//! Sans-IO: each function looks at the bytes received so far.

const MAX_HEADERS: usize = 100;
/// The longest chunk-size line (with extensions) accepted.
const MAX_CHUNK_LINE: usize = 4096;

/// The backend said something the gate cannot frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("backend response head malformed")]
    Head,
    #[error("backend response head over the size limit")]
    TooLarge,
    #[error("backend switched protocols (101), which the gate does not relay")]
    Upgrade,
    #[error("backend Content-Length malformed")]
    Length,
    #[error("backend chunked body malformed")]
    Chunk,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Empty,
    Length(u64),
    Chunked,
    /// The body runs until the backend closes its connection.
    UntilClose,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub len: usize,
    pub status: u16,
    /// 1xx (not 101): another head follows.
    pub interim: bool,
    pub framing: Framing,
    /// The backend keeps its connection open after this response.
    pub backend_keep_alive: bool,
    /// Any Transfer-Encoding header was present.
    pub has_transfer_encoding: bool,
    /// Status line (as HTTP/1.1) and end-to-end headers, without the blank line.
    pub head: Vec<u8>,
}

/// Parses the response head at the start of `buf`; `request_was_head`:
/// the answer to a HEAD request has no body whatever its headers say.
pub fn parse(
    buf: &[u8],
    max_head: usize,
    request_was_head: bool,
) -> Result<Option<ResponseHead>, ResponseError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= max_head => n,
        Ok(httparse::Status::Complete(_)) => return Err(ResponseError::TooLarge),
        Ok(httparse::Status::Partial) if buf.len() > max_head => {
            return Err(ResponseError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ResponseError::TooLarge),
        Err(_) => return Err(ResponseError::Head),
    };
    let (Some(version), Some(status)) = (resp.version, resp.code) else {
        return Err(ResponseError::Head);
    };
    if status == 101 {
        return Err(ResponseError::Upgrade);
    }
    let mut backend_keep_alive = version == 1;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut has_te = false;
    let mut named: Vec<String> = Vec::new();
    for h in resp.headers.iter() {
        let lower = |v: &[u8]| String::from_utf8_lossy(v).to_ascii_lowercase();
        if h.name.eq_ignore_ascii_case("connection") {
            for t in lower(h.value).split(',').map(str::trim) {
                match t {
                    "close" => backend_keep_alive = false,
                    "keep-alive" => backend_keep_alive = true,
                    "" => {}
                    other => named.push(other.to_string()),
                }
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            has_te = true;
            chunked = lower(h.value).rsplit(',').next().map(str::trim) == Some("chunked");
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value)
                .ok()
                .map(str::trim)
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or(ResponseError::Length)?;
            if content_length.is_some_and(|c| c != v) {
                return Err(ResponseError::Length);
            }
            content_length = Some(v);
        }
    }
    let interim = (100..200).contains(&status);
    let framing = if interim || request_was_head || status == 204 || status == 304 {
        Framing::Empty
    } else if has_te {
        // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3).
        if chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else if let Some(n) = content_length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    if framing == Framing::UntilClose {
        backend_keep_alive = false;
    }
    let mut head = Vec::with_capacity(len + 16);
    let reason = resp.reason.unwrap_or("");
    head.extend_from_slice(format!("HTTP/1.1 {status} {reason}\r\n").as_bytes());
    for h in resp.headers.iter() {
        let hop = ["connection", "keep-alive", "proxy-connection", "upgrade"]
            .iter()
            .any(|n| h.name.eq_ignore_ascii_case(n))
            || named.iter().any(|n| h.name.eq_ignore_ascii_case(n));
        if hop {
            continue;
        }
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(h.value);
        head.extend_from_slice(b"\r\n");
    }
    Ok(Some(ResponseHead {
        len,
        status,
        interim,
        framing,
        backend_keep_alive,
        has_transfer_encoding: has_te,
        head,
    }))
}

/// Finds the end of a chunked body in the bytes as they arrive; the bytes
/// themselves are relayed unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Chunks {
    /// At a chunk-size line.
    #[default]
    Size,
    /// Inside a chunk: data bytes left, then its CRLF.
    Data(u64),
    /// The CRLF after a chunk's data: bytes of it left.
    DataEnd(u8),
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
    Done,
}

impl Chunks {
    /// How many bytes of `buf` (the unscanned bytes received so far) belong
    /// to the body: scanning stops at the body's end or where more bytes are
    /// needed. `max_trailers` bounds a trailer line.
    pub fn scan(&mut self, buf: &[u8], max_trailers: usize) -> Result<usize, ResponseError> {
        let mut at = 0;
        loop {
            let rest = &buf[at..];
            match *self {
                Chunks::Done => return Ok(at),
                Chunks::Size => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((n, 0))) => {
                        at += n;
                        *self = Chunks::Trailers;
                    }
                    Ok(httparse::Status::Complete((n, size))) => {
                        at += n;
                        *self = Chunks::Data(size);
                    }
                    Ok(httparse::Status::Partial) if rest.len() > MAX_CHUNK_LINE => {
                        return Err(ResponseError::Chunk)
                    }
                    Ok(httparse::Status::Partial) => return Ok(at),
                    Err(_) => return Err(ResponseError::Chunk),
                },
                Chunks::Data(left) => {
                    if rest.is_empty() {
                        return Ok(at);
                    }
                    let take = left.min(rest.len() as u64);
                    at += take as usize;
                    *self = if take == left {
                        Chunks::DataEnd(2)
                    } else {
                        Chunks::Data(left - take)
                    };
                }
                Chunks::DataEnd(left) => {
                    let want: &[u8] = if left == 2 { b"\r\n" } else { b"\n" };
                    let n = rest.len().min(want.len());
                    if rest[..n] != want[..n] {
                        return Err(ResponseError::Chunk);
                    }
                    at += n;
                    if n == want.len() {
                        *self = Chunks::Size;
                    } else if n == 0 {
                        return Ok(at);
                    } else {
                        *self = Chunks::DataEnd(left - n as u8);
                    }
                }
                Chunks::Trailers => {
                    let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
                        if rest.len() > max_trailers {
                            return Err(ResponseError::Chunk);
                        }
                        return Ok(at);
                    };
                    at += eol + 2;
                    if eol == 0 {
                        *self = Chunks::Done;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str, head_req: bool) -> ResponseHead {
        parse(s.as_bytes(), 8192, head_req).unwrap().unwrap()
    }

    #[test]
    fn framing_follows_the_headers() {
        let r = p(
            "HTTP/1.0 200 OK\r\nServer: x\r\nContent-Length: 5\r\n\r\nhello",
            false,
        );
        assert_eq!(r.framing, Framing::Length(5));
        assert!(!r.backend_keep_alive, "HTTP/1.0 closes by default");
        assert_eq!(
            r.head,
            b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 5\r\n"
        );
        let r = p(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
            false,
        );
        assert_eq!(r.framing, Framing::Chunked);
        assert!(!r.backend_keep_alive);
        assert!(!String::from_utf8(r.head).unwrap().contains("Connection"));
        assert_eq!(
            p("HTTP/1.1 200 OK\r\n\r\n", false).framing,
            Framing::UntilClose
        );
        assert_eq!(
            p("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true).framing,
            Framing::Empty
        );
        assert_eq!(
            p("HTTP/1.1 304 Not Modified\r\n\r\n", false).framing,
            Framing::Empty
        );
        let r = p("HTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n", false);
        assert!(r.interim && r.framing == Framing::Empty && r.backend_keep_alive);
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\n", 8192, false), Ok(None));
        assert_eq!(
            parse(b"HTTP/1.1 101 Switching\r\n\r\n", 8192, false),
            Err(ResponseError::Upgrade)
        );
        assert_eq!(
            parse(
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                8192,
                false
            ),
            Err(ResponseError::Length)
        );
        assert_eq!(
            parse(b"SSH-2.0-x\r\n\r\n", 8192, false),
            Err(ResponseError::Head)
        );
    }

    #[test]
    fn chunked_bodies_end_where_they_end_in_any_split() {
        let body = b"5;ext=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n";
        let mut whole = body.to_vec();
        whole.extend_from_slice(b"NEXT");
        for split in 0..whole.len() {
            let mut c = Chunks::default();
            let mut done = c.scan(&whole[..split], 1024).unwrap();
            done += c.scan(&whole[done..], 1024).unwrap();
            assert_eq!(done, body.len(), "split at {split}");
            assert_eq!(c, Chunks::Done);
        }
        // Byte by byte.
        let mut c = Chunks::default();
        let mut pending = Vec::new();
        let mut done = 0;
        for &b in body.iter() {
            pending.push(b);
            let n = c.scan(&pending, 1024).unwrap();
            pending.drain(..n);
            done += n;
        }
        assert_eq!((done, c), (body.len(), Chunks::Done));
        assert_eq!(
            Chunks::default().scan(b"zz\r\n", 1024),
            Err(ResponseError::Chunk)
        );
        assert_eq!(
            Chunks::default().scan(b"1\r\naXY", 1024),
            Err(ResponseError::Chunk)
        );
    }
}
