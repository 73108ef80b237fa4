//! A board's console adapter as one piece: the CDC-ACM gadget on its own UDC, the board side
//! `/dev/ttyGS<N>` and the thread that runs it ([`super::run`]). The fastboot and DFU boards
//! use this; the Rockchip board (`board.rs`) holds the same parts itself.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread;
use std::time::Duration;

use super::{Command, open_tty, tty_of};
use crate::board::{ENUMERATE, lock, log};
use crate::gadget::{Gadget, Identity, host_port};

pub struct ConsolePort {
    gadget: Gadget,
    tty: PathBuf,
    tx: Mutex<Sender<Command>>,
}

/// The console thread's parts, until the board exists to hear the shell's `reboot`.
pub struct Pending {
    board: String,
    tty: PathBuf,
    file: File,
    rx: Receiver<Command>,
}

impl ConsolePort {
    /// Creates `gatecmd-BOARD-console` (1d6b:0104, function `acm.BOARD`) on `udc`, unbound,
    /// and opens its board side.
    pub fn create(board: &str, udc: &str) -> Result<(ConsolePort, Pending), String> {
        let serial = format!("vboard-{board}-console");
        let gadget = Gadget::create(
            &format!("gatecmd-{board}-console"),
            &Identity {
                vid: 0x1d6b,
                pid: 0x0104,
                manufacturer: "gatecmd",
                product: "gatecmd-vboard console",
                serial: &serial,
            },
            &format!("acm.{board}"),
            udc,
        )
        .map_err(|e| format!("{board}: console gadget (is usb_f_acm loaded?): {e}"))?;
        let tty = tty_of(&gadget.function_dir(&format!("acm.{board}")))
            .map_err(|e| format!("{board}: console tty: {e}"))?;
        let file = open_tty(&tty).map_err(|e| format!("{board}: {}: {e}", tty.display()))?;
        let (tx, rx) = channel();
        Ok((
            ConsolePort {
                gadget,
                tty: tty.clone(),
                tx: Mutex::new(tx),
            },
            Pending {
                board: board.to_string(),
                tty,
                file,
                rx,
            },
        ))
    }

    pub fn tty(&self) -> PathBuf {
        self.tty.clone()
    }

    pub fn udc(&self) -> &str {
        &self.gadget.udc
    }

    pub fn port(&self) -> Option<String> {
        host_port(&self.gadget.udc)
    }

    pub fn bound(&self) -> bool {
        self.gadget.bound()
    }

    /// Binds the adapter (a no-op when bound) and waits until the host has its tty.
    pub fn bind(&self) -> Result<(), String> {
        self.gadget
            .bind()
            .map_err(|e| format!("console bind: {e}"))?;
        if !self.gadget.wait_configured(ENUMERATE, Some("tty")) {
            return Err(format!(
                "console on {} was not configured by the host in {} s",
                self.gadget.udc,
                ENUMERATE.as_secs()
            ));
        }
        Ok(())
    }

    pub fn unbind(&self) {
        let _ = self.gadget.unbind();
    }

    pub fn silence(&self) {
        let _ = lock(&self.tx).send(Command::Silence);
    }

    /// Prints `lines` 20 ms apart, then a login prompt or silence; returns when they are out.
    pub fn print(&self, lines: Vec<String>, then_login: bool) {
        let (done_tx, done_rx) = channel();
        let _ = lock(&self.tx).send(Command::Boot {
            lines,
            gap: Duration::from_millis(20),
            then_login,
            done: Some(done_tx),
        });
        let _ = done_rx.recv_timeout(Duration::from_secs(30));
    }
}

impl Pending {
    /// Starts the console thread; `on_reboot` runs (on a thread of its own) when the shell
    /// says `reboot`.
    pub fn start(self, on_reboot: impl Fn() + Send + Sync + 'static) {
        let on_reboot = std::sync::Arc::new(on_reboot);
        let Pending {
            board,
            tty,
            file,
            rx,
        } = self;
        thread::spawn(move || {
            let name = board.clone();
            super::run(
                board,
                tty,
                file,
                rx,
                move |_action| {
                    let f = on_reboot.clone();
                    thread::spawn(move || f());
                },
                move |l| log(&name, &l),
            )
        });
    }
}
