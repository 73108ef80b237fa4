//! The test VM harness (tests/vm, its README) from Rust tests: where it is, whether it
//! can run here, and one VM driven over its control channel (one command per line, answered
//! by `ok VERB …` or `err VERB …` after `| …` data lines).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Unavailable, skip};

/// The harness: the repository's own (tests/vm), or `GATECMD_VM_DIR` when set; the same
/// as scripts/setup.sh, which prepares it (`make test-setup`).
pub fn dir() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("GATECMD_VM_DIR").map(PathBuf::from),
        Some(repo.join("tests/vm")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|d| d.join("run.sh").exists())
        .and_then(|d| d.canonicalize().ok())
}

fn has(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The harness when it can run here; otherwise says why (`SKIP: …`) and gives `None`.
/// The harness is in the repository, and scripts/setup.sh --test installs QEMU: under
/// `CI=true` neither may be missing (the test fails instead of skipping).
pub fn available(test: &str) -> Option<PathBuf> {
    let Some(dir) = dir() else {
        skip(
            test,
            Unavailable::InstalledByCi,
            "no test VM harness (tests/vm in the repository, or GATECMD_VM_DIR)",
        );
        return None;
    };
    for program in ["qemu-system-x86_64", "python3", "strip"] {
        if !has(program) {
            skip(
                test,
                Unavailable::InstalledByCi,
                &format!(
                    "{program} is not installed (scripts/setup.sh --test, or {}/prepare.sh, installs it)",
                    dir.display()
                ),
            );
            return None;
        }
    }
    Some(dir)
}

/// The one guest of this test binary at a time: a lane's binary holds every VM test of its
/// lane, libtest runs two tests at once, and two QEMU guests under TCG on a two-core machine
/// starve each other (a guest's stream was lost mid-test that way: docs/PERFORMANCE.md,
/// "CI time"). A VM test holds the guard for its guest's life: `guest_turn().await`, or
/// `guest_turn_blocking()` outside a runtime.
static GUEST: std::sync::LazyLock<tokio::sync::Mutex<()>> =
    std::sync::LazyLock::new(|| tokio::sync::Mutex::new(()));

/// Waits for this binary's guest to be free ([`GUEST`]).
pub async fn guest_turn() -> tokio::sync::MutexGuard<'static, ()> {
    GUEST.lock().await
}

/// [`guest_turn`] for a test without a runtime.
pub fn guest_turn_blocking() -> tokio::sync::MutexGuard<'static, ()> {
    GUEST.blocking_lock()
}

/// A stripped copy of `bin` in `into`: debug info would make the VM's initramfs huge.
pub fn stripped(bin: &Path, into: &Path) -> PathBuf {
    let name = bin.file_name().expect("binary name");
    let copy = into.join(name);
    std::fs::copy(bin, &copy).expect("copy the binary");
    let ok = Command::new("strip").arg(&copy).status();
    assert!(
        ok.is_ok_and(|s| s.success()),
        "strip {} failed",
        copy.display()
    );
    copy
}

/// A control-channel answer.
#[derive(Debug)]
pub struct Reply {
    pub ok: bool,
    /// The answer after `ok VERB `.
    pub text: String,
    /// The `| ` lines before it.
    pub data: Vec<String>,
}

/// One VM running one program (run.sh), powered off on drop.
pub struct Vm {
    child: Child,
    pub work: PathBuf,
    ctl: UnixStream,
    buf: Vec<u8>,
    nonce: u32,
}

impl Vm {
    /// Boots a VM for `bin ARGS` with extra run.sh options (`--port`, `--file`, `--env`,
    /// `--hold`), and waits until its control loop answers.
    pub fn start(usbvm: &Path, work: &Path, bin: &Path, options: &[String], args: &[&str]) -> Vm {
        let out = std::fs::File::create(work.join("run.out")).expect("run.out");
        let ctl_path = work.join("ctl.sock");
        let mut child = Command::new(usbvm.join("run.sh"))
            .arg("--bin")
            .arg(bin)
            .arg("--workdir")
            .arg(work)
            .arg("--ctl")
            .arg(&ctl_path)
            .args(options)
            .arg("--")
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup"))
            .stderr(out)
            .spawn()
            .expect("run.sh");
        let deadline = Instant::now() + Duration::from_secs(120);
        let ctl = loop {
            match UnixStream::connect(&ctl_path) {
                Ok(s) => break s,
                Err(_)
                    if Instant::now() < deadline && child.try_wait().ok().flatten().is_none() =>
                {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => {
                    stop(&mut child);
                    panic!("no control socket: {e}\n{}", read(&work.join("run.out")))
                }
            }
        };
        let mut vm = Vm {
            child,
            work: work.to_path_buf(),
            ctl,
            buf: Vec::new(),
            nonce: 0,
        };
        // Bytes sent before the guest opened its port are lost: ping until one is answered.
        loop {
            vm.nonce += 1;
            let n = vm.nonce.to_string();
            let _ = vm.send(&format!("ping {n}"));
            // Pings buffered before the guest listened are answered late: skip their pongs.
            let window = Instant::now() + Duration::from_millis(500);
            let mut answered = false;
            while let Some(r) = vm.answer("pong", window) {
                if r.text == n {
                    answered = true;
                    break;
                }
            }
            if answered {
                break;
            }
            if Instant::now() > deadline || vm.child.try_wait().ok().flatten().is_some() {
                panic!("the VM never came up:\n{}", vm.output());
            }
        }
        vm
    }

    /// False when the channel is gone (the VM stopped).
    fn send(&mut self, line: &str) -> bool {
        self.ctl.write_all(format!("{line}\n").as_bytes()).is_ok()
    }

    fn line(&mut self, deadline: Instant) -> Option<String> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(
                    String::from_utf8_lossy(&line)
                        .trim_end_matches(['\r', '\n'])
                        .to_string(),
                );
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            self.ctl
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .ok()?;
            let mut chunk = [0u8; 4096];
            match self.ctl.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(_) => return None,
            }
        }
    }

    fn answer(&mut self, verb: &str, deadline: Instant) -> Option<Reply> {
        let mut data = Vec::new();
        loop {
            let line = self.line(deadline)?;
            if let Some(d) = line.strip_prefix("| ") {
                data.push(d.to_string());
                continue;
            }
            let mut parts = line.splitn(3, ' ');
            let (status, v) = (parts.next(), parts.next());
            if matches!(status, Some("ok" | "err")) && v == Some(verb) {
                return Some(Reply {
                    ok: status == Some("ok"),
                    text: parts.next().unwrap_or("").to_string(),
                    data,
                });
            }
            // Anything else is noise from before the guest set its port raw.
        }
    }

    /// Sends one command and waits up to `secs` for its answer; panics on `err`.
    pub fn command(&mut self, line: &str, secs: u64) -> Reply {
        let verb = line.split(' ').next().unwrap_or("").to_string();
        assert!(
            self.send(line),
            "the VM's control channel is closed\n{}",
            self.log()
        );
        match self.answer(&verb, Instant::now() + Duration::from_secs(secs)) {
            Some(r) if r.ok => r,
            Some(r) => panic!("{line:?}: err {}\n{}", r.text, self.log()),
            None => panic!("no answer to {line:?} in {secs} s\n{}", self.log()),
        }
    }

    /// The guest console so far (the program's output and the harness's lines).
    pub fn log(&self) -> String {
        read(&self.work.join("console.log")).replace('\r', "")
    }

    /// run.sh's own output.
    pub fn output(&self) -> String {
        read(&self.work.join("run.out"))
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

impl Drop for Vm {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.send("poweroff");
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if self.child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            stop(&mut self.child);
        }
    }
}

/// Stops run.sh: SIGTERM (its trap kills QEMU by its PID), then SIGKILL.
fn stop(child: &mut Child) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}
