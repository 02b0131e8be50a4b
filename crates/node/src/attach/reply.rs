//! memcached's answers as the node reads them from the backend: where one
//! answer ends, and the items of a get. Sans-IO; each function looks at the
//! bytes received so far and says "not yet" or how many bytes the answer took.

use super::text::Key;

/// How an answer is framed, known from the request it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// One line.
    Line,
    /// `VALUE` items then `END` (or one error line).
    Get,
    /// `STAT`/`ITEM` lines then `END` (or one line).
    Stats,
}

/// The backend said something the node cannot frame: the connection is failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("backend line longer than {0} bytes")]
    LineTooLong(usize),
    #[error("backend value of {0} bytes is over the limit")]
    ValueTooLarge(usize),
    #[error("malformed VALUE line from the backend")]
    BadValue,
}

/// One item of a get answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueItem {
    pub key: Key,
    pub flags: u32,
    pub cas: Option<u64>,
    /// Without its `\r\n`.
    pub data: Box<[u8]>,
}

/// A complete get answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetReply {
    Items(Vec<ValueItem>),
    /// An error line instead (`SERVER_ERROR ...`), relayed as is.
    Line(Vec<u8>),
}

const MAX_LINE: usize = 64 * 1024;

fn line_at(buf: &[u8], at: usize) -> Result<Option<usize>, ReplyError> {
    match buf[at..].iter().position(|&b| b == b'\n') {
        Some(n) if n > MAX_LINE => Err(ReplyError::LineTooLong(MAX_LINE)),
        Some(n) => Ok(Some(at + n + 1)),
        None if buf.len() - at > MAX_LINE => Err(ReplyError::LineTooLong(MAX_LINE)),
        None => Ok(None),
    }
}

fn trim(line: &[u8]) -> &[u8] {
    let l = line.strip_suffix(b"\n").unwrap_or(line);
    l.strip_suffix(b"\r").unwrap_or(l)
}

/// The length of one complete `Line` or `Stats` answer at the start of `buf`.
pub fn frame_len(buf: &[u8], frame: Frame) -> Result<Option<usize>, ReplyError> {
    match frame {
        Frame::Line => line_at(buf, 0),
        Frame::Stats => {
            let mut at = 0;
            loop {
                let Some(end) = line_at(buf, at)? else {
                    return Ok(None);
                };
                let l = &buf[at..end];
                if !(l.starts_with(b"STAT ") || l.starts_with(b"ITEM ")) {
                    return Ok(Some(end));
                }
                at = end;
            }
        }
        Frame::Get => Ok(parse_get(buf, usize::MAX)?.map(|(n, _)| n)),
    }
}

/// A complete get answer at the start of `buf`: its length and items.
pub fn parse_get(buf: &[u8], max_value: usize) -> Result<Option<(usize, GetReply)>, ReplyError> {
    let mut at = 0;
    let mut items = Vec::new();
    loop {
        let Some(end) = line_at(buf, at)? else {
            return Ok(None);
        };
        let line = trim(&buf[at..end]);
        if line == b"END" {
            return Ok(Some((end, GetReply::Items(items))));
        }
        let Some(rest) = line.strip_prefix(b"VALUE ") else {
            if items.is_empty() {
                return Ok(Some((end, GetReply::Line(buf[..end].to_vec()))));
            }
            return Err(ReplyError::BadValue);
        };
        let t: Vec<&[u8]> = rest
            .split(|&b| b == b' ')
            .filter(|t| !t.is_empty())
            .collect();
        if !(3..=4).contains(&t.len()) {
            return Err(ReplyError::BadValue);
        }
        let n = |s: &[u8]| {
            std::str::from_utf8(s)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
        };
        let (Some(flags), Some(bytes)) = (n(t[1]), n(t[2])) else {
            return Err(ReplyError::BadValue);
        };
        let cas = match t.get(3) {
            Some(c) => Some(n(c).ok_or(ReplyError::BadValue)?),
            None => None,
        };
        let bytes = usize::try_from(bytes).map_err(|_| ReplyError::ValueTooLarge(usize::MAX))?;
        if bytes > max_value {
            return Err(ReplyError::ValueTooLarge(bytes));
        }
        let data_end = end + bytes + 2;
        if buf.len() < data_end {
            return Ok(None);
        }
        if &buf[end + bytes..data_end] != b"\r\n" {
            return Err(ReplyError::BadValue);
        }
        items.push(ValueItem {
            key: t[0].into(),
            flags: u32::try_from(flags).map_err(|_| ReplyError::BadValue)?,
            cas,
            data: buf[end..end + bytes].into(),
        });
        at = data_end;
    }
}

/// Appends one `VALUE` item as memcached writes it.
pub fn write_value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    use std::io::Write;
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    let _ = match cas {
        Some(c) => write!(out, " {flags} {} {c}\r\n", data.len()),
        None => write!(out, " {flags} {}\r\n", data.len()),
    };
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_answers_frame_and_parse() {
        let b = b"VALUE a 3 2 77\r\nxy\r\nVALUE b 0 0 78\r\n\r\nEND\r\nSTORED\r\n";
        let (n, r) = parse_get(b, 100).unwrap().unwrap();
        assert_eq!(&b[n..], b"STORED\r\n");
        let GetReply::Items(items) = r else { panic!() };
        assert_eq!(items.len(), 2);
        assert_eq!(
            (items[0].flags, items[0].cas, &*items[0].data),
            (3, Some(77), &b"xy"[..])
        );
        for cut in 0..n {
            assert_eq!(parse_get(&b[..cut], 100).unwrap(), None, "cut {cut}");
        }
        assert_eq!(
            parse_get(b"SERVER_ERROR out of memory\r\n", 100)
                .unwrap()
                .unwrap()
                .1,
            GetReply::Line(b"SERVER_ERROR out of memory\r\n".to_vec())
        );
        assert!(parse_get(b"VALUE a 0 5000\r\n", 100).is_err());
        assert!(parse_get(b"VALUE a 0 2\r\nxyz\r\n", 100).is_err());
        let mut w = Vec::new();
        write_value(&mut w, b"a", 3, b"xy", Some(77));
        assert_eq!(&w[..], &b[..20]);
    }

    #[test]
    fn stats_and_lines_frame() {
        let s = b"STAT pid 1\r\nSTAT x y\r\nEND\r\nrest";
        assert_eq!(frame_len(s, Frame::Stats).unwrap(), Some(s.len() - 4));
        assert_eq!(frame_len(b"RESET\r\n", Frame::Stats).unwrap(), Some(7));
        assert_eq!(frame_len(b"STAT pid 1\r\n", Frame::Stats).unwrap(), None);
        assert_eq!(frame_len(b"STORED\r\nX", Frame::Line).unwrap(), Some(8));
        assert_eq!(frame_len(b"STORED", Frame::Line).unwrap(), None);
    }
}
