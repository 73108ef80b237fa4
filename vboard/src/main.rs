//! `gatecmd-vboard`: virtual boards on a real USB stack (docs/VBOARD.md): Rockchip
//! (rockusb), Android fastboot and USB DFU families.
//!
//! # Layout
//! - `main.rs` — the CLI: `serve`, `power`, `status`, `make-loader`, `blobs`.
//! - `blobs.rs` — `blobs DIR`: a DDR blob, a usbplug and a packed SPL loader for the virtual ROM.
//! - `preflight.rs` — can this machine host boards (root, configfs, functionfs, UDCs)?
//! - `board.rs` — one board: its gadgets, state and power; `board/usb.rs` its ep0 and bulk threads.
//! - `gadget/` — configfs gadgets and UDCs. `ffs/` — FunctionFS descriptors, events, endpoints.
//! - `rockusb/` — the mask ROM download, CBW/CSW, the Loader commands.
//! - `flash.rs` — the sparse flash file and the regions written since the last boot.
//! - `console/` — the boot log, the login and shell, the tty thread (`console/port.rs`: the
//!   console as one piece, for the fastboot and DFU boards).
//! - `family/` — the families, the [`family::Powered`] view every board gives the control
//!   socket, and what the fastboot and DFU boards share.
//! - `fastboot/` — the fastboot protocol and board; `sparse.rs` — Android sparse images.
//! - `dfu/` — the DFU 1.1 protocol and board.
//! - `control.rs` — the control socket (server and client).
//! - `loader.rs` — the Rockchip boot-file packer; `crc.rs` — Rockchip's CRCs and RC4.

mod blobs;
mod board;
mod console;
mod control;
mod crc;
mod dfu;
mod family;
mod fastboot;
mod ffs;
mod flash;
mod gadget;
mod loader;
mod preflight;
mod rockusb;
mod sparse;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use family::{Family, Powered};

const DEFAULT_STATE: &str = "/run/gatecmd-vboard";

#[derive(Parser)]
#[command(
    name = "gatecmd-vboard",
    version,
    about = "Virtual boards that the real rkdeveloptool, fastboot and dfu-util flash (docs/VBOARD.md)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Present the boards (foreground; SIGTERM or Ctrl-C to stop).
    Serve {
        /// This many Rockchip boards (default 1, when no --board is given).
        #[arg(long, value_parser = clap::value_parser!(u8).range(1..=8), conflicts_with = "board")]
        boards: Option<u8>,
        /// One board of this family (rockchip or rk, fastboot, dfu); repeat it for more:
        /// vb1 is the first --board, vb2 the second, …
        #[arg(long, value_parser = Family::parse)]
        board: Vec<Family>,
        /// Per board: bytes, or with a K/M/G suffix (powers of 1024); whole MiB.
        #[arg(long, default_value = "16G", value_parser = parse_size)]
        flash_size: u64,
        #[arg(long, default_value = "0x2207", value_parser = parse_hex16)]
        vid: u16,
        #[arg(long, default_value = "0x350b", value_parser = parse_hex16)]
        pid: u16,
        /// The fastboot boards' VID and PID (Google's fastboot id by default).
        #[arg(long, default_value = "0x18d1", value_parser = parse_hex16)]
        fastboot_vid: u16,
        #[arg(long, default_value = "0x4ee0", value_parser = parse_hex16)]
        fastboot_pid: u16,
        /// The DFU boards' VID and PID (STM32's DFU bootloader by default).
        #[arg(long, default_value = "0x0483", value_parser = parse_hex16)]
        dfu_vid: u16,
        #[arg(long, default_value = "0xdf11", value_parser = parse_hex16)]
        dfu_pid: u16,
        /// A fastboot board's max-download-size (K/M suffixes): larger images arrive as
        /// sparse pieces. The download is held in memory.
        #[arg(long, default_value = "16M", value_parser = parse_download)]
        max_download_size: u32,
        #[arg(long, default_value = DEFAULT_STATE)]
        state_dir: PathBuf,
        /// Default: STATE_DIR/control.sock.
        #[arg(long)]
        control: Option<PathBuf>,
        /// At most this many bytes per second written to each flash (K/M/G suffixes, powers
        /// of 1024; default: as fast as USB carries them). A slow flash makes a write long
        /// on demand: a job that outlives a client's timeout, or time to switch the board
        /// off mid-write. `vbN=SPEED` sets one board's (repeatable): a board whose flash
        /// takes 0.5 MB/s beside fast ones.
        #[arg(long, value_parser = parse_speed)]
        write_speed: Vec<(Option<String>, u64)>,
        /// How the Rockchip boards' Loader answers reads: `sound` (default), `rk3588` (0xCC
        /// from 32 MiB, as the stock RK3588 loader), `cc:SIZE`, `stale:SIZE` (past SIZE,
        /// what the flash held when the Loader started). `vbN=MODE` sets one board's; repeat
        /// for more (docs/VBOARD.md, "Read-back modes").
        #[arg(long, value_parser = parse_read_back)]
        read_back: Vec<(Option<String>, flash::ReadBack)>,
        /// The Rockchip boards' Loader stalls (reads no data, answers nothing until a power
        /// cycle) on a READ_LBA/WRITE_LBA above SIZE bytes (K/M suffixes), as a loader that
        /// cannot take large transfers; `vbN=SIZE` for one board.
        #[arg(long, value_parser = parse_stall)]
        stall_above: Vec<(Option<String>, u64)>,
    },
    /// Switch a board: `on`, `on --recovery` (its flashing mode: MaskROM, fastboot, DFU),
    /// `off`.
    Power {
        board: String,
        #[arg(value_parser = ["on", "off"])]
        action: String,
        /// The Rockchip word for --recovery (the MaskROM button held).
        #[arg(long)]
        maskrom: bool,
        /// On into the board's flashing mode, as holding its button (or strapping its boot
        /// pin) would.
        #[arg(long)]
        recovery: bool,
        #[arg(long, default_value = concat!("/run/gatecmd-vboard", "/control.sock"))]
        control: PathBuf,
    },
    /// Print every board's state as JSON.
    Status {
        #[arg(long, default_value = concat!("/run/gatecmd-vboard", "/control.sock"))]
        control: PathBuf,
    },
    /// Write `ddr.bin`, `usbplug.bin` (a DDR + usbplug pair, sent as 0x471 then 0x472) and
    /// `spl_loader.bin` (a packed loader) into DIR; the virtual mask ROM knows them only.
    Blobs { dir: PathBuf },
    /// Write a Rockchip boot file (`rkdeveloptool db FILE`); the name must contain `.bin`.
    MakeLoader {
        #[arg(long)]
        out: PathBuf,
        /// A wrong trailing CRC-32: rkdeveloptool refuses the file.
        #[arg(long, conflicts_with = "bad_payload")]
        bad_crc: bool,
        /// A valid file whose 0x472 image the virtual ROM does not start.
        #[arg(long)]
        bad_payload: bool,
    },
}

fn parse_hex16(s: &str) -> Result<u16, String> {
    let t = s.strip_prefix("0x").unwrap_or(s);
    u16::from_str_radix(t, 16).map_err(|_| format!("{s:?} is not a 16-bit hex value like 0x2207"))
}

/// A byte count with an optional K/M/G suffix (powers of 1024).
fn parse_bytes(s: &str) -> Result<u64, String> {
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size like 16G, 64M or 1048576"))?;
    n.checked_mul(mul)
        .ok_or_else(|| format!("{s:?} is too large"))
}

fn parse_download(s: &str) -> Result<u32, String> {
    match parse_bytes(s) {
        Ok(n) if (4096..=1 << 30).contains(&n) => Ok(n as u32),
        _ => Err(format!(
            "{s:?} is not a download size from 4K to 1G (like 16M)"
        )),
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let bytes = parse_bytes(s)?;
    // rkdeveloptool's ef erases uiFlashSize / 2 / 1024 MiB: only whole MiB are erasable;
    // READ_FLASH_INFO carries the sector count in 32 bits.
    if bytes < (1 << 20) || bytes % (1 << 20) != 0 || bytes / 512 > u32::MAX as u64 {
        return Err(format!(
            "{s:?}: the flash must be a whole number of MiB, from 1M to 2047G"
        ));
    }
    Ok(bytes)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Serve {
            boards,
            board,
            flash_size,
            vid,
            pid,
            fastboot_vid,
            fastboot_pid,
            dfu_vid,
            dfu_pid,
            max_download_size,
            state_dir,
            control,
            write_speed,
            read_back,
            stall_above,
        } => {
            let control = control.unwrap_or_else(|| state_dir.join("control.sock"));
            let families = if board.is_empty() {
                vec![Family::Rockchip; boards.unwrap_or(1) as usize]
            } else {
                board
            };
            if families.len() > 8 {
                return fail(&format!("{} boards asked for; at most 8", families.len()));
            }
            serve(Serve {
                families,
                flash: flash_size,
                ids: Ids {
                    rockchip: (vid, pid),
                    fastboot: (fastboot_vid, fastboot_pid),
                    dfu: (dfu_vid, dfu_pid),
                },
                max_download: max_download_size,
                state_dir,
                control,
                write_speed,
                read_back,
                stall_above,
            })
        }
        Cmd::Power {
            board,
            action,
            maskrom,
            recovery,
            control,
        } => {
            let req = match (action.as_str(), maskrom, recovery) {
                ("on", true, _) => format!("power {board} on maskrom"),
                ("on", false, true) => format!("power {board} on recovery"),
                ("off", true, _) | ("off", _, true) => {
                    return fail(
                        "--recovery/--maskrom go with `on` (the button is held while powering on)",
                    );
                }
                (a, _, _) => format!("power {board} {a}"),
            };
            control::request(&control, &req).map(|s| println!("{board}: {s}"))
        }
        Cmd::Status { control } => control::request(&control, "status").map(|s| println!("{s}")),
        Cmd::MakeLoader {
            out,
            bad_crc,
            bad_payload,
        } => make_loader(&out, bad_crc, bad_payload),
        Cmd::Blobs { dir } => blobs::write(&dir),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(why: &str) -> ExitCode {
    eprintln!("gatecmd-vboard: {why}");
    ExitCode::from(2)
}

fn make_loader(out: &std::path::Path, bad_crc: bool, bad_payload: bool) -> Result<(), String> {
    if !out.to_string_lossy().to_lowercase().contains(".bin") {
        return Err(format!(
            "{}: the name must contain \".bin\" (rkdeveloptool opens any other name as an update.img)",
            out.display()
        ));
    }
    let variant = if bad_crc {
        loader::Variant::BadCrc
    } else if bad_payload {
        loader::Variant::BadPayload
    } else {
        loader::Variant::Good
    };
    let bytes = loader::build(variant);
    // What rkdeveloptool will check; a bad-crc file is meant to fail it.
    if variant != loader::Variant::BadCrc {
        loader::parse(&bytes)
            .map_err(|e| format!("internal error: the packed loader does not parse: {e}"))?;
    }
    std::fs::write(out, bytes).map_err(|e| format!("{}: {e}", out.display()))
}

/// `[vbN=]SIZE` of `--stall-above`.
fn parse_stall(s: &str) -> Result<(Option<String>, u64), String> {
    let (board, size) = match s.split_once('=') {
        Some((b, v)) => (Some(b.to_string()), v),
        None => (None, s),
    };
    match parse_bytes(size) {
        Ok(n) if n > 0 => Ok((board, n)),
        _ => Err(format!("{size:?} is not a size in bytes like 64K or 1M")),
    }
}

/// `[vbN=]MODE` of `--read-back`.
fn parse_read_back(s: &str) -> Result<(Option<String>, flash::ReadBack), String> {
    match s.split_once('=') {
        Some((board, mode)) => Ok((Some(board.to_string()), flash::ReadBack::parse(mode)?)),
        None => Ok((None, flash::ReadBack::parse(s)?)),
    }
}

/// The read-back mode of board `name`: its own `vbN=MODE`, else the last bare MODE.
fn read_back_of(modes: &[(Option<String>, flash::ReadBack)], name: &str) -> flash::ReadBack {
    modes
        .iter()
        .rev()
        .find(|(b, _)| b.as_deref() == Some(name))
        .or_else(|| modes.iter().rev().find(|(b, _)| b.is_none()))
        .map(|(_, m)| *m)
        .unwrap_or(flash::ReadBack::Sound)
}

/// Board `name`'s own `vbN=VALUE`, else the last bare VALUE.
fn per_board<T: Copy>(list: &[(Option<String>, T)], name: &str) -> Option<T> {
    list.iter()
        .rev()
        .find(|(b, _)| b.as_deref() == Some(name))
        .or_else(|| list.iter().rev().find(|(b, _)| b.is_none()))
        .map(|(_, v)| *v)
}

/// `[vbN=]SPEED` of `--write-speed`.
fn parse_speed(s: &str) -> Result<(Option<String>, u64), String> {
    match s.split_once('=') {
        Some((board, v)) => Ok((Some(board.to_string()), speed(v)?)),
        None => Ok((None, speed(s)?)),
    }
}

fn speed(s: &str) -> Result<u64, String> {
    match parse_bytes(s) {
        Ok(0) | Err(_) => Err(format!(
            "{s:?} is not a write speed in bytes per second like 4M or 512K"
        )),
        Ok(n) => Ok(n),
    }
}

/// VID:PID per family.
struct Ids {
    rockchip: (u16, u16),
    fastboot: (u16, u16),
    dfu: (u16, u16),
}

/// `serve`'s arguments.
struct Serve {
    /// Board vbK is `families[K-1]`.
    families: Vec<Family>,
    flash: u64,
    ids: Ids,
    max_download: u32,
    state_dir: PathBuf,
    control: PathBuf,
    write_speed: Vec<(Option<String>, u64)>,
    read_back: Vec<(Option<String>, flash::ReadBack)>,
    stall_above: Vec<(Option<String>, u64)>,
}

fn serve(args: Serve) -> Result<(), String> {
    let Serve {
        families,
        flash,
        ids,
        max_download,
        state_dir,
        control: control_path,
        write_speed,
        read_back,
        stall_above,
    } = args;
    let n = families.len();
    use nix::sys::signal::{SigSet, Signal};
    let udcs = preflight::check(n)?;
    // Block the stop signals before any thread starts, then wait for them here.
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block()
        .map_err(|e| format!("signal mask: {e}"))?;
    std::fs::create_dir_all(&state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{}: {e}", state_dir.display()))?;
    }
    // An earlier run's FunctionFS mounts, then its gadgets (their ep0s are closed now).
    if let Ok(entries) = std::fs::read_dir(state_dir.join("ffs")) {
        for e in entries.flatten() {
            ffs::unmount(&e.path());
        }
    }
    gadget::remove_leftovers("gatecmd-vb");
    let mut boards: Vec<Arc<dyn Powered>> = Vec::new();
    for (k, family) in families.iter().enumerate() {
        let (name, usb_udc, console_udc) = (
            format!("vb{}", k + 1),
            udcs[2 * k].clone(),
            udcs[2 * k + 1].clone(),
        );
        let write_speed = per_board(&write_speed, &name);
        let b: Result<Arc<dyn Powered>, String> = match family {
            Family::Rockchip => board::Board::start(board::Settings {
                read_back: read_back_of(&read_back, &name),
                stall_above: stall_above
                    .iter()
                    .rev()
                    .find(|(b, _)| b.as_deref() == Some(name.as_str()))
                    .or_else(|| stall_above.iter().rev().find(|(b, _)| b.is_none()))
                    .map(|(_, n)| *n),
                name,
                vid: ids.rockchip.0,
                pid: ids.rockchip.1,
                flash_bytes: flash,
                write_speed,
                state_dir: state_dir.clone(),
                rockusb_udc: usb_udc,
                console_udc,
            })
            .map(|b| b as Arc<dyn Powered>),
            Family::Fastboot => fastboot::board::FastbootBoard::start(fastboot::board::Settings {
                name,
                vid: ids.fastboot.0,
                pid: ids.fastboot.1,
                flash_bytes: flash,
                write_speed,
                max_download,
                state_dir: state_dir.clone(),
                usb_udc,
                console_udc,
            })
            .map(|b| b as Arc<dyn Powered>),
            Family::Dfu => dfu::board::DfuBoard::start(dfu::board::Settings {
                name,
                vid: ids.dfu.0,
                pid: ids.dfu.1,
                flash_bytes: flash,
                write_speed,
                state_dir: state_dir.clone(),
                usb_udc,
                console_udc,
            })
            .map(|b| b as Arc<dyn Powered>),
        };
        match b {
            Ok(b) => boards.push(b),
            Err(e) => {
                for b in &boards {
                    b.shutdown();
                }
                return Err(e);
            }
        }
    }
    control::serve(&control_path, boards.clone())?;
    println!(
        "gatecmd-vboard ready: boards={n} control={}",
        control_path.display()
    );
    for b in &boards {
        println!("{}", b.ready_line());
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let sig = set.wait().map_err(|e| format!("sigwait: {e}"))?;
    eprintln!("gatecmd-vboard: {sig:?}: unplugging the boards");
    for b in &boards {
        b.shutdown();
        for d in b.ffs_dirs() {
            ffs::unmount(&d);
        }
    }
    let _ = std::fs::remove_file(&control_path);
    // The USB threads are blocked in endpoint reads: leave without joining them.
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_odd_ones_are_refused() {
        assert_eq!(parse_size("16G"), Ok(16 << 30));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert!(parse_size("1000").is_err());
        assert!(parse_size("3000G").is_err());
        assert!(parse_size("big").is_err());
        assert_eq!(parse_speed("4M"), Ok((None, 4 << 20)));
        assert_eq!(parse_speed("1000"), Ok((None, 1000)));
        assert_eq!(parse_speed("vb3=512K"), Ok((Some("vb3".into()), 512 << 10)));
        assert!(parse_speed("vb3=0").is_err());
        let list = [(None, 1u64), (Some("vb3".to_string()), 3)];
        assert_eq!(per_board(&list, "vb3"), Some(3));
        assert_eq!(per_board(&list, "vb1"), Some(1));
        assert_eq!(per_board::<u64>(&[], "vb1"), None);
        assert!(parse_speed("0").is_err());
        assert!(parse_speed("fast").is_err());
        assert_eq!(parse_hex16("0x350b"), Ok(0x350b));
        assert_eq!(parse_download("16M"), Ok(16 << 20));
        assert!(parse_download("1K").is_err());
        assert!(parse_download("2G").is_err());
        assert!(parse_hex16("0x12345").is_err());
    }
}
