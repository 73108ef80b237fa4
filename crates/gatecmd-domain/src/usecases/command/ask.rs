//! A command call as asked, whatever surface it came through: the command, its arguments,
//! what it runs on and how. `prepare` decides on it; a call an approval holds keeps a copy
//! ([`Ask::again`]) to be checked again once approved.

use gatecmd_core::sanitizer::Args;
use gatecmd_devices::{DeviceError, DeviceId};
use serde::{Deserialize, Deserializer};

/// What a call asks to run (the lease it runs under and its note go with the caller).
#[derive(Debug, Default)]
#[cfg_attr(test, derive(Deserialize), serde(default))]
pub struct Ask {
    pub command: String,
    pub args: Args,
    pub timeout_secs: Option<u64>,
    pub dry_run: bool,
    pub device: Option<DeviceArg>,
    pub board: Option<String>,
    pub wait_secs: Option<u64>,
    pub background: bool,
}

impl Ask {
    /// The call as it is checked again once approved: the same command, arguments,
    /// timeout, device or board and wait, run (never a dry run) as the approval's job.
    pub fn again(&self) -> Ask {
        Ask {
            command: self.command.clone(),
            args: Args::List(self.args.clone().into_vec()),
            timeout_secs: self.timeout_secs,
            dry_run: false,
            device: match &self.device {
                Some(DeviceArg::Id(id)) => Some(DeviceArg::Id(id.clone())),
                _ => None,
            },
            board: self.board.clone(),
            wait_secs: self.wait_secs,
            background: false,
        }
    }
}

/// `device` of a call, parsed into a port path as the request is read. A text that is no
/// port path is kept with the reason, so that `prepare` refuses it in its turn among the
/// call's checks (audited, `invalid_request`, the same first reason for a call wrong in
/// several ways) rather than the surface as arguments that do not deserialize.
#[derive(Debug)]
pub enum DeviceArg {
    Id(DeviceId),
    Invalid(DeviceError),
}

impl<'de> Deserialize<'de> for DeviceArg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(match text.parse() {
            Ok(id) => DeviceArg::Id(id),
            Err(e) => DeviceArg::Invalid(e),
        })
    }
}
