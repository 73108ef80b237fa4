//! Download boot (`rkdeveloptool db`): the boot file's 0x471 images, then its 0x472 images,
//! to a board in MaskROM through the `rockusb` crate's `write_maskrom_area` (vendor control
//! transfers 0x40/0x0C in 4096-byte pieces, the CRC-CCITT appended, as rkdeveloptool's
//! `RKU_DeviceRequest`). The mask ROM then starts the usbplug, which re-enumerates at the
//! same port as a Loader.
//!
//! **Never cancelled half-way.** There is no cancel flag here on purpose: a mask ROM left
//! with half a 0x471 or 0x472 image waits for the rest and takes nothing else, so the only
//! way out is a power cycle. The download is short (a few hundred KiB); it runs to its end.

use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{Mode, RockusbBoard};
use crate::boot_file::BootFile;
use crate::error::FlashError;

/// What was sent, and how long it took.
#[derive(Debug, Clone, Serialize)]
pub struct DownloadReport {
    /// `(area, name, bytes)` of each image sent, in order.
    pub sent: Vec<(u16, String, usize)>,
    /// Seconds for the transfers and the entries' delays.
    pub secs: f64,
    /// Seconds until the Loader was open at the same port (when waited for).
    pub wait_secs: Option<f64>,
}

impl RockusbBoard {
    /// Sends the loader's images to a board in MaskROM. On success the board is leaving the
    /// bus to come back as a Loader: this handle is then stale; see
    /// [`download_boot_and_wait`](Self::download_boot_and_wait).
    pub fn download_boot(&mut self, boot: &BootFile) -> Result<DownloadReport, FlashError> {
        if self.usb.mode != Mode::MaskRom {
            return Err(FlashError::WrongMode {
                port: self.usb.port.clone(),
                found: self.usb.mode,
                needed: Mode::MaskRom,
                step: "download boot",
                advice: "it already runs a loader: write the image directly, or reset it into MaskROM first to load another loader",
            });
        }
        let t0 = Instant::now();
        let mut sent = Vec::new();
        for e in &boot.entries {
            self.dev
                .write_maskrom_area(e.area, &e.data)
                .map_err(|err| {
                    let step = format!("download boot (0x{:x} image {:?})", e.area, e.name);
                    let done = if sent.is_empty() {
                        "nothing was sent before it".to_string()
                    } else {
                        format!("{} image(s) were sent before it", sent.len())
                    };
                    super::board::usb_err(
                        &self.usb.port,
                        &step,
                        err,
                        &format!("{done}; the mask ROM now waits in an unknown state"),
                    )
                })?;
            sent.push((e.area, e.name.clone(), e.data.len()));
            if e.delay_ms > 0 {
                thread::sleep(Duration::from_millis(e.delay_ms as u64));
            }
        }
        Ok(DownloadReport {
            sent,
            secs: t0.elapsed().as_secs_f64(),
            wait_secs: None,
        })
    }

    /// Sends the loader, then waits (up to `timeout`) for the board to come back in Loader
    /// mode at the same port, and returns it open.
    pub fn download_boot_and_wait(
        mut self,
        boot: &BootFile,
        timeout: Duration,
    ) -> Result<(RockusbBoard, DownloadReport), FlashError> {
        let mut report = self.download_boot(boot)?;
        let port = self.usb.port.clone();
        // Close the MaskROM handle before its device goes away.
        drop(self);
        let t0 = Instant::now();
        let board = RockusbBoard::wait(&port, Mode::Loader, timeout).map_err(|e| match e {
            FlashError::Timeout { port, secs, seen, .. } => FlashError::Timeout {
                port,
                what: "come back in Loader mode after the loader download (the mask ROM may not have started it: is it the loader for this SoC?)",
                secs,
                seen,
            },
            other => other,
        })?;
        report.wait_secs = Some(t0.elapsed().as_secs_f64());
        Ok((board, report))
    }
}
