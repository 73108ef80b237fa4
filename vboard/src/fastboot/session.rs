//! One fastboot command, device side: parse it, run it against the flash, answer. The
//! transport is a trait so the tests drive it from memory; on the board it is the
//! FunctionFS bulk pair, which refuses transfers once the board was unplugged.
//!
//! Sequences, as fastboot 29 drives them (`fastboot_driver.cpp`): `download:%08x` →
//! `DATA%08x` → the bytes in 16 KiB bulk transfers, no zero-length packet → `OKAY`;
//! `flash:P` → `OKAY` once written (the host waits without a timeout, so a slow
//! `--write-speed` flash only lengthens its "Writing 'P'" line); `reboot`,
//! `reboot-bootloader`, `continue` → `OKAY`, then the board leaves the bus (the host waits
//! for its device node to go, `usb_linux.cpp WaitForDisconnect`).

use std::io;

use super::command::{self, Command, Response};
use super::partitions::Partition;
use super::variables::Vars;
use crate::flash::{Flash, SECTOR};
use crate::sparse;

/// The bulk pipe pair: `read` returns one transfer of at most `max` bytes, `write` sends one.
pub trait Pipe {
    fn read(&mut self, max: usize) -> io::Result<Vec<u8>>;
    fn write(&mut self, data: &[u8]) -> io::Result<()>;
}

/// What the board does once the answer is out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Nothing,
    /// `reboot`: leave the bus and boot from flash.
    Reboot,
    /// `reboot-bootloader`: leave the bus and come back in fastboot mode.
    RebootBootloader,
    /// `continue`: leave the bus and carry on booting (as `reboot` here).
    Continue,
}

/// The largest single read of a data phase and the largest single flash write (the throttle
/// and the unplug check act between pieces).
pub const PIECE: usize = 64 * 1024;

/// A fastboot session's memory: the last download (kept until the next one, as fastbootd
/// does, so one download can be flashed twice).
pub struct Session<'a> {
    pub vars: Vars<'a>,
    pub flash: &'a Flash,
    /// False once the board left the bus: a flash stops between pieces, as power loss would.
    pub plugged: &'a dyn Fn() -> bool,
    download: Vec<u8>,
}

impl<'a> Session<'a> {
    pub fn new(vars: Vars<'a>, flash: &'a Flash, plugged: &'a dyn Fn() -> bool) -> Session<'a> {
        Session {
            vars,
            flash,
            plugged,
            download: Vec::new(),
        }
    }

    /// Runs one command transfer. `Err` only when the pipe failed (the host is gone).
    pub fn serve(
        &mut self,
        raw: &[u8],
        pipe: &mut dyn Pipe,
        log: &mut dyn FnMut(String),
    ) -> io::Result<After> {
        let cmd = match command::parse(raw) {
            Ok(c) => c,
            Err(e) => {
                log(format!("fastboot: {e}"));
                return answer(pipe, Response::Fail(e.to_string()), After::Nothing);
            }
        };
        match cmd {
            Command::GetVar { name, args } if name == "all" && args.is_empty() => {
                for line in self.vars.all() {
                    pipe.write(&Response::Info(line).to_bytes())?;
                }
                answer(pipe, Response::Okay(String::new()), After::Nothing)
            }
            Command::GetVar { name, args } => {
                let r = match self.vars.get(&name, &args) {
                    Ok(v) => Response::Okay(v),
                    Err(e) => {
                        let full = std::iter::once(name.as_str())
                            .chain(args.iter().map(String::as_str))
                            .collect::<Vec<_>>()
                            .join(":");
                        log(format!("fastboot: getvar:{full} refused: {e}"));
                        Response::Fail(e)
                    }
                };
                answer(pipe, r, After::Nothing)
            }
            Command::Download(n) => self.download(n, pipe, log),
            Command::Flash(p) => {
                let r = match self.partition(&p) {
                    Ok(part) => self.flash_partition(&part, log),
                    Err(e) => Err(e),
                };
                let r = match r {
                    Ok(()) => Response::Okay(String::new()),
                    Err(e) => {
                        log(format!("fastboot: flash:{p} failed: {e}"));
                        Response::Fail(e)
                    }
                };
                answer(pipe, r, After::Nothing)
            }
            Command::Erase(p) => {
                let r = self.partition(&p).and_then(|part| {
                    self.flash
                        .erase(part.lba, part.sectors)
                        .map_err(|e| format!("Erasing failed: {e}"))
                        .map(|()| {
                            log(format!(
                                "fastboot: erased {} ({} bytes)",
                                part.name,
                                part.bytes()
                            ))
                        })
                });
                let r = match r {
                    Ok(()) => Response::Okay(String::new()),
                    Err(e) => {
                        log(format!("fastboot: erase:{p} failed: {e}"));
                        Response::Fail(e)
                    }
                };
                answer(pipe, r, After::Nothing)
            }
            Command::Reboot => answer(pipe, Response::Okay(String::new()), After::Reboot),
            Command::RebootBootloader => {
                answer(pipe, Response::Okay(String::new()), After::RebootBootloader)
            }
            Command::Continue => answer(pipe, Response::Okay(String::new()), After::Continue),
            Command::Unsupported { name, why } => {
                log(format!("fastboot: {name} refused: {why}"));
                answer(
                    pipe,
                    Response::Fail(format!("{name}: {why}")),
                    After::Nothing,
                )
            }
            Command::Unknown(name) => {
                log(format!("fastboot: unrecognized command {name:?}"));
                answer(
                    pipe,
                    Response::Fail(format!("Unrecognized command {name}")),
                    After::Nothing,
                )
            }
        }
    }

    fn partition(&self, name: &str) -> Result<Partition, String> {
        self.vars.table.get(name).cloned().ok_or_else(|| {
            format!(
                "Partition doesn't exist: {name} (this board has {})",
                self.vars.table.names()
            )
        })
    }

    fn download(
        &mut self,
        n: u32,
        pipe: &mut dyn Pipe,
        log: &mut dyn FnMut(String),
    ) -> io::Result<After> {
        let max = self.vars.max_download;
        if n == 0 || n > max {
            let why = format!(
                "Invalid size: {n} bytes (max-download-size is 0x{max:X}; fastboot sends larger images as sparse pieces)"
            );
            log(format!("fastboot: download refused: {why}"));
            return answer(pipe, Response::Fail(why), After::Nothing);
        }
        self.download.clear();
        pipe.write(&Response::Data(n).to_bytes())?;
        let want = n as usize;
        while self.download.len() < want {
            let piece = pipe.read((want - self.download.len()).min(PIECE))?;
            self.download.extend_from_slice(&piece);
        }
        log(format!("fastboot: downloaded {n} bytes"));
        answer(pipe, Response::Okay(String::new()), After::Nothing)
    }

    fn flash_partition(&self, p: &Partition, log: &mut dyn FnMut(String)) -> Result<(), String> {
        let data = &self.download;
        if data.is_empty() {
            return Err("No data to flash (send it with download: first)".into());
        }
        let write = |offset: u64, bytes: &[u8]| -> Result<(), String> {
            if !(self.plugged)() {
                return Err("the board was switched off during the flash".into());
            }
            self.flash
                .write(p.lba + offset / SECTOR, bytes)
                .map_err(|e| format!("flash write failed: {e}"))
        };
        if sparse::is_sparse(data) {
            let image = sparse::parse(data).map_err(|e| format!("invalid sparse image: {e}"))?;
            if !(image.block_size as u64).is_multiple_of(SECTOR) {
                return Err(format!(
                    "sparse block size {} is not a multiple of the {SECTOR}-byte sector",
                    image.block_size
                ));
            }
            if image.expanded_len() > p.bytes() {
                return Err(format!(
                    "sparse image of {} bytes is larger than partition {} ({} bytes)",
                    image.expanded_len(),
                    p.name,
                    p.bytes()
                ));
            }
            let count =
                |k: fn(&sparse::Data) -> bool| image.chunks.iter().filter(|c| k(&c.data)).count();
            log(format!(
                "fastboot: flash {}: sparse image, {} chunks (raw {}, fill {}, dont-care {}), {} bytes expanded",
                p.name,
                image.chunks.len(),
                count(|d| matches!(d, sparse::Data::Raw(_))),
                count(|d| matches!(d, sparse::Data::Fill(_))),
                count(|d| matches!(d, sparse::Data::DontCare)),
                image.expanded_len()
            ));
            sparse::apply(&image, PIECE, write)?;
        } else {
            if data.len() as u64 > p.bytes() {
                return Err(format!(
                    "image of {} bytes is larger than partition {} ({} bytes)",
                    data.len(),
                    p.name,
                    p.bytes()
                ));
            }
            log(format!(
                "fastboot: flash {}: raw image of {} bytes",
                p.name,
                data.len()
            ));
            for (k, piece) in data.chunks(PIECE).enumerate() {
                let offset = (k * PIECE) as u64;
                if (piece.len() as u64).is_multiple_of(SECTOR) {
                    write(offset, piece)?;
                } else {
                    // The tail padded to whole sectors, as a block device writes it.
                    let mut padded = piece.to_vec();
                    padded.resize(piece.len().next_multiple_of(SECTOR as usize), 0);
                    write(offset, &padded)?;
                }
            }
        }
        log(format!("fastboot: flash {} done", p.name));
        Ok(())
    }
}

fn answer(pipe: &mut dyn Pipe, r: Response, after: After) -> io::Result<After> {
    pipe.write(&r.to_bytes())?;
    Ok(after)
}

#[cfg(test)]
mod tests {
    use super::super::partitions::Table;
    use super::*;
    use std::collections::VecDeque;

    struct Host {
        to_device: VecDeque<Vec<u8>>,
        from_device: Vec<Vec<u8>>,
    }

    impl Pipe for Host {
        fn read(&mut self, max: usize) -> io::Result<Vec<u8>> {
            let mut t = self
                .to_device
                .pop_front()
                .ok_or_else(|| io::Error::other("the host sent nothing more"))?;
            if t.len() > max {
                let rest = t.split_off(max);
                self.to_device.push_front(rest);
            }
            Ok(t)
        }
        fn write(&mut self, data: &[u8]) -> io::Result<()> {
            self.from_device.push(data.to_vec());
            Ok(())
        }
    }

    struct Bench {
        _dir: tempfile::TempDir,
        flash: Flash,
        table: Table,
    }

    fn bench() -> Bench {
        let dir = tempfile::tempdir().expect("tmp");
        let flash = Flash::open(&dir.path().join("f"), 4 << 20).expect("flash");
        let table = Table::for_flash(flash.sectors());
        Bench {
            _dir: dir,
            flash,
            table,
        }
    }

    /// Runs `cmd` with `data` queued behind it; the device's answers as text.
    fn run(s: &mut Session, cmd: &str, data: Vec<Vec<u8>>) -> (After, Vec<String>) {
        let mut host = Host {
            to_device: data.into(),
            from_device: Vec::new(),
        };
        let after = s
            .serve(cmd.as_bytes(), &mut host, &mut |_| {})
            .expect("pipe");
        let answers = host
            .from_device
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        (after, answers)
    }

    fn session(b: &Bench) -> Session<'_> {
        static PLUGGED: fn() -> bool = || true;
        Session::new(
            Vars {
                product: "vboard",
                serial: "vboard-vb1",
                max_download: 256 << 10,
                table: &b.table,
            },
            &b.flash,
            &PLUGGED,
        )
    }

    fn read_back(b: &Bench, part: &str, len: usize) -> Vec<u8> {
        let p = b.table.get(part).expect("partition");
        let mut buf = vec![0u8; len.next_multiple_of(512)];
        b.flash.read(p.lba, &mut buf).expect("read");
        buf.truncate(len);
        buf
    }

    #[test]
    fn getvar_and_getvar_all() {
        let b = bench();
        let mut s = session(&b);
        assert_eq!(run(&mut s, "getvar:product", vec![]).1, ["OKAYvboard"]);
        assert_eq!(
            run(&mut s, "getvar:max-download-size", vec![]).1,
            ["OKAY0x40000"]
        );
        assert_eq!(
            run(&mut s, "getvar:nosuch", vec![]).1,
            ["FAILUnknown variable"]
        );
        let (_, all) = run(&mut s, "getvar:all", vec![]);
        assert_eq!(all.last().map(String::as_str), Some("OKAY"));
        assert!(
            all.contains(&"INFOpartition-size:boot:0x80000".to_string()),
            "{all:?}"
        );
    }

    #[test]
    fn a_raw_download_flashes_at_the_partition_start() {
        let b = bench();
        let mut s = session(&b);
        let img: Vec<u8> = (0..100_001u32).map(|i| (i % 253) as u8).collect();
        let (_, a) = run(
            &mut s,
            &format!("download:{:08x}", img.len()),
            img.chunks(16384).map(|c| c.to_vec()).collect(),
        );
        assert_eq!(a, ["DATA000186a1", "OKAY"]);
        assert_eq!(run(&mut s, "flash:system", vec![]).1, ["OKAY"]);
        assert_eq!(read_back(&b, "system", img.len()), img);
        // The tail sector was padded with zeros.
        assert_eq!(read_back(&b, "system", 100_352)[100_001..], [0u8; 351]);
    }

    #[test]
    fn sparse_pieces_like_fastboots_resparse_rebuild_the_image() {
        let b = bench();
        let mut s = session(&b);
        let bs = 4096usize;
        // Block 0-1 raw, 2-3 fill, 4-5 raw; cut into two pieces that each cover all six
        // blocks, DONT_CARE where the other piece has the data.
        let raw_a: Vec<u8> = (0..2 * bs).map(|i| (i * 3) as u8).collect();
        let raw_b: Vec<u8> = (0..2 * bs).map(|i| (i * 5 + 1) as u8).collect();
        let fill = 0x0102_0304u32;
        let one = sparse::build(
            4096,
            &[
                (sparse::CHUNK_RAW, 2, raw_a.clone()),
                (sparse::CHUNK_FILL, 2, fill.to_le_bytes().to_vec()),
                (sparse::CHUNK_DONT_CARE, 2, vec![]),
            ],
        );
        let two = sparse::build(
            4096,
            &[
                (sparse::CHUNK_DONT_CARE, 4, vec![]),
                (sparse::CHUNK_RAW, 2, raw_b.clone()),
            ],
        );
        for piece in [one, two] {
            let (_, a) = run(
                &mut s,
                &format!("download:{:08x}", piece.len()),
                vec![piece],
            );
            assert_eq!(a.last().map(String::as_str), Some("OKAY"));
            assert_eq!(run(&mut s, "flash:boot", vec![]).1, ["OKAY"]);
        }
        let mut want = raw_a;
        want.extend(fill.to_le_bytes().repeat(2 * bs / 4));
        want.extend(raw_b);
        assert_eq!(read_back(&b, "boot", 6 * bs), want);
        assert_eq!(b.flash.peek_regions().ranges(), &[(0, 48)]);
    }

    #[test]
    fn refusals_say_why() {
        let b = bench();
        let mut s = session(&b);
        let (_, a) = run(&mut s, "download:00100000", vec![]);
        assert_eq!(a.len(), 1, "no DATA for an oversized download: {a:?}");
        assert!(a[0].starts_with("FAILInvalid size"), "{a:?}");
        assert!(run(&mut s, "flash:boot", vec![]).1[0].starts_with("FAILNo data to flash"));
        let (_, a) = run(&mut s, "flash:vbmeta", vec![]);
        assert!(a[0].contains("boot, system, userdata"), "{a:?}");
        // A raw image larger than boot (512 KiB here), in two downloads' worth: refused.
        let big = sparse::build(4096, &[(sparse::CHUNK_FILL, 200, vec![0; 4])]);
        run(&mut s, &format!("download:{:08x}", big.len()), vec![big]);
        let (_, a) = run(&mut s, "flash:boot", vec![]);
        assert!(a[0].contains("larger than partition boot"), "{a:?}");
        assert!(
            b.flash.peek_regions().ranges().is_empty(),
            "nothing written"
        );
        let bad = sparse::build(4096, &[(0xCAC9, 1, vec![])]);
        run(&mut s, &format!("download:{:08x}", bad.len()), vec![bad]);
        let (_, a) = run(&mut s, "flash:boot", vec![]);
        assert!(a[0].starts_with("FAILinvalid sparse image"), "{a:?}");
        assert_eq!(
            run(&mut s, "oem unlock", vec![]).1,
            ["FAILUnrecognized command oem unlock"]
        );
        assert!(run(&mut s, "set_active:a", vec![]).1[0].contains("no A/B slots"));
    }

    #[test]
    fn erase_zeroes_the_partition_and_reboots_are_reported() {
        let b = bench();
        let mut s = session(&b);
        let img = vec![0xabu8; 4096];
        run(&mut s, "download:00001000", vec![img]);
        run(&mut s, "flash:userdata", vec![]);
        assert_eq!(run(&mut s, "erase:userdata", vec![]).1, ["OKAY"]);
        assert_eq!(read_back(&b, "userdata", 4096), vec![0u8; 4096]);
        assert!(b.flash.peek_regions().ranges().is_empty());
        assert_eq!(run(&mut s, "reboot", vec![]).0, After::Reboot);
        assert_eq!(
            run(&mut s, "reboot-bootloader", vec![]).0,
            After::RebootBootloader
        );
        assert_eq!(run(&mut s, "continue", vec![]).0, After::Continue);
    }

    #[test]
    fn a_flash_stops_when_the_board_goes_off() {
        let b = bench();
        let off: &dyn Fn() -> bool = &|| false;
        let mut s = Session::new(
            Vars {
                product: "vboard",
                serial: "s",
                max_download: 1 << 20,
                table: &b.table,
            },
            &b.flash,
            off,
        );
        run(&mut s, "download:00001000", vec![vec![1u8; 4096]]);
        let (_, a) = run(&mut s, "flash:boot", vec![]);
        assert!(a[0].contains("switched off"), "{a:?}");
    }
}
