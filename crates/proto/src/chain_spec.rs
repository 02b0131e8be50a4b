//! The text form of a chain, as the CLI takes it and named pipelines store
//! it: comma-separated hops `FUNCTION[:PARAM][@DEVICE]`, e.g.
//! `minmax@0,logit@1` or `topk:64@2,topk:8`. `FUNCTION` is a built-in's name
//! or a function id; a hop without `@DEVICE` runs on the node that receives
//! it (device 255).

use crate::{FunctionId, Hop, DEVICE_SELF, MAX_HOPS};

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
            let mut s = FunctionId::from_id(h.function)
                .map_or_else(|| h.function.to_string(), |f| f.name().to_string());
            if h.param != 0 {
                s += &format!(":{}", h.param);
            }
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
