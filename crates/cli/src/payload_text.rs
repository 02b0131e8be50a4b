//! The CLI's text form of payloads, derived from each function's layout in
//! the registry: arrays as comma-separated numbers, id lists (the ragged
//! layout) as rows separated by `;` (`1,2,3;;7`), CSR rows as `col:value`
//! pairs, bytes as text.

use crate::CliError;
use offrac_proto::{Elem, Layout};

fn bad(s: &str, e: Elem) -> CliError {
    CliError::Usage(format!("cannot parse {s:?} as {}", e.name()))
}

/// One element as little-endian bytes (4, or 2 for `uint16`); `uint32` also
/// takes `0x…` hex (the form of Criteo's hashed ids).
fn element(s: &str, e: Elem) -> Result<Vec<u8>, CliError> {
    let bytes = match e {
        Elem::I32 => s.parse::<i32>().map(|v| v.to_le_bytes().to_vec()).ok(),
        Elem::F32 => s.parse::<f32>().map(|v| v.to_le_bytes().to_vec()).ok(),
        Elem::U32 => match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(h) => u32::from_str_radix(h, 16),
            None => s.parse::<u32>(),
        }
        .map(|v| v.to_le_bytes().to_vec())
        .ok(),
        Elem::U16 => s.parse::<u16>().map(|v| v.to_le_bytes().to_vec()).ok(),
    };
    bytes.ok_or_else(|| bad(s, e))
}

fn items(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// `data` encoded for a function whose input has `layout`.
pub fn encode(layout: Layout, data: &str) -> Result<Vec<u8>, CliError> {
    match layout {
        Layout::Bytes => Ok(data.as_bytes().to_vec()),
        Layout::Array(e) => Ok(items(data)
            .map(|s| element(s, e))
            .collect::<Result<Vec<_>, _>>()?
            .concat()),
        Layout::Ragged(es) => {
            let rows: Vec<&str> = data.split(';').collect();
            let mut offsets = vec![0u32];
            let mut arrays: Vec<Vec<u8>> = vec![Vec::new(); es.len()];
            for row in &rows {
                for item in items(row) {
                    let parts: Vec<&str> = item.split(':').collect();
                    if parts.len() != es.len() {
                        return Err(CliError::Usage(format!(
                            "{item:?}: each element of this layout is {} value(s) joined by ':'",
                            es.len()
                        )));
                    }
                    for ((p, &e), a) in parts.iter().zip(es).zip(&mut arrays) {
                        a.extend_from_slice(&element(p.trim(), e)?);
                    }
                }
                offsets.push((arrays[0].len() / 4) as u32);
            }
            let mut out = ((rows.len()) as u32).to_le_bytes().to_vec();
            offsets
                .iter()
                .for_each(|o| out.extend_from_slice(&o.to_le_bytes()));
            arrays.iter().for_each(|a| out.extend_from_slice(a));
            Ok(out)
        }
    }
}

/// One element's text; `w` holds exactly `e.size()` bytes.
fn element_text(w: &[u8], e: Elem) -> String {
    let word = |w: &[u8]| <[u8; 4]>::try_from(w).unwrap_or_default();
    match e {
        Elem::I32 => i32::from_le_bytes(word(w)).to_string(),
        Elem::U32 => u32::from_le_bytes(word(w)).to_string(),
        Elem::F32 => f32::from_le_bytes(word(w)).to_string(),
        Elem::U16 => u16::from_le_bytes(<[u8; 2]>::try_from(w).unwrap_or_default()).to_string(),
    }
}

/// A result with `layout` as text; a payload that does not fit the layout is
/// shown as bytes with a note.
pub fn decode(layout: Layout, b: &[u8]) -> String {
    match layout {
        Layout::Bytes => String::from_utf8_lossy(b).into_owned(),
        Layout::Array(e) if b.len().is_multiple_of(e.size()) => b
            .chunks_exact(e.size())
            .map(|w| element_text(w, e))
            .collect::<Vec<_>>()
            .join(","),
        Layout::Array(e) => format!("(not a whole number of {}-byte elements) {b:?}", e.size()),
        Layout::Ragged(es) => match b.as_chunks::<4>() {
            (words, []) => decode_ragged(es, words)
                .unwrap_or_else(|| format!("(not a valid {} payload) {b:?}", layout.describe())),
            _ => format!("(not a whole number of 4-byte elements) {b:?}"),
        },
    }
}

fn decode_ragged(es: &[Elem], words: &[[u8; 4]]) -> Option<String> {
    let rows = u32::from_le_bytes(*words.first()?) as usize;
    let offsets: Vec<usize> = words
        .get(1..rows + 2)?
        .iter()
        .map(|w| u32::from_le_bytes(*w) as usize)
        .collect();
    let n = *offsets.last()?;
    let values = words.get(rows + 2..)?;
    if values.len() != n * es.len() || offsets.windows(2).any(|w| w[1] < w[0]) {
        return None;
    }
    let row = |r: usize| {
        (offsets[r]..offsets[r + 1])
            .map(|i| {
                es.iter()
                    .enumerate()
                    .map(|(a, &e)| element_text(&values[a * n + i], e))
                    .collect::<Vec<_>>()
                    .join(":")
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    Some((0..rows).map(row).collect::<Vec<_>>().join(";"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use offrac_proto::FunctionId;

    #[test]
    fn id_lists_round_trip() {
        let l = FunctionId::FirstX.spec().input;
        let b = encode(l, "1,2,0x10;;7").unwrap();
        assert_eq!(decode(l, &b), "1,2,16;;7");
        assert!(encode(l, "1,x").is_err());
    }

    #[test]
    fn csr_and_arrays() {
        let l = FunctionId::SparseTransform.spec().output;
        let b = encode(l, "1:4.2,4:7.1;").unwrap();
        assert_eq!(decode(l, &b), "1:4.2,4:7.1;");
        assert!(encode(l, "1").is_err());
        let a = FunctionId::TopK.spec().input;
        assert_eq!(decode(a, &encode(a, "-5, 3").unwrap()), "-5,3");
        assert!(decode(l, &[1, 0, 0, 0]).starts_with("(not a valid"));
    }

    #[test]
    fn uint16_pixels_are_two_bytes() {
        let l = FunctionId::Cnn.spec().input;
        let b = encode(l, "0, 65535, 4096").unwrap();
        assert_eq!(b, [0, 0, 0xff, 0xff, 0, 0x10]);
        assert_eq!(decode(l, &b), "0,65535,4096");
        assert!(encode(l, "65536").is_err());
        assert!(encode(l, "-1").is_err());
        assert!(decode(l, &[1, 2, 3]).starts_with("(not a whole number of 2-byte"));
    }
}
