//! The rockusb protocol, device side: the mask ROM's vendor-request download (`maskrom`),
//! the bulk-only CBW/CSW framing (`cbw`) and the Loader commands (`commands`). Wire facts
//! from rkdeveloptool 1.32 (`RKComm.cpp`, `RKDevice.cpp`) and U-Boot's `f_rockusb.c`;
//! docs/VBOARD.md lists them.

pub mod cbw;
pub mod commands;
pub mod maskrom;

/// The rockusb gadget's mode, as the host tells it (bit 0 of bcdUSB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    MaskRom,
    Loader,
}
