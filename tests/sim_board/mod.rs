//! A board played on the master side of a pseudo-terminal (the server opens the slave):
//! a login with a password, a shell that echoes what it receives and shows a coloured
//! prompt, commands with exit statuses (one prints the prompt's text, one never ends
//! until Ctrl-C, one takes a while and sees its type-ahead echoed like a cooked tty),
//! U-Boot with its "Hit any key to stop autoboot" countdown, and a power switch driven
//! by a file the bench's power command appends `on`/`off` to. Output is paced at the
//! configured baud rate (10 bits a byte), since a pty itself has no line rate.
#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const PROMPT: &str = "\x1b[1;32mroot@sim\x1b[0m:\x1b[1;34m~\x1b[0m# ";
pub const LOGIN: &str = "sim login: ";
pub const PASSWORD: &str = "secret";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Login,
    Shell,
    /// Powered off: says nothing, answers nothing.
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Off,
    Login,
    Password,
    Shell,
    Uboot,
    /// `hang`: runs until Ctrl-C.
    Hang,
}

struct Sim {
    out: File,
    state: State,
    line: Vec<u8>,
    /// Lines received while a command ran, to run after it.
    queued: Vec<Vec<u8>>,
    status: i32,
    after_cr: bool,
    baud: u32,
    password: bool,
    /// `slow` runs: what follows its line is type-ahead (echoed at once, run after).
    slow: bool,
}

/// Makes the pty, links its slave at `link`, and plays the board until the test ends.
/// `power_log` is where the power command appends `on`/`off`.
pub fn plug(link: &Path, start: Start, baud: u32, power_log: Option<PathBuf>) {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave =
        std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).expect("slave path");
    std::os::unix::fs::symlink(slave, link).expect("symlink");
    // Keep the slave open: the board never "hangs up" while the server reopens it.
    let keep: OwnedFd = pty.slave;
    let master = File::from(pty.master);
    let mut reader = master.try_clone().expect("clone master");
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut sim = Sim {
        out: master,
        state: match start {
            Start::Login => State::Login,
            Start::Shell => State::Shell,
            Start::Off => State::Off,
        },
        line: vec![],
        queued: vec![],
        status: 0,
        after_cr: false,
        baud,
        password: true,
        slow: false,
    };
    std::thread::spawn(move || {
        let _keep = keep;
        let mut power_seen = 0usize;
        loop {
            match rx.recv_timeout(Duration::from_millis(10)) {
                Ok(bytes) => sim.feed(&bytes),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            if let Some(p) = &power_log {
                let text = std::fs::read_to_string(p).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                for l in &lines[power_seen.min(lines.len())..] {
                    sim.power(l.trim(), &rx);
                }
                power_seen = lines.len();
            }
        }
    });
}

impl Sim {
    fn say(&mut self, s: &str) {
        // The line rate: 10 bits a byte.
        let pace = Duration::from_secs_f64(s.len() as f64 * 10.0 / self.baud as f64);
        let _ = self.out.write_all(s.as_bytes());
        std::thread::sleep(pace);
    }

    fn prompt(&mut self) {
        match self.state {
            State::Login => self.say(LOGIN),
            State::Password => self.say("Password: "),
            State::Shell => self.say(PROMPT),
            State::Uboot => self.say("=> "),
            State::Off | State::Hang => {}
        }
    }

    fn power(&mut self, what: &str, rx: &mpsc::Receiver<Vec<u8>>) {
        match what {
            "off" => self.state = State::Off,
            "on" => {
                self.say("\r\nU-Boot 2024.01-sim (Dec 01 2026)\r\nDRAM:  8 GiB\r\n");
                self.say("Hit any key to stop autoboot:  2 ");
                let until = Instant::now() + Duration::from_millis(1500);
                while let Some(left) = until.checked_duration_since(Instant::now()) {
                    if rx.recv_timeout(left).is_ok() {
                        self.say("\x08\x08\x080 \r\n");
                        self.state = State::Uboot;
                        self.prompt();
                        return;
                    }
                }
                self.boot_linux();
            }
            _ => {}
        }
    }

    fn boot_linux(&mut self) {
        self.say("\r\nStarting kernel ...\r\n\r\n[    0.000000] Booting Linux\r\n");
        self.say("\x1b[32m[  OK  ]\x1b[0m Reached target Login Prompts.\r\n\r\nDebian GNU/Linux 12 sim ttyS2\r\n\r\n");
        self.state = State::Login;
        self.prompt();
    }

    fn feed(&mut self, bytes: &[u8]) {
        for (i, &b) in bytes.iter().enumerate() {
            if self.state == State::Off {
                return;
            }
            if self.state == State::Hang {
                if b == 0x03 {
                    // A tty flushes its input queue on an interrupt.
                    self.queued.clear();
                    self.line.clear();
                    self.status = 130;
                    self.state = State::Shell;
                    self.say("^C\r\n");
                    self.prompt();
                    continue;
                }
                // Cooked-tty type-ahead: echoed at once, run after the command.
                self.type_ahead(b);
                continue;
            }
            let was_cr = std::mem::replace(&mut self.after_cr, b == b'\r');
            match b {
                b'\n' if was_cr => {}
                b'\r' | b'\n' => {
                    if self.state != State::Password {
                        self.say("\r\n");
                    }
                    let line =
                        String::from_utf8_lossy(&std::mem::take(&mut self.line)).into_owned();
                    self.enter(line.trim());
                    if self.slow {
                        for &rest in &bytes[i + 1..] {
                            self.type_ahead(rest);
                        }
                        self.slow = false;
                        std::thread::sleep(Duration::from_millis(300));
                        self.say("second\r\n");
                        self.status = 0;
                        // What was typed meanwhile runs now, without a second echo.
                        for l in std::mem::take(&mut self.queued) {
                            self.prompt();
                            let l = String::from_utf8_lossy(&l).into_owned();
                            self.run(l.trim());
                        }
                        self.prompt();
                        return;
                    }
                    if self.state == State::Hang {
                        for &rest in &bytes[i + 1..] {
                            if rest == 0x03 {
                                self.feed(&[0x03]);
                            } else {
                                self.type_ahead(rest);
                            }
                        }
                        return;
                    }
                }
                0x03 => {
                    self.say("^C\r\n");
                    self.line.clear();
                    self.prompt();
                }
                0x20..=0x7e => {
                    self.line.push(b);
                    if self.state != State::Password {
                        self.say(&(b as char).to_string());
                    }
                }
                _ => {}
            }
        }
    }

    fn type_ahead(&mut self, b: u8) {
        if b == b'\r' || b == b'\n' {
            self.say("\r\n");
            self.queued.push(std::mem::take(&mut self.line));
        } else if (0x20..=0x7e).contains(&b) {
            self.line.push(b);
            self.say(&(b as char).to_string());
        }
    }

    fn enter(&mut self, line: &str) {
        match self.state {
            State::Login => {
                if line == "root" {
                    self.state = if self.password {
                        State::Password
                    } else {
                        State::Shell
                    };
                } else if !line.is_empty() {
                    self.say("\r\nLogin incorrect\r\n");
                }
                self.prompt();
            }
            State::Password => {
                if line == PASSWORD {
                    self.say("\r\nLinux sim 6.1.0-sim aarch64\r\n\r\n");
                    self.state = State::Shell;
                } else {
                    self.say("\r\nLogin incorrect\r\n");
                    self.state = State::Login;
                }
                self.prompt();
            }
            State::Shell => {
                self.run(line);
                if self.state == State::Shell && !self.slow {
                    self.prompt();
                }
            }
            State::Uboot => {
                for part in line.split(';') {
                    self.run_uboot(part.trim());
                }
                if self.state == State::Uboot {
                    self.prompt();
                }
            }
            State::Off | State::Hang => {}
        }
    }

    fn run(&mut self, line: &str) {
        let words = split_words(line, self.status);
        let Some((cmd, args)) = words.split_first() else {
            return;
        };
        let (text, status) = match cmd.as_str() {
            "echo" => (format!("{}\n", args.join(" ")), 0),
            "true" => (String::new(), 0),
            "false" => (String::new(), 1),
            "status" => (
                String::new(),
                args.first().and_then(|a| a.parse().ok()).unwrap_or(2),
            ),
            "fakeprompt" => ("root@sim:~# \nstill output\n".to_string(), 0),
            "colours" => ("\x1b[31mred\x1b[0m text\n".to_string(), 0),
            "slow" => {
                self.say("first\r\n");
                self.slow = true;
                return;
            }
            "hang" => {
                self.state = State::Hang;
                self.say("hanging...\r\n");
                return;
            }
            _ => (format!("-sh: {cmd}: command not found\n"), 127),
        };
        self.status = status;
        self.say(&text.replace('\n', "\r\n"));
    }

    fn run_uboot(&mut self, cmd: &str) {
        let words = split_words(cmd, self.status);
        let Some((c, args)) = words.split_first() else {
            return;
        };
        let (text, status) = match c.as_str() {
            "echo" => (format!("{}\n", args.join(" ")), 0),
            "version" => ("U-Boot 2024.01-sim (Dec 01 2026)\n".to_string(), 0),
            "false" => (String::new(), 1),
            "boot" => {
                self.boot_linux();
                return;
            }
            other => (format!("Unknown command '{other}' - try 'help'\n"), 1),
        };
        self.status = status;
        self.say(&text.replace('\n', "\r\n"));
    }
}

/// Blanks split words; '…' and "…" quote; `$?` (outside '…') is the last status.
fn split_words(line: &str, status: i32) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut has = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, ' ') => {
                if has {
                    words.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            (None, '\'' | '"') => {
                quote = Some(c);
                has = true;
            }
            (Some(q), c) if c == q => quote = None,
            (q, '$') if q != Some('\'') && chars.peek() == Some(&'?') => {
                chars.next();
                cur.push_str(&status.to_string());
                has = true;
            }
            (_, c) => {
                cur.push(c);
                has = true;
            }
        }
    }
    if has {
        words.push(cur);
    }
    words
}

/// Debian's default coloured prompt (`/etc/skel/.bashrc` with `force_color_prompt`): the
/// window title (OSC 0), then `user@host:dir$ ` in colours.
pub const BASH_PS1: &str =
    r"\[\e]0;\u@\h: \w\a\]\[\033[01;32m\]\u@\h\[\033[00m\]:\[\033[01;34m\]\w\[\033[00m\]\$ ";

/// An ordinary interactive bash as a board: Debian's bash with its line editor, bracketed
/// paste on and a coloured prompt, on a pseudo-terminal of its own (its controlling
/// terminal). The server opens `link`, a second pty joined to bash's by a relay that
/// paces each direction at `baud` (10 bits a byte), as a UART between two machines
/// would. Lives until the test process ends; the relay threads end with it.
pub fn plug_bash(link: &Path, baud: u32) {
    drop(plug_bash_with_line(link, baud));
}

/// [`plug_bash`], and a writer onto the wire beside bash: what a test writes there reaches
/// the server's console as if the board printed it (a kernel message in the middle of a
/// command, a line a plan's `fail_on` matches), while bash's own output keeps flowing.
pub fn plug_bash_with_line(link: &Path, baud: u32) -> File {
    use std::os::unix::process::CommandExt;
    let board = nix::pty::openpty(None, None).expect("openpty (board)");
    let wire = nix::pty::openpty(None, None).expect("openpty (wire)");
    // A UART does not echo: until the server opens its end (and sets it raw itself), the
    // wire's tty must not send bash's output back to bash as typed input.
    let mut raw = nix::sys::termios::tcgetattr(&wire.slave).expect("tcgetattr");
    nix::sys::termios::cfmakeraw(&mut raw);
    nix::sys::termios::tcsetattr(&wire.slave, nix::sys::termios::SetArg::TCSANOW, &raw)
        .expect("tcsetattr");
    let wire_slave = std::fs::read_link(format!("/proc/self/fd/{}", wire.slave.as_raw_fd()))
        .expect("slave path");
    std::os::unix::fs::symlink(wire_slave, link).expect("symlink");
    let keep: OwnedFd = wire.slave;
    let slave = File::from(board.slave);
    let home = std::env::temp_dir();
    let mut cmd = std::process::Command::new("/bin/bash");
    cmd.args(["--norc", "--noprofile", "-i"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TERM", "xterm-256color")
        .env("HOME", &home)
        .env("PS1", BASH_PS1)
        .env("INPUTRC", "/dev/null")
        .current_dir(&home)
        .stdin(slave.try_clone().expect("stdin"))
        .stdout(slave.try_clone().expect("stdout"))
        .stderr(slave);
    // SAFETY: between fork and exec only async-signal-safe calls: a new session, and the
    // pty (fd 0) as its controlling terminal, as getty gives a login shell.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("bash");
    let board_master = File::from(board.master);
    let wire_master = File::from(wire.master);
    let line = wire_master.try_clone().expect("clone");
    relay(
        board_master.try_clone().expect("clone"),
        wire_master.try_clone().expect("clone"),
        baud,
    );
    relay(wire_master, board_master, baud);
    std::thread::spawn(move || {
        let _keep = keep;
        let mut child = child;
        let _ = child.wait();
    });
    line
}

/// Copies `from` to `to` at most `baud / 10` bytes a second.
fn relay(mut from: File, mut to: File, baud: u32) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_secs_f64(n as f64 * 10.0 / baud as f64));
        }
    });
}
