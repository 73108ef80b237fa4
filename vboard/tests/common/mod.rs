//! Helpers for the VM tests of the fastboot and DFU families (`usbvm_families.rs`): find the
//! usbvm harness, skip or fail when a prerequisite is missing, boot the VM with a guest
//! script, and read back what the script printed (`STEP NAME rc=N`, a tool's output between
//! `TEXT NAME` and `END NAME`, raw bytes as hex between `HEX NAME` and `ENDHEX NAME`, the
//! stamped reads of a tool's output between `STAMPS NAME` and `ENDSTAMPS NAME`). usbvm.rs has its own copies of the
//! first few (it predates this module).

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn skip_or_fail(test: &str, why: &str, installed_by_ci: bool) {
    let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    if installed_by_ci && ci {
        panic!("{test}: {why}; CI installs it, so the test may not skip");
    }
    let _ = writeln!(std::io::stderr(), "SKIP: {test}: {why}");
}

/// The repository's test VM harness (tests/vm), found as tests/usbvm/mod.rs finds it
/// (`GATECMD_VM_DIR` overrides it).
pub fn harness() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    [
        std::env::var_os("GATECMD_VM_DIR").map(PathBuf::from),
        Some(repo.join("tests/vm")),
    ]
    .into_iter()
    .flatten()
    .find(|d| d.join("run.sh").exists())
    .and_then(|d| d.canonicalize().ok())
}

/// Whether `scripts/setup.sh --test` installs Debian package `package` (then CI has it, and
/// its absence fails the test there instead of skipping it).
pub fn ci_installs(package: &str) -> bool {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/setup.sh"))
        .is_ok_and(|s| {
            s.lines()
                .filter(|l| l.contains("packages=") || l.contains("packages+="))
                .any(|l| {
                    l.split(|c: char| !c.is_ascii_alphanumeric() && c != '-')
                        .any(|w| w == package)
                })
        })
}

pub fn has(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A stripped copy of the vboard binary (debug info would make the initramfs huge).
pub fn stripped_vboard(dir: &Path) -> PathBuf {
    let vboard = dir.join("gatecmd-vboard");
    std::fs::copy(env!("CARGO_BIN_EXE_gatecmd-vboard"), &vboard).expect("copy");
    assert!(
        Command::new("strip")
            .arg(&vboard)
            .status()
            .is_ok_and(|s| s.success())
    );
    vboard
}

/// Pseudo-random bytes (an LCG seeded with `seed`), so a dropped or misplaced block changes
/// the hash.
pub fn noise(len: usize, seed: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut x = seed;
    while v.len() < len {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        v.push((x >> 24) as u8);
    }
    v
}

pub struct Run {
    pub log: String,
    pub steps: HashMap<String, i32>,
    pub seconds: f64,
}

impl Run {
    pub fn rc(&self, step: &str) -> i32 {
        *self
            .steps
            .get(step)
            .unwrap_or_else(|| panic!("step {step} never ran\n{}", self.log))
    }

    fn between(&self, start: &str, end: &str) -> Option<String> {
        let a = self.log.find(start)?;
        let rest = &self.log[a + start.len()..];
        Some(rest[..rest.find(end).unwrap_or(rest.len())].to_string())
    }

    /// The tool's output of a step, `\r` shown as `~`.
    pub fn text(&self, step: &str) -> String {
        self.between(&format!("TEXT {step}\n"), &format!("\nEND {step}\n"))
            .unwrap_or_else(|| panic!("no output of {step}\n{}", self.log))
    }

    pub fn expect(&self, step: &str, rc: i32, contains: &str) {
        let text = self.text(step);
        assert_eq!(self.rc(step), rc, "{step}: exit status\n{text}");
        assert!(
            text.contains(contains),
            "{step}: expected {contains:?} in\n{text}"
        );
    }

    /// The raw bytes a step's output had (stdout and stderr as the tool wrote them).
    pub fn raw(&self, step: &str) -> Vec<u8> {
        let hex_text = self
            .between(&format!("HEX {step}\n"), &format!("ENDHEX {step}\n"))
            .unwrap_or_else(|| panic!("no raw capture of {step}\n{}", self.log));
        let joined: String = hex_text.split_whitespace().collect();
        hex::decode(joined).unwrap_or_else(|e| panic!("{step}: bad hex capture: {e}"))
    }

    /// When each read of a step's output returned (guest uptime), and the step's start and
    /// end.
    pub fn stamps(&self, step: &str) -> Stamps {
        let body = self
            .between(&format!("STAMPS {step}\n"), &format!("ENDSTAMPS {step}\n"))
            .unwrap_or_else(|| panic!("no stamps of {step}\n{}", self.log));
        let mut s = Stamps {
            start: 0.0,
            end: 0.0,
            records: Vec::new(),
        };
        for l in body.lines() {
            let (t, rest) = l.split_once(' ').unwrap_or((l, ""));
            let Ok(t) = t.parse::<f64>() else { continue };
            match rest {
                "<start>" => s.start = t,
                "<end>" => s.end = t,
                r => s.records.push((t, r.to_string())),
            }
        }
        s
    }
}

/// When the reads of a tool's output returned, and what they held (`\r` as `~`, `\n` as
/// `|`).
pub struct Stamps {
    pub start: f64,
    pub end: f64,
    pub records: Vec<(f64, String)>,
}

impl Stamps {
    /// One line: the run's length, how many reads, how many came before its last 0.2 s.
    pub fn summary(&self) -> String {
        let early = self
            .records
            .iter()
            .filter(|(t, _)| *t < self.end - 0.2)
            .count();
        format!(
            "ran {:.2} s; its output came in {} reads, {} of them more than 0.2 s before it exited (first +{:.2} s, last +{:.2} s)",
            self.end - self.start,
            self.records.len(),
            early,
            self.records.first().map_or(0.0, |r| r.0 - self.start),
            self.records.last().map_or(0.0, |r| r.0 - self.start),
        )
    }

    /// Every read: `+T  TEXT`.
    pub fn listing(&self) -> String {
        self.records
            .iter()
            .map(|(t, text)| format!("  +{:6.2} s  {text}\n", t - self.start))
            .collect()
    }
}

/// Boots the VM once with `guest` as its program and `files` (SRC:DST) copied in.
pub fn run_vm(usbvm: &Path, work: &Path, guest: &Path, files: &[String], timeout: u32) -> Run {
    let t0 = std::time::Instant::now();
    let mut c = Command::new(usbvm.join("run.sh"));
    c.env("USBVM_EXTRA_MODULES", "usb_f_fs usb_f_acm cdc_acm")
        .arg("--bin")
        .arg(guest);
    for f in files {
        c.arg("--file").arg(f);
    }
    let out = c
        .args(["--udcs", "4", "--timeout", &timeout.to_string(), "--quiet"])
        .arg("--workdir")
        .arg(work)
        .output()
        .expect("run.sh");
    let seconds = t0.elapsed().as_secs_f64();
    let log = std::fs::read_to_string(work.join("console.log"))
        .unwrap_or_default()
        .replace("\r\n", "\n");
    println!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && log.contains("GUEST DONE"),
        "the VM run failed ({}):\n{log}",
        out.status
    );
    let steps = log
        .lines()
        .filter_map(|l| l.strip_prefix("STEP "))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?.to_string();
            let rc = w.next()?.strip_prefix("rc=")?.parse().ok()?;
            Some((name, rc))
        })
        .collect();
    Run {
        log,
        steps,
        seconds,
    }
}
