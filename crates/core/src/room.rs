//! Where a driver's shell reads the next bytes of a connection straight
//! into, without a read buffer in between (`docs/collectives.md`, "Posted
//! receives").

/// Room for the next bytes of a connection's stream.
#[derive(Debug)]
pub enum Room<'a> {
    /// Append at most this many bytes to the vector (into its spare
    /// capacity: a request's reassembly buffer, or a work buffer that grows
    /// in order). Never more than its spare capacity.
    Spare(&'a mut Vec<u8>, usize),
    /// Overwrite these bytes from their start (a segment's place in a work
    /// buffer); fewer may come in one read.
    Slice(&'a mut [u8]),
}

impl Room<'_> {
    /// Bytes that fit.
    pub fn len(&self) -> usize {
        match self {
            Room::Spare(v, need) => (*need).min(v.capacity() - v.len()),
            Room::Slice(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Put the front of `data` here (as a read would; for a simulated
    /// shell): returns how many bytes went in, at most [`Room::len`].
    pub fn fill_from(self, data: &[u8]) -> usize {
        let n = self.len().min(data.len());
        match self {
            Room::Spare(v, _) => v.extend_from_slice(&data[..n]),
            Room::Slice(s) => s[..n].copy_from_slice(&data[..n]),
        }
        n
    }
}
