//! What the fastboot and DFU boards share: the console, the flash, the state (off, the
//! flashing mode, booting, running), one lock for every state change (power commands,
//! the protocol's reboots and the shell's `reboot` never interleave), and the count of the
//! flashing device's unplugs (a transfer begun before one must not read the next
//! session's data; see `board/usb.rs` for the Rockchip board's version).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::board::{ABSENCE, ENUMERATE, lock, log};
use crate::console::port::ConsolePort;
use crate::flash::Flash;
use crate::gadget::Gadget;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Off,
    /// The flashing mode: fastboot, DFU.
    Recovery,
    Booting,
    Running,
}

pub struct Base {
    pub name: String,
    pub console: ConsolePort,
    pub flash: Flash,
    /// Held by every state change.
    pub ops: Mutex<()>,
    state: Mutex<Mode>,
    unplugs: AtomicU64,
    /// What `status` and the control socket call [`Mode::Recovery`].
    recovery: &'static str,
}

/// A board built on [`Base`].
pub trait HasBase: Send + Sync + 'static {
    fn base(&self) -> &Base;
}

impl Base {
    pub fn new(name: &str, console: ConsolePort, flash: Flash, recovery: &'static str) -> Base {
        Base {
            name: name.to_string(),
            console,
            flash,
            ops: Mutex::new(()),
            state: Mutex::new(Mode::Off),
            unplugs: AtomicU64::new(0),
            recovery,
        }
    }

    pub fn log(&self, line: &str) {
        log(&self.name, line);
    }

    pub fn state(&self) -> Mode {
        *lock(&self.state)
    }

    pub fn name_of(&self, m: Mode) -> &'static str {
        match m {
            Mode::Off => "off",
            Mode::Recovery => self.recovery,
            Mode::Booting => "booting",
            Mode::Running => "running",
        }
    }

    pub fn set(&self, m: Mode) {
        *lock(&self.state) = m;
        self.log(&format!("state {}", self.name_of(m)));
    }

    /// How many times a flashing-device gadget left the bus so far.
    pub fn unplugs(&self) -> u64 {
        self.unplugs.load(Ordering::SeqCst)
    }

    /// Takes every bound gadget of `all` off the bus; true if one was.
    pub fn unplug(&self, all: &[&Gadget]) -> Result<bool, String> {
        let mut was = false;
        for g in all {
            if g.bound() {
                self.unplugs.fetch_add(1, Ordering::SeqCst);
                g.unbind().map_err(|e| format!("unbind: {e}"))?;
                was = true;
            }
        }
        Ok(was)
    }

    /// Takes `all` off the bus (if on it), binds `target` and waits until the host has
    /// configured it; then the state is `then`. Caller holds `ops`.
    pub fn enumerate(&self, target: &Gadget, all: &[&Gadget], then: Mode) -> Result<(), String> {
        if self.unplug(all)? {
            thread::sleep(ABSENCE);
        }
        target.bind().map_err(|e| format!("bind: {e}"))?;
        if !target.wait_configured(ENUMERATE, None) {
            return Err(format!(
                "the device on {} was not configured by the host in {} s",
                target.udc,
                ENUMERATE.as_secs()
            ));
        }
        self.set(then);
        Ok(())
    }

    /// Power off: the flashing device leaves the bus, the console goes quiet (its adapter
    /// stays, as board.rs explains).
    pub fn off(&self, all: &[&Gadget]) -> Result<&'static str, String> {
        let _g = lock(&self.ops);
        self.console.silence();
        self.unplug(all)?;
        self.set(Mode::Off);
        Ok("off")
    }
}

/// Runs a state change off the USB threads (they must return to their endpoints first),
/// only if the board is still in `from` by then: a board switched off in between is not
/// brought back by a stale reboot.
pub fn later<B: HasBase>(
    board: &Arc<B>,
    delay: Duration,
    from: Mode,
    f: impl FnOnce(&B) -> Result<Mode, String> + Send + 'static,
) {
    let b = board.clone();
    thread::spawn(move || {
        thread::sleep(delay);
        let base = b.base();
        let _g = lock(&base.ops);
        let now = base.state();
        if now != from {
            base.log(&format!(
                "a pending change from {} dropped: the board is {} now",
                base.name_of(from),
                base.name_of(now)
            ));
            return;
        }
        if let Err(e) = f(&b) {
            base.log(&e);
        }
    });
}
