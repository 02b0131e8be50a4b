//! A job's input: its own bytes, or a kept named buffer's bytes (shared,
//! not copied) followed by its own. A load hop (`BufferOp::Get`) makes the
//! second kind so that the function of a local slot can read the kept
//! bytes in place (issue #16: the copy of an 8 MiB matrix block was 60 %
//! of a distributed gemv's call). Every other path takes the bytes as one
//! `Vec` with [`Payload::into_flat`], which joins them (one copy) if need
//! be: there is no way to read a payload as one slice without choosing.

use bytes::Bytes;
use std::borrow::Cow;

#[derive(Debug, Clone, Default)]
pub struct Payload {
    /// A kept buffer's bytes, first (empty: the payload is flat).
    head: Bytes,
    /// The job's own bytes, after `head`.
    tail: Vec<u8>,
}

impl Payload {
    /// `head` (a kept buffer, shared) then `tail`.
    pub fn joined(head: Bytes, tail: Vec<u8>) -> Payload {
        Payload { head, tail }
    }

    pub fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes [`Payload::into_flat`] would copy (those of the kept buffer).
    pub fn shared_len(&self) -> usize {
        self.head.len()
    }

    /// The kept buffer's bytes and the job's own, in order.
    pub fn parts(&self) -> (&[u8], &[u8]) {
        (&self.head, &self.tail)
    }

    /// The kept buffer's bytes (shared) and the job's own, taken apart: to
    /// write them one after the other without joining.
    pub fn into_parts(self) -> (Bytes, Vec<u8>) {
        (self.head, self.tail)
    }

    /// The kept buffer part (empty when flat).
    pub fn head(&self) -> &Bytes {
        &self.head
    }

    /// All the bytes as one slice: borrowed when flat, joined (a copy)
    /// when not.
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        if self.head.is_empty() {
            Cow::Borrowed(&self.tail)
        } else {
            Cow::Owned(join(&self.head, &self.tail))
        }
    }

    /// All the bytes as one `Vec`: moved when flat, joined (one copy) when not.
    pub fn into_flat(self) -> Vec<u8> {
        if self.head.is_empty() {
            return self.tail;
        }
        join(&self.head, &self.tail)
    }

    /// An empty `Vec` with the allocation of the job's own bytes, for
    /// reuse (the kept part, shared, is let go).
    pub fn into_spare(self) -> Vec<u8> {
        let mut v = self.tail;
        v.clear();
        v
    }

    /// Make it flat in place (one copy when it is not) and give its bytes.
    pub fn flatten(&mut self) -> &mut Vec<u8> {
        if !self.head.is_empty() {
            self.tail = join(&std::mem::take(&mut self.head), &self.tail);
        }
        &mut self.tail
    }
}

/// `head` then `tail` in one new `Vec` (the one copy a joined payload costs).
fn join(head: &[u8], tail: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + tail.len());
    out.extend_from_slice(head);
    out.extend_from_slice(tail);
    out
}

impl From<Vec<u8>> for Payload {
    fn from(tail: Vec<u8>) -> Payload {
        Payload {
            head: Bytes::new(),
            tail,
        }
    }
}

/// Equal when the bytes are, wherever the kept part ends.
impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.len() == other.len()
            && self
                .head
                .iter()
                .chain(&self.tail)
                .eq(other.head.iter().chain(&other.tail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joined_bytes_read_in_order_and_flatten_once() {
        let kept = Bytes::from(b"kept ".to_vec());
        let p = Payload::joined(kept.clone(), b"own".to_vec());
        assert_eq!((p.len(), p.shared_len()), (8, 5));
        assert_eq!(p.parts(), (&b"kept "[..], &b"own"[..]));
        // The kept part is the buffer itself, not a copy of it.
        assert_eq!(p.head().as_ptr(), kept.as_ptr());
        assert_eq!(p, Payload::from(b"kept own".to_vec()));
        let mut q = p.clone();
        assert_eq!(q.flatten().as_slice(), b"kept own");
        assert_eq!(q.shared_len(), 0);
        assert_eq!(&p.bytes()[..], b"kept own");
        assert_eq!(p.into_flat(), b"kept own");
        let flat = Payload::from(b"x".to_vec());
        assert_ne!(flat, q);
        assert_eq!(flat.into_flat(), b"x");
    }
}
