//! The soak's labgrid part (issue 29): gatecmd exports one board (`labbed`: a pty console
//! and the relay as its power) to a real labgrid coordinator (`.venv/bin/labgrid-coordinator`,
//! `make soak` creates the venv), a person's place holds it under the labgrid user `alice`,
//! and an attacker who is not that user (this process's own account) tries the bridge's
//! ports until the deadline, each loop bounded:
//!
//! - the console port: connect, send a line, read what comes, again and again (every
//!   connection must be refused and nothing typed may reach the board);
//! - the power port: `PUT 0` (must be refused; the relay must not run for it);
//! - 2,100 idle keep-alive connections to the power port, re-opened as the server closes
//!   them (gatecmd's descriptors must stay bounded).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The board the coordinator sees; on a port no honest session uses.
pub const BOARD: &str = "labbed";
pub const USB_PORT: &str = "1-41";
/// The labgrid user the person's place is acquired under: not this process's account.
pub const PERSON: &str = "alice";
const EXPORTER: &str = "soak";
const PLACE: &str = "lp";

/// The coordinator and the board's console, while the soak runs.
pub struct Lab {
    coordinator: Child,
    pub address: String,
    venv: PathBuf,
    /// The board's side of its console (the pty's master); the server opens the slave.
    pub board: std::fs::File,
    pub tty: PathBuf,
    _slave: std::os::fd::OwnedFd,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.coordinator.kill();
        let _ = self.coordinator.wait();
    }
}

/// Starts the coordinator when the project's venv has labgrid; `Err` says why not.
pub fn start(repo: &Path, dir: &Path) -> Result<Lab, String> {
    let venv = repo.join(".venv/bin");
    let exe = venv.join("labgrid-coordinator");
    if !exe.exists() {
        return Err(format!(
            "{} is missing (scripts/venv.sh installs labgrid)",
            exe.display()
        ));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let address = format!("127.0.0.1:{port}");
    let log = std::fs::File::create(dir.join("coordinator.log")).map_err(|e| e.to_string())?;
    let coordinator = Command::new(&exe)
        .args(["-l", &address])
        .current_dir(dir)
        .env_remove("LD_PRELOAD")
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&address).is_err() {
        if Instant::now() > deadline {
            return Err("the coordinator did not listen within 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pty = nix::pty::openpty(None, None).map_err(|e| e.to_string())?;
    let tty = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&pty.slave)
    ))
    .map_err(|e| e.to_string())?;
    Ok(Lab {
        coordinator,
        address,
        venv,
        board: std::fs::File::from(pty.master),
        tty,
        _slave: pty.slave,
    })
}

impl Lab {
    /// The `boards:` entry and the `labgrid:` section for the soak's config.
    pub fn yaml(&self) -> (String, String) {
        (
            format!(
                "  - name: {BOARD}\n    usb: \"{USB_PORT}\"\n    console: {{path: {}, baud: 115200}}\n    \
                 power: {{on: {{command: relay, args: \"on 1\"}}, off: {{command: relay, args: \"off 1\"}}}}\n",
                self.tty.display()
            ),
            format!(
                // The person's account is `nobody`: the attacker runs as this process's own
                // account, which no person lists (issue 37: a declared name opens nothing).
                "labgrid:\n  coordinator: \"{}\"\n  name: {EXPORTER}\n  proxy_required: false\n  \
                 people: [{{name: {PERSON}, accounts: [nobody]}}]\n",
                self.address
            ),
        )
    }

    fn client(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(self.venv.join("labgrid-client"))
            .args(["-x", &self.address, "-p", PLACE])
            .args(args)
            .env_remove("LD_PRELOAD")
            .env("LG_HOSTNAME", "desk")
            .env("LG_USERNAME", PERSON)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "labgrid-client {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The person's place, acquired; returns the console port and the power port.
    pub fn acquire(&self) -> Result<(u16, u16), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let resources = loop {
            let out = Command::new(self.venv.join("labgrid-client"))
                .args(["-x", &self.address, "-v", "resources"])
                .env_remove("LD_PRELOAD")
                .output()
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if text.contains("NetworkPowerPort") {
                break text;
            }
            if Instant::now() > deadline {
                return Err("gatecmd's resources never reached the coordinator".into());
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let number_after = |anchor: &str, key: &str| -> Option<u16> {
            let at = resources.find(anchor)?;
            let rest = &resources[at..];
            let k = rest.find(key)? + key.len();
            rest[k..]
                .trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        };
        let console = number_after("'cls': 'NetworkSerialPort'", "'port':")
            .ok_or("no console port in the resources")?;
        // `'host': 'http://127.0.0.1:PORT/power/{index}/value'`
        let power = resources
            .find("/power/{index}/value")
            .and_then(|at| resources[..at].rsplit(':').next()?.parse().ok())
            .ok_or("no power port in the resources")?;
        self.client(&["create"])?;
        self.client(&["add-match", &format!("{EXPORTER}/{BOARD}/*")])?;
        self.client(&["acquire"])?;
        Ok((console, power))
    }
}

/// What the attacker managed.
#[derive(Debug, Default)]
pub struct Attack {
    pub console_tries: u64,
    pub console_refused: u64,
    /// Console bytes the attacker received that were not a refusal line.
    pub console_bytes_leaked: u64,
    pub power_tries: u64,
    pub power_refused: u64,
    pub power_switched: u64,
    pub idle_opened: u64,
    pub idle_most_open: usize,
}

/// Hammers the console and power ports until `deadline` (and at most `max_rounds`).
pub fn attack(console: u16, power: u16, deadline: Instant, max_rounds: u64) -> Attack {
    let mut a = Attack::default();
    let mut idle: Vec<TcpStream> = Vec::new();
    let mut round = 0;
    while Instant::now() < deadline && round < max_rounds {
        round += 1;
        // The console: a line typed, then what comes back.
        a.console_tries += 1;
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", console)) {
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let _ = s.write_all(b"typed-by-the-attacker\r");
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 || got.len() > 1 << 20 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            let text = String::from_utf8_lossy(&got);
            if text.starts_with("gatecmd: ") && text.lines().count() <= 1 {
                a.console_refused += 1;
            } else {
                a.console_bytes_leaked += got.len() as u64;
            }
        }
        // The power port: switch the person's board off.
        a.power_tries += 1;
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", power)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let req = format!(
                "PUT /power/0/value HTTP/1.1\r\nHost: 127.0.0.1:{power}\r\nContent-Length: 1\r\nConnection: close\r\n\r\n0"
            );
            let _ = s.write_all(req.as_bytes());
            let mut head = [0u8; 12];
            if s.read_exact(&mut head).is_ok() {
                match &head[9..12] {
                    b"403" | b"409" => a.power_refused += 1,
                    b"200" => a.power_switched += 1,
                    _ => {}
                }
            }
        }
        // Idle keep-alive connections, topped up to 2,100 (the server closes them).
        idle.retain(|s| {
            let mut b = [0u8; 1];
            let _ = s.set_nonblocking(true);
            !matches!((&*s).read(&mut b), Ok(0))
        });
        while idle.len() < 2100 && Instant::now() < deadline {
            match TcpStream::connect_timeout(
                &std::net::SocketAddr::from(([127, 0, 0, 1], power)),
                Duration::from_millis(200),
            ) {
                Ok(s) => {
                    a.idle_opened += 1;
                    idle.push(s);
                }
                Err(_) => break,
            }
        }
        a.idle_most_open = a.idle_most_open.max(idle.len());
        std::thread::sleep(Duration::from_millis(200));
    }
    a
}

/// Open descriptors of `pid`.
pub fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}
