//! An input file of a flash (image, bmap, loader, DDR blob, usbplug) opened beneath the
//! file roots.

use std::fs::File;
use std::path::PathBuf;

/// An input file opened beneath the file roots, and where it resolved.
pub struct OpenFile {
    pub file: File,
    pub path: PathBuf,
}
