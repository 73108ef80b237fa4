//! A small command-line driver of the engine, for the usbvm test (tests/usbvm.rs copies it
//! into the guest) and for trying the engine by hand against a board or the vboard.
//!
//! ```text
//! flash_driver info  --port 1-1
//! flash_driver db    --port 1-1 --loader loader.bin [--wait-secs 10]
//! flash_driver flash --port 1-1 --image IMG [--bmap BMAP] --board vb1 --state DIR
//!                    [--chunk BYTES] [--transfer SECTORS] [--start-lba N]
//!                    [--no-resume] [--no-verify] [--reset]
//! flash_driver flash --file-target DISK --capacity BYTES --image IMG ...   (no board:
//!                    a file as the target, to measure the host side alone)
//! flash_driver reset --port 1-1 [--maskrom]
//! flash_driver check --image IMG [--bmap BMAP]
//! ```
//!
//! Output, one fact per line for the test to parse: `PROGRESS phase done total` (every 5 %),
//! `TIME name seconds`, `RESULT {json}` on success; `ERROR message` and exit status 1 on
//! failure.

use std::collections::HashMap;
use std::fs::File;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use gatecmd_flash::{
    BootFile, Control, DeviceId, FlashError, FlashOptions, Image, Progress, Reset, RockusbBoard,
    flash,
};

struct Args {
    cmd: String,
    opts: HashMap<String, String>,
    flags: Vec<String>,
}

const FLAGS: [&str; 4] = ["--no-resume", "--no-verify", "--reset", "--maskrom"];

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let cmd = it
        .next()
        .ok_or("usage: flash_driver info|db|flash|reset|check ...")?;
    let mut opts = HashMap::new();
    let mut flags = Vec::new();
    while let Some(a) = it.next() {
        if FLAGS.contains(&a.as_str()) {
            flags.push(a);
        } else if a.starts_with("--") {
            let v = it.next().ok_or(format!("{a} needs a value"))?;
            opts.insert(a, v);
        } else {
            return Err(format!("unexpected argument {a:?}"));
        }
    }
    Ok(Args { cmd, opts, flags })
}

impl Args {
    fn get(&self, k: &str) -> Result<&str, String> {
        self.opts
            .get(k)
            .map(String::as_str)
            .ok_or(format!("{} needs {k}", self.cmd))
    }

    fn num(&self, k: &str) -> Result<Option<u64>, String> {
        self.opts
            .get(k)
            .map(|v| {
                let (t, radix) = match v.strip_prefix("0x") {
                    Some(h) => (h, 16),
                    None => (v.as_str(), 10),
                };
                u64::from_str_radix(t, radix).map_err(|_| format!("{k} {v:?} is not a number"))
            })
            .transpose()
    }

    fn flag(&self, f: &str) -> bool {
        self.flags.iter().any(|x| x == f)
    }

    fn port(&self) -> Result<DeviceId, String> {
        self.get("--port")?.parse().map_err(|e| format!("{e}"))
    }
}

fn open(path: &str) -> Result<File, String> {
    File::open(path).map_err(|e| format!("{path}: {e}"))
}

fn image(a: &Args) -> Result<Image, String> {
    let bmap = match a.opts.get("--bmap") {
        Some(p) => Some(open(p)?),
        None => None,
    };
    Image::open(open(a.get("--image")?)?, bmap).map_err(|e| e.to_string())
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Prints a progress line when the phase changes or 5 % more is done.
fn printer() -> impl FnMut(Progress) {
    let mut last: Option<(gatecmd_flash::Phase, u64)> = None;
    move |p: Progress| {
        let pct = (p.done * 100).checked_div(p.total).unwrap_or(100);
        let due = match last {
            Some((ph, l)) => ph != p.phase || pct >= l + 5 || (pct == 100 && l != 100),
            None => true,
        };
        if due {
            println!("PROGRESS {} {} {}", p.phase, p.done, p.total);
            last = Some((p.phase, pct));
        }
    }
}

fn options(a: &Args) -> Result<FlashOptions, String> {
    let mut o = FlashOptions::new(a.get("--board")?, a.get("--state")?);
    if let Some(c) = a.num("--chunk")? {
        o.chunk_size = c;
    }
    o.start_lba = a.num("--start-lba")?.unwrap_or(0);
    o.resume = !a.flag("--no-resume");
    o.verify = !a.flag("--no-verify");
    Ok(o)
}

fn run(a: &Args) -> Result<(), String> {
    let err = |e: FlashError| e.to_string();
    match a.cmd.as_str() {
        "info" => {
            let mut b = RockusbBoard::open(&a.port()?).map_err(err)?;
            let chip = b.chip_info().map_err(err)?;
            println!(
                "RESULT {{\"usb\":{},\"chip\":{}}}",
                json(b.usb()),
                json(&chip)
            );
        }
        "db" => {
            let t0 = Instant::now();
            let loader = BootFile::read(open(a.get("--loader")?)?).map_err(err)?;
            let b = RockusbBoard::open(&a.port()?).map_err(err)?;
            let wait = Duration::from_secs(a.num("--wait-secs")?.unwrap_or(10));
            let (b, report) = b.download_boot_and_wait(&loader, wait).map_err(err)?;
            println!("TIME db {:.3}", t0.elapsed().as_secs_f64());
            println!(
                "RESULT {{\"download\":{},\"usb\":{}}}",
                json(&report),
                json(b.usb())
            );
        }
        "flash" if a.opts.contains_key("--file-target") => {
            let t0 = Instant::now();
            let mut img = image(a)?;
            let path = a.get("--file-target")?;
            let disk = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(|e| format!("{path}: {e}"))?;
            let capacity = a
                .num("--capacity")?
                .ok_or("--file-target needs --capacity")?;
            let mut target = gatecmd_flash::FileTarget::new(disk, capacity)
                .map_err(|e| format!("{path}: {e}"))?
                .with_max_transfer(a.num("--transfer")?.unwrap_or(128) as u32);
            let o = options(a)?;
            let cancel = AtomicBool::new(false);
            let mut progress = printer();
            let r = flash(
                &mut target,
                &mut img,
                &o,
                &mut Control::new(&mut progress, &cancel),
            )
            .map_err(err)?;
            println!("TIME flash {:.3}", t0.elapsed().as_secs_f64());
            println!("RESULT {}", json(&r));
        }
        "flash" => {
            let t0 = Instant::now();
            let mut img = image(a)?;
            println!("TIME image_open {:.3}", t0.elapsed().as_secs_f64());
            let b = RockusbBoard::open(&a.port()?).map_err(err)?;
            let mut target = b.into_target().map_err(err)?;
            println!("TIME board_open {:.3}", t0.elapsed().as_secs_f64());
            if let Some(t) = a.num("--transfer")? {
                target = target.with_transfer_blocks(t as u32).map_err(err)?;
            }
            let o = options(a)?;
            let cancel = AtomicBool::new(false);
            let mut progress = printer();
            let r = flash(
                &mut target,
                &mut img,
                &o,
                &mut Control::new(&mut progress, &cancel),
            )
            .map_err(err)?;
            println!("TIME flash {:.3}", t0.elapsed().as_secs_f64());
            if a.flag("--reset") {
                target.reset_and_boot().map_err(err)?;
            }
            println!("RESULT {}", json(&r));
        }
        "reset" => {
            let b = RockusbBoard::open(&a.port()?).map_err(err)?;
            let how = if a.flag("--maskrom") {
                Reset::MaskRom
            } else {
                Reset::Boot
            };
            b.reset(how).map_err(err)?;
            println!("RESULT {{\"reset\":\"{how:?}\"}}");
        }
        "check" => {
            let mut img = image(a)?;
            let cancel = AtomicBool::new(false);
            let mut progress = printer();
            // No board here: the check expands at most 16 TiB (no board's flash is larger).
            let limit = gatecmd_flash::SizeLimit::new(16 << 40, "this driver's check");
            let r = img
                .check(&mut Control::new(&mut progress, &cancel), &limit)
                .map_err(err)?;
            println!(
                "RESULT {{\"image\":{},\"check\":{}}}",
                json(img.info()),
                json(&r)
            );
        }
        other => {
            return Err(format!(
                "unknown command {other:?} (info, db, flash, reset, check)"
            ));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse().and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("ERROR {e}");
            ExitCode::FAILURE
        }
    }
}
