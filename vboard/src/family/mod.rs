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
    /// The board's line after `gatecmd-vboard ready: …`: `board NAME KIND=UDC port=PORT
    /// console=UDC port=PORT tty=… flash=… size=… family=FAMILY`.
    fn ready_line(&self) -> String;
    /// Takes the board off the bus (serve is stopping).
    fn shutdown(&self);
    /// Its FunctionFS mounts, unmounted when serve stops.
    fn ffs_dirs(&self) -> Vec<PathBuf>;
}

/// The ready line's common shape (vbench.py parses `board NAME rockusb=… port=(…)
/// console=… port=(…)`; other families put their own word where `rockusb` is).
#[allow(clippy::too_many_arguments)]
pub fn ready_line(
    name: &str,
    kind: &str,
    udc: &str,
    port: Option<String>,
    console_udc: &str,
    console_port: Option<String>,
    tty: &std::path::Path,
    flash: &std::path::Path,
    bytes: u64,
    family: Family,
) -> String {
    format!(
        "board {name} {kind}={udc} port={} console={console_udc} port={} tty={} flash={} size={bytes} family={}",
        port.as_deref().unwrap_or("?"),
        console_port.as_deref().unwrap_or("?"),
        tty.display(),
        flash.display(),
        family.name()
    )
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
        let l = ready_line(
            "vb1",
            "rockusb",
            "dummy_udc.0",
            Some("1-1".into()),
            "dummy_udc.1",
            None,
            std::path::Path::new("/dev/ttyGS0"),
            std::path::Path::new("/run/vb/vb1.flash"),
            1 << 20,
            Family::Rockchip,
        );
        assert_eq!(
            l,
            "board vb1 rockusb=dummy_udc.0 port=1-1 console=dummy_udc.1 port=? tty=/dev/ttyGS0 flash=/run/vb/vb1.flash size=1048576 family=rockchip"
        );
    }
}
