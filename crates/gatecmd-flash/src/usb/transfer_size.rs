//! The size of each `WRITE_LBA`/`READ_LBA`, chosen from the rate the link has shown so
//! far, so that one transfer never nears the `rockusb` crate's per-transfer limit (5 s,
//! its libusb transport's timeout for every bulk transfer) instead of learning the limit
//! from a stall. Writes and reads are sized apart (a loader may read far faster than its
//! flash takes writes): each starts at 64 KiB (what every loader takes: rkdeveloptool's
//! `DEFAULT_RW_LBA`), and after each transfer the next is the largest power-of-two multiple
//! of 64 KiB that the last transfer's rate moves in [`BUDGET`], at most four times the
//! last (one fast sample does not jump to the cap), never above the cap
//! (`flash.transfer_kib`). A board writing 0.5 MB/s is sent 256 KiB transfers (0.5 s
//! each); one at 40 MB/s reaches 4 MiB after three.

use std::time::Duration;

/// 64 KiB in sectors: the first transfer each way, and the smallest (the `usb::target`
/// default, what every loader takes).
const DEFAULT_TRANSFER_BLOCKS: u32 = 128;

/// What one transfer may take: a fifth of the transport's 5 s.
pub const BUDGET: Duration = Duration::from_secs(1);

/// Sizes for writes and for reads, in 512-byte sectors.
#[derive(Debug, Clone)]
pub struct TransferSize {
    cap: u32,
    write: u32,
    read: u32,
    /// The largest write transfer sent (sectors).
    pub largest_write: u32,
    /// The last write rate measured (bytes/s).
    pub write_rate: f64,
}

/// Which way a transfer went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// `WRITE_LBA`.
    Write,
    /// `READ_LBA`.
    Read,
}

impl TransferSize {
    /// Starting at 64 KiB (or the cap, if smaller).
    pub fn new(cap: u32) -> TransferSize {
        let start = cap.clamp(1, DEFAULT_TRANSFER_BLOCKS);
        TransferSize {
            cap: cap.max(1),
            write: start,
            read: start,
            largest_write: 0,
            write_rate: 0.0,
        }
    }

    /// The cap (the most any transfer may carry).
    pub fn cap(&self) -> u32 {
        self.cap
    }

    /// Sectors for the next transfer that way.
    pub fn next(&self, way: Way) -> u32 {
        match way {
            Way::Write => self.write,
            Way::Read => self.read,
        }
    }

    /// A transfer of `sectors` took `took`: the next that way is sized from its rate.
    pub fn measured(&mut self, way: Way, sectors: u32, took: Duration) {
        let bytes = sectors as f64 * 512.0;
        let secs = took.as_secs_f64().max(1e-4);
        let rate = bytes / secs;
        let last = match way {
            Way::Write => {
                self.largest_write = self.largest_write.max(sectors);
                self.write_rate = rate;
                self.write
            }
            Way::Read => self.read,
        };
        // A short transfer (the tail of a chunk) says little of the rate: it may shrink
        // the size, never grow it past four times the usual.
        let fits = (rate * BUDGET.as_secs_f64() / 512.0) as u64;
        let mut size = DEFAULT_TRANSFER_BLOCKS as u64;
        while size * 2 <= fits && size * 2 <= last.max(sectors) as u64 * 4 {
            size *= 2;
        }
        let size = if fits < DEFAULT_TRANSFER_BLOCKS as u64 {
            DEFAULT_TRANSFER_BLOCKS as u64
        } else {
            size
        };
        let size = (size as u32).min(self.cap);
        match way {
            Way::Write => self.write = size,
            Way::Read => self.read = size,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(t: &mut TransferSize, way: Way, rate: f64, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| {
                let s = t.next(way);
                t.measured(way, s, Duration::from_secs_f64(s as f64 * 512.0 / rate));
                s
            })
            .collect()
    }

    #[test]
    fn a_slow_board_gets_transfers_it_moves_well_within_the_limit() {
        let mut t = TransferSize::new(8192);
        let sizes = feed(&mut t, Way::Write, 0.5e6, 6);
        assert_eq!(sizes[0], 128, "64 KiB first");
        let top = *sizes.iter().max().expect("sizes");
        assert_eq!(top, 512, "256 KiB: 0.52 s at 0.5 MB/s");
        assert!(top as f64 * 512.0 / 0.5e6 < 1.1, "well under 5 s");
    }

    #[test]
    fn a_fast_board_reaches_the_cap_in_steps() {
        let mut t = TransferSize::new(8192);
        let sizes = feed(&mut t, Way::Write, 40e6, 5);
        assert_eq!(sizes, [128, 512, 2048, 8192, 8192]);
        let mut capped = TransferSize::new(1024);
        assert_eq!(
            *feed(&mut capped, Way::Write, 40e6, 5).last().expect("x"),
            1024
        );
    }

    #[test]
    fn a_board_that_slows_down_is_followed_at_once_and_reads_are_apart() {
        let mut t = TransferSize::new(8192);
        feed(&mut t, Way::Write, 40e6, 5);
        t.measured(Way::Write, 8192, Duration::from_secs(4));
        assert_eq!(t.next(Way::Write), 2048, "1 MB/s: 1 MiB, 1 s");
        assert_eq!(t.next(Way::Read), 128, "reads not yet measured");
        t.measured(Way::Write, 1024, Duration::from_secs(10));
        assert_eq!(t.next(Way::Write), 128, "never below 64 KiB");
    }
}
