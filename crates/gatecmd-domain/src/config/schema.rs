//! The validated configuration: what the rest of gatecmd reads. Every type here is built by
//! the validator (`validate/`) from the raw YAML (`raw.rs`); nothing else constructs one.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::command::CommandConfig;
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
    /// The bench page (docs/OPERATING.md).
    pub page: super::page::PageSettings,
    /// Background jobs: how many finished ones are kept per client, and how long.
    pub jobs: super::jobs::JobSettings,
    /// Who may read `/metrics`, and where (docs/METRICS.md).
    pub metrics: super::metrics::MetricsSettings,
    /// gatecmd as a labgrid exporter (docs/LAB.md); `None` when off.
    pub labgrid: Option<super::lab::LabSettings>,
}

/// Where the real sysfs and devfs are, for building isolated views (docs/ISOLATION.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IsolationSettings {
    /// Where sysfs is mounted; the view replaces `<sysfs_root>/bus/usb/devices`.
    pub sysfs_root: PathBuf,
    /// Where devfs is mounted; the view replaces `<devfs_root>/bus/usb`.
    pub devfs_root: PathBuf,
}

impl Default for IsolationSettings {
    fn default() -> Self {
        IsolationSettings {
            sysfs_root: PathBuf::from("/sys"),
            devfs_root: PathBuf::from("/dev"),
        }
    }
}

impl IsolationSettings {
    /// The roots as the isolation module takes them.
    pub fn roots(&self) -> crate::isolation::Roots {
        crate::isolation::Roots {
            sysfs: self.sysfs_root.clone(),
            devfs: self.devfs_root.clone(),
        }
    }
}

/// How the device registry is kept current.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MonitorSettings {
    /// `auto` (udev where built with it, falling back as needed), `udev`, `libusb` or `poll`.
    pub backend: String,
    /// Rescan interval of the polling sources.
    pub poll_interval_ms: u64,
    /// How long a vanished device is kept in case its port re-enumerates (then reported as
    /// one change instead of removed + added). 0 reports removals at once.
    pub removal_grace_ms: u64,
    /// Where sysfs is mounted (tests point it at a testbed).
    pub sysfs_root: PathBuf,
}

impl Default for MonitorSettings {
    fn default() -> Self {
        MonitorSettings {
            backend: "auto".into(),
            poll_interval_ms: 1000,
            removal_grace_ms: 0,
            sysfs_root: PathBuf::from("/sys"),
        }
    }
}

/// Resource limits; every one has a default.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Bytes kept of each of stdout and stderr; the rest is counted and dropped.
    pub max_output_bytes: usize,
    /// Children running at once across all clients.
    pub max_concurrent_children: usize,
    /// Commands one client may run at once; more are refused with this limit named.
    pub max_concurrent_per_client: usize,
    /// Largest accepted HTTP request body.
    pub max_request_body_bytes: usize,
    /// Seconds between SIGTERM and SIGKILL when a command is stopped.
    pub kill_grace_secs: u64,
    /// Upper bound for a caller's `timeout_secs`.
    pub max_timeout_secs: u64,
    /// An idle legacy MCP session is closed after this long (rmcp's default of 300 s
    /// would drop a client that only waits for hotplug events).
    pub session_idle_secs: u64,
    /// Legacy sessions one client may hold; opening one more closes its longest-idle one.
    pub max_sessions_per_client: usize,
    /// Open HTTP connections; past this a new one is answered 503 and closed.
    pub max_connections: usize,
    /// Connections that have not passed the token check yet; past this the oldest closes.
    pub max_unauthenticated_connections: usize,
    /// The same, per peer address (NAT guests share 127.0.0.1: the oldest closes here too).
    pub max_unauthenticated_per_peer: usize,
    /// A connection that has not passed the token check this long after opening is closed.
    pub header_read_timeout_secs: u64,
    /// An authenticated connection waits this long for its next request header, and is
    /// closed after as long without traffic.
    pub http_idle_timeout_secs: u64,
    /// URIs one legacy session (or one listen stream) may subscribe to.
    pub max_subscriptions_per_session: usize,
    /// URIs one client may subscribe to over all its sessions and listen streams.
    pub max_subscriptions_per_client: usize,
    /// `subscriptions/listen` streams one client may hold open.
    pub max_listen_streams_per_client: usize,
    /// `/mcp` requests of one client whose answer is not yet sent in full.
    pub max_open_answers_per_client: usize,
    /// `console_read` calls with `wait_for` one client may have waiting.
    pub max_waiting_reads_per_client: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_output_bytes: 1024 * 1024,
            max_concurrent_children: 16,
            max_concurrent_per_client: 8,
            max_request_body_bytes: 4 * 1024 * 1024,
            kill_grace_secs: 3,
            max_timeout_secs: 3600,
            session_idle_secs: 4 * 3600,
            max_sessions_per_client: 64,
            max_connections: 512,
            max_unauthenticated_connections: 64,
            max_unauthenticated_per_peer: 32,
            header_read_timeout_secs: 10,
            http_idle_timeout_secs: 120,
            max_subscriptions_per_session: 64,
            max_subscriptions_per_client: 256,
            max_listen_streams_per_client: 8,
            max_open_answers_per_client: 16,
            max_waiting_reads_per_client: 8,
        }
    }
}

/// Lease lifetimes, and how much of the lock table one client may fill.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseSettings {
    pub default_ttl_secs: u64,
    pub max_ttl_secs: u64,
    /// Leases one client may hold (lease requests waiting included).
    pub max_leases_per_client: usize,
    /// Lease and command requests one client may have waiting in lock queues.
    pub max_waiters_per_client: usize,
    /// Longest lease note, in bytes; a longer one is refused.
    pub max_note_bytes: usize,
    /// Most keys one `list_locks` answer lists; the rest are counted.
    pub max_listed: usize,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            default_ttl_secs: 600,
            max_ttl_secs: 3600,
            max_leases_per_client: 32,
            max_waiters_per_client: 32,
            max_note_bytes: 1024,
            max_listed: 256,
        }
    }
}

/// Retention, record size and refusal aggregation of the audit log (docs/AUDIT.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditSettings {
    /// The file is rotated before a line would take it past this size.
    pub max_bytes: u64,
    /// Rotated files kept (`audit.log.1` … `audit.log.N`); older ones are deleted.
    pub keep: u32,
    /// Longest line; longer fields are cut and logged with their length and SHA-256.
    pub max_record_bytes: u64,
    /// A rotated file whose newest line is older than this many days is deleted; 0: never.
    pub max_age_days: u32,
    /// Refusals of one kind from one client written in full per window; later ones counted.
    pub refusal_burst: u32,
    /// Length of a refusal window; its summary is written when it closes.
    pub refusal_window_secs: u64,
}

/// Smallest accepted `audit.max_bytes`: below this, rotation would happen every few lines.
pub const AUDIT_MIN_BYTES: u64 = 4096;

/// Smallest accepted `audit.max_record_bytes`: room for a cut record's lengths and hashes.
pub const AUDIT_MIN_RECORD_BYTES: u64 = 1024;

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            max_bytes: 10 * 1024 * 1024,
            keep: 5,
            max_record_bytes: 8 * 1024,
            max_age_days: 90,
            refusal_burst: 5,
            refusal_window_secs: 60,
        }
    }
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
}

/// A named device class: labels matching devices and defines what a command locks.
#[derive(Debug, Clone)]
pub struct DeviceClass {
    pub name: String,
    pub vid: u16,
    pub pid: Option<u16>,
    pub lock_group: Option<String>,
}

impl DeviceClass {
    /// Whether a device with this VID:PID belongs to the class.
    pub fn matches(&self, vid: u16, pid: u16) -> bool {
        self.vid == vid && self.pid.is_none_or(|p| p == pid)
    }
}

impl Config {
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
