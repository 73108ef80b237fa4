//! A board's flash: a sparse file of 512-byte sectors, and the regions written since the
//! last boot (which the boot log names with their SHA-256).

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

pub const SECTOR: u64 = 512;

/// Sorted, disjoint, non-adjacent `[start, end)` sector ranges.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Regions(Vec<(u64, u64)>);

impl Regions {
    pub fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        let mut kept = Vec::with_capacity(self.0.len() + 1);
        for &(a, b) in &self.0 {
            if b < s || a > e {
                kept.push((a, b));
            } else {
                // Overlapping or adjacent: merge.
                s = s.min(a);
                e = e.max(b);
            }
        }
        kept.push((s, e));
        kept.sort_unstable();
        self.0 = kept;
    }

    pub fn remove(&mut self, start: u64, end: u64) {
        let mut kept = Vec::with_capacity(self.0.len() + 1);
        for &(a, b) in &self.0 {
            if b <= start || a >= end {
                kept.push((a, b));
                continue;
            }
            if a < start {
                kept.push((a, start));
            }
            if b > end {
                kept.push((end, b));
            }
        }
        self.0 = kept;
    }

    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.0
    }
}

/// Why a flash access was refused.
#[derive(Debug)]
pub enum FlashError {
    OutOfRange { lba: u64, sectors: u64, total: u64 },
    Io(io::Error),
}

impl std::fmt::Display for FlashError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FlashError::OutOfRange {
                lba,
                sectors,
                total,
            } => write!(
                f,
                "lba 0x{lba:x} + {sectors} sectors is beyond the flash end ({total} sectors)"
            ),
            FlashError::Io(e) => write!(f, "flash file: {e}"),
        }
    }
}

pub struct Flash {
    file: File,
    path: PathBuf,
    sectors: u64,
    written: Mutex<Regions>,
    pace: Option<Pace>,
    read_back: ReadBack,
    /// The running Loader is a DDR + usbplug pair's (`blobs`): its reads are sound whatever
    /// `read_back` says (set by the mask ROM when it starts the 0x472 image).
    usbplug_reads: std::sync::atomic::AtomicBool,
    /// `ReadBack::Stale`: what the sectors written since the Loader started held before.
    stale: Mutex<Stale>,
}

/// How the Loader answers `READ_LBA` (`serve --read-back`): soundly, or as real Rockchip
/// loaders have been seen to (docs/VBOARD.md, "Read-back modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadBack {
    /// Every read answers what the flash holds.
    Sound,
    /// Sectors at or past `from` (bytes) read as `byte` everywhere: the stock RK3588 loader
    /// answers 0xCC past 32 MiB (turing-machines/BMC-Firmware PR #117).
    Fill { from: u64, byte: u8 },
    /// Sectors at or past `from` read as they were when the Loader started: writes since
    /// are taken (and kept) but not seen by reads (rockchiprs PR #52: loaders that "stop
    /// returning meaningful data past the first few megabytes").
    Stale { from: u64 },
}

impl ReadBack {
    /// `sound`, `rk3588` (0xCC from 32 MiB), `cc:SIZE`, `stale:SIZE` (SIZE in bytes or with
    /// a K/M/G suffix, whole sectors).
    pub fn parse(text: &str) -> Result<ReadBack, String> {
        let size = |s: &str| -> Result<u64, String> {
            let (num, mult) = match s.as_bytes().last() {
                Some(b'K' | b'k') => (&s[..s.len() - 1], 1u64 << 10),
                Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
                Some(b'G' | b'g') => (&s[..s.len() - 1], 1 << 30),
                _ => (s, 1),
            };
            let n: u64 = num
                .parse()
                .map_err(|_| format!("{s:?} is not a size (bytes, or with K/M/G)"))?;
            let b = n
                .checked_mul(mult)
                .ok_or_else(|| format!("{s:?} is too large"))?;
            if b % SECTOR != 0 {
                return Err(format!("{s:?} is not a whole number of 512-byte sectors"));
            }
            Ok(b)
        };
        match text.split_once(':') {
            None if text == "sound" => Ok(ReadBack::Sound),
            None if text == "rk3588" => Ok(ReadBack::Fill {
                from: 32 << 20,
                byte: 0xcc,
            }),
            Some(("cc", s)) => Ok(ReadBack::Fill {
                from: size(s)?,
                byte: 0xcc,
            }),
            Some(("stale", s)) => Ok(ReadBack::Stale { from: size(s)? }),
            _ => Err(format!(
                "{text:?} is not a read-back mode: sound, rk3588, cc:SIZE or stale:SIZE"
            )),
        }
    }

    /// The first sector whose reads are not sound (`None`: all are).
    fn limit_sector(self) -> Option<u64> {
        match self {
            ReadBack::Sound => None,
            ReadBack::Fill { from, .. } | ReadBack::Stale { from } => Some(from / SECTOR),
        }
    }
}

/// The old contents of the sectors written past a `Stale` limit since the Loader started,
/// kept in a sparse side file beside the flash's.
#[derive(Default)]
struct Stale {
    file: Option<File>,
    saved: HashSet<u64>,
}

/// A write speed limit: when the flash is free again. Writes wait their turn and then take
/// `len / bytes_per_sec`, so the speed holds over many small WRITE_LBA commands without the
/// per-command overhead adding up.
struct Pace {
    bytes_per_sec: u64,
    free_at: Mutex<Instant>,
}

impl Pace {
    fn take(&self, bytes: usize) {
        let cost = Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec as f64);
        let done = {
            let mut free_at = self.free_at.lock().unwrap_or_else(|p| p.into_inner());
            let start = (*free_at).max(Instant::now());
            *free_at = start + cost;
            *free_at
        };
        let now = Instant::now();
        if done > now {
            std::thread::sleep(done - now);
        }
    }
}

impl Flash {
    /// Opens (or creates) the backing file and sets its length to `bytes` (sparse: a new
    /// 16 GiB flash occupies no disk).
    pub fn open(path: &Path, bytes: u64) -> io::Result<Flash> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        file.set_len(bytes)?;
        Ok(Flash {
            file,
            path: path.to_path_buf(),
            sectors: bytes / SECTOR,
            written: Mutex::new(Regions::default()),
            pace: None,
            read_back: ReadBack::Sound,
            usbplug_reads: std::sync::atomic::AtomicBool::new(false),
            stale: Mutex::new(Stale::default()),
        })
    }

    /// How the Loader answers reads ([`read_as_loader`](Self::read_as_loader)).
    pub fn with_read_back(mut self, r: ReadBack) -> Flash {
        self.read_back = r;
        self
    }

    /// A Loader starts: a `Stale` flash forgets what it kept (reads past the limit now see
    /// what the flash holds, until the next write there).
    pub fn loader_started(&self) {
        let mut st = self.stale.lock().unwrap_or_else(|p| p.into_inner());
        st.saved.clear();
        st.file = None;
    }

    /// The Loader the mask ROM starts next is the pair's usbplug (`true`: sound reads) or a
    /// packed loader's (`false`: the `--read-back` mode).
    pub fn set_usbplug_reads(&self, sound: bool) {
        self.usbplug_reads
            .store(sound, std::sync::atomic::Ordering::Relaxed);
    }

    /// The read-back mode of the running Loader.
    fn mode(&self) -> ReadBack {
        if self
            .usbplug_reads
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            ReadBack::Sound
        } else {
            self.read_back
        }
    }

    /// A Loader's `READ_LBA`: as [`read`](Self::read), then the read-back mode applied to
    /// the sectors at or past its limit.
    pub fn read_as_loader(&self, lba: u64, buf: &mut [u8]) -> Result<(), FlashError> {
        self.read(lba, buf)?;
        let Some(limit) = self.mode().limit_sector() else {
            return Ok(());
        };
        let n = buf.len() as u64 / SECTOR;
        for k in 0..n {
            let sector = lba + k;
            if sector < limit {
                continue;
            }
            let piece = &mut buf[(k * SECTOR) as usize..((k + 1) * SECTOR) as usize];
            match self.mode() {
                ReadBack::Fill { byte, .. } => piece.fill(byte),
                ReadBack::Stale { .. } => {
                    let st = self.stale.lock().unwrap_or_else(|p| p.into_inner());
                    if st.saved.contains(&sector)
                        && let Some(f) = &st.file
                    {
                        f.read_exact_at(piece, sector * SECTOR)
                            .map_err(FlashError::Io)?;
                    }
                }
                ReadBack::Sound => {}
            }
        }
        Ok(())
    }

    /// `Stale`: the old contents of the sectors about to be written past the limit, kept
    /// once per Loader session.
    fn keep_stale(&self, lba: u64, sectors: u64) -> Result<(), FlashError> {
        let ReadBack::Stale { from } = self.mode() else {
            return Ok(());
        };
        let limit = from / SECTOR;
        let mut st = self.stale.lock().unwrap_or_else(|p| p.into_inner());
        let mut old = [0u8; SECTOR as usize];
        for sector in lba.max(limit)..lba + sectors {
            if st.saved.contains(&sector) {
                continue;
            }
            if st.file.is_none() {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(self.path.with_extension("stale"))
                    .map_err(FlashError::Io)?;
                f.set_len(self.sectors * SECTOR).map_err(FlashError::Io)?;
                st.file = Some(f);
            }
            self.file
                .read_exact_at(&mut old, sector * SECTOR)
                .map_err(FlashError::Io)?;
            if let Some(f) = &st.file {
                f.write_all_at(&old, sector * SECTOR)
                    .map_err(FlashError::Io)?;
            }
            st.saved.insert(sector);
        }
        Ok(())
    }

    /// Writes take at least `len / bytes_per_sec` (None: as fast as the file takes them).
    pub fn with_write_speed(mut self, bytes_per_sec: Option<u64>) -> Flash {
        self.pace = bytes_per_sec.filter(|&b| b > 0).map(|bytes_per_sec| Pace {
            bytes_per_sec,
            free_at: Mutex::new(Instant::now()),
        });
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn sectors(&self) -> u64 {
        self.sectors
    }

    fn check(&self, lba: u64, sectors: u64) -> Result<(), FlashError> {
        match lba.checked_add(sectors) {
            Some(end) if end <= self.sectors => Ok(()),
            _ => Err(FlashError::OutOfRange {
                lba,
                sectors,
                total: self.sectors,
            }),
        }
    }

    pub fn read(&self, lba: u64, buf: &mut [u8]) -> Result<(), FlashError> {
        self.check(lba, buf.len() as u64 / SECTOR)?;
        self.file
            .read_exact_at(buf, lba * SECTOR)
            .map_err(FlashError::Io)
    }

    pub fn write(&self, lba: u64, data: &[u8]) -> Result<(), FlashError> {
        let sectors = data.len() as u64 / SECTOR;
        self.check(lba, sectors)?;
        self.keep_stale(lba, sectors)?;
        self.file
            .write_all_at(data, lba * SECTOR)
            .map_err(FlashError::Io)?;
        self.regions().add(lba, lba + sectors);
        if let Some(p) = &self.pace {
            p.take(data.len());
        }
        Ok(())
    }

    /// Zeroes `sectors` from `lba`: a hole punched in the file (no data written), or
    /// zeros where the filesystem cannot punch.
    pub fn erase(&self, lba: u64, sectors: u64) -> Result<(), FlashError> {
        self.check(lba, sectors)?;
        let (off, len) = ((lba * SECTOR) as i64, (sectors * SECTOR) as i64);
        // SAFETY: fallocate on an fd we own, with plain integer arguments.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                len,
            )
        };
        if rc != 0 {
            let zeros = vec![0u8; 1 << 20];
            let mut at = off as u64;
            let end = (off + len) as u64;
            while at < end {
                let n = (end - at).min(zeros.len() as u64) as usize;
                self.file
                    .write_all_at(&zeros[..n], at)
                    .map_err(FlashError::Io)?;
                at += n as u64;
            }
        }
        self.regions().remove(lba, lba + sectors);
        Ok(())
    }

    fn regions(&self) -> std::sync::MutexGuard<'_, Regions> {
        // A poisoned lock only means a panic elsewhere; the interval list is still valid.
        self.written.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The regions written since the last boot, and forgets them (a boot consumes them).
    pub fn take_regions(&self) -> Regions {
        std::mem::take(&mut *self.regions())
    }

    pub fn peek_regions(&self) -> Regions {
        self.regions().clone()
    }

    /// SHA-256 of `[start, end)` sectors, read back from the file.
    pub fn sha256(&self, start: u64, end: u64) -> Result<String, FlashError> {
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut at = start;
        while at < end {
            let n = ((end - at) * SECTOR).min(buf.len() as u64) as usize;
            self.read(at, &mut buf[..n])?;
            h.update(&buf[..n]);
            at += n as u64 / SECTOR;
        }
        Ok(hex::encode(h.finalize()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_merge_and_split() {
        let mut r = Regions::default();
        r.add(64, 192);
        r.add(192, 320); // adjacent: merged
        r.add(1000, 1010);
        assert_eq!(r.ranges(), &[(64, 320), (1000, 1010)]);
        r.add(300, 1000); // bridges both
        assert_eq!(r.ranges(), &[(64, 1010)]);
        r.remove(100, 200);
        assert_eq!(r.ranges(), &[(64, 100), (200, 1010)]);
        r.remove(0, 5000);
        assert!(r.ranges().is_empty());
    }

    #[test]
    fn sectors_round_trip_and_bounds_are_checked() {
        let dir = tempfile::tempdir().expect("tmp");
        let f = Flash::open(&dir.path().join("f"), 1 << 20).expect("open");
        assert_eq!(f.sectors(), 2048);
        let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        f.write(64, &data).expect("write");
        let mut back = vec![0u8; 4096];
        f.read(64, &mut back).expect("read");
        assert_eq!(back, data);
        assert_eq!(f.peek_regions().ranges(), &[(64, 72)]);
        let err = f.write(2047, &data).expect_err("beyond the end");
        assert!(err.to_string().contains("beyond the flash end"), "{err}");
        let expect = hex::encode(Sha256::digest(&data));
        assert_eq!(f.sha256(64, 72).expect("hash"), expect);
        f.erase(0, 2048).expect("erase");
        f.read(64, &mut back).expect("read");
        assert!(back.iter().all(|&b| b == 0));
        assert!(f.take_regions().ranges().is_empty());
    }

    #[test]
    fn read_back_modes_answer_as_the_loaders_they_stand_for() {
        let dir = tempfile::tempdir().expect("tmp");
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        // rk3588's fill, scaled down: 0xCC from 4 KiB (sector 8).
        let f = Flash::open(&dir.path().join("f"), 1 << 20)
            .expect("open")
            .with_read_back(ReadBack::parse("cc:4K").expect("mode"));
        f.write(0, &data).expect("write");
        let mut back = vec![0u8; 8192];
        f.read_as_loader(0, &mut back).expect("read");
        assert_eq!(back[..4096], data[..4096], "below the limit: sound");
        assert!(back[4096..].iter().all(|&b| b == 0xcc), "past it: 0xCC");
        f.read(0, &mut back).expect("read");
        assert_eq!(back, data, "the flash itself holds what was written");
        // The DDR + usbplug pair's Loader reads soundly under any mode; a packed loader
        // started after it reads as the mode says again.
        f.set_usbplug_reads(true);
        f.read_as_loader(0, &mut back).expect("read");
        assert_eq!(back, data, "the usbplug's reads are sound past the limit");
        f.set_usbplug_reads(false);
        f.read_as_loader(0, &mut back).expect("read");
        assert!(
            back[4096..].iter().all(|&b| b == 0xcc),
            "the packed loader's again"
        );
        // stale: past the limit, what the sector held when the Loader started.
        let f = Flash::open(&dir.path().join("g"), 1 << 20)
            .expect("open")
            .with_read_back(ReadBack::parse("stale:4K").expect("mode"));
        f.write(0, &vec![7u8; 8192]).expect("old contents");
        f.loader_started();
        f.write(0, &data).expect("write");
        f.write(0, &data)
            .expect("written twice: the first old contents stay");
        f.read_as_loader(0, &mut back).expect("read");
        assert_eq!(back[..4096], data[..4096]);
        assert!(back[4096..].iter().all(|&b| b == 7), "stale past the limit");
        f.loader_started();
        f.read_as_loader(0, &mut back).expect("read");
        assert_eq!(back, data, "a new Loader reads what the flash holds");
        assert_eq!(
            ReadBack::parse("rk3588"),
            Ok(ReadBack::Fill {
                from: 32 << 20,
                byte: 0xcc
            })
        );
        assert!(ReadBack::parse("stale:100").is_err());
        assert!(ReadBack::parse("sometimes").is_err());
    }

    #[test]
    fn a_write_speed_makes_writes_take_at_least_their_share() {
        // A lower bound only (sleeps never end early): four 64 KiB writes at 1 MiB/s take a
        // quarter of a second or more, however loaded the machine.
        let dir = tempfile::tempdir().expect("tmp");
        let f = Flash::open(&dir.path().join("f"), 1 << 20)
            .expect("open")
            .with_write_speed(Some(1 << 20));
        let data = vec![0x5au8; 64 << 10];
        let t0 = Instant::now();
        for k in 0..4 {
            f.write(k * 128, &data).expect("write");
        }
        assert!(
            t0.elapsed() >= Duration::from_millis(250),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(f.peek_regions().ranges(), &[(0, 512)]);
    }
}
