//! Shared helpers for payloads that are arrays of 4-byte little-endian
//! elements (`int32` / `float32`).

use crate::AccelError;

/// Size in bytes of one `int32` / `float32` element.
pub(crate) const ELEM: usize = 4;

/// Number of 4-byte elements in `input`; `kind` ("int32", "float32") names
/// the element type in the error message.
///
/// Rejects an empty payload and a length that is not a multiple of 4.
pub(crate) fn element_count(input: &[u8], kind: &str) -> Result<usize, AccelError> {
    if input.is_empty() {
        return Err(AccelError::BadInput(format!(
            "empty input: expected an array of at least one {kind} (4 bytes each)"
        )));
    }
    if !input.len().is_multiple_of(ELEM) {
        return Err(AccelError::BadInput(format!(
            "input length {} bytes is not a multiple of 4 (expected an array of {kind})",
            input.len()
        )));
    }
    Ok(input.len() / ELEM)
}

/// Decodes `input` (a validated or unvalidated little-endian `int32` array)
/// into `dst`, replacing its contents.
pub(crate) fn decode_i32_into(input: &[u8], dst: &mut Vec<i32>) -> Result<(), AccelError> {
    let n = element_count(input, "int32")?;
    dst.clear();
    dst.reserve(n);
    dst.extend(input.chunks_exact(ELEM).map(i32_le));
    Ok(())
}

/// Decodes `input` (a little-endian `float32` array) into `dst`, replacing
/// its contents.
pub(crate) fn decode_f32_into(input: &[u8], dst: &mut Vec<f32>) -> Result<(), AccelError> {
    let n = element_count(input, "float32")?;
    dst.clear();
    dst.reserve(n);
    dst.extend(input.chunks_exact(ELEM).map(f32_le));
    Ok(())
}

/// One little-endian `float32` from a 4-byte chunk (shorter chunks read as
/// zero-padded; callers pass exact chunks).
#[inline(always)]
pub(crate) fn f32_le(c: &[u8]) -> f32 {
    let mut b = [0u8; ELEM];
    let m = c.len().min(ELEM);
    b[..m].copy_from_slice(&c[..m]);
    f32::from_le_bytes(b)
}

/// One little-endian `int32` from a 4-byte chunk (shorter chunks read as
/// zero-padded; callers pass exact chunks).
#[inline(always)]
pub(crate) fn i32_le(c: &[u8]) -> i32 {
    let mut b = [0u8; ELEM];
    let m = c.len().min(ELEM);
    b[..m].copy_from_slice(&c[..m]);
    i32::from_le_bytes(b)
}

/// Appends `vals` to `out` as little-endian `float32`.
pub(crate) fn encode_f32(vals: &[f32], out: &mut Vec<u8>) {
    out.reserve(vals.len() * ELEM);
    for v in vals {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Appends `vals` to `out` as little-endian `int32`.
pub(crate) fn encode_i32(vals: &[i32], out: &mut Vec<u8>) {
    out.reserve(vals.len() * ELEM);
    for v in vals {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Lanes per block in block-wise reductions: one AVX-512, two AVX2 or four
/// SSE vectors of `f32`.
pub(crate) const LANES: usize = 16;

/// Bytes per block of [`LANES`] elements.
pub(crate) const BLOCK: usize = LANES * ELEM;

/// Decodes one block of [`LANES`] little-endian `float32`.
#[inline(always)]
pub(crate) fn load_block(b: &[u8; BLOCK]) -> [f32; LANES] {
    let mut x = [0f32; LANES];
    let (words, _) = b.as_chunks::<ELEM>();
    for (xi, w) in x.iter_mut().zip(words) {
        *xi = f32::from_le_bytes(*w);
    }
    x
}

/// Writes `f(x)` for every `float32` `x` of `input` to `out` (appending
/// `input.len()` bytes). `input.len()` must be a multiple of 4 (callers
/// validate with [`element_count`] first; a ragged tail is ignored).
///
/// A plain element loop over `[u8; 4]` words: when `f` is branch-free
/// LLVM's loop vectoriser turns it into SIMD code with contiguous loads and
/// stores. (Hand-blocking it into fixed arrays made things worse: the
/// vectoriser then strides across blocks with per-lane inserts.)
#[inline(always)]
pub(crate) fn map_f32(input: &[u8], out: &mut Vec<u8>, f: impl Fn(f32) -> f32) {
    let start = out.len();
    out.resize(start + input.len() / ELEM * ELEM, 0);
    let (src, _) = input.as_chunks::<ELEM>();
    let (dst, _) = out[start..].as_chunks_mut::<ELEM>();
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f(f32::from_le_bytes(*s)).to_le_bytes();
    }
}

/// Whether the running x86-64 CPU has AVX2 (cached by std after the first
/// call). Kernels keep a copy compiled for AVX2 and pick it at run time.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_rejects_empty_and_ragged() {
        assert_eq!(element_count(&[0; 8], "int32"), Ok(2));
        let e = element_count(&[], "int32").unwrap_err();
        assert!(
            matches!(&e, AccelError::BadInput(m) if m.contains("empty")),
            "{e}"
        );
        let e = element_count(&[0; 7], "float32").unwrap_err();
        assert!(
            matches!(&e, AccelError::BadInput(m) if m.contains("7 bytes") && m.contains("multiple of 4")),
            "{e}"
        );
    }

    #[test]
    fn decode_is_little_endian() {
        let mut v = vec![99];
        decode_i32_into(&[1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff], &mut v).unwrap();
        assert_eq!(v, [1, -2]);
        let mut f = Vec::new();
        decode_f32_into(&1.5f32.to_le_bytes(), &mut f).unwrap();
        assert_eq!(f, [1.5]);
        assert!(decode_f32_into(&[0; 3], &mut f).is_err());
    }

    #[test]
    fn encode_round_trips() {
        let mut b = Vec::new();
        encode_i32(&[7, -1], &mut b);
        let mut v = Vec::new();
        decode_i32_into(&b, &mut v).unwrap();
        assert_eq!(v, [7, -1]);
        let mut b = Vec::new();
        encode_f32(&[0.25, -3.0], &mut b);
        let mut f = Vec::new();
        decode_f32_into(&b, &mut f).unwrap();
        assert_eq!(f, [0.25, -3.0]);
    }

    #[test]
    fn map_covers_blocks_and_tail() {
        for n in [1usize, 15, 16, 17, 40] {
            let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let mut inp = Vec::new();
            encode_f32(&xs, &mut inp);
            let mut out = Vec::new();
            map_f32(&inp, &mut out, |x| 2.0 * x + 1.0);
            let mut ys = Vec::new();
            decode_f32_into(&out, &mut ys).unwrap();
            let want: Vec<f32> = xs.iter().map(|x| 2.0 * x + 1.0).collect();
            assert_eq!(ys, want, "n = {n}");
        }
    }
}
