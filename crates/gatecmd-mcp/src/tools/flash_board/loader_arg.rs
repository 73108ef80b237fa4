//! `flash_board`'s `loader` argument: a packed loader's path, or a DDR init blob and
//! usbplug pair (docs/FLASHING.md, "DDR blob + usbplug"), and how each reaches the use case.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use gatecmd_domain::usecases::flash::PairNames;

/// `flash_board`'s `loader`: a packed loader, or a DDR blob and usbplug pair.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum LoaderArg {
    /// A packed loader (`*_spl_loader_*.bin`), a path in the file roots.
    Packed(String),
    /// A DDR init blob and a usbplug, paths in the file roots.
    Pair {
        /// rkbin's DDR init blob (`rk3588_ddr_….bin`), sent as 0x471.
        ddr: String,
        /// rkbin's usbplug (`rk3588_usbplug_v….bin`), sent as 0x472.
        usbplug: String,
    },
}

impl LoaderArg {
    /// The packed loader's path, if it is one.
    pub fn packed(&self) -> Option<String> {
        match self {
            LoaderArg::Packed(l) => Some(l.clone()),
            LoaderArg::Pair { .. } => None,
        }
    }

    /// The pair's names, if it is one.
    pub fn pair(self) -> Option<PairNames> {
        match self {
            LoaderArg::Pair { ddr, usbplug } => Some(PairNames { ddr, usbplug }),
            LoaderArg::Packed(_) => None,
        }
    }
}
