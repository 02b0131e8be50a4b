//! `topk` (id 1): the `min(K, n)` largest `int32` values, descending.
//!
//! Same result as numpy `np.sort(x)[::-1][:k]` (duplicates kept).
//!
//! Algorithm: a candidate buffer of `cap = max(2K, CAP_MIN)` elements and a
//! threshold. The first `cap` elements fill the buffer; whenever it is full
//! it is compacted to its `K` largest (`select_nth_unstable`) and the
//! threshold becomes the smallest of those. Later elements enter the buffer
//! only if they beat the threshold (a branch-free store + conditional
//! increment), and blocks of 8 in which none does are skipped after one
//! vectorised compare. An element equal to the threshold can be dropped:
//! `K` values at least as large are already kept, so it cannot change the
//! result. Each compaction costs `O(cap)` and frees at least `cap - K ≥ K`
//! slots, so the worst case (ascending input) stays `O(n)`; on typical data
//! almost every element is rejected by one compare. Finally the `K`
//! survivors are sorted.
//!
//! Input order: scanned front to back, an ascending input would beat the
//! threshold with every element (5-19x the cost of random data). So inputs of
//! 64+ blocks of 8 are scanned in two passes: first one block in every 8,
//! visited in a scattered (golden-ratio) order, which lifts the threshold
//! close to the top whatever the order, then the other blocks in order.

use offrac_proto::FunctionId;

use crate::elems::{decode_i32_into, element_count, encode_i32, ELEM};
use crate::{AccelError, Accelerator};

/// Smallest candidate buffer (elements): fewer, cheaper compactions for
/// small `K`.
const CAP_MIN: usize = 64;

/// Top-K of an `int32` array; `param` = K ≥ 1.
#[derive(Debug, Default, Clone)]
pub struct TopK {
    buf: Vec<i32>,
}

impl TopK {
    pub fn new() -> TopK {
        TopK::default()
    }
}

impl Accelerator for TopK {
    fn function(&self) -> FunctionId {
        FunctionId::TopK
    }

    /// ~0.8 µs at 4 KiB whatever the order, linear (`make bench-kernels`).
    fn inline_max_bytes(&self) -> usize {
        16384
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        let n = element_count(input, "int32")?;
        if param == 0 {
            return Err(AccelError::BadInput("K (param) must be at least 1".into()));
        }
        // K ≥ n: everything, sorted. (`as` is lossless once clamped to n.)
        let k = param.min(n as u64) as usize;
        top_k(input, k, &mut self.buf)?;
        encode_i32(&self.buf, out);
        Ok(())
    }
}

/// Descending order.
#[inline(always)]
fn desc(a: &i32, b: &i32) -> std::cmp::Ordering {
    b.cmp(a)
}

/// Elements per block in the filter loop: a block is first tested as a
/// whole against the threshold (a vectorised compare), and skipped when
/// nothing in it qualifies, which is the common case once the threshold has
/// settled.
const SKIP_BLOCK: usize = 8;

/// The candidate buffer and threshold, see the module docs. (A slice, not
/// the `Vec`: through `&mut Vec` LLVM reloads the length after every store.)
struct Candidates<'a> {
    buf: &'a mut [i32],
    k: usize,
    len: usize,
    thr: i32,
}

impl Candidates<'_> {
    /// Adds `v` if it beats the threshold (branch-free), compacting the
    /// buffer when it fills up.
    #[inline(always)]
    fn offer(&mut self, v: i32) {
        // len < buf.len() always holds: it is reset to k when it gets there.
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = v;
        }
        self.len += usize::from(v > self.thr);
        if self.len == self.buf.len() {
            self.compact();
        }
    }

    /// Offers a block of 8, after one vectorised test that skips it when
    /// nothing in it beats the threshold (the common case).
    #[inline(always)]
    fn filter(&mut self, block: &[[u8; ELEM]; SKIP_BLOCK]) {
        let x: [i32; SKIP_BLOCK] = block.map(i32::from_le_bytes);
        if x.iter().fold(false, |any, &v| any | (v > self.thr)) {
            for v in x {
                self.offer(v);
            }
        }
    }

    /// Keeps the `k` largest of the buffer and raises the threshold to the
    /// smallest of them.
    fn compact(&mut self) {
        let (_, kth, _) = self.buf[..self.len].select_nth_unstable_by(self.k - 1, desc);
        self.thr = *kth;
        self.len = self.k;
    }
}

/// Leaves the `k` largest values of `input` (validated int32 LE, `1 ≤ k ≤ n`)
/// in `buf`, descending.
fn top_k(input: &[u8], k: usize, buf: &mut Vec<i32>) -> Result<(), AccelError> {
    let n = input.len() / ELEM;
    let cap = (2 * k).max(CAP_MIN);
    if cap >= n {
        // Small input: all of it is the candidate set.
        decode_i32_into(input, buf)?;
    } else {
        // Fill the buffer with the first `cap` elements, then filter.
        let (head, rest) = input.split_at(cap * ELEM);
        decode_i32_into(head, buf)?;
        let mut c = Candidates {
            buf: buf.as_mut_slice(),
            k,
            len: cap,
            thr: i32::MIN,
        };
        c.compact();
        let (words, _) = rest.as_chunks::<ELEM>();
        let (blocks, tail) = words.as_chunks::<SKIP_BLOCK>();
        // First one block in every 8, spread over the whole input, then the
        // rest in order: on a sorted input the first pass already lifts the
        // threshold near the top, so the second rejects almost everything, as
        // on random data (ascending input used to cost 5-19x random).
        let (groups, rest_blocks) = blocks.as_chunks::<SCATTER>();
        if groups.len() < SCATTER {
            // Too short for a sample to pay: one pass in order.
            for block in blocks {
                c.filter(block);
            }
        } else {
            // The first pass itself goes in a scattered order (a golden-ratio
            // stride), so that neither an ascending nor a descending input
            // makes it offer every sample.
            let ng = groups.len();
            let stride = scatter_stride(ng);
            let mut i = 0;
            for _ in 0..ng {
                c.filter(&groups[i][0]);
                i += stride;
                if i >= ng {
                    i -= ng;
                }
            }
            for g in groups {
                for block in &g[1..] {
                    c.filter(block);
                }
            }
            for block in rest_blocks {
                c.filter(block);
            }
        }
        for w in tail {
            c.offer(i32::from_le_bytes(*w));
        }
        let len = c.len;
        buf.truncate(len);
    }
    if buf.len() > k {
        buf.select_nth_unstable_by(k - 1, desc);
        buf.truncate(k);
    }
    buf.sort_unstable_by(desc);
    Ok(())
}

/// The first pass takes one block in this many.
const SCATTER: usize = 8;

/// A step coprime with `n` near `n / φ`: stepping by it from 0 visits every
/// index of `0..n` once, spread evenly (a Kronecker sequence).
fn scatter_stride(n: usize) -> usize {
    if n < 3 {
        return 1;
    }
    let mut s = ((n as f64) * 0.618_033_988_75) as usize;
    s = s.clamp(1, n - 1);
    while gcd(s, n) != 1 {
        s += 1;
    }
    s
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elems::i32_le;
    use proptest::prelude::*;

    fn enc(v: &[i32]) -> Vec<u8> {
        let mut b = Vec::new();
        encode_i32(v, &mut b);
        b
    }

    fn dec(b: &[u8]) -> Vec<i32> {
        b.chunks_exact(4).map(i32_le).collect()
    }

    fn run(v: &[i32], k: u64) -> Result<Vec<i32>, AccelError> {
        let mut out = Vec::new();
        TopK::new().run(k, &enc(v), &mut out)?;
        Ok(dec(&out))
    }

    fn reference(v: &[i32], k: u64) -> Vec<i32> {
        let mut s = v.to_vec();
        s.sort_unstable();
        s.reverse();
        s.truncate(k.min(v.len() as u64) as usize);
        s
    }

    #[test]
    fn basic() {
        assert_eq!(run(&[3, 1, 4, 1, 5, 9, 2, 6], 3).unwrap(), [9, 6, 5]);
        assert_eq!(run(&[3, 1, 4, 1, 5, 9, 2, 6], 1).unwrap(), [9]);
    }

    #[test]
    fn k_larger_than_n_returns_all_sorted() {
        assert_eq!(run(&[2, -7, 5], 10).unwrap(), [5, 2, -7]);
        assert_eq!(run(&[2, -7, 5], u64::MAX).unwrap(), [5, 2, -7]);
        assert_eq!(run(&[42], 1).unwrap(), [42]);
    }

    #[test]
    fn duplicates_and_extremes_are_kept() {
        assert_eq!(run(&[1, 1, 1, 1], 3).unwrap(), [1, 1, 1]);
        let v = [i32::MIN, i32::MAX, i32::MIN, 0, i32::MAX];
        assert_eq!(run(&v, 4).unwrap(), [i32::MAX, i32::MAX, 0, i32::MIN]);
        // Long runs of equal values at the threshold (buffer path).
        let v: Vec<i32> = (0..1000).map(|i| i % 3).collect();
        assert_eq!(run(&v, 500).unwrap(), reference(&v, 500));
        let v = vec![i32::MIN; 1000];
        assert_eq!(run(&v, 5).unwrap(), vec![i32::MIN; 5]);
    }

    #[test]
    fn ascending_and_descending_inputs() {
        let asc: Vec<i32> = (0..10_000).collect();
        let want: Vec<i32> = (9_984..10_000).rev().collect();
        assert_eq!(run(&asc, 16).unwrap(), want);
        let desc: Vec<i32> = asc.iter().rev().copied().collect();
        assert_eq!(run(&desc, 16).unwrap(), want);
    }

    #[test]
    fn the_scattered_order_visits_every_index_once() {
        for n in 0..300 {
            let s = scatter_stride(n);
            let mut seen = vec![false; n];
            let mut i = 0;
            for _ in 0..n {
                assert!(!seen[i], "n {n}: index {i} twice");
                seen[i] = true;
                i = (i + s) % n.max(1);
            }
            assert!(seen.iter().all(|&x| x), "n {n}");
        }
    }

    #[test]
    fn sorted_and_organ_pipe_inputs() {
        for n in [100usize, 1000, 4097, 20_000] {
            let asc: Vec<i32> = (0..n as i32).collect();
            let pipe: Vec<i32> = (0..n as i32).map(|i| i.min(n as i32 - i)).collect();
            for k in [1u64, 16, 100] {
                assert_eq!(run(&asc, k).unwrap(), reference(&asc, k));
                assert_eq!(run(&pipe, k).unwrap(), reference(&pipe, k));
            }
        }
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(run(&[1, 2], 0), Err(AccelError::BadInput(m)) if m.contains("K")));
        let mut out = Vec::new();
        let mut t = TopK::new();
        assert!(matches!(
            t.run(1, &[], &mut out),
            Err(AccelError::BadInput(_))
        ));
        assert!(matches!(
            t.run(1, &[1, 2, 3, 4, 5], &mut out),
            Err(AccelError::BadInput(_))
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn instance_is_reusable() {
        let mut t = TopK::new();
        let mut out = Vec::new();
        t.run(2, &enc(&[5, 1, 9, 3]), &mut out).unwrap();
        assert_eq!(dec(&out), [9, 5]);
        out.clear();
        t.run(3, &enc(&[0, -1]), &mut out).unwrap();
        assert_eq!(dec(&out), [0, -1]);
    }

    proptest! {
        #[test]
        fn matches_sort_reference(
            v in prop::collection::vec(any::<i32>(), 1..600),
            k in 1u64..700,
        ) {
            prop_assert_eq!(run(&v, k).unwrap(), reference(&v, k));
        }

        #[test]
        fn matches_sort_reference_few_distinct(
            v in prop::collection::vec(-4i32..4, 1..2000),
            k in 1u64..100,
        ) {
            prop_assert_eq!(run(&v, k).unwrap(), reference(&v, k));
        }
    }
}
