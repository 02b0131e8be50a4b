//! What the fuzz targets share: numbers drawn from the fuzzer's input.

/// Reads choices from the fuzzer's input: a draw below `m` takes as few
/// bytes as hold `m - 1` (one byte for a choice among 256, so a byte of the
/// input maps to one decision). Once the input is used up, the draws go on
/// from a generator seeded with the input's hash: a short input still makes
/// a whole varied scenario (all zeros would pick the slowest one, 1-byte
/// segments, every time).
pub struct Draws<'a> {
    data: &'a [u8],
    rng: u64,
}

impl<'a> Draws<'a> {
    pub fn new(data: &'a [u8]) -> Draws<'a> {
        // FNV-1a of the input, never 0 (xorshift's fixed point).
        let h = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        Draws { data, rng: h | 1 }
    }

    /// A number below `m` (0 when `m` is 0 or 1).
    pub fn below(&mut self, m: u64) -> u64 {
        if m <= 1 {
            return 0;
        }
        if self.data.is_empty() {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            return self.rng % m;
        }
        let bytes = (64 - (m - 1).leading_zeros() as usize).div_ceil(8);
        let n = bytes.min(self.data.len());
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        let mut x = [0u8; 8];
        x[..n].copy_from_slice(head);
        u64::from_le_bytes(x) % m
    }

    /// A whole u64 (8 bytes of input).
    pub fn u64(&mut self) -> u64 {
        let n = 8.min(self.data.len());
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        let mut x = [0u8; 8];
        x[..n].copy_from_slice(head);
        u64::from_le_bytes(x)
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}
