//! The ragged payload layout (`docs/protocol.md`, "Payload layouts"): rows
//! of variable length, one layout for every operator on sparse features so
//! their outputs chain into each other without re-encoding.
//!
//! ```text
//! u32 rows
//! u32 offsets[rows + 1]    offsets[0] = 0, non-decreasing; n = offsets[rows]
//! then `arrays` parallel arrays of n 4-byte elements each
//! ```
//! Row `r` is elements `offsets[r]..offsets[r + 1]` of every array. An id
//! list batch has one array (`uint32` ids); CSR has two (`uint32` column
//! indices, then `float32` values).

use crate::elems::ELEM;
use crate::AccelError;

/// A validated ragged payload, borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RaggedView<'a> {
    offsets: &'a [[u8; ELEM]],
    arrays: &'a [u8],
    n: usize,
}

fn word(w: &[u8; ELEM]) -> u32 {
    u32::from_le_bytes(*w)
}

impl<'a> RaggedView<'a> {
    /// Checks `input` against the layout with `arrays` parallel arrays;
    /// errors name the offending offset.
    pub(crate) fn parse(input: &'a [u8], arrays: usize) -> Result<RaggedView<'a>, AccelError> {
        let bad = |m: String| Err(AccelError::BadInput(m));
        let (words, tail) = input.as_chunks::<ELEM>();
        if !tail.is_empty() {
            return bad(format!(
                "ragged input of {} bytes is not a whole number of 4-byte words",
                input.len()
            ));
        }
        let Some((rows, rest)) = words.split_first() else {
            return bad("empty input: a ragged payload starts with its row count (u32)".into());
        };
        let rows = word(rows) as usize;
        if rest.len() <= rows {
            return bad(format!(
                "ragged input says {rows} rows but has room for {} of the {} offsets",
                rest.len(),
                rows + 1
            ));
        }
        let (offsets, values) = rest.split_at(rows + 1);
        if word(&offsets[0]) != 0 {
            return bad(format!("offsets[0] is {}, must be 0", word(&offsets[0])));
        }
        for (i, pair) in offsets.windows(2).enumerate() {
            if word(&pair[1]) < word(&pair[0]) {
                return bad(format!(
                    "offsets[{}] = {} is below offsets[{i}] = {}: offsets must not decrease",
                    i + 1,
                    word(&pair[1]),
                    word(&pair[0])
                ));
            }
        }
        let n = word(&offsets[rows]) as usize;
        if values.len() != n * arrays {
            return bad(format!(
                "offsets[{rows}] = {n} elements need {} words of values, the payload has {}",
                n * arrays,
                values.len()
            ));
        }
        Ok(RaggedView {
            offsets,
            arrays: values.as_flattened(),
            n,
        })
    }

    /// An id-list payload whose rows come in pairs (2i, 2i+1), as the
    /// pairwise operators take them.
    pub(crate) fn parse_pairs(input: &'a [u8]) -> Result<RaggedView<'a>, AccelError> {
        let v = RaggedView::parse(input, 1)?;
        if !v.rows().is_multiple_of(2) {
            return Err(AccelError::BadInput(format!(
                "{} rows: id list pairs need an even row count",
                v.rows()
            )));
        }
        Ok(v)
    }

    pub(crate) fn rows(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Elements `start..end` of row `r`.
    pub(crate) fn span(&self, r: usize) -> (usize, usize) {
        (
            word(&self.offsets[r]) as usize,
            word(&self.offsets[r + 1]) as usize,
        )
    }

    /// Array `a`'s bytes for row `r`.
    pub(crate) fn row_bytes(&self, a: usize, r: usize) -> &'a [u8] {
        let (s, e) = self.span(r);
        let base = a * self.n * ELEM;
        &self.arrays[base + s * ELEM..base + e * ELEM]
    }

    /// Row `r` of array `a` decoded as `u32`.
    pub(crate) fn row_u32(&self, a: usize, r: usize) -> impl ExactSizeIterator<Item = u32> + 'a {
        self.row_bytes(a, r).as_chunks::<ELEM>().0.iter().map(word)
    }
}

/// Builds a ragged payload with one or two arrays; its buffers are reused
/// between calls.
#[derive(Debug, Default, Clone)]
pub(crate) struct RaggedBuilder {
    offsets: Vec<u32>,
    first: Vec<u32>,
    second: Vec<u32>,
}

impl RaggedBuilder {
    pub(crate) fn clear(&mut self) {
        self.offsets.clear();
        self.offsets.push(0);
        self.first.clear();
        self.second.clear();
    }

    /// Appends one element (first array).
    #[inline]
    pub(crate) fn push(&mut self, v: u32) {
        self.first.push(v);
    }

    /// Appends one element pair (both arrays).
    #[inline]
    pub(crate) fn push2(&mut self, a: u32, b: u32) {
        self.first.push(a);
        self.second.push(b);
    }

    /// Ends the current row.
    pub(crate) fn end_row(&mut self) -> Result<(), AccelError> {
        let n = u32::try_from(self.first.len())
            .map_err(|_| AccelError::BadInput("result has more than 2^32 elements".into()))?;
        self.offsets.push(n);
        Ok(())
    }

    /// Writes the payload (with the second array only if pairs were pushed).
    pub(crate) fn finish(&self, out: &mut Vec<u8>) {
        let rows = (self.offsets.len() - 1) as u32;
        out.reserve((1 + self.offsets.len() + self.first.len() + self.second.len()) * ELEM);
        out.extend_from_slice(&rows.to_le_bytes());
        for w in self.offsets.iter().chain(&self.first).chain(&self.second) {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
}

/// Encodes rows of `u32` as a one-array ragged payload (tests and payload
/// generation).
pub fn encode_id_lists(rows: &[Vec<u32>]) -> Vec<u8> {
    let mut b = RaggedBuilder::default();
    b.clear();
    for r in rows {
        r.iter().for_each(|&v| b.push(v));
        // Test helpers never reach 2^32 elements.
        let _ = b.end_row();
    }
    let mut out = Vec::new();
    b.finish(&mut out);
    out
}

/// Decodes a one-array ragged payload of `u32` into rows.
pub fn decode_id_lists(payload: &[u8]) -> Result<Vec<Vec<u32>>, AccelError> {
    let v = RaggedView::parse(payload, 1)?;
    Ok((0..v.rows()).map(|r| v.row_u32(0, r).collect()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn round_trip() {
        let rows = vec![vec![1, 2, 3], vec![], vec![7]];
        let p = encode_id_lists(&rows);
        assert_eq!(p, words(&[3, 0, 3, 3, 4, 1, 2, 3, 7]));
        assert_eq!(decode_id_lists(&p).unwrap(), rows);
        assert_eq!(
            decode_id_lists(&words(&[0, 0])).unwrap(),
            Vec::<Vec<u32>>::new()
        );
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let err = |ws: &[u32], arrays: usize| match RaggedView::parse(&words(ws), arrays) {
            Err(AccelError::BadInput(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(RaggedView::parse(&[], 1).is_err());
        assert!(RaggedView::parse(&[0; 7], 1).is_err());
        assert!(err(&[2, 0, 1], 1).contains("room for 2 of the 3 offsets"));
        assert!(err(&[1, 1, 1, 5], 1).contains("offsets[0] is 1"));
        assert!(err(&[2, 0, 2, 1, 9, 9], 1).contains("offsets[2] = 1 is below offsets[1] = 2"));
        assert!(err(&[1, 0, 2, 5], 1).contains("need 2 words of values, the payload has 1"));
        assert!(err(&[1, 0, 1, 5], 2).contains("need 2 words"));
        let two = words(&[1, 0, 1, 5, 6]);
        let v = RaggedView::parse(&two, 2).unwrap();
        assert_eq!(v.row_u32(1, 0).collect::<Vec<_>>(), [6]);
    }
}
