//! A fixed-size byte ring addressed by absolute cursors.
//!
//! A cursor is the number of bytes captured before a position since capture started, so it
//! never wraps and a reader can tell exactly how much the ring overwrote before its cursor
//! (`dropped`). Memory grows with what was captured, up to the capacity: an idle console
//! costs nothing.

/// What a read of the ring gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The bytes from `from` to `to`.
    pub bytes: Vec<u8>,
    /// Absolute cursor of the first byte (later than asked when the ring lost bytes).
    pub from: u64,
    /// Absolute cursor after the last byte.
    pub to: u64,
    /// Bytes between the asked cursor and `from` that the ring no longer holds.
    pub dropped: u64,
}

/// The ring itself; the caller serialises access (a `std` mutex around it).
#[derive(Debug)]
pub struct Ring {
    buf: Vec<u8>,
    cap: usize,
    end: u64,
}

impl Ring {
    /// An empty ring that keeps the last `cap` bytes (at least one).
    pub fn new(cap: usize) -> Ring {
        Ring {
            buf: Vec::new(),
            cap: cap.max(1),
            end: 0,
        }
    }

    /// Cursor of the oldest byte held.
    pub fn start(&self) -> u64 {
        self.end - self.buf.len() as u64
    }

    /// Cursor after the newest byte: everything ever captured.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Bytes held now.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Appends `data`, overwriting the oldest bytes once full.
    pub fn push(&mut self, mut data: &[u8]) {
        if self.buf.len() < self.cap {
            // Still growing: no wrap yet, so byte `c` sits at index `c`.
            let n = (self.cap - self.buf.len()).min(data.len());
            if self.buf.capacity() < self.buf.len() + n {
                // Doubling, but never past the ring's size.
                let want = (self.buf.len() + n)
                    .max(2 * self.buf.capacity())
                    .min(self.cap);
                self.buf.reserve_exact(want - self.buf.len());
            }
            self.buf.extend_from_slice(&data[..n]);
            self.end += n as u64;
            data = &data[n..];
        }
        if data.is_empty() {
            return;
        }
        if data.len() > self.cap {
            let skip = data.len() - self.cap;
            self.end += skip as u64;
            data = &data[skip..];
        }
        // Full: byte `c` sits at index `c % cap`.
        let pos = (self.end % self.cap as u64) as usize;
        let first = (self.cap - pos).min(data.len());
        self.buf[pos..pos + first].copy_from_slice(&data[..first]);
        self.buf[..data.len() - first].copy_from_slice(&data[first..]);
        self.end += data.len() as u64;
    }

    /// Up to `max` bytes from cursor `at` (clamped to what is held; a cursor past the end
    /// reads nothing).
    pub fn read(&self, at: u64, max: usize) -> Slice {
        let start = self.start();
        let from = at.clamp(start, self.end);
        let to = self.end.min(from.saturating_add(max as u64));
        let dropped = start.saturating_sub(at);
        let mut bytes = Vec::with_capacity((to - from) as usize);
        if self.buf.len() < self.cap {
            bytes.extend_from_slice(&self.buf[from as usize..to as usize]);
        } else {
            let cap = self.cap as u64;
            let (a, b) = ((from % cap) as usize, (to % cap) as usize);
            if from == to {
            } else if a < b {
                bytes.extend_from_slice(&self.buf[a..b]);
            } else {
                bytes.extend_from_slice(&self.buf[a..]);
                bytes.extend_from_slice(&self.buf[..b]);
            }
        }
        Slice {
            bytes,
            from,
            to,
            dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_then_wraps_keeping_the_newest_bytes() {
        let mut r = Ring::new(8);
        r.push(b"abc");
        assert_eq!((r.start(), r.end(), r.len()), (0, 3, 3));
        assert_eq!(r.read(0, 100).bytes, b"abc");
        r.push(b"defgh");
        assert_eq!((r.start(), r.end()), (0, 8));
        assert_eq!(r.buf.capacity(), 8, "never allocates past its size");
        r.push(b"ijk");
        assert_eq!((r.start(), r.end(), r.len()), (3, 11, 8));
        let s = r.read(0, 100);
        assert_eq!(s.bytes, b"defghijk");
        assert_eq!((s.from, s.to, s.dropped), (3, 11, 3));
    }

    #[test]
    fn reads_across_the_wrap_point_and_caps_at_max() {
        let mut r = Ring::new(5);
        r.push(b"01234");
        r.push(b"567");
        // Held: 34567, with 5,6,7 at indices 0..3.
        assert_eq!(r.read(3, 100).bytes, b"34567");
        assert_eq!(r.read(4, 2).bytes, b"45");
        let s = r.read(4, 3);
        assert_eq!((s.bytes.as_slice(), s.from, s.to), (&b"456"[..], 4, 7));
        assert_eq!(r.read(6, 100).bytes, b"67");
        assert_eq!(r.read(8, 100).bytes, b"");
    }

    #[test]
    fn a_push_larger_than_the_ring_keeps_its_tail() {
        let mut r = Ring::new(4);
        r.push(b"ab");
        r.push(b"0123456789");
        assert_eq!((r.start(), r.end()), (8, 12));
        let s = r.read(2, 100);
        assert_eq!(s.bytes, b"6789");
        assert_eq!(s.dropped, 6);
    }

    #[test]
    fn a_cursor_past_the_end_reads_nothing_and_drops_nothing() {
        let mut r = Ring::new(4);
        r.push(b"xy");
        let s = r.read(10, 100);
        assert_eq!((s.bytes.len(), s.from, s.to, s.dropped), (0, 2, 2, 0));
    }

    #[test]
    fn cursor_math_holds_over_many_pushes() {
        // Every byte is its cursor mod 251: any read shows whether the math is right.
        let mut r = Ring::new(1000);
        let mut c = 0u64;
        for n in [1usize, 7, 999, 1000, 1001, 3, 2500, 17] {
            let chunk: Vec<u8> = (c..c + n as u64).map(|i| (i % 251) as u8).collect();
            r.push(&chunk);
            c += n as u64;
            assert_eq!(r.end(), c);
            assert_eq!(r.start(), c.saturating_sub(1000));
            for at in [0, r.start(), r.start() + 1, c.saturating_sub(5)] {
                let s = r.read(at, 300);
                assert_eq!(s.dropped, r.start().saturating_sub(at));
                let want: Vec<u8> = (s.from..s.to).map(|i| (i % 251) as u8).collect();
                assert_eq!(s.bytes, want, "at {at} after {c}");
            }
        }
    }
}
