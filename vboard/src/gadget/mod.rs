//! configfs USB gadgets (`/sys/kernel/config/usb_gadget/NAME`): create one with a single
//! function, bind it to a UDC, unbind it, switch WebUSB (which decides bcdUSB), remove it.
//! Also the UDCs themselves: which are free and which host port each one feeds.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const CONFIGFS: &str = "/sys/kernel/config/usb_gadget";
const UDC_CLASS: &str = "/sys/class/udc";

/// What a gadget presents.
pub struct Identity<'a> {
    pub vid: u16,
    pub pid: u16,
    pub manufacturer: &'a str,
    pub product: &'a str,
    pub serial: &'a str,
}

pub struct Gadget {
    dir: PathBuf,
    pub udc: String,
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

impl Gadget {
    /// Creates `usb_gadget/NAME` with one configuration holding `functions/FUNCTION`
    /// (e.g. `ffs.vb1`, `acm.vb1`). A leftover gadget of that name is removed first.
    pub fn create(name: &str, id: &Identity, function: &str, udc: &str) -> io::Result<Gadget> {
        let dir = Path::new(CONFIGFS).join(name);
        if dir.exists() {
            remove_dir(&dir);
        }
        fs::create_dir(&dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        write(&dir.join("idVendor"), &format!("0x{:04x}", id.vid))?;
        write(&dir.join("idProduct"), &format!("0x{:04x}", id.pid))?;
        write(&dir.join("bcdDevice"), "0x0100")?;
        write(&dir.join("bcdUSB"), "0x0200")?;
        let strings = dir.join("strings/0x409");
        fs::create_dir_all(&strings)?;
        write(&strings.join("manufacturer"), id.manufacturer)?;
        write(&strings.join("product"), id.product)?;
        write(&strings.join("serialnumber"), id.serial)?;
        let config = dir.join("configs/c.1");
        fs::create_dir_all(&config)?;
        write(&config.join("MaxPower"), "500")?;
        let func = dir.join("functions").join(function);
        fs::create_dir(&func)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", func.display())))?;
        std::os::unix::fs::symlink(&func, config.join(function))?;
        Ok(Gadget {
            dir,
            udc: udc.to_string(),
        })
    }

    pub fn function_dir(&self, function: &str) -> PathBuf {
        self.dir.join("functions").join(function)
    }

    /// bcdUSB follows WebUSB on kernels ≥ 6.3 (the composite layer overrides the
    /// attribute): off = 0x0200 (MaskROM), on = 0x0201 (Loader). Only while unbound.
    pub fn set_webusb(&self, on: bool) -> io::Result<()> {
        write(
            &self.dir.join("bcdUSB"),
            if on { "0x0201" } else { "0x0200" },
        )?;
        let use_ = self.dir.join("webusb/use");
        if use_.exists() {
            write(&use_, if on { "1" } else { "0" })?;
        } else if on {
            return Err(io::Error::other(
                "this kernel has no configfs webusb (needs ≥ 6.3): Loader mode (bcdUSB 0x0201) cannot be presented",
            ));
        }
        Ok(())
    }

    pub fn bound(&self) -> bool {
        fs::read_to_string(self.dir.join("UDC"))
            .map(|s| !s.trim().is_empty())
            .unwrap_or(false)
    }

    pub fn bind(&self) -> io::Result<()> {
        if self.bound() {
            return Ok(());
        }
        write(&self.dir.join("UDC"), &self.udc)
    }

    /// Takes the gadget off the bus and, where the host side is visible, waits (up to
    /// 5 s) until the host has removed the device.
    pub fn unbind(&self) -> io::Result<()> {
        if !self.bound() {
            return Ok(());
        }
        write(&self.dir.join("UDC"), "\n")?;
        if let Some(p) = host_port(&self.udc) {
            let dev = Path::new("/sys/bus/usb/devices").join(p);
            let deadline = Instant::now() + Duration::from_secs(5);
            while dev.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }

    /// Waits until the host has configured the device. Where the host side is visible
    /// (a `dummy_hcd` UDC: the host port is on this machine) that is the port's first
    /// interface (and `extra`, e.g. `tty` for the console's driver) appearing; elsewhere
    /// the UDC's `state`, which can still read `configured` from before an unbind, so it
    /// is only a fallback.
    pub fn wait_configured(&self, timeout: Duration, extra: Option<&str>) -> bool {
        let deadline = Instant::now() + timeout;
        let port = host_port(&self.udc);
        loop {
            let done = match &port {
                Some(p) => {
                    let intf = Path::new("/sys/bus/usb/devices").join(format!("{p}:1.0"));
                    intf.exists() && extra.is_none_or(|x| intf.join(x).exists())
                }
                None => udc_state(&self.udc).as_deref() == Some("configured"),
            };
            if done {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn remove_dir(dir: &Path) {
    let _ = fs::write(dir.join("UDC"), "\n");
    let config = dir.join("configs/c.1");
    if let Ok(entries) = fs::read_dir(&config) {
        for e in entries.flatten() {
            if e.path().is_symlink() {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    let _ = fs::remove_dir(config.join("strings/0x409"));
    let _ = fs::remove_dir(&config);
    if let Ok(entries) = fs::read_dir(dir.join("functions")) {
        for e in entries.flatten() {
            let _ = fs::remove_dir(e.path());
        }
    }
    let _ = fs::remove_dir(dir.join("strings/0x409"));
    let _ = fs::remove_dir(dir);
}

/// Removes gadgets named `PREFIX*` left by an earlier run.
pub fn remove_leftovers(prefix: &str) {
    if let Ok(entries) = fs::read_dir(CONFIGFS) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(prefix) {
                remove_dir(&e.path());
            }
        }
    }
}

pub fn udc_state(udc: &str) -> Option<String> {
    fs::read_to_string(Path::new(UDC_CLASS).join(udc).join("state"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// UDCs not named by any gadget's `UDC` file, sorted by name.
pub fn free_udcs() -> Vec<String> {
    let used: Vec<String> = fs::read_dir(CONFIGFS)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| fs::read_to_string(e.path().join("UDC")).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let mut all: Vec<String> = fs::read_dir(UDC_CLASS)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|u| !used.contains(u))
        .collect();
    all.sort_by_key(|a| natural_key(a));
    all
}

/// `dummy_udc.10` after `dummy_udc.9`.
fn natural_key(s: &str) -> (String, u64) {
    let digits: String = s.chars().rev().take_while(|c| c.is_ascii_digit()).collect();
    let n: u64 = digits
        .chars()
        .rev()
        .collect::<String>()
        .parse()
        .unwrap_or(0);
    (s[..s.len() - digits.len()].to_string(), n)
}

/// The host-side port of a `dummy_hcd` UDC: `dummy_udc.K` feeds `dummy_hcd.K`, whose root
/// hub is `usbB`, so the device appears at `B-1`. `None` for other UDCs.
pub fn host_port(udc: &str) -> Option<String> {
    let k = udc.strip_prefix("dummy_udc.")?;
    let dir = format!("/sys/devices/platform/dummy_hcd.{k}");
    fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let bus = name.strip_prefix("usb")?;
        bus.parse::<u32>().ok().map(|b| format!("{b}-1"))
    })
}

#[cfg(test)]
mod tests {
    use super::natural_key;

    #[test]
    fn udcs_sort_naturally() {
        let mut v = vec!["dummy_udc.10", "dummy_udc.2", "dummy_udc.0"];
        v.sort_by_key(|a| natural_key(a));
        assert_eq!(v, ["dummy_udc.0", "dummy_udc.2", "dummy_udc.10"]);
    }
}
