//! The validated configuration: what the rest of gatecmd reads. Every type here is built by
//! the validator (`validate/`) from the raw YAML (`raw.rs`); nothing else constructs one.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::command::CommandConfig;
use super::sections::{AuditSettings, IsolationSettings, LeaseSettings, Limits, MonitorSettings};
use super::staging::StagingConfig;

/// Default port: VM guests reach it as `http://10.0.2.2:9222/mcp`.
pub const DEFAULT_BIND: &str = "127.0.0.1:9222";

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it came from (a path, or [`EMBEDDED_NAME`]).
    pub source: String,
    pub bind: SocketAddr,
    pub clients: Vec<ClientConfig>,
    pub file_roots: Vec<PathBuf>,
    /// Accept input file arguments with more than one hard link (a hard link can bring a
    /// file from outside the roots inside them; off by default).
    pub allow_hardlinked_inputs: bool,
    pub devices: Vec<DeviceClass>,
    pub commands: Vec<CommandConfig>,
    pub allowed_origins: Vec<String>,
    pub allowed_hosts: Vec<String>,
    pub state_dir: PathBuf,
    pub limits: Limits,
    pub leases: LeaseSettings,
    /// File staging (upload/list/stat/remove tools): limits and who may write where.
    pub staging: StagingConfig,
    pub monitor: MonitorSettings,
    pub isolation: IsolationSettings,
    pub audit: AuditSettings,
    /// Named boards (docs/BOARDS.md).
    pub boards: Vec<super::boards::BoardConfig>,
    /// Actions that wait for an approver's yes (docs/APPROVALS.md), in config order.
    pub approvals: Vec<super::approvals::ApprovalRule>,
    /// Who answers `by: requester` approvals for which client (`clients[].person`).
    pub persons: super::approvals::Persons,
    /// The bench page (docs/OPERATING.md).
    pub page: super::page::PageSettings,
    /// Background jobs: how many finished ones are kept per client, and how long.
    pub jobs: super::jobs::JobSettings,
    /// Boot reports: how many per board, how much console each, when one is silent.
    pub boots: super::boots::BootSettings,
    /// `flash_board`: on or off, which boards, clients and loaders (docs/FLASHING.md).
    pub flash: super::flash::FlashSettings,
    /// Who may read `/metrics`, and where (docs/METRICS.md).
    pub metrics: super::metrics::MetricsSettings,
    /// gatecmd as a labgrid exporter (docs/LAB.md); `None` when off.
    pub labgrid: Option<super::lab::LabSettings>,
    /// The other gatecmd hosts of the lab (`labgrid.peers`), with or without a coordinator.
    pub lab_peers: Vec<super::peers::LabPeer>,
    /// The restart-only settings as written, for a reload to compare.
    pub(crate) written: super::declare::Written,
}

/// Where a client's token comes from. Tokens never appear on a command line.
#[derive(Debug, Clone)]
pub enum TokenSource {
    /// Written in this (owner-only) config file.
    Inline(String),
    /// Read from a file at start.
    File(PathBuf),
    /// Read from an environment variable at start.
    Env(String),
    /// Only the SHA-256 of the token is known (64 hex digits).
    Sha256([u8; 32]),
}

/// A named client: the name is the identity shown as lock holder and in the audit log.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub name: String,
    pub token: TokenSource,
    /// Commands this client may run; `None` means all.
    pub commands: Option<BTreeSet<String>>,
    /// May release other clients' leases (logged).
    pub admin: bool,
    /// Another gatecmd host of the lab (`peer: true`): only such a client may act for an
    /// agent of its host (`Gatecmd-On-Behalf-Of`), recorded as `HOST/CLIENT`.
    pub peer: bool,
}

/// A named device class: labels matching devices and defines what a command locks.
#[derive(Debug, Clone)]
pub struct DeviceClass {
    pub name: String,
    /// What a device must be to belong to the class; each part given must hold.
    pub vid: Option<u16>,
    pub pid: Option<u16>,
    /// A family and a mode of the families table (gatecmd_devices::families): a class of
    /// "this board's fastboot device" whatever its vendor's id.
    pub family: Option<&'static str>,
    pub mode: Option<&'static str>,
    pub lock_group: Option<String>,
}

impl DeviceClass {
    /// Whether a device belongs to the class.
    pub fn matches(&self, d: &gatecmd_devices::Device) -> bool {
        self.vid.is_none_or(|v| v == d.vid)
            && self.pid.is_none_or(|p| p == d.pid)
            && self.family.is_none_or(|f| d.family == Some(f))
            && self.mode.is_none_or(|m| d.mode == Some(m))
    }

    /// What the class matches, for a refusal: `2207:*`, `family fastboot`,
    /// `2207:* in mode maskrom`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(v) = self.vid {
            let pid = self
                .pid
                .map_or_else(|| "*".to_string(), |p| format!("{p:04x}"));
            parts.push(format!("{v:04x}:{pid}"));
        }
        if let Some(f) = self.family {
            parts.push(format!("family {f}"));
        }
        if let Some(m) = self.mode {
            parts.push(format!("in mode {m}"));
        }
        parts.join(" ")
    }
}

impl Config {
    /// The value of the restart-only setting `key` as written (its default when absent),
    /// for a reload to compare.
    pub fn written(&self, key: &str) -> Option<&str> {
        self.written.get(key)
    }

    /// The board with this name.
    pub fn board(&self, name: &str) -> Option<&super::boards::BoardConfig> {
        self.boards.iter().find(|b| b.name == name)
    }

    /// The configured boards' names, in config order (what an unknown-board refusal lists).
    pub fn board_names(&self) -> Vec<String> {
        self.boards.iter().map(|b| b.name.clone()).collect()
    }

    /// The board whose flashing USB is the port `id`.
    pub fn board_at(&self, id: &str) -> Option<&super::boards::BoardConfig> {
        self.boards.iter().find(|b| b.usb.as_str() == id)
    }

    pub fn command(&self, name: &str) -> Option<&CommandConfig> {
        self.commands.iter().find(|c| c.name == name)
    }

    /// The device class with this name.
    pub fn device_class(&self, name: &str) -> Option<&DeviceClass> {
        self.devices.iter().find(|d| d.name == name)
    }

    /// Whether some command runs isolated on boards of class `name`: their leases are
    /// then taken per board (`port:` keys) by `lock_device {device}`.
    pub fn class_is_isolated(&self, name: &str) -> bool {
        self.commands
            .iter()
            .any(|c| c.device.as_deref() == Some(name) && c.may_isolate())
    }

    /// Binaries that do not exist or are not executable: fatal for `gatecmd check`.
    pub fn unavailable_commands(&self) -> Vec<(&CommandConfig, &str)> {
        self.commands
            .iter()
            .filter_map(|c| c.unavailable.as_deref().map(|why| (c, why)))
            .collect()
    }
}
