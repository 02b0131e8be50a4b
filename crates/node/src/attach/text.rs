//! memcached's text protocol as a client speaks it to the node: bytes in,
//! requests out. Sans-IO: the parser owns only its input buffer, bounded by
//! the longest command line plus the largest value it accepts.
//!
//! What it answers itself mirrors memcached 1.6 (`ERROR` for an unknown
//! command or a wrong number of tokens, `CLIENT_ERROR bad command line
//! format` for a bad number or a key over 250 bytes, `SERVER_ERROR object too
//! large for cache` for a value over the limit, whose bytes are then skipped,
//! `CLIENT_ERROR bad data chunk` for a block not ended by `\r\n`).

/// memcached's longest key.
pub const MAX_KEY: usize = 250;

/// A key, as bytes.
pub type Key = Box<[u8]>;

/// One parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `get`/`gets` with one or more keys.
    Get { keys: Vec<Key>, cas: bool },
    /// `gat`/`gats`: forwarded as sent, answered like a get.
    Gat { line: Vec<u8> },
    /// `set`/`add`/`replace`/`append`/`prepend`/`cas`: `line` is the command
    /// line for memcached (`noreply` removed, `\r\n` ended), `data` the block
    /// with its `\r\n`.
    Store {
        key: Key,
        line: Vec<u8>,
        data: Vec<u8>,
        noreply: bool,
    },
    /// `delete`/`incr`/`decr`/`touch`: one key changed, one line answered.
    Update {
        key: Key,
        line: Vec<u8>,
        noreply: bool,
    },
    /// `flush_all [delay]`.
    FlushAll {
        line: Vec<u8>,
        noreply: bool,
        delay_s: u32,
    },
    /// `stats ...`: `STAT`/`ITEM` lines, then `END` (or one line).
    Stats { line: Vec<u8> },
    /// `version`, `verbosity`, `cache_memlimit`: one line answered.
    Other { line: Vec<u8>, noreply: bool },
    /// `quit`: answer what came before, then close.
    Quit,
    /// The node answers this itself (a malformed or unsupported command).
    Reply(&'static [u8]),
    /// Answer this, then close the connection (a line over the limit).
    Fatal(&'static [u8]),
}

pub const ERROR: &[u8] = b"ERROR\r\n";
pub const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
pub const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
pub const BAD_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
pub const LINE_TOO_LONG: &[u8] = b"CLIENT_ERROR line too long\r\n";

/// Incremental request parser.
#[derive(Debug)]
pub struct RequestParser {
    buf: Vec<u8>,
    start: usize,
    /// Bytes of an oversized value still to skip.
    swallow: usize,
    max_line: usize,
    max_value: usize,
    dead: bool,
}

impl RequestParser {
    pub fn new(max_line: usize, max_value: usize) -> Self {
        RequestParser {
            buf: Vec::new(),
            start: 0,
            swallow: 0,
            max_line,
            max_value,
            dead: false,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.dead {
            return;
        }
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held, not yet parsed.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The most bytes this parser ever needs to hold to make progress.
    pub fn bound(&self) -> usize {
        self.max_line + self.max_value + 2
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 64 * 1024 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    /// The next complete request, if the buffer holds one.
    pub fn next_request(&mut self) -> Option<Request> {
        if self.dead {
            return None;
        }
        if self.swallow > 0 {
            let n = self.swallow.min(self.buffered());
            self.swallow -= n;
            self.consume(n);
            if self.swallow > 0 {
                return None;
            }
        }
        let avail = &self.buf[self.start..];
        let Some(nl) = avail.iter().position(|&b| b == b'\n') else {
            if avail.len() > self.max_line {
                self.dead = true;
                self.buf = Vec::new();
                self.start = 0;
                return Some(Request::Fatal(LINE_TOO_LONG));
            }
            return None;
        };
        if nl > self.max_line {
            self.dead = true;
            self.buf = Vec::new();
            self.start = 0;
            return Some(Request::Fatal(LINE_TOO_LONG));
        }
        let line_len = nl + 1;
        let line = avail[..nl].strip_suffix(b"\r").unwrap_or(&avail[..nl]);
        let tokens: Vec<&[u8]> = line
            .split(|&b| b == b' ')
            .filter(|t| !t.is_empty())
            .collect();
        let parsed = match parse_line(&tokens, self.max_value) {
            Line::Done(r) => {
                self.consume(line_len);
                r
            }
            Line::Store {
                key,
                line,
                bytes,
                noreply,
            } => {
                let need = line_len + bytes + 2;
                if avail.len() < need {
                    return None;
                }
                let block = &avail[line_len..need];
                let r = if block.ends_with(b"\r\n") {
                    Request::Store {
                        key,
                        line,
                        data: block.to_vec(),
                        noreply,
                    }
                } else {
                    Request::Reply(BAD_CHUNK)
                };
                self.consume(need);
                r
            }
            Line::Swallow(bytes) => {
                self.consume(line_len);
                self.swallow = bytes + 2;
                // The skipped bytes may already be here.
                let n = self.swallow.min(self.buffered());
                self.swallow -= n;
                self.consume(n);
                Request::Reply(TOO_LARGE)
            }
        };
        Some(parsed)
    }
}

enum Line {
    Done(Request),
    Store {
        key: Key,
        line: Vec<u8>,
        bytes: usize,
        noreply: bool,
    },
    Swallow(usize),
}

fn num<T: std::str::FromStr>(t: &[u8]) -> Option<T> {
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// The tokens joined again for memcached, without a trailing `noreply`.
fn rebuild(tokens: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::with_capacity(tokens.iter().map(|t| t.len() + 1).sum::<usize>() + 2);
    for (i, t) in tokens.iter().enumerate() {
        if i > 0 {
            v.push(b' ');
        }
        v.extend_from_slice(t);
    }
    v.extend_from_slice(b"\r\n");
    v
}

fn split_noreply<'a, 'b>(tokens: &'a [&'b [u8]]) -> (&'a [&'b [u8]], bool) {
    match tokens.split_last() {
        Some((last, rest)) if *last == b"noreply" => (rest, true),
        _ => (tokens, false),
    }
}

/// memcached checks only the length (control bytes pass: memaslap's keys have them).
fn key_ok(k: &[u8]) -> bool {
    k.len() <= MAX_KEY
}

fn parse_line(tokens: &[&[u8]], max_value: usize) -> Line {
    let Some((&cmd, args)) = tokens.split_first() else {
        return Line::Done(Request::Reply(ERROR));
    };
    let done = Line::Done;
    match cmd {
        b"get" | b"gets" => {
            if args.is_empty() {
                return done(Request::Reply(ERROR));
            }
            if !args.iter().all(|k| key_ok(k)) {
                return done(Request::Reply(BAD_FORMAT));
            }
            done(Request::Get {
                keys: args.iter().map(|k| Key::from(*k)).collect(),
                cas: cmd == b"gets",
            })
        }
        b"gat" | b"gats" => {
            if args.len() < 2 {
                return done(Request::Reply(ERROR));
            }
            if num::<i64>(args[0]).is_none() || !args[1..].iter().all(|k| key_ok(k)) {
                return done(Request::Reply(BAD_FORMAT));
            }
            done(Request::Gat {
                line: rebuild(tokens),
            })
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let (toks, noreply) = split_noreply(tokens);
            let want = if cmd == b"cas" { 6 } else { 5 };
            if toks.len() != want {
                return done(Request::Reply(ERROR));
            }
            let key = toks[1];
            let ok = key_ok(key)
                && num::<u32>(toks[2]).is_some()
                && num::<i64>(toks[3]).is_some()
                && (cmd != b"cas" || num::<u64>(toks[5]).is_some());
            let Some(bytes) = num::<i64>(toks[4]).filter(|_| ok) else {
                return done(Request::Reply(BAD_FORMAT));
            };
            let Ok(bytes) = usize::try_from(bytes) else {
                return done(Request::Reply(BAD_FORMAT));
            };
            if bytes > i32::MAX as usize - 2 {
                return done(Request::Reply(BAD_FORMAT));
            }
            if bytes > max_value {
                return Line::Swallow(bytes);
            }
            Line::Store {
                key: key.into(),
                line: rebuild(toks),
                bytes,
                noreply,
            }
        }
        b"delete" | b"incr" | b"decr" | b"touch" => {
            let (toks, noreply) = split_noreply(tokens);
            let ok_count = match cmd {
                b"delete" => (2..=3).contains(&toks.len()),
                _ => toks.len() == 3,
            };
            if !ok_count {
                return done(Request::Reply(ERROR));
            }
            let ok_args = match cmd {
                b"incr" | b"decr" => num::<u64>(toks[2]).is_some(),
                b"touch" => num::<i64>(toks[2]).is_some(),
                // memcached accepts `delete <key> 0` only.
                _ => toks.len() == 2 || toks[2] == b"0",
            };
            if !key_ok(toks[1]) || !ok_args {
                let msg: &'static [u8] = if cmd == b"delete" && toks.len() == 3 {
                    b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
                } else if cmd == b"incr" || cmd == b"decr" {
                    b"CLIENT_ERROR invalid numeric delta argument\r\n"
                } else {
                    BAD_FORMAT
                };
                return done(Request::Reply(msg));
            }
            done(Request::Update {
                key: toks[1].into(),
                line: rebuild(toks),
                noreply,
            })
        }
        b"flush_all" => {
            let (toks, noreply) = split_noreply(tokens);
            if toks.len() > 2 {
                return done(Request::Reply(ERROR));
            }
            let delay = match toks.get(1) {
                None => Some(0),
                Some(t) => num::<i64>(t).map(|d| d.clamp(0, u32::MAX as i64) as u32),
            };
            match delay {
                Some(delay_s) => done(Request::FlushAll {
                    line: rebuild(toks),
                    noreply,
                    delay_s,
                }),
                None => done(Request::Reply(BAD_FORMAT)),
            }
        }
        b"stats" => done(Request::Stats {
            line: rebuild(tokens),
        }),
        b"version" if args.is_empty() => done(Request::Other {
            line: rebuild(tokens),
            noreply: false,
        }),
        b"verbosity" | b"cache_memlimit" => {
            let (toks, noreply) = split_noreply(tokens);
            if toks.len() != 2 {
                return done(Request::Reply(ERROR));
            }
            done(Request::Other {
                line: rebuild(toks),
                noreply,
            })
        }
        b"quit" => done(Request::Quit),
        // Everything else, including the meta commands (mg, ms, md, ma, mn,
        // me) and the streaming ones (watch, lru_crawler), is answered as a
        // memcached without them would: see docs/inline.md.
        _ => done(Request::Reply(ERROR)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(input: &[u8]) -> Vec<Request> {
        let mut p = RequestParser::new(2048, 1024);
        p.push(input);
        std::iter::from_fn(|| p.next_request()).collect()
    }

    #[test]
    fn commands_parse() {
        let r = all(
            b"get a bb\r\ngets c\r\nset k 5 0 3 noreply\r\nabc\r\ndelete k\r\nincr n 7\r\nquit\r\n",
        );
        assert_eq!(
            r[0],
            Request::Get {
                keys: vec![Key::from(&b"a"[..]), Key::from(&b"bb"[..])],
                cas: false
            }
        );
        assert!(matches!(&r[1], Request::Get { cas: true, .. }));
        assert_eq!(
            r[2],
            Request::Store {
                key: Key::from(&b"k"[..]),
                line: b"set k 5 0 3\r\n".to_vec(),
                data: b"abc\r\n".to_vec(),
                noreply: true
            }
        );
        assert!(matches!(&r[3], Request::Update { noreply: false, .. }));
        assert!(matches!(&r[4], Request::Update { line, .. } if line == b"incr n 7\r\n"));
        assert_eq!(r[5], Request::Quit);
        assert_eq!(r.len(), 6);
    }

    #[test]
    fn errors_are_memcacheds() {
        assert_eq!(all(b"bogus\r\n"), vec![Request::Reply(ERROR)]);
        assert_eq!(all(b"get\r\n"), vec![Request::Reply(ERROR)]);
        assert_eq!(all(b"\r\n"), vec![Request::Reply(ERROR)]);
        assert_eq!(
            all(b"set k x 0 1\r\n"),
            vec![Request::Reply(BAD_FORMAT), Request::Reply(ERROR)][..1].to_vec()
        );
        let long = format!("get {}\r\n", "k".repeat(251));
        assert_eq!(all(long.as_bytes()), vec![Request::Reply(BAD_FORMAT)]);
        assert_eq!(
            all(b"set k 0 0 2\r\nabcd\r\n")[0],
            Request::Reply(BAD_CHUNK)
        );
        // Too large: the value's bytes are skipped, the next command parsed.
        let big = format!("set k 0 0 2000\r\n{}\r\nget k\r\n", "v".repeat(2000));
        let r = all(big.as_bytes());
        assert_eq!(r[0], Request::Reply(TOO_LARGE));
        assert!(matches!(r[1], Request::Get { .. }));
        assert_eq!(all(b"set k 0 0 -1\r\n"), vec![Request::Reply(BAD_FORMAT)]);
        assert_eq!(all(b"mg k v\r\n"), vec![Request::Reply(ERROR)]);
    }

    #[test]
    fn a_line_over_the_limit_is_fatal_and_bounded() {
        let mut p = RequestParser::new(64, 64);
        p.push(&[b'x'; 65]);
        assert_eq!(p.next_request(), Some(Request::Fatal(LINE_TOO_LONG)));
        assert_eq!(p.next_request(), None);
        p.push(&[b'x'; 1000]);
        assert_eq!(p.buffered(), 0);
    }

    fn feed_split(input: &[u8], cuts: &[usize]) -> Vec<Request> {
        let mut p = RequestParser::new(256, 128);
        let mut out = Vec::new();
        let mut at = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.push(input.len());
        for c in cuts {
            p.push(&input[at..c]);
            at = c;
            while let Some(r) = p.next_request() {
                out.push(r);
            }
            assert!(
                p.buffered() <= p.bound(),
                "parser holds {} bytes",
                p.buffered()
            );
        }
        out
    }

    fn stream() -> impl Strategy<Value = Vec<u8>> {
        let cmd = prop_oneof![
            "[a-z]{1,5}".prop_map(|k| format!("get {k}\r\n")),
            "[a-z]{1,5} [a-z]{1,5}".prop_map(|k| format!("gets {k}\r\n")),
            ("[a-z]{1,5}", "[ -~]{0,40}")
                .prop_map(|(k, v)| format!("set {k} 1 0 {}\r\n{v}\r\n", v.len())),
            ("[a-z]{1,5}", 100usize..300)
                .prop_map(|(k, n)| format!("set {k} 1 0 {n}\r\n{}\r\n", "z".repeat(n))),
            "[a-z]{1,5}".prop_map(|k| format!("delete {k} noreply\r\n")),
            "[ -~]{0,300}".prop_map(|g| format!("{g}\r\n")),
            Just("incr n 99999999999999999999\r\n".to_string()),
        ];
        prop::collection::vec(cmd, 0..20).prop_map(|v| v.concat().into_bytes())
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_requests(input in stream(), cuts in prop::collection::vec(any::<usize>(), 0..12)) {
            let whole = feed_split(&input, &[]);
            prop_assert_eq!(feed_split(&input, &cuts), whole);
        }

        #[test]
        fn garbage_is_answered_and_bounded(input in prop::collection::vec(any::<u8>(), 0..4000), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
            let whole = feed_split(&input, &[]);
            prop_assert_eq!(feed_split(&input, &cuts), whole);
        }
    }
}
