//! The `labgrid:` section: gatecmd as an exporter of a labgrid coordinator (docs/LAB.md,
//! docs/CONFIG.md). Off unless `coordinator` is set; restart-only.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;

/// `labgrid:` as written in YAML.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawLab {
    pub coordinator: Option<String>,
    pub name: Option<String>,
    pub console_bind: Option<String>,
    pub host: Option<String>,
    pub proxy: Option<String>,
    pub proxy_required: Option<bool>,
    pub hold_secs: Option<u64>,
}

/// Longest `hold_secs`: a board a person held through a lost coordinator is not kept
/// from the agents for more than an hour.
pub const MAX_LAB_HOLD_SECS: u64 = 3600;

/// How long labgrid-held boards stay held while the coordinator is unreachable, unless
/// the config says otherwise.
pub const DEFAULT_LAB_HOLD_SECS: u64 = 60;

/// gatecmd's part in a labgrid lab (docs/LAB.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabSettings {
    /// The coordinator's gRPC address, `HOST:PORT` (labgrid's `-x`/`LG_COORDINATOR`).
    pub coordinator: String,
    /// The exporter's name at the coordinator (default: this host's name); resources are
    /// `NAME/BOARD/CLASS/RESOURCE`.
    pub name: String,
    /// Where the console TCP ports and the power port listen (loopback by default).
    pub console_bind: IpAddr,
    /// The `host` the resources name, as a person's labgrid-client reaches it through
    /// `proxy` (default: the console bind address).
    pub host: String,
    /// The host people's labgrid-client opens its SSH forwards through (default: this
    /// host's name).
    pub proxy: String,
    /// Whether labgrid must go through `proxy` (default: when `console_bind` is loopback).
    pub proxy_required: bool,
    /// How long boards held by a labgrid place stay held once the coordinator is lost.
    pub hold: Duration,
}

impl LabSettings {
    /// The address a console or power listener binds (an ephemeral port on `console_bind`).
    pub fn listen_addr(&self) -> SocketAddr {
        SocketAddr::new(self.console_bind, 0)
    }
}
