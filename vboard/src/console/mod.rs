//! The board's serial console: the board side of its CDC-ACM gadget (`/dev/ttyGS<N>`, raw),
//! driven by one thread that prints boot logs and runs the login and shell.

pub mod bootlog;
pub mod port;
pub mod shell;

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use nix::sys::termios;

use shell::{Action, Shell};

/// What the board asks of its console.
pub enum Command {
    /// Print these lines (`\r\n` added), `gap` apart, then offer a login prompt or go quiet.
    Boot {
        lines: Vec<String>,
        gap: Duration,
        then_login: bool,
        done: Option<Sender<()>>,
    },
    /// Power off, MaskROM, Loader: nothing runs that prints or reads.
    Silence,
}

/// Opens the board side raw (no echo, no `\n` → `\r\n`, bytes as they come).
pub fn open_tty(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)?;
    let mut t = termios::tcgetattr(f.as_fd()).map_err(io::Error::from)?;
    termios::cfmakeraw(&mut t);
    termios::tcsetattr(f.as_fd(), termios::SetArg::TCSANOW, &t).map_err(io::Error::from)?;
    Ok(f)
}

/// Something to hold while the tty is closed: writes vanish, reads see end of file.
fn placeholder() -> File {
    File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap_or_else(|_| {
            // /dev/null always exists where configfs gadgets do; a closed pipe would do too.
            let (r, _w) = std::io::pipe().expect("a pipe");
            File::from(std::os::fd::OwnedFd::from(r))
        })
}

/// The tty of an `acm.NAME` function: `/dev/ttyGS<port_num>`.
pub fn tty_of(function_dir: &Path) -> io::Result<PathBuf> {
    let n = std::fs::read_to_string(function_dir.join("port_num"))?;
    Ok(PathBuf::from(format!("/dev/ttyGS{}", n.trim())))
}

/// Runs the console until `rx` closes. `on_action` hears `reboot` from the shell.
/// The tty is reopened for every boot and after a read error: unbinding the gadget hangs
/// up the board side, and a hung-up descriptor answers EIO for good (seen in the VM after
/// power off → on).
pub fn run(
    board: String,
    path: PathBuf,
    mut tty: File,
    rx: Receiver<Command>,
    on_action: impl Fn(Action),
    log: impl Fn(String),
) {
    let mut stale = false;
    let mut shell = Shell::new(&board);
    let mut active = false;
    let mut buf = [0u8; 1024];
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Command::Silence) => active = false,
            Ok(Command::Boot {
                lines,
                gap,
                then_login,
                done,
            }) => {
                active = false;
                // Close first: a second open of a hung-up tty shares its EIO state.
                drop(std::mem::replace(&mut tty, placeholder()));
                match open_tty(&path) {
                    Ok(f) => {
                        tty = f;
                        stale = false;
                    }
                    Err(e) => {
                        log(format!("console: reopening {}: {e}", path.display()));
                        stale = true;
                    }
                }
                // Drop what was typed at a board that was not listening.
                while matches!(tty.read(&mut buf), Ok(n) if n > 0) {}
                for l in lines {
                    put(&mut tty, format!("{l}\r\n").as_bytes(), &log);
                    std::thread::sleep(gap);
                }
                if then_login {
                    let p = shell.login_prompt();
                    put(&mut tty, &p, &log);
                    active = true;
                }
                if let Some(d) = done {
                    let _ = d.send(());
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if stale {
            drop(std::mem::replace(&mut tty, placeholder()));
            match open_tty(&path) {
                Ok(f) => {
                    tty = f;
                    stale = false;
                }
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
            }
        }
        loop {
            match tty.read(&mut buf) {
                Ok(0) => break,
                Ok(n) if active => {
                    let (out, action) = shell.feed(&buf[..n]);
                    put(&mut tty, &out, &log);
                    if let Some(a) = action {
                        active = false;
                        on_action(a);
                    }
                }
                Ok(_) => {} // a board that is off or in MaskROM reads nothing
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // EIO: hung up by an unbind; a new descriptor works once rebound.
                    stale = true;
                    std::thread::sleep(Duration::from_millis(100));
                    break;
                }
            }
        }
    }
}

/// Writes all of `data`, waiting up to 2 s for room (the gadget buffers 8 KiB while the
/// host is not reading); what does not fit by then is dropped and logged, so a console
/// nobody reads never stalls the board.
fn put(tty: &mut File, mut data: &[u8], log: &impl Fn(String)) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !data.is_empty() {
        match tty.write(data) {
            Ok(n) => data = &data[n..],
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                if Instant::now() > deadline {
                    log(format!(
                        "console: nobody reads the console: {} bytes dropped",
                        data.len()
                    ));
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                log(format!(
                    "console: write failed ({e}): {} bytes dropped",
                    data.len()
                ));
                return;
            }
        }
    }
}
