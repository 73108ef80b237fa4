//! One virtual board: its gadgets, its flash, its state (off, MaskROM, Loader, booting,
//! running) and the threads that serve ep0 (the mask ROM's download), the bulk pipe
//! (Loader commands) and the console.
//!
//! The rockusb device is two configfs gadgets on the same UDC, one bound at a time: the
//! MaskROM one without WebUSB (bcdUSB 0x0200) and the Loader one with it (0x0201). One
//! gadget toggled would not do: the kernel copies `webusb/use` into the composite device
//! at bind and never clears it, so once 0x0201 a gadget stays 0x0201 (seen in the VM).
//! Every state change runs under one lock per board, so power commands, `db`, `rd` and
//! the shell's `reboot` never interleave.

use std::path::PathBuf;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use crate::console::{self, bootlog};
use crate::crc::p_rc4;
use crate::ffs::{BulkFiles, Ep0};
use crate::flash::Flash;
use crate::gadget::{Gadget, Identity, host_port};
use crate::rockusb::Mode;

mod powered;
mod usb;

/// How long a re-enumerating board stays off the bus (a real board's reset is similar).
pub(crate) const ABSENCE: Duration = Duration::from_millis(300);
/// How long the host gets to enumerate a bound gadget.
pub(crate) const ENUMERATE: Duration = Duration::from_secs(10);
const IDB_LBA: u64 = 0x40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Off,
    MaskRom,
    Loader,
    Booting,
    Running,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Off => "off",
            State::MaskRom => "maskrom",
            State::Loader => "loader",
            State::Booting => "booting",
            State::Running => "running",
        }
    }
}

pub struct Settings {
    pub name: String,
    pub vid: u16,
    pub pid: u16,
    pub flash_bytes: u64,
    /// Bytes per second the flash takes at most (`serve --write-speed`).
    pub write_speed: Option<u64>,
    /// How the Loader answers reads (`serve --read-back`).
    pub read_back: crate::flash::ReadBack,
    /// A `READ_LBA`/`WRITE_LBA` moving more bytes than this stalls the Loader until a
    /// power cycle (`serve --stall-above`).
    pub stall_above: Option<u64>,
    pub state_dir: PathBuf,
    pub rockusb_udc: String,
    pub console_udc: String,
}

pub struct Board {
    pub name: String,
    rom: Gadget,
    ldr: Gadget,
    console: Gadget,
    pub flash: Flash,
    pub stall_above: Option<u64>,
    tty: Mutex<PathBuf>,
    pub ffs_dirs: [PathBuf; 2],
    state: Mutex<State>,
    ops: Mutex<()>,
    console_tx: Mutex<Sender<console::Command>>,
    /// Counts the rockusb gadget's unplugs (power off, re-enumeration): a bulk command
    /// started before one must not read the next session's transfers as its own.
    unplugs: std::sync::atomic::AtomicU64,
}

/// One stderr line, stamped with seconds since the process started (to read a log
/// against the host tool's timing).
pub fn log(board: &str, line: &str) {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let t = START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64();
    // One write(2) per line: eprintln! writes each formatted piece on its own, and in the
    // VM tests another process's line could land between the pieces (seen: `[STEP rd …`).
    let text = format!("[{t:9.3}] {board}: {line}\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicked holder leaves plain data that is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Board {
    /// Creates the gadgets (unbound: the board starts off), mounts FunctionFS, writes the
    /// descriptors and starts the board's threads.
    pub fn start(s: Settings) -> Result<Arc<Board>, String> {
        let n = &s.name;
        log(n, "creating gadgets");
        let serial = format!("vboard-{n}");
        let id = Identity {
            vid: s.vid,
            pid: s.pid,
            manufacturer: "Rockchip",
            product: "gatecmd-vboard rockusb",
            serial: &serial,
        };
        let (rom_fs, ldr_fs) = (format!("{n}-maskrom"), format!("{n}-loader"));
        let rom = Gadget::create(
            &format!("gatecmd-{rom_fs}"),
            &id,
            &format!("ffs.{rom_fs}"),
            &s.rockusb_udc,
        )
        .map_err(|e| format!("{n}: rockusb gadget (is usb_f_fs loaded?): {e}"))?;
        let ldr = Gadget::create(
            &format!("gatecmd-{ldr_fs}"),
            &id,
            &format!("ffs.{ldr_fs}"),
            &s.rockusb_udc,
        )
        .map_err(|e| format!("{n}: rockusb gadget (is usb_f_fs loaded?): {e}"))?;
        rom.set_webusb(false).map_err(|e| format!("{n}: {e}"))?;
        ldr.set_webusb(true).map_err(|e| format!("{n}: {e}"))?;
        let console_serial = format!("vboard-{n}-console");
        let console = Gadget::create(
            &format!("gatecmd-{n}-console"),
            &Identity {
                vid: 0x1d6b,
                pid: 0x0104,
                manufacturer: "gatecmd",
                product: "gatecmd-vboard console",
                serial: &console_serial,
            },
            &format!("acm.{n}"),
            &s.console_udc,
        )
        .map_err(|e| format!("{n}: console gadget (is usb_f_acm loaded?): {e}"))?;
        let tty = console::tty_of(&console.function_dir(&format!("acm.{n}")))
            .map_err(|e| format!("{n}: console tty: {e}"))?;
        let mut ends = Vec::new();
        let mut ffs_dirs = Vec::new();
        for inst in [&rom_fs, &ldr_fs] {
            let dir = s.state_dir.join("ffs").join(inst);
            crate::ffs::mount(inst, &dir)?;
            let ep0 =
                Ep0::open(&dir, "rockusb").map_err(|e| format!("{n}: FunctionFS ep0: {e}"))?;
            let bulk =
                BulkFiles::open(&dir).map_err(|e| format!("{n}: FunctionFS endpoints: {e}"))?;
            ends.push((ep0, bulk));
            ffs_dirs.push(dir);
        }
        let flash_path = s.state_dir.join(format!("{n}.flash"));
        let flash = Flash::open(&flash_path, s.flash_bytes)
            .map_err(|e| format!("{n}: flash {}: {e}", flash_path.display()))?
            .with_write_speed(s.write_speed)
            .with_read_back(s.read_back);
        let tty_file =
            console::open_tty(&tty).map_err(|e| format!("{n}: {}: {e}", tty.display()))?;
        let (tx, rx) = channel();
        let board = Arc::new(Board {
            name: n.clone(),
            rom,
            ldr,
            console,
            flash,
            stall_above: s.stall_above,
            tty: Mutex::new(tty.clone()),
            ffs_dirs: [ffs_dirs[0].clone(), ffs_dirs[1].clone()],
            state: Mutex::new(State::Off),
            ops: Mutex::new(()),
            console_tx: Mutex::new(tx),
            unplugs: std::sync::atomic::AtomicU64::new(0),
        });
        for (mode, (ep0, bulk)) in [Mode::MaskRom, Mode::Loader].into_iter().zip(ends) {
            let b = board.clone();
            thread::spawn(move || b.serve_ep0(mode, ep0));
            let b = board.clone();
            thread::spawn(move || b.serve_bulk(mode, bulk));
        }
        let b = board.clone();
        let name = n.clone();
        let tty_path = board.tty();
        thread::spawn(move || {
            let weak = Arc::downgrade(&b);
            drop(b);
            console::run(
                name.clone(),
                tty_path,
                tty_file,
                rx,
                move |_reboot| {
                    if let Some(b) = weak.upgrade() {
                        thread::spawn(move || {
                            let _g = lock(&b.ops);
                            let _ = b.boot();
                        });
                    }
                },
                move |l| log(&name, &l),
            )
        });
        Ok(board)
    }

    pub fn tty(&self) -> PathBuf {
        lock(&self.tty).clone()
    }

    /// How many times the rockusb gadget was unplugged so far.
    pub(crate) fn unplugs(&self) -> u64 {
        self.unplugs.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn state(&self) -> State {
        *lock(&self.state)
    }

    fn set(&self, s: State) {
        *lock(&self.state) = s;
        log(&self.name, &format!("state {}", s.as_str()));
    }

    fn say(&self, c: console::Command) {
        let _ = lock(&self.console_tx).send(c);
    }

    pub fn ports(&self) -> (Option<String>, Option<String>) {
        (host_port(&self.rom.udc), host_port(&self.console.udc))
    }

    pub fn udcs(&self) -> (&str, &str) {
        (&self.rom.udc, &self.console.udc)
    }

    pub fn bound(&self) -> (bool, bool) {
        (self.rom.bound() || self.ldr.bound(), self.console.bound())
    }

    /// Takes whichever rockusb gadget is bound off the bus; true if one was.
    fn unplug_rockusb(&self) -> Result<bool, String> {
        let mut was = false;
        for g in [&self.rom, &self.ldr] {
            if g.bound() {
                self.unplugs
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                g.unbind().map_err(|e| format!("rockusb unbind: {e}"))?;
                was = true;
            }
        }
        Ok(was)
    }

    // ---- power ----

    pub fn power_off(&self) -> Result<State, String> {
        let _g = lock(&self.ops);
        self.say(console::Command::Silence);
        // The console adapter stays on the bus, as a real USB-serial cable does (it is
        // powered by the host): a CDC-ACM gadget unbound and bound again gave EIO on every
        // later write to its tty, old or newly opened, even as a new function (seen in the
        // VM), so the boot log after the next power on would be lost.
        self.unplug_rockusb()?;
        self.set(State::Off);
        Ok(State::Off)
    }

    pub fn power_on(&self, maskrom: bool) -> Result<State, String> {
        let _g = lock(&self.ops);
        let was = self.state();
        if !maskrom && was != State::Off {
            return Ok(was);
        }
        self.bind_console()?;
        if maskrom {
            self.say(console::Command::Silence);
            self.enumerate(Mode::MaskRom)?;
            return Ok(State::MaskRom);
        }
        // Power-on reset and the ROM's look at the flash.
        thread::sleep(Duration::from_millis(500));
        self.boot()
    }

    fn bind_console(&self) -> Result<(), String> {
        self.console
            .bind()
            .map_err(|e| format!("console bind: {e}"))?;
        if !self.console.wait_configured(ENUMERATE, Some("tty")) {
            return Err(format!(
                "console on {} was not configured by the host in {} s",
                self.console.udc,
                ENUMERATE.as_secs()
            ));
        }
        Ok(())
    }

    /// Takes the rockusb gadget off the bus (if on it) and brings it back in `mode`.
    /// Caller holds `ops`.
    fn enumerate(&self, mode: Mode) -> Result<(), String> {
        if self.unplug_rockusb()? {
            thread::sleep(ABSENCE);
        }
        let g = match mode {
            Mode::MaskRom => &self.rom,
            Mode::Loader => &self.ldr,
        };
        if mode == Mode::Loader {
            self.flash.loader_started();
        }
        g.bind().map_err(|e| format!("rockusb bind: {e}"))?;
        if !g.wait_configured(ENUMERATE, None) {
            return Err(format!(
                "rockusb on {} was not configured by the host in {} s",
                g.udc,
                ENUMERATE.as_secs()
            ));
        }
        self.set(match mode {
            Mode::MaskRom => State::MaskRom,
            Mode::Loader => State::Loader,
        });
        Ok(())
    }

    /// Boots from flash (caller holds `ops`): a bootable flash prints the boot log and a
    /// login prompt (rockusb stays off the bus); otherwise a failure, then MaskROM.
    fn boot(&self) -> Result<State, String> {
        self.unplug_rockusb()?;
        self.set(State::Booting);
        let (done_tx, done_rx) = channel();
        log(&self.name, "boot: reading the flash");
        match self.bootable() {
            Ok(()) => {
                let regions: Vec<bootlog::Region> = self
                    .flash
                    .take_regions()
                    .ranges()
                    .iter()
                    .map(|&(a, b)| bootlog::Region {
                        lba: a,
                        sectors: b - a,
                        sha256: self
                            .flash
                            .sha256(a, b)
                            .unwrap_or_else(|e| format!("<unreadable: {e}>")),
                    })
                    .collect();
                log(
                    &self.name,
                    &format!(
                        "boot: {} region(s) hashed, printing the boot log",
                        regions.len()
                    ),
                );
                self.say(console::Command::Boot {
                    lines: bootlog::boot(&self.name, "rk3588", &regions),
                    gap: Duration::from_millis(20),
                    then_login: bootlog::reaches_login(&self.name),
                    done: Some(done_tx),
                });
                let _ = done_rx.recv_timeout(Duration::from_secs(30));
                self.set(State::Running);
                Ok(State::Running)
            }
            Err(reason) => {
                log(&self.name, &format!("boot: no bootable image: {reason}"));
                self.say(console::Command::Boot {
                    lines: bootlog::failure(&reason),
                    gap: Duration::from_millis(20),
                    then_login: false,
                    done: Some(done_tx),
                });
                let _ = done_rx.recv_timeout(Duration::from_secs(30));
                self.enumerate(Mode::MaskRom)?;
                Ok(State::MaskRom)
            }
        }
    }

    /// `RKNS` at LBA 0x40 (rk35xx idbloader), or an RC4-scrambled ID block (tag 0x0FF0AA55).
    fn bootable(&self) -> Result<(), String> {
        let mut s = [0u8; 512];
        self.flash
            .read(IDB_LBA, &mut s)
            .map_err(|e| format!("cannot read LBA 0x40: {e}"))?;
        if &s[..4] == b"RKNS" {
            return Ok(());
        }
        p_rc4(&mut s, 512);
        if u32::from_le_bytes([s[0], s[1], s[2], s[3]]) == 0x0FF0_AA55 {
            return Ok(());
        }
        Err(
            "LBA 0x40 holds no idbloader (no \"RKNS\" magic, no RC4 ID block tag 0x0FF0AA55)"
                .into(),
        )
    }

    /// Takes the board off the bus (shutdown). The configfs trees stay until the next
    /// start removes them: removing a FunctionFS function while its ep0 is open blocked
    /// in the kernel (seen in the VM), and the process still holds ep0 here.
    pub fn shutdown(&self) {
        self.say(console::Command::Silence);
        let _ = self.unplug_rockusb();
        let _ = self.console.unbind();
    }
}
