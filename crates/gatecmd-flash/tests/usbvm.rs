//! The engine against gatecmd-vboard on a real kernel USB stack: one boot of
//! the repository's test VM, tests/vm (QEMU TCG, Debian's kernel, `dummy_hcd`, 2 vCPUs) runs
//! `usbvm_guest.sh`, which drives the board with this crate's `flash_driver` example:
//! MaskROM (a write refused: "send a loader first") → download boot with a loader made by
//! `gatecmd-vboard make-loader` → Loader at the same port → (a) a raw image, (b) a raw
//! image with a bmap mapping a quarter of it, a bmap of another image refused with nothing
//! written, (c) a zstd-compressed image with its bmap, (d) an Android sparse image (every
//! chunk type), each written, verified, reset, and checked against the vboard's own record
//! of what was written (the regions' SHA-256 in its boot log); then a flash cut by a
//! power-off mid-write and resumed, writing less than half the second time. In the same run
//! it measures the figures against Debian's rkdeveloptool (`wl`) on the same board: a dense
//! 64 MiB write, and a 64 MiB image whose bmap maps 25 % of it against `wl` of the whole.
//!
//! Needs the vboard binary built beside this test (`cargo build -p gatecmd-vboard`, same
//! profile); the driver example is built by `cargo test` itself. Skips (a `SKIP:` line)
//! where the harness is absent; with it present, a missing QEMU or rkdeveloptool fails
//! under `CI=true`, as the vboard's own VM test does.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

const GUEST: &str = "tests/usbvm_guest.sh";
const RKDEVELOPTOOL: &str = "/usr/bin/rkdeveloptool";
const MIB: usize = 1 << 20;

fn skip_or_fail(why: &str, installed_by_ci: bool) {
    let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    if installed_by_ci && ci {
        panic!("usbvm_flash: {why}; CI installs this, so it may not skip");
    }
    let _ = writeln!(std::io::stderr(), "SKIP: usbvm_flash: {why}");
}

fn harness() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    [
        std::env::var_os("GATECMD_VM_DIR").map(PathBuf::from),
        Some(repo.join("tests/vm")),
    ]
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

/// `target/<profile>/` of this test binary.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf()
}

/// Pseudo-random bytes (an LCG), so a misplaced or dropped sector changes the hash.
fn lcg(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761) ^ 0x9e37_79b9;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

/// The rk35xx idbloader magic at LBA 0x40: what the vboard boots.
fn bootable(mut v: Vec<u8>) -> Vec<u8> {
    v[0x8000..0x8004].copy_from_slice(b"RKNS");
    v
}

/// A raw image whose 4 KiB blocks in `ranges` (inclusive) hold data; zeros elsewhere.
fn mapped_image(len: usize, ranges: &[(u64, u64)], seed: u32) -> Vec<u8> {
    let mut img = vec![0u8; len];
    for (i, &(a, z)) in ranges.iter().enumerate() {
        let (s, e) = (a as usize * 4096, (z as usize + 1) * 4096);
        img[s..e].copy_from_slice(&lcg(e - s, seed + i as u32));
    }
    bootable(img)
}

/// bmaptool 2.0's format (sha256), the file's own checksum filled in as bmaptool does.
fn bmap(img: &[u8], ranges: &[(u64, u64)]) -> String {
    let zeros = "0".repeat(64);
    let mapped: u64 = ranges.iter().map(|(a, z)| z - a + 1).sum();
    let mut s = format!(
        "<?xml version=\"1.0\" ?>\n<bmap version=\"2.0\">\n    <ImageSize> {} </ImageSize>\n    <BlockSize> 4096 </BlockSize>\n    <BlocksCount> {} </BlocksCount>\n    <MappedBlocksCount> {mapped} </MappedBlocksCount>\n    <ChecksumType> sha256 </ChecksumType>\n    <BmapFileChecksum> {zeros} </BmapFileChecksum>\n    <BlockMap>\n",
        img.len(),
        img.len().div_ceil(4096)
    );
    for &(a, z) in ranges {
        let sha = hex::encode(Sha256::digest(
            &img[a as usize * 4096..(z as usize + 1) * 4096],
        ));
        s.push_str(&format!(
            "        <Range chksum=\"{sha}\"> {a}-{z} </Range>\n"
        ));
    }
    s.push_str("    </BlockMap>\n</bmap>\n");
    let own = hex::encode(Sha256::digest(s.as_bytes()));
    s.replacen(&zeros, &own, 1)
}

enum Chunk {
    Raw(Vec<u8>),
    Fill(u32, u32),
    DontCare(u32),
    Crc,
}

/// An Android sparse image (block size 4096) and its runs of written bytes.
fn sparse(chunks: &[Chunk]) -> (Vec<u8>, Vec<(usize, Vec<u8>)>) {
    let bs = 4096usize;
    let mut body = Vec::new();
    let mut runs: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut crc = crc32fast::Hasher::new();
    let mut at = 0usize;
    let push = |at: usize, data: &[u8], runs: &mut Vec<(usize, Vec<u8>)>| match runs.last_mut() {
        Some((o, d)) if *o + d.len() == at => d.extend_from_slice(data),
        _ => runs.push((at, data.to_vec())),
    };
    for c in chunks {
        let (kind, blocks, payload): (u16, u32, Vec<u8>) = match c {
            Chunk::Raw(d) => {
                crc.update(d);
                push(at, d, &mut runs);
                (0xCAC1, (d.len() / bs) as u32, d.clone())
            }
            Chunk::Fill(v, n) => {
                let bytes: Vec<u8> = v
                    .to_le_bytes()
                    .iter()
                    .copied()
                    .cycle()
                    .take(*n as usize * bs)
                    .collect();
                crc.update(&bytes);
                push(at, &bytes, &mut runs);
                (0xCAC2, *n, v.to_le_bytes().to_vec())
            }
            Chunk::DontCare(n) => {
                crc.update(&vec![0u8; *n as usize * bs]);
                (0xCAC3, *n, vec![])
            }
            Chunk::Crc => (0xCAC4, 0, crc.clone().finalize().to_le_bytes().to_vec()),
        };
        if kind != 0xCAC4 {
            at += blocks as usize * bs;
        }
        body.extend(kind.to_le_bytes());
        body.extend([0u8, 0]);
        body.extend(blocks.to_le_bytes());
        body.extend((12 + payload.len() as u32).to_le_bytes());
        body.extend(payload);
    }
    let mut out = vec![0x3a, 0xff, 0x26, 0xed, 1, 0, 0, 0, 28, 0, 12, 0];
    out.extend((bs as u32).to_le_bytes());
    out.extend(((at / bs) as u32).to_le_bytes());
    out.extend((chunks.len() as u32).to_le_bytes());
    out.extend(0u32.to_le_bytes());
    out.extend(body);
    (out, runs)
}

/// The vboard's boot-log lines for these runs (merged when adjacent, as its regions are).
fn region_lines(runs: &[(usize, &[u8])]) -> Vec<String> {
    let mut merged: Vec<(usize, Vec<u8>)> = Vec::new();
    for (o, d) in runs {
        match merged.last_mut() {
            Some((mo, md)) if *mo + md.len() == *o => md.extend_from_slice(d),
            _ => merged.push((*o, d.to_vec())),
        }
    }
    merged
        .iter()
        .map(|(o, d)| {
            format!(
                "vboard: region lba=0x{:x} sectors={} bytes={} sha256={}",
                o / 512,
                d.len() / 512,
                d.len(),
                hex::encode(Sha256::digest(d))
            )
        })
        .collect()
}

/// Image runs: offset and bytes.
type Runs<'a> = Vec<(usize, &'a [u8])>;

fn ranges_runs<'a>(img: &'a [u8], ranges: &[(u64, u64)]) -> Runs<'a> {
    ranges
        .iter()
        .map(|&(a, z)| {
            let (s, e) = (a as usize * 4096, (z as usize + 1) * 4096);
            (s, &img[s..e])
        })
        .collect()
}

struct Step {
    rc: i32,
    secs: f64,
    out: Vec<String>,
}

struct Run {
    log: String,
    steps: BTreeMap<String, Step>,
}

impl Run {
    fn parse(log: String) -> Run {
        let mut steps: BTreeMap<String, Step> = BTreeMap::new();
        let mut outs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for l in log.lines() {
            if let Some(rest) = l.strip_prefix("OUT ")
                && let Some((name, line)) = rest.split_once(": ")
            {
                outs.entry(name.to_string())
                    .or_default()
                    .push(line.to_string());
            }
            if let Some(rest) = l.strip_prefix("STEP ") {
                let mut w = rest.split_whitespace();
                let Some(name) = w.next() else { continue };
                let mut rc = -1;
                let mut secs = f64::NAN;
                for kv in w {
                    if let Some(v) = kv.strip_prefix("rc=") {
                        rc = v.parse().unwrap_or(-1);
                    }
                    if let Some(v) = kv.strip_prefix("secs=") {
                        secs = v.parse().unwrap_or(f64::NAN);
                    }
                }
                steps.insert(
                    name.to_string(),
                    Step {
                        rc,
                        secs,
                        out: Vec::new(),
                    },
                );
            }
        }
        for (name, lines) in outs {
            if let Some(s) = steps.get_mut(&name) {
                s.out = lines;
            }
        }
        Run { log, steps }
    }

    fn step(&self, name: &str) -> &Step {
        self.steps
            .get(name)
            .unwrap_or_else(|| panic!("step {name} never ran\n{}", self.log))
    }

    fn ok(&self, name: &str) -> serde_json::Value {
        let s = self.step(name);
        assert_eq!(s.rc, 0, "{name} failed: {:?}\n{}", s.out, self.tail());
        let line = s
            .out
            .iter()
            .find_map(|l| l.strip_prefix("RESULT "))
            .unwrap_or_else(|| panic!("{name}: no RESULT in {:?}", s.out));
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: {e}: {line}"))
    }

    fn error(&self, name: &str) -> String {
        let s = self.step(name);
        assert_ne!(s.rc, 0, "{name} should have failed: {:?}", s.out);
        s.out
            .iter()
            .find_map(|l| l.strip_prefix("ERROR "))
            .unwrap_or_else(|| panic!("{name}: no ERROR in {:?}", s.out))
            .to_string()
    }

    fn boot(&self, name: &str) -> String {
        let a = format!("BEGIN boot_{name}\n");
        let b = format!("\nEND boot_{name}");
        let i = self
            .log
            .find(&a)
            .unwrap_or_else(|| panic!("no boot log for {name}\n{}", self.tail()));
        let rest = &self.log[i + a.len()..];
        rest[..rest.find(&b).unwrap_or(rest.len())].to_string()
    }

    fn regions(&self, name: &str) -> Vec<String> {
        self.boot(name)
            .lines()
            .filter_map(|l| l.find("vboard: region ").map(|i| l[i..].trim().to_string()))
            .collect()
    }

    fn status(&self, name: &str) -> serde_json::Value {
        let p = format!("STATUS {name} ");
        let line = self
            .log
            .lines()
            .find_map(|l| l.strip_prefix(&p))
            .unwrap_or_else(|| panic!("no status {name}"));
        serde_json::from_str(line).expect("status json")
    }

    fn tail(&self) -> String {
        let n = self.log.len();
        self.log[n.saturating_sub(6000)..].to_string()
    }
}

fn f(v: &serde_json::Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64().unwrap_or(f64::NAN)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn run_vm(usbvm: &Path, work: &Path, files: &Path, vboard: &Path, driver: &Path) -> Option<Run> {
    let guest = Path::new(env!("CARGO_MANIFEST_DIR")).join(GUEST);
    let out = Command::new(usbvm.join("run.sh"))
        .env("USBVM_EXTRA_MODULES", "usb_f_fs usb_f_acm cdc_acm")
        .arg("--bin")
        .arg(&guest)
        .arg("--file")
        .arg(format!(
            "{}:/usr/local/bin/gatecmd-vboard",
            vboard.display()
        ))
        .arg("--file")
        .arg(format!("{}:/usr/local/bin/flash_driver", driver.display()))
        .arg("--file")
        .arg(RKDEVELOPTOOL)
        .arg("--file")
        .arg(format!("{}:/opt/flash", files.display()))
        .args([
            "--udcs",
            "4",
            "--smp",
            "2",
            "--mem",
            "2048",
            "--timeout",
            "1100",
        ])
        .args(["--quiet", "--workdir"])
        .arg(work)
        .output()
        .expect("run.sh");
    let log = std::fs::read_to_string(work.join("console.log"))
        .unwrap_or_default()
        .replace("\r\n", "\n");
    println!("{}", String::from_utf8_lossy(&out.stderr));
    // Kept for a look after the run (the work directory goes with the test's tempdir).
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("usbvm_flash.console.log");
    if std::fs::write(&keep, &log).is_ok() {
        println!("console log: {}", keep.display());
    }
    // 125: the VM never ran the program (usbvm's README: -smp 2 dies in early boot about once
    // in 17 boots); the caller tries once more.
    if out.status.code() == Some(125) || !log.contains("NPROC") {
        println!(
            "the VM did not start the program ({}); log tail:\n{}",
            out.status,
            &log[log.len().saturating_sub(3000)..]
        );
        return None;
    }
    assert!(
        out.status.success() && log.contains("GUEST DONE"),
        "the VM run failed ({}):\n{log}",
        out.status
    );
    Some(Run::parse(log))
}

#[test]
fn usbvm_flash() {
    let Some(usbvm) = harness() else {
        skip_or_fail(
            "no test VM harness (tests/vm in the repository, or GATECMD_VM_DIR)",
            true,
        );
        return;
    };
    for program in ["qemu-system-x86_64", "python3", "strip", RKDEVELOPTOOL] {
        if !has(program) {
            skip_or_fail(&format!("{program} is not installed"), true);
            return;
        }
    }
    let dir = profile_dir();
    let (vboard_bin, driver_bin) = (
        dir.join("gatecmd-vboard"),
        dir.join("examples/flash_driver"),
    );
    for (b, how) in [
        (
            &vboard_bin,
            "cargo build -p gatecmd-vboard (same profile as this test)",
        ),
        (
            &driver_bin,
            "cargo test builds it: cargo test -p gatecmd-flash --test usbvm",
        ),
    ] {
        assert!(b.exists(), "{} is missing: {how}", b.display());
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (files, work) = (tmp.path().join("files"), tmp.path().join("work"));
    std::fs::create_dir_all(&files).expect("files");
    // Stripped copies: debug info would make the initramfs huge.
    let strip = |src: &Path, name: &str| {
        let dst = tmp.path().join(name);
        std::fs::copy(src, &dst).expect("copy");
        assert!(
            Command::new("strip")
                .arg(&dst)
                .status()
                .is_ok_and(|s| s.success())
        );
        dst
    };
    let vboard = strip(&vboard_bin, "gatecmd-vboard");
    let driver = strip(&driver_bin, "flash_driver");
    assert!(
        Command::new(&vboard)
            .args(["make-loader", "--out"])
            .arg(files.join("loader.bin"))
            .status()
            .is_ok_and(|s| s.success())
    );
    let put = |name: &str, bytes: &[u8]| std::fs::write(files.join(name), bytes).expect(name);

    // (a) raw, 16 MiB.
    let raw = bootable(lcg(16 * MIB, 1));
    put("raw.img", &raw);
    // (b) 16 MiB, a quarter mapped (1024 of 4096 blocks), and (c) another such image, zstd.
    let q = [(0u64, 127u64), (500, 883), (1800, 2055), (3000, 3255)];
    let bimg = mapped_image(16 * MIB, &q, 10);
    put("bmap.img", &bimg);
    put("bmap.bmap", bmap(&bimg, &q).as_bytes());
    let zimg = mapped_image(16 * MIB, &q, 20);
    put(
        "bmapz.img.zst",
        &zstd::encode_all(&zimg[..], 3).expect("zstd"),
    );
    put("bmapz.bmap", bmap(&zimg, &q).as_bytes());
    // (d) Android sparse, 16 MiB: every chunk type.
    let first = bootable(lcg(64 * 4096, 30));
    let (simg, sruns) = sparse(&[
        Chunk::Raw(first),
        Chunk::Fill(0xdead_beef, 512),
        Chunk::DontCare(1024),
        Chunk::Crc,
        Chunk::Raw(lcg(256 * 4096, 31)),
        Chunk::DontCare(1024),
        Chunk::Fill(0, 256),
        Chunk::Raw(lcg(128 * 4096, 32)),
        Chunk::DontCare(832),
        Chunk::Crc,
    ]);
    put("sparse.simg", &simg);
    // Figures: a dense 64 MiB image; a 64 MiB image with 25 % mapped (8 ranges of 2 MiB).
    put("dense64.img", &bootable(lcg(64 * MIB, 40)));
    let bq: Vec<(u64, u64)> = (0..8).map(|i| (i * 2048, i * 2048 + 511)).collect();
    let bench = mapped_image(64 * MIB, &bq, 50);
    put("bench.img", &bench);
    put("bench.bmap", bmap(&bench, &bq).as_bytes());
    // The cut-and-resume image, 32 MiB.
    let resume = bootable(lcg(32 * MIB, 60));
    put("resume.img", &resume);

    let run = match run_vm(&usbvm, &work, &files, &vboard, &driver) {
        Some(r) => r,
        None => run_vm(&usbvm, &work, &files, &vboard, &driver)
            .expect("the VM did not start the program twice"),
    };
    let r = &run;

    // MaskROM: the mode from bcdUSB, the chip, and a write refused before a loader runs.
    let info = r.ok("info_maskrom");
    assert_eq!(info["usb"]["mode"], "maskrom", "{info}");
    assert_eq!(info["chip"]["text"], "3588V100", "{info}");
    let e = r.error("flash_in_maskrom");
    assert!(
        e.contains("maskrom mode") && e.contains("send a loader first"),
        "{e}"
    );
    let db = r.ok("db");
    assert_eq!(db["usb"]["mode"], "loader", "{db}");
    assert_eq!(
        db["usb"]["port"], "1-1",
        "the Loader came back at the same port: {db}"
    );
    assert_eq!(r.ok("info_loader")["usb"]["mode"], "loader");

    // (a)-(d): written, verified, and the vboard's record equals the expected content.
    let cases: [(&str, Runs); 4] = [
        ("raw", vec![(0, &raw[..])]),
        ("bmap", ranges_runs(&bimg, &q)),
        ("bmap_zstd", ranges_runs(&zimg, &q)),
        (
            "sparse",
            sruns.iter().map(|(o, d)| (*o, d.as_slice())).collect(),
        ),
    ];
    for (name, runs) in &cases {
        let rep = r.ok(name);
        let mapped: usize = runs.iter().map(|(_, d)| d.len()).sum();
        assert_eq!(rep["write"]["bytes_written"], mapped, "{name}: {rep}");
        assert_eq!(rep["verify"]["bytes"], mapped, "{name}: {rep}");
        assert_eq!(
            r.step(&format!("boot_{name}")).rc,
            0,
            "{name}: no login prompt"
        );
        assert_eq!(
            r.regions(name),
            region_lines(runs),
            "{name}: the vboard's regions differ from the image\n{}",
            r.boot(name)
        );
    }
    assert_eq!(r.ok("bmap_zstd")["image"]["compression"], "zstd");
    assert_eq!(r.ok("sparse")["image"]["layout"], "android_sparse");
    // A bmap of another image: refused before any write.
    let e = r.error("bmap_mismatch");
    assert!(
        e.contains("does not match the image") && e.contains("nothing was written"),
        "{e}"
    );
    let st = r.status("after_mismatch");
    assert_eq!(
        st["boards"][0]["regions"],
        serde_json::json!([]),
        "the refused bmap wrote something: {st}"
    );

    // The cut: the first run stopped by the power-off, the second wrote under half.
    let cut = r.step("cut_flash");
    assert_ne!(
        cut.rc, 0,
        "the power-off did not cut the flash: {:?}",
        cut.out
    );
    let cut_err = cut
        .out
        .iter()
        .find_map(|l| l.strip_prefix("ERROR "))
        .unwrap_or("");
    assert!(cut_err.contains("flash the same image again"), "{cut_err}");
    let res = r.ok("resume");
    let (written, skipped) = (
        res["write"]["bytes_written"].as_u64().unwrap_or(u64::MAX),
        res["write"]["bytes_skipped"].as_u64().unwrap_or(0),
    );
    assert!(
        written < resume.len() as u64 / 2 && skipped > 0,
        "the resumed flash wrote {written} and skipped {skipped} of {}: {res}",
        resume.len()
    );
    assert_eq!(
        r.regions("resume"),
        region_lines(&[(0, &resume[..])]),
        "after the resume the board does not hold the image\n{}",
        r.boot("resume")
    );

    // The figures.
    let rk: Vec<f64> = (1..=3)
        .map(|i| r.step(&format!("rk_dense_{i}")).secs)
        .collect();
    let fd: Vec<serde_json::Value> = (1..=3).map(|i| r.ok(&format!("fd_dense_{i}"))).collect();
    let big: Vec<serde_json::Value> = (1..=3)
        .map(|i| r.ok(&format!("fd_dense_big_{i}")))
        .collect();
    let fd_proc: Vec<f64> = (1..=3)
        .map(|i| r.step(&format!("fd_dense_{i}")).secs)
        .collect();
    let fd_write = median(fd.iter().map(|v| f(v, &["write", "secs"])).collect());
    let fd_verify = median(fd.iter().map(|v| f(v, &["verify", "secs"])).collect());
    let big_write = median(big.iter().map(|v| f(v, &["write", "secs"])).collect());
    let rk_m = median(rk.clone());
    let rkb: Vec<f64> = (1..=3)
        .map(|i| r.step(&format!("rk_bmapraw_{i}")).secs)
        .collect();
    let fb: Vec<f64> = (1..=3)
        .map(|i| r.step(&format!("fd_bmap_{i}")).secs)
        .collect();
    let fbv: Vec<serde_json::Value> = (1..=3)
        .map(|i| r.ok(&format!("fd_bmap_verify_{i}")))
        .collect();
    let fbv_proc: Vec<f64> = (1..=3)
        .map(|i| r.step(&format!("fd_bmap_verify_{i}")).secs)
        .collect();
    let check = median(fbv.iter().map(|v| f(v, &["check", "secs"])).collect());
    let bmap_verify = median(fbv.iter().map(|v| f(v, &["verify", "secs"])).collect());
    let (rkb_m, fb_m) = (median(rkb.clone()), median(fb.clone()));
    println!("--- figures (usbvm guest, 2 vCPUs TCG; medians of 3 interleaved rounds) ---");
    println!("rkdeveloptool wl dense 64 MiB          {rk_m:6.2} s   (runs {rk:?})");
    println!(
        "engine write phase, 64 KiB transfers   {fd_write:6.2} s   ratio {:.2}  (process {:?})",
        fd_write / rk_m,
        fd_proc
    );
    println!(
        "engine write phase, 4 MiB transfers    {big_write:6.2} s   ratio {:.2}",
        big_write / rk_m
    );
    println!("engine verification 64 MiB            {fd_verify:6.2} s");
    println!("rkdeveloptool wl of the bmap image (64 MiB raw)  {rkb_m:6.2} s  (runs {rkb:?})");
    println!(
        "engine bmap 25 % end to end, no verify {fb_m:6.2} s   {:.2}x faster  (runs {fb:?})",
        rkb_m / fb_m
    );
    println!(
        "engine bmap 25 % end to end + verify   {:6.2} s   {:.2}x faster; bmap check pre-pass {check:.3} s; verify {bmap_verify:.2} s",
        median(fbv_proc.clone()),
        rkb_m / median(fbv_proc)
    );
    println!(
        "resume: first run cut by power-off; second run wrote {written} B, skipped {skipped} B of {} (write {:.2} s, of it comparing {:.2} s)",
        resume.len(),
        f(&res, &["write", "secs"]),
        f(&res, &["write", "compare_secs"])
    );
    // Sanity, not the targets (the VM's timing noise is larger than 5 %): a bmap of a
    // quarter of the image writes faster than the whole.
    assert!(
        fb_m < rkb_m,
        "the bmap flash was not faster than writing all: {fb:?} vs {rkb:?}"
    );
}
