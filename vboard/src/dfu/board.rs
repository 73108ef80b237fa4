//! The DFU board: a device with a DFU 1.1 bootloader (STM32- or U-Boot-like), default id
//! 0483:df11. Two FunctionFS gadgets on its UDC, one bound at a time: runtime mode (the
//! application, interface fe/01/01) and DFU mode (fe/01/02, alt settings `u-boot` and
//! `rootfs`, `targets.rs`). `power on --recovery` = the boot pin strapped: DFU mode.
//! `power on`: the bootloader starts the application if alt 0 holds an image — the console
//! prints the boot log (one line per alt setting downloaded since the last boot, with the
//! image's SHA-256) and a login, and the device enumerates in runtime mode, where a DFU
//! DETACH (`dfu-util -e`, or any `-D`/`-U` that finds it) sends it to DFU mode; with alt 0
//! empty it says so and stays in DFU mode.
//!
//! The control requests arrive on ep0 as FunctionFS SETUP events (class requests to the
//! interface; no `FUNCTIONFS_ALL_CTRL_RECIP` needed). FunctionFS does not tell userspace
//! which alt setting SET_INTERFACE chose (Linux 6.12 `f_fs.c ffs_func_set_alt` only queues
//! an ENABLE event): the board reads it where the host side is visible, the interface's
//! `bAlternateSetting` in sysfs (a `dummy_hcd` UDC's port is on this machine), when a
//! transfer begins. Elsewhere it assumes alt 0 and says so once.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use super::descriptors::{self, TRANSFER_SIZE};
use super::state::{Dfu, Reply, Request, Work};
use super::targets::{self, Alt, FlashTargets, Images};
use crate::board::lock;
use crate::console::bootlog;
use crate::console::port::ConsolePort;
use crate::family::base::{Base, HasBase, Mode, later};
use crate::family::function::{self, Function};
use crate::family::{Family, Powered, ReadyLine};
use crate::ffs::{Ep0, Event, Setup};
use crate::flash::{Flash, SECTOR};
use crate::gadget::{Gadget, Identity, host_port};

pub struct Settings {
    pub name: String,
    pub vid: u16,
    pub pid: u16,
    pub flash_bytes: u64,
    pub write_speed: Option<u64>,
    pub state_dir: PathBuf,
    pub usb_udc: String,
    pub console_udc: String,
}

pub struct DfuBoard {
    base: Base,
    runtime: Function,
    dfu: Function,
    alts: Vec<Alt>,
    images: Images,
    write_speed: Option<u64>,
    /// The "alt setting unknown, assuming 0" line is said once.
    said_alt: AtomicBool,
}

impl HasBase for DfuBoard {
    fn base(&self) -> &Base {
        &self.base
    }
}

impl DfuBoard {
    pub fn start(s: Settings) -> Result<Arc<DfuBoard>, String> {
        let n = &s.name;
        crate::board::log(n, "creating gadgets (dfu)");
        let serial = format!("vboard-{n}");
        let id = |product| Identity {
            vid: s.vid,
            pid: s.pid,
            manufacturer: "gatecmd",
            product,
            serial: &serial,
        };
        let flash_path = s.state_dir.join(format!("{n}.flash"));
        let flash = Flash::open(&flash_path, s.flash_bytes)
            .map_err(|e| format!("{n}: flash {}: {e}", flash_path.display()))?
            .with_write_speed(s.write_speed);
        let alts = targets::alts_for_flash(flash.sectors());
        let names: Vec<&str> = alts.iter().map(|a| a.name).collect();
        let hint = |e: String| {
            format!("{e} (FunctionFS takes a DFU functional descriptor since Linux 6.12)")
        };
        let (d, st) = descriptors::runtime();
        let (runtime, rt_ep0) = function::create(
            &format!("{n}-dfu-runtime"),
            &id("gatecmd-vboard DFU runtime"),
            &s.usb_udc,
            &s.state_dir,
            &d,
            &st,
        )
        .map_err(hint)?;
        let (d, st) = descriptors::dfu_mode(&names);
        let (dfu, dfu_ep0) = function::create(
            &format!("{n}-dfu"),
            &id("gatecmd-vboard DFU"),
            &s.usb_udc,
            &s.state_dir,
            &d,
            &st,
        )
        .map_err(hint)?;
        let (console, pending) = ConsolePort::create(n, &s.console_udc)?;
        let images = Images::open(&s.state_dir.join(format!("{n}.dfu.json")), &alts);
        let board = Arc::new(DfuBoard {
            base: Base::new(n, console, flash, "dfu"),
            runtime,
            dfu,
            alts,
            images,
            write_speed: s.write_speed,
            said_alt: AtomicBool::new(false),
        });
        let b = board.clone();
        thread::spawn(move || b.serve_ep0(rt_ep0, true));
        let b = board.clone();
        thread::spawn(move || b.serve_ep0(dfu_ep0, false));
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

    fn gadgets(&self) -> [&Gadget; 2] {
        [&self.runtime.gadget, &self.dfu.gadget]
    }

    fn machine(&self, runtime: bool) -> Dfu {
        if runtime {
            Dfu::runtime()
        } else {
            Dfu::dfu_mode(TRANSFER_SIZE, self.write_speed)
        }
    }

    /// The alt setting the host selected, read on the host side (see the module comment).
    fn host_alt(&self, gadget: &Gadget) -> u8 {
        let read = host_port(&gadget.udc).and_then(|p| {
            std::fs::read_to_string(format!("/sys/bus/usb/devices/{p}:1.0/bAlternateSetting"))
                .ok()
                .and_then(|s| s.trim().parse::<u8>().ok())
        });
        match read {
            Some(a) => a,
            None => {
                if !self.said_alt.swap(true, Ordering::SeqCst) {
                    self.base.log(&format!(
                        "dfu: the host side of {} is not visible here: assuming alt setting 0 for every transfer",
                        gadget.udc
                    ));
                }
                0
            }
        }
    }

    fn serve_ep0(self: Arc<Self>, mut ep0: Ep0, runtime: bool) {
        let gadget = if runtime {
            &self.runtime.gadget
        } else {
            &self.dfu.gadget
        };
        let mut m = self.machine(runtime);
        loop {
            let ev = match ep0.event() {
                Ok(ev) => ev,
                Err(e) => {
                    self.base.log(&format!("ep0: {e}"));
                    thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            match ev {
                // A new enumeration or a bus reset: the device starts over (dfuIDLE/appIDLE).
                Event::Bind | Event::Unbind | Event::Disable => m = self.machine(runtime),
                Event::Setup(setup) => {
                    let work = self.control(&mut m, &mut ep0, setup, gadget);
                    if let Some(w) = work {
                        self.work(&mut m, w);
                    }
                }
                _ => {}
            }
        }
    }

    /// Answers one control request; returns the work to do after the answer.
    fn control(&self, m: &mut Dfu, ep0: &mut Ep0, setup: Setup, gadget: &Gadget) -> Option<Work> {
        // Class (0x20) requests to the interface (recipient 1).
        if setup.request_type & 0x7f != 0x21 {
            self.base.log(&format!(
                "ep0: control request type 0x{:02x} request 0x{:02x} stalled (DFU uses class requests to the interface)",
                setup.request_type, setup.request
            ));
            ep0.stall(&setup);
            return None;
        }
        let req = Request {
            request: setup.request,
            value: setup.value,
            length: setup.length,
        };
        let data_read = Cell::new(false);
        let (reply, work) = {
            let ep0 = &mut *ep0;
            let mut data = || {
                data_read.set(true);
                if setup.is_in() {
                    return Err("an OUT request expected, the SETUP says IN".to_string());
                }
                ep0.read_data(setup.length as usize)
                    .map_err(|e| e.to_string())
            };
            let mut alt = || self.host_alt(gadget);
            let targets = FlashTargets {
                alts: &self.alts,
                flash: &self.base.flash,
                images: &self.images,
            };
            let mut log = |l: String| self.base.log(&l);
            m.handle(req, &mut data, &mut alt, &targets, &mut log)
        };
        let done = match reply {
            Reply::Stall if !data_read.get() => {
                ep0.stall(&setup);
                Ok(())
            }
            Reply::Stall => Ok(()), // the data stage already happened: nothing to stall
            Reply::Data(d) if setup.is_in() => {
                let n = d.len().min(setup.length as usize);
                ep0.reply(&d[..n])
            }
            Reply::Data(_) => {
                ep0.stall(&setup);
                Ok(())
            }
            Reply::Ack if setup.is_in() => ep0.reply(&[]),
            Reply::Ack if setup.length == 0 => ep0.ack(),
            Reply::Ack if !data_read.get() => ep0.read_data(setup.length as usize).map(|_| ()),
            Reply::Ack => Ok(()),
        };
        if let Err(e) = done {
            self.base.log(&format!(
                "ep0: answering {} failed: {e}",
                super::state::request_name(setup.request)
            ));
        }
        work
    }

    fn work(self: &Arc<Self>, m: &mut Dfu, w: Work) {
        let mut log = |l: String| self.base.log(&l);
        match w {
            Work::Write {
                alt,
                offset,
                data,
                first,
            } => {
                let r = (|| {
                    let a = self
                        .alts
                        .get(alt as usize)
                        .ok_or_else(|| format!("no alt setting {alt}"))?;
                    if first {
                        self.base
                            .log(&format!("dfu: download into alt {alt} ({}) begins", a.name));
                        self.images.set(alt, 0).map_err(|e| e.to_string())?;
                    }
                    targets::write_bytes(&self.base.flash, a.lba * SECTOR + offset, &data)
                        .map_err(|e| e.to_string())?;
                    Ok(data.len() as u64)
                })();
                m.written(r, &mut log);
            }
            Work::Manifest { alt, len } => {
                let r = self.images.set(alt, len).map_err(|e| e.to_string());
                if r.is_ok() {
                    self.base.log(&format!(
                        "dfu: manifestation: alt {alt} ({}) holds an image of {len} bytes",
                        self.alts.get(alt as usize).map_or("?", |a| a.name)
                    ));
                }
                m.manifested(r, &mut log);
            }
            Work::Abandon { alt, len } => {
                self.base.log(&format!(
                    "dfu: download into alt {alt} aborted after {len} bytes"
                ));
                if let Err(e) = self.images.set(alt, len) {
                    self.base.log(&format!("dfu: {e}"));
                }
            }
            Work::Detach => {
                self.base.log("dfu: DETACH: re-enumerating in DFU mode");
                later(self, Duration::from_millis(50), Mode::Running, |b| {
                    b.dfu_mode().map(|()| Mode::Recovery)
                });
            }
        }
    }

    /// (Re-)enumerates in DFU mode. Caller holds `ops`.
    fn dfu_mode(&self) -> Result<(), String> {
        self.base.console.silence();
        self.base
            .enumerate(&self.dfu.gadget, &self.gadgets(), Mode::Recovery)
    }

    /// The bootloader starts the application from alt 0 (caller holds `ops`).
    fn boot(&self) -> Result<Mode, String> {
        self.base.unplug(&self.gadgets())?;
        self.base.set(Mode::Booting);
        let _ = self.base.flash.take_regions();
        if self.images.len(0) == 0 {
            let first = self.alts.first().map_or("?", |a| a.name);
            let reason = format!("alt setting 0 ({first}) holds no image");
            self.base.log(&format!("boot: {reason}"));
            self.base
                .console
                .print(bootlog::failure_to(&reason, "staying in DFU mode"), false);
            self.dfu_mode()?;
            return Ok(Mode::Recovery);
        }
        let lines: Vec<String> = self
            .images
            .take_fresh()
            .into_iter()
            .filter_map(|alt| {
                let a = self.alts.get(alt as usize)?;
                let len = self.images.len(alt);
                let sha = targets::sha256_bytes(&self.base.flash, a.lba * SECTOR, len)
                    .unwrap_or_else(|e| format!("<unreadable: {e}>"));
                Some(format!(
                    "vboard: region alt={alt} name={} bytes={len} sha256={sha}",
                    a.name
                ))
            })
            .collect();
        self.base
            .console
            .print(bootlog::boot_with(&self.base.name, "dfu", &lines), true);
        // The application runs and offers DFU's runtime interface.
        self.base
            .enumerate(&self.runtime.gadget, &self.gadgets(), Mode::Running)?;
        Ok(Mode::Running)
    }
}

impl Powered for DfuBoard {
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
            self.dfu_mode()?;
            return Ok(self.base.name_of(Mode::Recovery));
        }
        thread::sleep(Duration::from_millis(500));
        self.boot().map(|m| self.base.name_of(m))
    }

    fn power_off(&self) -> Result<&'static str, String> {
        self.base.off(&self.gadgets())
    }

    fn status(&self) -> serde_json::Value {
        let alts: Vec<serde_json::Value> = self
            .alts
            .iter()
            .enumerate()
            .map(|(k, a)| {
                serde_json::json!({"alt": k, "name": a.name, "lba": a.lba, "sectors": a.sectors, "image_bytes": self.images.len(k as u8)})
            })
            .collect();
        let udc = &self.dfu.gadget.udc;
        serde_json::json!({
            "name": self.base.name,
            "family": "dfu",
            "state": self.base.name_of(self.base.state()),
            "dfu": {"udc": udc, "port": host_port(udc), "bound": self.dfu.gadget.bound(), "runtime_bound": self.runtime.gadget.bound()},
            "console": {"udc": self.base.console.udc(), "port": self.base.console.port(), "bound": self.base.console.bound(), "tty": self.base.console.tty()},
            "flash": {"path": self.base.flash.path(), "bytes": self.base.flash.sectors() * SECTOR},
            "alts": alts,
        })
    }

    fn ready_line(&self) -> String {
        ReadyLine {
            name: &self.base.name,
            kind: "dfu",
            udc: &self.dfu.gadget.udc,
            console_udc: self.base.console.udc(),
            tty: &self.base.console.tty(),
            flash: self.base.flash.path(),
            bytes: self.base.flash.sectors() * SECTOR,
            family: Family::Dfu,
        }
        .to_string()
    }

    fn shutdown(&self) {
        self.base.console.silence();
        let _ = self.base.unplug(&self.gadgets());
        self.base.console.unbind();
    }

    fn ffs_dirs(&self) -> Vec<PathBuf> {
        vec![self.runtime.dir.clone(), self.dfu.dir.clone()]
    }
}
