//! The board's USB threads: ep0 (the mask ROM's download, every other control request
//! stalled) and the bulk pipe (one CBW at a time), one pair per rockusb gadget; and the
//! deferred state changes they ask for (they must return to their endpoints first).

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::{Board, State, lock, log};
use crate::ffs::{BulkFiles, Ep0, Event};
use crate::rockusb::commands::{self, After};
use crate::rockusb::maskrom::{self, Download, Step};
use crate::rockusb::{Mode, cbw};

impl Board {
    /// Runs a state change off the USB threads (they must return to their endpoints first).
    /// It runs only if the board is still in `from` by then: a board switched off (or
    /// re-enumerated by a power command) in between is not brought back by a stale `db`/`rd`.
    fn later(
        self: &Arc<Self>,
        delay: Duration,
        from: State,
        f: impl FnOnce(&Board) -> Result<State, String> + Send + 'static,
    ) {
        let b = self.clone();
        thread::spawn(move || {
            thread::sleep(delay);
            let _g = lock(&b.ops);
            let now = b.state();
            if now != from {
                log(
                    &b.name,
                    &format!(
                        "a pending change from {} dropped: the board is {} now",
                        from.as_str(),
                        now.as_str()
                    ),
                );
                return;
            }
            if let Err(e) = f(&b) {
                log(&b.name, &e);
            }
        });
    }

    pub(super) fn serve_ep0(self: Arc<Self>, mode: Mode, mut ep0: Ep0) {
        let mut download = Download::default();
        // The last 0x471 image was the vboard DDR blob (a usbplug runs from DDR).
        let mut ddr = false;
        loop {
            let ev = match ep0.event() {
                Ok(ev) => ev,
                Err(e) => {
                    log(&self.name, &format!("ep0: {e}"));
                    thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            let Event::Setup(setup) = ev else {
                continue;
            };
            let rom_request = setup.request_type == maskrom::REQUEST_TYPE
                && setup.request == maskrom::REQUEST
                && matches!(setup.index, 0x471 | 0x472);
            if !rom_request {
                log(
                    &self.name,
                    &format!(
                        "ep0: control request type 0x{:02x} request 0x{:02x} wIndex 0x{:04x} stalled (expected the mask ROM's 0x40/0x0C with wIndex 0x471 or 0x472)",
                        setup.request_type, setup.request, setup.index
                    ),
                );
                ep0.stall(&setup);
                continue;
            }
            if mode != Mode::MaskRom {
                log(
                    &self.name,
                    &format!(
                        "ep0: mask ROM request 0x{:03x} in Loader mode stalled (only a board in MaskROM takes `db`)",
                        setup.index,
                    ),
                );
                ep0.stall(&setup);
                continue;
            }
            let data = match ep0.read_data(setup.length as usize) {
                Ok(d) => d,
                Err(e) => {
                    log(
                        &self.name,
                        &format!("ep0: data stage of 0x{:03x}: {e}", setup.index),
                    );
                    continue;
                }
            };
            match download.push(setup.index, &data) {
                Step::More => {}
                Step::Restarted { dropped } => log(
                    &self.name,
                    &format!(
                        "maskrom: 0x{:03x} began before the previous image ended: {dropped} bytes dropped",
                        setup.index
                    ),
                ),
                Step::Done(Err(e)) => log(&self.name, &format!("maskrom: {e}; staying in MaskROM")),
                Step::Done(Ok(img)) if img.index == 0x471 => {
                    ddr = crate::blobs::is_ddr(&img.data);
                    log(
                        &self.name,
                        &format!(
                            "maskrom: 0x471 image of {} bytes, CRC good: DDR initialised",
                            img.data.len()
                        ),
                    );
                }
                Step::Done(Ok(img)) => {
                    if maskrom::is_usbplug(&img.data) {
                        let sound =
                            std::mem::take(&mut ddr) && crate::blobs::is_sound_usbplug(&img.data);
                        self.flash.set_usbplug_reads(sound);
                        log(
                            &self.name,
                            &format!(
                                "maskrom: 0x472 image of {} bytes, CRC good: starting the loader{}",
                                img.data.len(),
                                if sound {
                                    " (the DDR + usbplug pair: reads sound everywhere)"
                                } else {
                                    ""
                                }
                            ),
                        );
                        // After the status stage has gone back to the host.
                        self.later(Duration::from_millis(100), State::MaskRom, |b| {
                            b.enumerate(Mode::Loader).map(|_| State::Loader)
                        });
                    } else {
                        log(
                            &self.name,
                            "maskrom: the 0x472 image is not a vboard usbplug (no VBOARD-USBPLUG marker after RC4): staying in MaskROM",
                        );
                    }
                }
            }
        }
    }

    pub(super) fn serve_bulk(self: Arc<Self>, mode: Mode, mut bulk: BulkFiles) {
        use crate::rockusb::commands::Bulk;
        let name = self.name.clone();
        let mut junk = 0usize;
        loop {
            let got = match bulk.read(cbw::CBW_LEN) {
                Ok(b) => b,
                Err(_) => {
                    // Not enabled (unbound, or not configured by the host yet; see BulkFiles): try
                    // again shortly.
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
            };
            let c = match cbw::Cbw::parse(&got) {
                Ok(c) => c,
                Err(e) => {
                    if junk == 0 {
                        log(&name, &format!("rockusb: {e}; skipping to the next CBW"));
                    }
                    junk += got.len();
                    continue;
                }
            };
            if junk > 0 {
                log(
                    &name,
                    &format!("rockusb: skipped {junk} bytes that were not CBWs"),
                );
                junk = 0;
            }
            if mode == Mode::Loader
                && matches!(c.opcode, cbw::READ_LBA | cbw::WRITE_LBA)
                && self
                    .stall_above
                    .is_some_and(|max| c.transfer_len as u64 > max)
            {
                // As a loader that cannot take a transfer this large: it reads no data and
                // answers nothing more until it is powered off (--stall-above).
                log(
                    &name,
                    &format!(
                        "rockusb: {} of {} bytes is above --stall-above: the Loader stalls until a power cycle",
                        cbw::opcode_name(c.opcode),
                        c.transfer_len
                    ),
                );
                let since = self.unplugs();
                while self.unplugs() == since {
                    thread::sleep(Duration::from_millis(50));
                }
                continue;
            }
            let mut say = |l: String| log(&name, &l);
            let mut pipe = Plugged {
                bulk: &mut bulk,
                board: &self,
                since: self.unplugs(),
            };
            match commands::serve(&c, mode, &self.flash, &mut pipe, &mut say) {
                Ok(After::Nothing) => {}
                Ok(After::PowerOff) => {
                    self.later(Duration::from_millis(50), State::Loader, |b| {
                        // As `power_off`, under the `ops` lock `later` already holds.
                        b.say(crate::console::Command::Silence);
                        b.unplug_rockusb()?;
                        b.set(State::Off);
                        Ok(State::Off)
                    })
                }
                Ok(After::Reset(3)) => self.later(Duration::from_millis(50), State::Loader, |b| {
                    b.enumerate(Mode::MaskRom).map(|_| State::MaskRom)
                }),
                Ok(After::Reset(_)) => {
                    self.later(Duration::from_millis(50), State::Loader, |b| b.boot())
                }
                Ok(After::ErasedToEnd) => {
                    log(
                        &name,
                        "rockusb: whole flash erased: resetting into MaskROM (rkdeveloptool's ef waits for it)",
                    );
                    self.later(Duration::from_millis(50), State::Loader, |b| {
                        b.enumerate(Mode::MaskRom).map(|_| State::MaskRom)
                    })
                }
                Err(e) => log(
                    &name,
                    &format!("rockusb: {} aborted: {e}", cbw::opcode_name(c.opcode)),
                ),
            }
        }
    }
}

/// The bulk pipe for one command: fails once the gadget was unplugged after the command
/// began. A command that was not in a transfer when the board went off (its flash write
/// waiting out `--write-speed`) would otherwise read the next session's CBW as its data.
struct Plugged<'a> {
    bulk: &'a mut BulkFiles,
    board: &'a Board,
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

impl crate::rockusb::commands::Bulk for Plugged<'_> {
    fn read(&mut self, max: usize) -> std::io::Result<Vec<u8>> {
        self.check()?;
        self.bulk.read(max)
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.check()?;
        self.bulk.write(data)
    }
}
