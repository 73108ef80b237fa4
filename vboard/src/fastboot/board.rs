//! The fastboot board: an Android device whose bootloader offers fastboot (interface class
//! ff/42/03 with one bulk IN and one bulk OUT endpoint, what `fastboot.cpp
//! match_fastboot_with_serial` looks for), default id 18d1:4ee0; its partitions live in
//! the board's flash file (`partitions.rs`). `power on --recovery` = the volume-down key
//! held: fastboot mode. `power on`: the bootloader boots `boot` if it holds an Android boot
//! image (`ANDROID!` at its start) — the console prints the boot log (one line per region
//! written since the last boot, with its SHA-256) and a login; otherwise it says why and
//! stays in fastboot mode.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::partitions::Table;
use super::session::{After, Pipe, Session};
use super::variables::Vars;
use crate::board::lock;
use crate::console::bootlog;
use crate::console::port::ConsolePort;
use crate::family::base::{Base, HasBase, Mode, later};
use crate::family::function::{self, Function};
use crate::family::{Family, Powered, ReadyLine};
use crate::ffs::blob::{bulk_endpoint, descriptors, interface, strings};
use crate::ffs::{BulkFiles, EP_IN, EP_OUT, Ep0, Event};
use crate::flash::{Flash, SECTOR};
use crate::gadget::{Identity, host_port};
use crate::rockusb::commands::Bulk;

/// What an Android boot image starts with (`bootimg.h BOOT_MAGIC`).
const BOOT_MAGIC: &[u8; 8] = b"ANDROID!";
pub const PRODUCT: &str = "vboard";

pub struct Settings {
    pub name: String,
    pub vid: u16,
    pub pid: u16,
    pub flash_bytes: u64,
    pub write_speed: Option<u64>,
    pub max_download: u32,
    pub state_dir: PathBuf,
    pub usb_udc: String,
    pub console_udc: String,
}

pub struct FastbootBoard {
    base: Base,
    usb: Function,
    table: Table,
    serial: String,
    max_download: u32,
}

impl HasBase for FastbootBoard {
    fn base(&self) -> &Base {
        &self.base
    }
}

/// The fastboot interface (FunctionFS descriptors and its one string).
fn blobs() -> (Vec<u8>, Vec<u8>) {
    let d = descriptors(|hs| {
        let mp = if hs { 512 } else { 64 };
        vec![
            interface(0, 0, 2, [0xff, 0x42, 0x03], 1),
            bulk_endpoint(EP_IN, mp),
            bulk_endpoint(EP_OUT, mp),
        ]
    });
    (d, strings(&["fastboot"]))
}

impl FastbootBoard {
    pub fn start(s: Settings) -> Result<Arc<FastbootBoard>, String> {
        let n = &s.name;
        crate::board::log(n, "creating gadgets (fastboot)");
        let serial = format!("vboard-{n}");
        let (descs, strs) = blobs();
        let (usb, ep0) = function::create(
            &format!("{n}-fastboot"),
            &Identity {
                vid: s.vid,
                pid: s.pid,
                manufacturer: "gatecmd",
                product: "gatecmd-vboard fastboot",
                serial: &serial,
            },
            &s.usb_udc,
            &s.state_dir,
            &descs,
            &strs,
        )?;
        let bulk =
            BulkFiles::open(&usb.dir).map_err(|e| format!("{n}: FunctionFS endpoints: {e}"))?;
        let (console, pending) = ConsolePort::create(n, &s.console_udc)?;
        let flash_path = s.state_dir.join(format!("{n}.flash"));
        let flash = Flash::open(&flash_path, s.flash_bytes)
            .map_err(|e| format!("{n}: flash {}: {e}", flash_path.display()))?
            .with_write_speed(s.write_speed);
        let table = Table::for_flash(flash.sectors());
        let board = Arc::new(FastbootBoard {
            base: Base::new(n, console, flash, "fastboot"),
            usb,
            table,
            serial,
            max_download: s.max_download,
        });
        let b = board.clone();
        thread::spawn(move || b.serve_ep0(ep0));
        let b = board.clone();
        thread::spawn(move || b.serve_bulk(bulk));
        let weak = Arc::downgrade(&board);
        pending.start(move || {
            if let Some(b) = weak.upgrade() {
                let _g = lock(&b.base.ops);
                if let Err(e) = b.boot() {
                    b.base.log(&e);
                }
            }
        });
        Ok(board)
    }

    /// fastboot sends no control requests to its interface: any that comes is stalled.
    fn serve_ep0(self: Arc<Self>, mut ep0: Ep0) {
        loop {
            match ep0.event() {
                Ok(Event::Setup(setup)) => {
                    self.base.log(&format!(
                        "ep0: control request type 0x{:02x} request 0x{:02x} stalled (fastboot uses only the bulk endpoints)",
                        setup.request_type, setup.request
                    ));
                    ep0.stall(&setup);
                }
                Ok(_) => {}
                Err(e) => {
                    self.base.log(&format!("ep0: {e}"));
                    thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    fn serve_bulk(self: Arc<Self>, mut bulk: BulkFiles) {
        // A session (its download buffer) lasts from one enumeration to the next unplug.
        let since = Cell::new(self.base.unplugs());
        let plugged = || self.base.unplugs() == since.get();
        let vars = || Vars {
            product: PRODUCT,
            serial: &self.serial,
            max_download: self.max_download,
            table: &self.table,
        };
        let mut session = Session::new(vars(), &self.base.flash, &plugged);
        loop {
            let cmd = match bulk.read(4096) {
                Ok(c) => c,
                Err(_) => {
                    // Not enabled (off, or not configured by the host yet): try again shortly.
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
            };
            if !plugged() {
                since.set(self.base.unplugs());
                session = Session::new(vars(), &self.base.flash, &plugged);
            }
            if cmd.is_empty() {
                continue; // a zero-length packet is no command
            }
            self.base.log(&format!(
                "fastboot: {}",
                String::from_utf8_lossy(&cmd[..cmd.len().min(64)])
            ));
            let mut pipe = Plugged {
                bulk: &mut bulk,
                board: &self.base,
                since: since.get(),
            };
            let mut say = |l: String| self.base.log(&l);
            match session.serve(&cmd, &mut pipe, &mut say) {
                Ok(After::Nothing) => {}
                Ok(After::Reboot | After::Continue) => {
                    later(&self, Duration::from_millis(50), Mode::Recovery, |b| {
                        b.boot()
                    })
                }
                Ok(After::RebootBootloader) => {
                    later(&self, Duration::from_millis(50), Mode::Recovery, |b| {
                        b.fastboot_mode().map(|()| Mode::Recovery)
                    })
                }
                Err(e) => self.base.log(&format!("fastboot: command aborted: {e}")),
            }
        }
    }

    /// (Re-)enumerates in fastboot mode. Caller holds `ops`.
    fn fastboot_mode(&self) -> Result<(), String> {
        self.base.console.silence();
        self.base
            .enumerate(&self.usb.gadget, &[&self.usb.gadget], Mode::Recovery)
    }

    /// The bootloader boots from flash (caller holds `ops`).
    fn boot(&self) -> Result<Mode, String> {
        self.base.unplug(&[&self.usb.gadget])?;
        self.base.set(Mode::Booting);
        match self.bootable() {
            Ok(()) => {
                let lines = self.region_lines();
                self.base.log(&format!(
                    "boot: {} region line(s), printing the boot log",
                    lines.len()
                ));
                self.base.console.print(
                    bootlog::boot_with(&self.base.name, "android fastboot", &lines),
                    true,
                );
                self.base.set(Mode::Running);
                Ok(Mode::Running)
            }
            Err(reason) => {
                self.base.log(&format!("boot: {reason}"));
                self.base.console.print(
                    bootlog::failure_to(&reason, "staying in fastboot mode"),
                    false,
                );
                self.fastboot_mode()?;
                Ok(Mode::Recovery)
            }
        }
    }

    fn bootable(&self) -> Result<(), String> {
        let boot = self
            .table
            .get("boot")
            .ok_or("no boot partition in the table")?;
        let mut s = [0u8; SECTOR as usize];
        self.base
            .flash
            .read(boot.lba, &mut s)
            .map_err(|e| format!("cannot read the boot partition: {e}"))?;
        if &s[..8] == BOOT_MAGIC {
            Ok(())
        } else {
            Err("the boot partition holds no Android boot image (no \"ANDROID!\" magic)".into())
        }
    }

    /// One line per region written since the last boot, cut at partition boundaries:
    /// `vboard: region partition=boot offset=0x0 bytes=N sha256=H`.
    fn region_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for &(a, b) in self.base.flash.take_regions().ranges() {
            for (p, s, e) in self.table.split(a, b) {
                let sha = self
                    .base
                    .flash
                    .sha256(s, e)
                    .unwrap_or_else(|e| format!("<unreadable: {e}>"));
                out.push(format!(
                    "vboard: region partition={} offset=0x{:x} bytes={} sha256={sha}",
                    p.name,
                    (s - p.lba) * SECTOR,
                    (e - s) * SECTOR
                ));
            }
        }
        out
    }
}

/// The bulk pipe for one command: fails once the board was unplugged after the session
/// began, so a command cut by a power-off never answers into the next session.
struct Plugged<'a> {
    bulk: &'a mut BulkFiles,
    board: &'a Base,
    since: u64,
}

impl Plugged<'_> {
    fn check(&self) -> std::io::Result<()> {
        if self.board.unplugs() == self.since {
            Ok(())
        } else {
            Err(std::io::Error::other(
                "the board was unplugged during the command",
            ))
        }
    }
}

impl Pipe for Plugged<'_> {
    fn read(&mut self, max: usize) -> std::io::Result<Vec<u8>> {
        self.check()?;
        self.bulk.read(max)
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.check()?;
        self.bulk.write(data)
    }
}

impl Powered for FastbootBoard {
    fn name(&self) -> &str {
        &self.base.name
    }

    fn power_on(&self, recovery: bool) -> Result<&'static str, String> {
        let _g = lock(&self.base.ops);
        let was = self.base.state();
        if !recovery && was != Mode::Off {
            return Ok(self.base.name_of(was));
        }
        self.base.console.bind()?;
        if recovery {
            self.fastboot_mode()?;
            return Ok(self.base.name_of(Mode::Recovery));
        }
        // Power-on reset, then the bootloader looks at the boot partition.
        thread::sleep(Duration::from_millis(500));
        self.boot().map(|m| self.base.name_of(m))
    }

    fn power_off(&self) -> Result<&'static str, String> {
        self.base.off(&[&self.usb.gadget])
    }

    fn status(&self) -> serde_json::Value {
        let regions: Vec<serde_json::Value> = self
            .base
            .flash
            .peek_regions()
            .ranges()
            .iter()
            .map(|&(s, e)| serde_json::json!({"lba": s, "sectors": e - s}))
            .collect();
        let partitions: Vec<serde_json::Value> = self
            .table
            .iter()
            .map(|p| serde_json::json!({"name": p.name, "lba": p.lba, "sectors": p.sectors}))
            .collect();
        serde_json::json!({
            "name": self.base.name,
            "family": "fastboot",
            "state": self.base.name_of(self.base.state()),
            "fastboot": {"udc": self.usb.gadget.udc, "port": host_port(&self.usb.gadget.udc), "bound": self.usb.gadget.bound()},
            "console": {"udc": self.base.console.udc(), "port": self.base.console.port(), "bound": self.base.console.bound(), "tty": self.base.console.tty()},
            "flash": {"path": self.base.flash.path(), "bytes": self.base.flash.sectors() * SECTOR},
            "partitions": partitions,
            "regions": regions,
        })
    }

    fn ready_line(&self) -> String {
        ReadyLine {
            name: &self.base.name,
            kind: "fastboot",
            udc: &self.usb.gadget.udc,
            console_udc: self.base.console.udc(),
            tty: &self.base.console.tty(),
            flash: self.base.flash.path(),
            bytes: self.base.flash.sectors() * SECTOR,
            family: Family::Fastboot,
        }
        .to_string()
    }

    fn shutdown(&self) {
        self.base.console.silence();
        let _ = self.base.unplug(&[&self.usb.gadget]);
        self.base.console.unbind();
    }

    fn ffs_dirs(&self) -> Vec<PathBuf> {
        vec![self.usb.dir.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interface_is_what_fastboot_matches() {
        let (d, s) = blobs();
        // fastboot.cpp match_fastboot_with_serial: class ff, subclass 42, protocol 03.
        assert_eq!(&d[20..29], &[9, 4, 0, 0, 2, 0xff, 0x42, 0x03, 1]);
        assert!(s.ends_with(b"fastboot\0"));
    }
}
