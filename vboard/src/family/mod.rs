//! Board families: what a virtual board presents for flashing. Every family has the same
//! console (a CDC-ACM adapter on a second UDC) and power model (`off`, on into its
//! flashing mode, on and boot from flash); they differ in the USB device:
//! - `rockchip`: rockusb (MaskROM/Loader), flashed by `rkdeveloptool` (`board.rs`);
//! - `fastboot`: an Android bootloader in fastboot mode, flashed by `fastboot`
//!   (`fastboot/`);
//! - `dfu`: a DFU 1.1 device (runtime and DFU mode), flashed by `dfu-util` (`dfu/`).
//!
//! The control socket and `serve`'s ready lines see every board through [`Powered`].

pub mod base;
pub mod function;

use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Rockchip,
    Fastboot,
    Dfu,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Rockchip => "rockchip",
            Family::Fastboot => "fastboot",
            Family::Dfu => "dfu",
        }
    }

    /// `rockchip` (or `rk`), `fastboot`, `dfu`.
    pub fn parse(s: &str) -> Result<Family, String> {
        match s {
            "rockchip" | "rk" => Ok(Family::Rockchip),
            "fastboot" => Ok(Family::Fastboot),
            "dfu" => Ok(Family::Dfu),
            _ => Err(format!(
                "{s:?} is not a board family (rockchip, fastboot or dfu)"
            )),
        }
    }
}

/// A board as the control socket and `serve` see it.
pub trait Powered: Send + Sync {
    fn name(&self) -> &str;
    /// Switches the board on; `recovery`: into its flashing mode (Rockchip MaskROM, fastboot
    /// mode, DFU mode), as holding the board's button would. The state reached.
    fn power_on(&self, recovery: bool) -> Result<&'static str, String>;
    fn power_off(&self) -> Result<&'static str, String>;
    /// The board's entry in `status`.
    fn status(&self) -> serde_json::Value;
    /// The board's line after `gatecmd-vboard ready: …` ([`ReadyLine`]).
    fn ready_line(&self) -> String;
    /// Takes the board off the bus (serve is stopping).
    fn shutdown(&self);
    /// Its FunctionFS mounts, unmounted when serve stops.
    fn ffs_dirs(&self) -> Vec<PathBuf>;
}

/// A board's ready line (vbench.py parses `board NAME rockusb=… port=(…) console=…
/// port=(…)`; other families put their own word where `rockusb` is, and `family=` comes last
/// so that parse still works).
pub struct ReadyLine<'a> {
    pub name: &'a str,
    /// The flashing device's word: `rockusb`, `fastboot`, `dfu`.
    pub kind: &'a str,
    pub udc: &'a str,
    pub console_udc: &'a str,
    pub tty: &'a std::path::Path,
    pub flash: &'a std::path::Path,
    pub bytes: u64,
    pub family: Family,
}

impl std::fmt::Display for ReadyLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let port = |udc| crate::gadget::host_port(udc).unwrap_or_else(|| "?".into());
        write!(
            f,
            "board {} {}={} port={} console={} port={} tty={} flash={} size={} family={}",
            self.name,
            self.kind,
            self.udc,
            port(self.udc),
            self.console_udc,
            port(self.console_udc),
            self.tty.display(),
            self.flash.display(),
            self.bytes,
            self.family.name()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_parse_by_name() {
        assert_eq!(Family::parse("rk"), Ok(Family::Rockchip));
        assert_eq!(Family::parse("rockchip"), Ok(Family::Rockchip));
        assert_eq!(Family::parse("fastboot"), Ok(Family::Fastboot));
        assert_eq!(Family::parse("dfu"), Ok(Family::Dfu));
        let e = Family::parse("esp32").expect_err("unknown");
        assert!(e.contains("rockchip, fastboot or dfu"), "{e}");
    }

    #[test]
    fn the_ready_line_keeps_the_rockchip_shape() {
        // Not dummy_hcd UDCs: their host ports are unknown here.
        let l = ReadyLine {
            name: "vb1",
            kind: "rockusb",
            udc: "fe980000.usb",
            console_udc: "fe990000.usb",
            tty: std::path::Path::new("/dev/ttyGS0"),
            flash: std::path::Path::new("/run/vb/vb1.flash"),
            bytes: 1 << 20,
            family: Family::Rockchip,
        };
        assert_eq!(
            l.to_string(),
            "board vb1 rockusb=fe980000.usb port=? console=fe990000.usb port=? tty=/dev/ttyGS0 flash=/run/vb/vb1.flash size=1048576 family=rockchip"
        );
    }
}
