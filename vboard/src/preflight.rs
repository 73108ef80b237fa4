//! Can this machine host virtual boards? One check per prerequisite, in order; the first
//! that fails is the one line the user sees, with how to fix it.

use std::path::Path;

use crate::gadget;

pub fn check(boards: usize) -> Result<Vec<String>, String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("not root: configfs gadgets need root (run it with sudo)".into());
    }
    if !Path::new(gadget::CONFIGFS).is_dir() {
        return Err(format!(
            "no configfs usb_gadget at {}: load libcomposite and mount configfs (modprobe libcomposite; mount -t configfs none /sys/kernel/config)",
            gadget::CONFIGFS
        ));
    }
    // The functionfs filesystem registers itself only when the first `ffs.*` function is
    // created, so the module's presence is what can be checked beforehand.
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !fs.split_whitespace().any(|w| w == "functionfs")
        && !Path::new("/sys/module/usb_f_fs").exists()
    {
        return Err("no functionfs in this kernel: load usb_f_fs (modprobe usb_f_fs; Debian builds it as CONFIG_USB_CONFIGFS_F_FS)".into());
    }
    let udcs = gadget::free_udcs();
    if udcs.len() < 2 * boards {
        return Err(format!(
            "{boards} board(s) need {} free UDCs, found {}{}: load dummy_hcd (modprobe dummy_hcd num={}) or free a UDC",
            2 * boards,
            udcs.len(),
            if udcs.is_empty() {
                String::new()
            } else {
                format!(" ({})", udcs.join(", "))
            },
            2 * boards
        ));
    }
    Ok(udcs)
}
