//! The text form of a chain, as the CLI takes it and named pipelines store
//! it: comma-separated hops `FUNCTION[:PARAM][@DEVICE]`, e.g.
//! `minmax@0,logit@1` or `topk:64@2,topk:8`. `FUNCTION` is a built-in's name
//! or a function id; a hop without `@DEVICE` runs on the node that receives
//! it (device 255). A named-buffer hop is `buffer.OP:NAME[@DEVICE]` with OP
//! one of put, tee, get, drop, create and NAME the buffer's number, e.g.
//! `buffer.get:7@1,gemv@1`.

use crate::buffer::{buffer_param, decode_buffer_param, BufferOp};
use crate::{FunctionId, Hop, DEVICE_SELF, FN_BUFFER, MAX_HOPS};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("empty chain")]
    Empty,
    #[error("a chain has at most {MAX_HOPS} hops, not {0}")]
    TooLong(usize),
    #[error("hop {hop:?}: {why}")]
    Hop { hop: String, why: String },
}

/// Parse `FUNCTION[:PARAM][@DEVICE],…`.
pub fn parse(spec: &str) -> Result<Vec<Hop>, SpecError> {
    let parts: Vec<&str> = spec
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if parts.is_empty() {
        return Err(SpecError::Empty);
    }
    if parts.len() > MAX_HOPS {
        return Err(SpecError::TooLong(parts.len()));
    }
    parts.iter().map(|p| parse_hop(p)).collect()
}

fn parse_hop(text: &str) -> Result<Hop, SpecError> {
    let bad = |why: String| SpecError::Hop {
        hop: text.to_string(),
        why,
    };
    let (rest, device) = match text.split_once('@') {
        Some((r, d)) => (
            r,
            d.trim()
                .parse::<u8>()
                .map_err(|_| bad(format!("device {d:?} is not 0..=255")))?,
        ),
        None => (text, DEVICE_SELF),
    };
    let (name, param) = match rest.split_once(':') {
        Some((n, p)) => (
            n,
            p.trim()
                .parse::<u64>()
                .map_err(|_| bad(format!("parameter {p:?} is not a u64")))?,
        ),
        None => (rest, 0),
    };
    let name = name.trim();
    if let Some(op) = name.strip_prefix("buffer.") {
        let op = BufferOp::from_name(op).ok_or_else(|| {
            bad(format!(
                "buffer operation {op:?} is not put, tee, get, drop or create"
            ))
        })?;
        let buffer = u32::try_from(param)
            .ok()
            .filter(|_| rest.contains(':'))
            .ok_or_else(|| {
                bad("a buffer hop needs its name, a number below 2^32: buffer.OP:NAME".into())
            })?;
        return Ok(Hop {
            function: FN_BUFFER,
            device,
            param: buffer_param(op, buffer),
        });
    }
    let function = match FunctionId::from_name(name) {
        Some(f) => f.id(),
        None => name
            .parse::<u8>()
            .map_err(|_| bad(format!("unknown function {name:?}")))?,
    };
    Ok(Hop {
        function,
        device,
        param,
    })
}

/// The text form of `hops` (parameters and devices only where set).
pub fn format(hops: &[Hop]) -> String {
    hops.iter()
        .map(|h| {
            let buffer = (h.function == FN_BUFFER)
                .then(|| decode_buffer_param(h.param).ok())
                .flatten();
            let mut s = match buffer {
                Some((op, name)) => format!("buffer.{}:{name}", op.name()),
                None => {
                    let mut s = FunctionId::from_id(h.function)
                        .map_or_else(|| h.function.to_string(), |f| f.name().to_string());
                    if h.param != 0 {
                        s += &format!(":{}", h.param);
                    }
                    s
                }
            };
            if h.device != DEVICE_SELF {
                s += &format!("@{}", h.device);
            }
            s
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_parse_and_print_back() {
        let hops = parse("minmax@0, logit@1,topk:64@2,topk:8,200").unwrap();
        assert_eq!(
            hops,
            vec![
                Hop {
                    function: 3,
                    device: 0,
                    param: 0
                },
                Hop {
                    function: 2,
                    device: 1,
                    param: 0
                },
                Hop {
                    function: 1,
                    device: 2,
                    param: 64
                },
                Hop {
                    function: 1,
                    device: DEVICE_SELF,
                    param: 8
                },
                Hop {
                    function: 200,
                    device: DEVICE_SELF,
                    param: 0
                },
            ]
        );
        assert_eq!(format(&hops), "minmax@0,logit@1,topk:64@2,topk:8,200");
        assert_eq!(parse(&format(&hops)).unwrap(), hops);
    }

    #[test]
    fn buffer_hops_parse_and_print_back() {
        let hops =
            parse("buffer.put:7@1, buffer.get:7@1,gemv@1,buffer.tee:4294967295,buffer.drop:0")
                .unwrap();
        let ops = [
            (BufferOp::Put, 7, 1),
            (BufferOp::Get, 7, 1),
            (BufferOp::Tee, u32::MAX, DEVICE_SELF),
            (BufferOp::Drop, 0, DEVICE_SELF),
        ];
        for (h, (op, name, device)) in [&hops[0], &hops[1], &hops[3], &hops[4]]
            .into_iter()
            .zip(ops)
        {
            assert_eq!((h.function, h.device), (FN_BUFFER, device));
            assert_eq!(decode_buffer_param(h.param), Ok((op, name)));
        }
        assert_eq!(hops[2].function, FunctionId::Gemv.id());
        assert_eq!(
            format(&hops),
            "buffer.put:7@1,buffer.get:7@1,gemv@1,buffer.tee:4294967295,buffer.drop:0"
        );
        assert_eq!(parse(&format(&hops)).unwrap(), hops);
        // A function-255 hop whose param is not a buffer operation prints as a number.
        let raw = [Hop {
            function: FN_BUFFER,
            device: DEVICE_SELF,
            param: 9,
        }];
        assert_eq!(format(&raw), "255:9");
        for (spec, why) in [
            ("buffer.get", "needs its name"),
            ("buffer.get:4294967296", "needs its name"),
            ("buffer.copy:1", "not put, tee, get, drop or create"),
        ] {
            let e = parse(spec).unwrap_err().to_string();
            assert!(e.contains(why), "{spec}: {e}");
        }
    }

    #[test]
    fn errors_say_which_hop() {
        assert_eq!(parse(" , "), Err(SpecError::Empty));
        assert_eq!(parse(&["echo"; 9].join(",")), Err(SpecError::TooLong(9)));
        for (spec, why) in [
            ("fft", "unknown function"),
            ("topk:x", "not a u64"),
            ("echo@300", "not 0..=255"),
        ] {
            let e = parse(spec).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(spec), "{e}");
        }
    }
}
