//! A FunctionFS gadget for one board's flashing device: `usb_gadget/gatecmd-INST` with the
//! function `ffs.INST`, FunctionFS mounted at `STATE_DIR/ffs/INST`, ep0 written with the
//! family's descriptors and strings. Bound to its UDC only when the board says so.

use std::path::{Path, PathBuf};

use crate::ffs::{self, Ep0};
use crate::gadget::{Gadget, Identity};

pub struct Function {
    pub gadget: Gadget,
    pub dir: PathBuf,
}

/// Creates the gadget (unbound) and returns it with its ep0, ready to serve.
pub fn create(
    inst: &str,
    id: &Identity,
    udc: &str,
    state_dir: &Path,
    descriptors: &[u8],
    strings: &[u8],
) -> Result<(Function, Ep0), String> {
    let gadget = Gadget::create(&format!("gatecmd-{inst}"), id, &format!("ffs.{inst}"), udc)
        .map_err(|e| format!("{inst}: gadget (is usb_f_fs loaded?): {e}"))?;
    let dir = state_dir.join("ffs").join(inst);
    ffs::mount(inst, &dir)?;
    let ep0 = Ep0::open_with(&dir, descriptors, strings)
        .map_err(|e| format!("{inst}: FunctionFS ep0 refused the descriptors: {e}"))?;
    Ok((Function { gadget, dir }, ep0))
}
