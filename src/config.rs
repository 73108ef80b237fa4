//! The YAML configuration (`allowed_commands.yaml`): schema, defaults and validation.
//!
//! Values that can be checked on their own (absolute binaries, regexes, patterns, hex ids)
//! are checked while deserializing, so serde_yaml attaches the line, column and field path
//! to the error. Checks that relate several fields run afterwards and find their line with
//! [`Locator`]. Either way a [`ConfigError`] names file, line, column and field and says
//! what would be valid.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;

use crate::sanitizer::{Pattern, Word};

/// The configuration bundled with the binary: `gatecmd serve` runs on it when no file is found.
pub const EMBEDDED_DEFAULT: &str = include_str!("../allowed_commands.yaml");
/// The name under which the embedded default appears in logs and errors.
pub const EMBEDDED_NAME: &str = "<embedded allowed_commands.yaml>";
/// Where a system-wide installation keeps its configuration.
pub const SYSTEM_PATH: &str = "/etc/gatecmd/allowed_commands.yaml";

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
        }
    }
}

/// Lease lifetimes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseSettings {
    pub default_ttl_secs: u64,
    pub max_ttl_secs: u64,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            default_ttl_secs: 600,
            max_ttl_secs: 3600,
        }
    }
}

/// Rotation of the audit log (`<state_dir>/audit.log`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditSettings {
    /// The file is rotated before a line would take it past this size.
    pub max_bytes: u64,
    /// Rotated files kept (`audit.log.1` … `audit.log.N`); older ones are deleted.
    pub keep: u32,
}

/// Smallest accepted `audit.max_bytes`: below this, rotation would happen every few lines.
pub const AUDIT_MIN_BYTES: u64 = 4096;

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            max_bytes: 10 * 1024 * 1024,
            keep: 5,
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

/// What a command's file slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Must exist and be a regular file inside a file root.
    Input,
    /// May be new; its parent must resolve inside a file root.
    Output,
}

/// Whether a running command may be cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CancelPolicy {
    #[default]
    Allow,
    /// Finish what was started (e.g. a bootloader write): a cancel is refused.
    Never,
}

/// One allowed argument pattern of a command.
#[derive(Debug, Clone)]
pub struct PatternConfig {
    pub pattern: Pattern,
    pub file_slots: BTreeMap<String, FileKind>,
    pub timeout: Option<Duration>,
    pub progress: Option<Regex>,
    pub cancel: Option<CancelPolicy>,
    /// Overrides the command's `isolate` for this pattern.
    pub isolate: Option<bool>,
}

/// One allowlisted command.
#[derive(Debug, Clone)]
pub struct CommandConfig {
    pub name: String,
    pub binary: PathBuf,
    pub description: String,
    pub patterns: Vec<PatternConfig>,
    pub params: BTreeMap<String, Regex>,
    pub timeout: Duration,
    pub env: BTreeMap<String, String>,
    pub device: Option<String>,
    pub progress: Option<Regex>,
    pub cancel: CancelPolicy,
    pub read_only: bool,
    pub destructive: bool,
    /// Runs in a view of the system holding only the chosen board (docs/ISOLATION.md);
    /// a pattern may override it.
    pub isolate: bool,
    /// Why the command cannot run on this host (binary missing), if so.
    pub unavailable: Option<String>,
}

impl CommandConfig {
    /// Whether a call matching pattern `index` runs isolated.
    pub fn isolates(&self, index: usize) -> bool {
        self.patterns
            .get(index)
            .and_then(|p| p.isolate)
            .unwrap_or(self.isolate)
    }

    /// Whether any pattern of the command runs isolated.
    pub fn may_isolate(&self) -> bool {
        (0..self.patterns.len()).any(|i| self.isolates(i))
    }

    /// Every allowed command line, as a person would type it.
    pub fn command_lines(&self) -> Vec<String> {
        self.patterns
            .iter()
            .map(|p| {
                if p.pattern.words.is_empty() {
                    self.binary.display().to_string()
                } else {
                    format!("{} {}", self.binary.display(), p.pattern)
                }
            })
            .collect()
    }
}

/// A configuration error, located in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    /// Dotted field path such as `commands[1].binary` (empty for the whole file).
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// All errors of one configuration file (each is reported; none hides another).
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Where to load the configuration from, in the documented search order.
pub fn find_config(explicit: Option<&Path>) -> ConfigLocation {
    if let Some(p) = explicit {
        return ConfigLocation::File(p.to_path_buf(), "--config");
    }
    if let Some(p) = std::env::var_os("GATECMD_CONFIG").filter(|v| !v.is_empty()) {
        return ConfigLocation::File(PathBuf::from(p), "$GATECMD_CONFIG");
    }
    if Path::new(SYSTEM_PATH).exists() {
        return ConfigLocation::File(PathBuf::from(SYSTEM_PATH), "system path");
    }
    ConfigLocation::Embedded
}

/// The configuration chosen by [`find_config`].
#[derive(Debug, Clone)]
pub enum ConfigLocation {
    /// A file, and which rule of the search order chose it.
    File(PathBuf, &'static str),
    Embedded,
}

impl fmt::Display for ConfigLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigLocation::File(p, why) => write!(f, "{} (from {why})", p.display()),
            ConfigLocation::Embedded => f.write_str(EMBEDDED_NAME),
        }
    }
}

impl ConfigLocation {
    /// Reads and validates the configuration.
    pub fn load(&self) -> Result<Config, ConfigErrors> {
        match self {
            ConfigLocation::Embedded => Config::parse(EMBEDDED_DEFAULT, EMBEDDED_NAME),
            ConfigLocation::File(path, _) => Config::load_file(path),
        }
    }
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load_file(path: &Path) -> Result<Config, ConfigErrors> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: file.clone(),
                line: 0,
                column: 0,
                field: String::new(),
                message: format!("cannot read the file: {e}"),
            }])
        })?;
        let config = Config::parse(&text, &file)?;
        if config
            .clients
            .iter()
            .any(|c| matches!(c.token, TokenSource::Inline(_)))
        {
            check_owner_only(path, &text, &file)?;
        }
        Ok(config)
    }

    /// Parses and validates configuration text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigErrors> {
        // An empty file (or one of comments only) is an empty mapping: all defaults.
        let empty = text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
        let raw: RawConfig =
            serde_yaml::from_str(if empty { "{}" } else { text }).map_err(|e| {
                let (line, column) = e
                    .location()
                    .map(|l| (l.line(), l.column()))
                    .unwrap_or((0, 0));
                let full = e.to_string();
                let message = match full.rfind(" at line ") {
                    Some(i) => full[..i].to_string(),
                    None => full,
                };
                let (field, message) = split_field(&message);
                ConfigErrors(vec![ConfigError {
                    file: file.into(),
                    line,
                    column,
                    field,
                    message,
                }])
            })?;
        let mut v = Validator {
            loc: Locator::new(text),
            file: file.to_string(),
            errors: vec![],
        };
        let config = v.validate(raw);
        if v.errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors(v.errors))
        }
    }

    /// The command with this name.
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

/// serde_yaml prefixes nested errors with their path ("commands[0].binary: ...").
fn split_field(message: &str) -> (String, String) {
    if let Some((head, rest)) = message.split_once(": ") {
        let looks_like_path = !head.contains(' ')
            && head
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.[]-".contains(c));
        if looks_like_path {
            return (head.to_string(), rest.to_string());
        }
    }
    (String::new(), message.to_string())
}

fn check_owner_only(path: &Path, text: &str, file: &str) -> Result<(), ConfigErrors> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode())
        .unwrap_or(0);
    if mode & 0o077 != 0 {
        let (line, column) = Locator::new(text).key_line("token", 0).unwrap_or((1, 1));
        return Err(ConfigErrors(vec![ConfigError {
            file: file.into(),
            line,
            column,
            field: "token".into(),
            message: format!(
                "this file holds a token but is readable by others (mode {:o}); \
                 run `chmod 600 {}`, or move the token to `token_file` or `token_env`",
                mode & 0o777,
                path.display()
            ),
        }]));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Raw schema, as written in YAML.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    bind: Option<String>,
    auth_token: Option<String>,
    #[serde(default)]
    clients: Vec<RawClient>,
    #[serde(default)]
    file_roots: Vec<String>,
    #[serde(default)]
    devices: Vec<RawDeviceClass>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    state_dir: Option<String>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    leases: LeaseSettings,
    #[serde(default)]
    monitor: MonitorSettings,
    #[serde(default)]
    isolation: IsolationSettings,
    #[serde(default)]
    audit: AuditSettings,
    #[serde(default)]
    staging: RawStaging,
    #[serde(default)]
    commands: Vec<RawCommand>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    name: String,
    token: Option<String>,
    token_file: Option<String>,
    token_env: Option<String>,
    token_sha256: Option<String>,
    commands: Option<Vec<String>>,
    #[serde(default)]
    admin: bool,
    // File staging: read by `Validator::staging`, not by `Validator::clients`.
    write_roots: Option<Vec<String>>,
    staging: Option<RawStagingOverride>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDeviceClass {
    name: String,
    #[serde(rename = "match")]
    matches: RawMatch,
    lock_group: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    vid: serde_yaml::Value,
    pid: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommand {
    name: String,
    binary: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    allowed_args: Vec<RawPattern>,
    timeout_secs: Option<u64>,
    #[serde(default)]
    params: BTreeMap<String, String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    device: Option<String>,
    progress: Option<String>,
    #[serde(default)]
    cancel: CancelPolicy,
    #[serde(default)]
    read_only: bool,
    #[serde(default)]
    destructive: bool,
    #[serde(default)]
    isolate: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPattern {
    pattern: String,
    #[serde(default)]
    file_args: Vec<String>,
    #[serde(default)]
    output_args: Vec<String>,
    timeout_secs: Option<u64>,
    progress: Option<String>,
    cancel: Option<CancelPolicy>,
    isolate: Option<bool>,
}

// Values are read as plain YAML and checked by the validator: serde_yaml reports an error
// raised inside a field's own Deserialize at the enclosing mapping, which would lose the
// field's line. The validator finds the line itself.

fn check_name(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid name {s:?}: use 1 to 64 letters, digits, '_', '-' or '.'"
        ))
    }
}

fn parse_abs(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if !p.is_absolute() {
        return Err(format!(
            "{s:?} is not an absolute path: write the full path, e.g. /usr/bin/{s}"
        ));
    }
    if p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(format!(
            "{s:?} contains '..': write the path without parent-directory components"
        ));
    }
    Ok(p)
}

fn parse_bind(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| {
        format!("{s:?} is not an address:port; write e.g. \"127.0.0.1:9222\" or \"[::1]:9222\"")
    })
}

fn parse_hex16(v: &serde_yaml::Value) -> Result<u16, String> {
    // YAML reads 2207 as a number; take its decimal digits as the hex digits they were meant as.
    let s = match v {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Number(n) => n.to_string(),
        other => format!("{other:?}"),
    };
    let t = s.trim_start_matches("0x");
    if t.len() == 4
        && t.chars().all(|c| c.is_ascii_hexdigit())
        && let Ok(n) = u16::from_str_radix(t, 16)
    {
        return Ok(n);
    }
    Err(format!(
        "{s:?} is not a USB id: write 4 hex digits in quotes, e.g. \"2207\""
    ))
}

fn parse_sha256(s: &str) -> Result<[u8; 32], String> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s.trim(), &mut out).map_err(|_| {
        "expected the SHA-256 of the token as 64 hex digits (e.g. from `printf %s \"$TOKEN\" | sha256sum`)".to_string()
    })?;
    Ok(out)
}

/// A slot regex must match the whole value, so it is anchored here.
fn parse_anchored(s: &str) -> Result<Regex, String> {
    Regex::new(&format!("^(?:{s})$")).map_err(|e| format!("invalid regex {s:?}: {e}"))
}

/// A progress regex: its first capture group must give the percentage.
fn parse_progress(s: &str) -> Result<Regex, String> {
    let re = Regex::new(s).map_err(|e| format!("invalid regex {s:?}: {e}"))?;
    if re.captures_len() < 2 {
        return Err(format!(
            "progress regex {s:?} has no capture group: wrap the percentage in (...), e.g. \"\\\\((\\\\d+)%\\\\)\""
        ));
    }
    Ok(re)
}

// ---------------------------------------------------------------------------
// Cross-field validation.

struct Validator<'a> {
    loc: Locator<'a>,
    file: String,
    errors: Vec<ConfigError>,
}

impl Validator<'_> {
    fn err(&mut self, at: Option<(usize, usize)>, field: String, message: String) {
        let (line, column) = at.unwrap_or((1, 1));
        self.errors.push(ConfigError {
            file: self.file.clone(),
            line,
            column,
            field,
            message,
        });
    }

    /// Runs a value check; on failure records it at `at` and yields `None`.
    fn value<T>(
        &mut self,
        r: Result<T, String>,
        at: Option<(usize, usize)>,
        field: String,
    ) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(m) => {
                self.err(at, field, m);
                None
            }
        }
    }

    fn validate(&mut self, mut raw: RawConfig) -> Config {
        let default_bind = SocketAddr::from(([127, 0, 0, 1], 9222));
        let bind = match raw.bind {
            None => default_bind,
            Some(b) => {
                let at = self.loc.key_line("bind", 0);
                self.value(parse_bind(&b), at, "bind".into())
                    .unwrap_or(default_bind)
            }
        };
        let client_staging = take_client_staging(&mut raw.clients);
        let clients = self.clients(raw.auth_token, raw.clients);
        let devices = self.devices(raw.devices);
        let mut file_roots = Vec::new();
        for (i, r) in raw.file_roots.iter().enumerate() {
            let at = self.loc.value_line(r);
            if let Some(p) = self.value(parse_abs(r), at, format!("file_roots[{i}]")) {
                file_roots.push(p);
            }
        }
        let staging = self.staging(
            raw.staging,
            client_staging,
            &file_roots,
            raw.limits.max_request_body_bytes,
        );
        let state_dir = match raw.state_dir {
            None => default_state_dir(),
            Some(d) => {
                let at = self.loc.key_line("state_dir", 0);
                self.value(parse_abs(&d), at, "state_dir".into())
                    .unwrap_or_else(default_state_dir)
            }
        };
        let mut commands = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, rc) in raw.commands.into_iter().enumerate() {
            if !seen.insert(rc.name.clone()) {
                let at = self.loc.item_key_nth(&rc.name, "name", 1);
                self.err(
                    at,
                    format!("commands[{i}].name"),
                    format!(
                        "command {:?} is defined twice; give each command a unique name",
                        rc.name
                    ),
                );
            }
            if let Some(c) = self.command(i, rc, &devices, &file_roots) {
                commands.push(c);
            }
        }
        for (ci, c) in clients.iter().enumerate() {
            for name in c.commands.iter().flatten() {
                if !commands.iter().any(|k| &k.name == name) {
                    let at = self.loc.item_key(&c.name, "commands");
                    let known: Vec<_> = commands.iter().map(|k| k.name.as_str()).collect();
                    self.err(
                        at,
                        format!("clients[{ci}].commands"),
                        format!(
                            "unknown command {name:?}; defined commands: {}",
                            known.join(", ")
                        ),
                    );
                }
            }
        }
        if raw.limits.max_concurrent_per_client == 0 {
            let at = self.loc.key_line("max_concurrent_per_client", 0);
            self.err(
                at,
                "limits.max_concurrent_per_client".into(),
                "must be at least 1".into(),
            );
        }
        if raw.limits.max_concurrent_children == 0 {
            let at = self.loc.key_line("max_concurrent_children", 0);
            self.err(
                at,
                "limits.max_concurrent_children".into(),
                "must be at least 1".into(),
            );
        }
        if raw.leases.default_ttl_secs == 0 || raw.leases.default_ttl_secs > raw.leases.max_ttl_secs
        {
            let at = self.loc.key_line("default_ttl_secs", 0);
            self.err(
                at,
                "leases.default_ttl_secs".into(),
                format!(
                    "must be between 1 and leases.max_ttl_secs ({})",
                    raw.leases.max_ttl_secs
                ),
            );
        }
        if raw
            .monitor
            .backend
            .parse::<crate::devices::Backend>()
            .is_err()
        {
            let at = self.loc.key_line("backend", 0);
            self.err(
                at,
                "monitor.backend".into(),
                format!(
                    "unknown backend {:?}; use auto, udev, libusb or poll",
                    raw.monitor.backend
                ),
            );
        }
        for (key, p) in [
            ("sysfs_root", &raw.isolation.sysfs_root),
            ("devfs_root", &raw.isolation.devfs_root),
        ] {
            if !p.is_absolute() {
                // After the `isolation:` line: `monitor:` has a sysfs_root too.
                let from = self.loc.key_line("isolation", 0).map_or(0, |(l, _)| l);
                let at = self.loc.key_line(key, from);
                self.err(
                    at,
                    format!("isolation.{key}"),
                    format!("{} is not an absolute path", p.display()),
                );
            }
        }
        // Search from the `audit:` line, so another `max_bytes`/`keep` above is not blamed.
        let audit_at = self.loc.key_line("audit", 0).map_or(0, |(line, _)| line);
        if raw.audit.max_bytes < AUDIT_MIN_BYTES {
            let at = self.loc.key_line("max_bytes", audit_at);
            self.err(
                at,
                "audit.max_bytes".into(),
                format!(
                    "{} is too small: rotate at {AUDIT_MIN_BYTES} bytes or more (the default is {})",
                    raw.audit.max_bytes,
                    AuditSettings::default().max_bytes
                ),
            );
        }
        if raw.audit.keep == 0 {
            let at = self.loc.key_line("keep", audit_at);
            self.err(
                at,
                "audit.keep".into(),
                "must be at least 1: rotation keeps the previous file as audit.log.1".into(),
            );
        }
        for (i, o) in raw.allowed_origins.iter().enumerate() {
            if !(o.starts_with("http://") || o.starts_with("https://")) {
                let at = self.loc.value_line(o);
                self.err(
                    at,
                    format!("allowed_origins[{i}]"),
                    format!("{o:?} is not an origin: write scheme://host[:port], e.g. \"http://localhost:3000\""),
                );
            }
        }
        Config {
            source: self.file.clone(),
            bind,
            clients,
            file_roots,
            devices,
            commands,
            allowed_origins: raw.allowed_origins,
            allowed_hosts: raw.allowed_hosts,
            state_dir,
            limits: raw.limits,
            leases: raw.leases,
            staging,
            monitor: raw.monitor,
            isolation: raw.isolation,
            audit: raw.audit,
        }
    }

    fn clients(&mut self, auth_token: Option<String>, raw: Vec<RawClient>) -> Vec<ClientConfig> {
        let mut out = Vec::new();
        if let Some(t) = auth_token {
            if t.trim().is_empty() {
                let at = self.loc.key_line("auth_token", 0);
                self.err(
                    at,
                    "auth_token".into(),
                    "is empty; remove it or set a token".into(),
                );
            } else {
                out.push(ClientConfig {
                    name: "default".into(),
                    token: TokenSource::Inline(t),
                    commands: None,
                    admin: false,
                });
            }
        }
        for (i, rc) in raw.into_iter().enumerate() {
            let name = rc.name;
            let at = self.loc.item_key(&name, "name");
            if self
                .value(check_name(&name), at, format!("clients[{i}].name"))
                .is_none()
            {
                continue;
            }
            let mut sources = Vec::new();
            if let Some(t) = rc.token {
                sources.push(TokenSource::Inline(t));
            }
            if let Some(p) = rc.token_file {
                let at = self.loc.item_key(&name, "token_file");
                if let Some(p) = self.value(parse_abs(&p), at, format!("clients[{i}].token_file")) {
                    sources.push(TokenSource::File(p));
                }
            }
            if let Some(e) = rc.token_env {
                sources.push(TokenSource::Env(e));
            }
            if let Some(h) = rc.token_sha256 {
                let at = self.loc.item_key(&name, "token_sha256");
                if let Some(d) =
                    self.value(parse_sha256(&h), at, format!("clients[{i}].token_sha256"))
                {
                    sources.push(TokenSource::Sha256(d));
                }
            }
            if sources.len() != 1 {
                self.err(
                    at,
                    format!("clients[{i}]"),
                    format!(
                        "client {name:?} needs exactly one of token, token_file, token_env, token_sha256 (has {})",
                        sources.len()
                    ),
                );
                continue;
            }
            if out.iter().any(|c: &ClientConfig| c.name == name) {
                self.err(
                    at,
                    format!("clients[{i}].name"),
                    format!("client name {name:?} is used twice (a top-level auth_token is the client \"default\")"),
                );
                continue;
            }
            out.push(ClientConfig {
                name,
                token: sources.remove(0),
                commands: rc.commands.map(|v| v.into_iter().collect()),
                admin: rc.admin,
            });
        }
        out
    }

    fn devices(&mut self, raw: Vec<RawDeviceClass>) -> Vec<DeviceClass> {
        let mut out: Vec<DeviceClass> = Vec::new();
        for (i, d) in raw.into_iter().enumerate() {
            let at = self.loc.item_key(&d.name, "name");
            if self
                .value(check_name(&d.name), at, format!("devices[{i}].name"))
                .is_none()
            {
                continue;
            }
            if out.iter().any(|o| o.name == d.name) {
                let at = self.loc.item_key_nth(&d.name, "name", 1);
                self.err(
                    at,
                    format!("devices[{i}].name"),
                    format!("device class {:?} is defined twice", d.name),
                );
            }
            let at = self.loc.item_key(&d.name, "match");
            let vid = self.value(
                parse_hex16(&d.matches.vid),
                at,
                format!("devices[{i}].match.vid"),
            );
            let pid = match &d.matches.pid {
                None => Some(None),
                Some(p) => self
                    .value(parse_hex16(p), at, format!("devices[{i}].match.pid"))
                    .map(Some),
            };
            let group = match d.lock_group {
                None => Some(None),
                Some(g) => {
                    let at = self.loc.item_key(&d.name, "lock_group");
                    self.value(
                        check_name(&g).map(|_| Some(g)),
                        at,
                        format!("devices[{i}].lock_group"),
                    )
                }
            };
            if let (Some(vid), Some(pid), Some(lock_group)) = (vid, pid, group) {
                out.push(DeviceClass {
                    name: d.name,
                    vid,
                    pid,
                    lock_group,
                });
            }
        }
        out
    }

    fn command(
        &mut self,
        i: usize,
        rc: RawCommand,
        devices: &[DeviceClass],
        file_roots: &[PathBuf],
    ) -> Option<CommandConfig> {
        let name = rc.name;
        let field = |f: &str| format!("commands[{i}].{f}");
        let at = self.loc.item_key(&name, "name");
        self.value(check_name(&name), at, field("name"))?;
        let at = self.loc.item_key(&name, "binary");
        let binary = self.value(parse_abs(&rc.binary), at, field("binary"));
        if let Some(d) = &rc.device
            && !devices.iter().any(|c| &c.name == d)
        {
            let at = self.loc.item_key(&name, "device");
            let known: Vec<_> = devices.iter().map(|c| c.name.as_str()).collect();
            self.err(
                at,
                field("device"),
                format!(
                    "unknown device class {d:?}; defined under `devices:`: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            );
        }
        if rc.allowed_args.is_empty() {
            let at = self.loc.item_key(&name, "name");
            self.err(
                at,
                field("allowed_args"),
                "no allowed_args: add at least one `- pattern: ...` (an empty pattern \"\" allows running with no arguments)".into(),
            );
        }
        for key in rc.env.keys() {
            let ok = !key.is_empty()
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !key.starts_with(|c: char| c.is_ascii_digit());
            if !ok || key.starts_with("LD_") || key == "PATH" {
                let at = self.loc.item_key(&name, key);
                self.err(
                    at,
                    field(&format!("env.{key}")),
                    format!("environment variable {key:?} may not be set (PATH is fixed; LD_* would change what runs)"),
                );
            }
        }
        let timeout = rc.timeout_secs.unwrap_or(60);
        if timeout == 0 {
            let at = self.loc.item_key(&name, "timeout_secs");
            self.err(
                at,
                field("timeout_secs"),
                "must be at least 1 second".into(),
            );
        }
        let mut params = BTreeMap::new();
        for (k, v) in &rc.params {
            let at = self.loc.item_key(&name, k);
            if let Some(re) = self.value(parse_anchored(v), at, field(&format!("params.{k}"))) {
                params.insert(k.clone(), re);
            }
        }
        let progress = match &rc.progress {
            None => None,
            Some(p) => {
                let at = self.loc.item_key(&name, "progress");
                self.value(parse_progress(p), at, field("progress"))
            }
        };
        let mut patterns = Vec::new();
        for (j, rp) in rc.allowed_args.into_iter().enumerate() {
            let pfield = format!("commands[{i}].allowed_args[{j}]");
            let at = self.loc.item_value(&name, "pattern", &rp.pattern);
            let Some(pattern) = self.value(
                rp.pattern.parse::<Pattern>(),
                at,
                format!("{pfield}.pattern"),
            ) else {
                continue;
            };
            let slots: BTreeSet<&str> = pattern.slot_names().collect();
            let mut file_slots = BTreeMap::new();
            for (list, kind, key) in [
                (&rp.file_args, FileKind::Input, "file_args"),
                (&rp.output_args, FileKind::Output, "output_args"),
            ] {
                for s in list {
                    if !slots.contains(s.as_str()) {
                        let at = self.loc.item_key(&name, key);
                        self.err(
                            at,
                            format!("{pfield}.{key}"),
                            format!(
                                "{s:?} is not a slot of pattern \"{pattern}\"; its slots are: {}",
                                if slots.is_empty() {
                                    "none".to_string()
                                } else {
                                    slots.iter().copied().collect::<Vec<_>>().join(", ")
                                }
                            ),
                        );
                    }
                    file_slots.insert(s.clone(), kind);
                }
            }
            if !file_slots.is_empty() && file_roots.is_empty() {
                let at = self
                    .loc
                    .item_key(&name, "file_args")
                    .or(self.loc.item_key(&name, "output_args"));
                self.err(
                    at,
                    format!("{pfield}.file_args"),
                    "file arguments need `file_roots:` (the directories they must resolve inside)"
                        .into(),
                );
            }
            let pprogress = match &rp.progress {
                None => None,
                Some(p) => {
                    let at = self.loc.item_value(&name, "progress", p);
                    self.value(parse_progress(p), at, format!("{pfield}.progress"))
                }
            };
            if rp.timeout_secs == Some(0) {
                let at = self.loc.item_key(&name, "timeout_secs");
                self.err(
                    at,
                    format!("{pfield}.timeout_secs"),
                    "must be at least 1 second".into(),
                );
            }
            patterns.push(PatternConfig {
                pattern,
                file_slots,
                timeout: rp.timeout_secs.map(Duration::from_secs),
                progress: pprogress,
                cancel: rp.cancel,
                isolate: rp.isolate,
            });
        }
        for key in rc.params.keys() {
            let used = patterns.iter().any(|p| {
                p.pattern
                    .words
                    .iter()
                    .any(|w| matches!(w, Word::Slot(s) if s == key))
            });
            if !used {
                let at = self.loc.item_key(&name, key);
                self.err(
                    at,
                    field(&format!("params.{key}")),
                    format!("{key:?} is not a slot of any pattern of this command"),
                );
            }
        }
        let isolated = rc.isolate || patterns.iter().any(|p| p.isolate == Some(true));
        if isolated && rc.device.is_none() {
            let at = self
                .loc
                .item_key(&name, "isolate")
                .or(self.loc.item_key(&name, "name"));
            self.err(
                at,
                field("isolate"),
                "an isolated command needs `device:` (the class whose board it runs on): the view holds one board of that class".into(),
            );
        }
        let binary = binary?;
        let unavailable = binary_problem(&binary);
        Some(CommandConfig {
            name,
            binary,
            description: rc.description,
            patterns,
            params,
            timeout: Duration::from_secs(timeout),
            env: rc.env,
            device: rc.device,
            progress,
            cancel: rc.cancel,
            read_only: rc.read_only,
            destructive: rc.destructive,
            isolate: rc.isolate,
            unavailable,
        })
    }
}

// ---------------------------------------------------------------------------
// File staging (`staging:` and the per-client `write_roots:` / `staging:` keys).
//
// Kept in one block so that it stays apart from the rest of the schema. The per-client
// values live in `StagingConfig::clients` (by client name) rather than in `ClientConfig`,
// so the token table and the identity type do not change.

/// Size limits of file staging. Per client, each may be overridden.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingLimits {
    /// Largest file a client may upload.
    pub max_file_bytes: u64,
    /// Largest chunk (decoded bytes) of one `write_file` call. Its base64 form must fit in
    /// `limits.max_request_body_bytes`.
    pub max_chunk_bytes: u64,
    /// A write is refused when the regular files under the root (unfinished uploads
    /// included) would exceed this many bytes.
    pub quota_bytes_per_root: u64,
}

impl Default for StagingLimits {
    fn default() -> Self {
        StagingLimits {
            max_file_bytes: 8 << 30,
            // 2 MiB is 2.7 MiB in base64: fits the default 4 MiB request body with room.
            max_chunk_bytes: 2 << 20,
            quota_bytes_per_root: 32 << 30,
        }
    }
}

/// Where a client may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRoots {
    /// Every file root (implicit clients: `default`, `anonymous`, `stdio`).
    All,
    /// Only these roots (each one of `file_roots`); empty: nowhere.
    Only(Vec<PathBuf>),
}

impl WriteRoots {
    /// Whether `root` (an entry of `file_roots`) may be written.
    pub fn allows(&self, root: &Path) -> bool {
        match self {
            WriteRoots::All => true,
            WriteRoots::Only(roots) => roots.iter().any(|r| r == root),
        }
    }
}

/// The staging policy of one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientStaging {
    pub write_roots: WriteRoots,
    pub limits: StagingLimits,
}

/// The `staging:` section, with each configured client's policy.
#[derive(Debug, Clone, Default)]
pub struct StagingConfig {
    /// Limits of clients that do not override them.
    pub defaults: StagingLimits,
    /// An unfinished upload untouched for this long is deleted (when another upload starts
    /// in its directory).
    pub stale_upload_secs: u64,
    /// Policies of the clients listed under `clients:`, by name.
    pub clients: BTreeMap<String, ClientStaging>,
}

impl StagingConfig {
    /// The policy for the client named `name`.
    ///
    /// A client listed under `clients:` writes only to its `write_roots` (none if absent):
    /// security by default. Identities that are not listed there — `default` (the simple
    /// schema's `auth_token` or the generated token), `anonymous` (`--no-auth` on loopback)
    /// and `stdio` (the local user) — are single-user setups and may write to every root.
    pub fn policy(&self, name: &str) -> ClientStaging {
        self.clients.get(name).cloned().unwrap_or(ClientStaging {
            write_roots: WriteRoots::All,
            limits: self.defaults,
        })
    }
}

/// Bytes of JSON-RPC envelope allowed for around a chunk's base64 text.
pub const CHUNK_ENVELOPE_BYTES: u64 = 64 * 1024;

/// Length of the base64 (padded) text of `n` bytes.
pub fn base64_len(n: u64) -> u64 {
    n.div_ceil(3) * 4
}

// Plain fields rather than a flattened `StagingLimits`: serde cannot combine `flatten`
// with `deny_unknown_fields`, and a misspelt key must be an error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawStaging {
    max_file_bytes: u64,
    max_chunk_bytes: u64,
    quota_bytes_per_root: u64,
    stale_upload_secs: u64,
}

impl Default for RawStaging {
    fn default() -> Self {
        let l = StagingLimits::default();
        RawStaging {
            max_file_bytes: l.max_file_bytes,
            max_chunk_bytes: l.max_chunk_bytes,
            quota_bytes_per_root: l.quota_bytes_per_root,
            stale_upload_secs: 24 * 3600,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStagingOverride {
    max_file_bytes: Option<u64>,
    max_chunk_bytes: Option<u64>,
    quota_bytes_per_root: Option<u64>,
}

/// A client's staging keys, taken out before `Validator::clients` consumes the entry.
struct RawClientStaging {
    index: usize,
    name: String,
    write_roots: Option<Vec<String>>,
    overrides: RawStagingOverride,
}

fn take_client_staging(clients: &mut [RawClient]) -> Vec<RawClientStaging> {
    clients
        .iter_mut()
        .enumerate()
        .map(|(index, c)| RawClientStaging {
            index,
            name: c.name.clone(),
            write_roots: c.write_roots.take(),
            overrides: c.staging.take().unwrap_or_default(),
        })
        .collect()
}

impl Validator<'_> {
    /// Line of `key:` inside the top-level `staging:` section.
    fn staging_key(&self, key: &str) -> Option<(usize, usize)> {
        let start = self
            .loc
            .lines
            .iter()
            .position(|l| l.starts_with("staging:"))?;
        self.loc.key_line(key, start)
    }

    fn staging(
        &mut self,
        raw: RawStaging,
        clients: Vec<RawClientStaging>,
        file_roots: &[PathBuf],
        max_body: usize,
    ) -> StagingConfig {
        let defaults = StagingLimits {
            max_file_bytes: raw.max_file_bytes,
            max_chunk_bytes: raw.max_chunk_bytes,
            quota_bytes_per_root: raw.quota_bytes_per_root,
        };
        self.staging_limits(&defaults, "staging", None, file_roots, max_body);
        if raw.stale_upload_secs == 0 {
            let at = self.staging_key("stale_upload_secs");
            self.err(
                at,
                "staging.stale_upload_secs".into(),
                "must be at least 1 second".into(),
            );
        }
        let mut out = BTreeMap::new();
        for c in clients {
            let i = c.index;
            let mut roots = Vec::new();
            for (j, r) in c.write_roots.iter().flatten().enumerate() {
                let at = self.loc.item_key(&c.name, "write_roots");
                let field = format!("clients[{i}].write_roots[{j}]");
                let Some(p) = self.value(parse_abs(r), at, field.clone()) else {
                    continue;
                };
                // Compared by components, so "/srv/img/" and "/srv/img" are the same root.
                match file_roots.iter().find(|f| f.components().eq(p.components())) {
                    Some(root) => roots.push(root.clone()),
                    None => self.err(
                        at,
                        field,
                        format!(
                            "{r:?} is not one of file_roots ({}); write_roots lists file roots this client may write",
                            if file_roots.is_empty() {
                                "none are configured".to_string()
                            } else {
                                file_roots
                                    .iter()
                                    .map(|f| f.display().to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            }
                        ),
                    ),
                }
            }
            let o = c.overrides;
            let limits = StagingLimits {
                max_file_bytes: o.max_file_bytes.unwrap_or(defaults.max_file_bytes),
                max_chunk_bytes: o.max_chunk_bytes.unwrap_or(defaults.max_chunk_bytes),
                quota_bytes_per_root: o
                    .quota_bytes_per_root
                    .unwrap_or(defaults.quota_bytes_per_root),
            };
            let prefix = format!("clients[{i}].staging");
            self.staging_limits(&limits, &prefix, Some(&c.name), file_roots, max_body);
            out.insert(
                c.name,
                ClientStaging {
                    write_roots: WriteRoots::Only(roots),
                    limits,
                },
            );
        }
        StagingConfig {
            defaults,
            stale_upload_secs: raw.stale_upload_secs,
            clients: out,
        }
    }

    /// Checks one set of limits; `client` locates a client's override.
    fn staging_limits(
        &mut self,
        l: &StagingLimits,
        prefix: &str,
        client: Option<&str>,
        file_roots: &[PathBuf],
        max_body: usize,
    ) {
        let locate = |v: &Self, key: &str| match client {
            // `item_key` falls back to the item's `name:` line when the key is not on a
            // line of its own (e.g. in a flow mapping `staging: {...}`).
            Some(name) => {
                let item = v.loc.item_key(name, "name");
                match v.loc.item_key(name, key) {
                    Some(at) if Some(at) != item => Some(at),
                    _ => v.loc.item_key(name, "staging"),
                }
            }
            None => v.staging_key(key),
        };
        for (key, value) in [
            ("max_file_bytes", l.max_file_bytes),
            ("max_chunk_bytes", l.max_chunk_bytes),
            ("quota_bytes_per_root", l.quota_bytes_per_root),
        ] {
            if value == 0 {
                let at = locate(self, key);
                self.err(at, format!("{prefix}.{key}"), "must be at least 1".into());
            }
        }
        // A chunk travels as base64 inside one JSON-RPC request: without file roots no
        // chunk is ever sent, so the relation only matters when there are roots.
        let need = base64_len(l.max_chunk_bytes) + CHUNK_ENVELOPE_BYTES;
        if !file_roots.is_empty() && need > max_body as u64 {
            let fits = (max_body as u64).saturating_sub(CHUNK_ENVELOPE_BYTES) / 4 * 3;
            let at = locate(self, "max_chunk_bytes");
            self.err(
                at,
                format!("{prefix}.max_chunk_bytes"),
                format!(
                    "a chunk of {} bytes needs a request body of {need} bytes (base64 plus envelope), \
                     more than limits.max_request_body_bytes ({max_body}); lower max_chunk_bytes to at \
                     most {fits} or raise limits.max_request_body_bytes to at least {need}",
                    l.max_chunk_bytes
                ),
            );
        }
    }
}

#[cfg(test)]
mod staging_tests {
    use super::*;

    fn errors(text: &str) -> Vec<ConfigError> {
        match Config::parse(text, "test.yaml") {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn defaults_and_implicit_clients_write_everywhere() {
        let c = Config::parse("auth_token: x\nfile_roots: [/srv/a, /srv/b]\n", "t").expect("ok");
        assert_eq!(c.staging.defaults, StagingLimits::default());
        assert_eq!(c.staging.stale_upload_secs, 86400);
        for name in ["default", "anonymous", "stdio"] {
            let p = c.staging.policy(name);
            assert_eq!(p.write_roots, WriteRoots::All, "{name}");
            assert!(p.write_roots.allows(Path::new("/srv/b")));
        }
    }

    #[test]
    fn listed_client_writes_only_its_roots() {
        let c = Config::parse(
            "clients:\n  - name: a\n    token_env: A\n    write_roots: [/srv/b/]\n    staging: {max_file_bytes: 1000}\n  - name: b\n    token_env: B\nfile_roots: [/srv/a, /srv/b]\nstaging:\n  max_chunk_bytes: 1024\n",
            "t",
        )
        .expect("ok");
        let a = c.staging.policy("a");
        assert_eq!(
            a.write_roots,
            WriteRoots::Only(vec![PathBuf::from("/srv/b")])
        );
        assert!(!a.write_roots.allows(Path::new("/srv/a")));
        assert_eq!(a.limits.max_file_bytes, 1000);
        assert_eq!(
            a.limits.max_chunk_bytes, 1024,
            "inherits the section's value"
        );
        let b = c.staging.policy("b");
        assert_eq!(
            b.write_roots,
            WriteRoots::Only(vec![]),
            "nowhere by default"
        );
    }

    #[test]
    fn write_root_must_be_a_file_root() {
        let e = errors(
            "file_roots: [/srv/a]\nclients:\n  - name: a\n    token_env: A\n    write_roots: [/srv/x]\n",
        );
        assert_eq!(
            (e[0].line, e[0].field.as_str()),
            (5, "clients[0].write_roots[0]")
        );
        assert!(
            e[0].message.contains("not one of file_roots (/srv/a)"),
            "{}",
            e[0]
        );
    }

    #[test]
    fn chunk_must_fit_the_request_body() {
        let e = errors("file_roots: [/srv/a]\nstaging:\n  max_chunk_bytes: 8388608\n");
        assert_eq!(
            (e[0].line, e[0].field.as_str()),
            (3, "staging.max_chunk_bytes")
        );
        assert!(
            e[0].message.contains("raise limits.max_request_body_bytes"),
            "{}",
            e[0]
        );
        // Raising the body limit makes it valid.
        Config::parse(
            "file_roots: [/srv/a]\nlimits: {max_request_body_bytes: 16777216}\nstaging:\n  max_chunk_bytes: 8388608\n",
            "t",
        )
        .expect("fits");
        // A client override is checked too, at the client's line.
        let e = errors(
            "file_roots: [/srv/a]\nclients:\n  - name: a\n    token_env: A\n    staging: {max_chunk_bytes: 8388608}\n",
        );
        assert_eq!(
            (e[0].line, e[0].field.as_str()),
            (5, "clients[0].staging.max_chunk_bytes")
        );
    }

    #[test]
    fn zero_limits_and_unknown_keys_are_located() {
        let e = errors("staging:\n  quota_bytes_per_root: 0\n");
        assert_eq!(
            (e[0].line, e[0].field.as_str()),
            (2, "staging.quota_bytes_per_root")
        );
        let e = errors("staging:\n  max_chunk: 5\n");
        assert_eq!(e[0].line, 2);
        assert!(
            e[0].message.contains("unknown field `max_chunk`"),
            "{}",
            e[0]
        );
    }
}

/// Why a binary cannot be run, if it cannot.
pub fn binary_problem(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Some(format!("{} does not exist on this host", path.display()))
        }
        Err(e) => Some(format!("{} cannot be inspected: {e}", path.display())),
        Ok(m) if !m.is_file() => Some(format!("{} is not a regular file", path.display())),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            Some(format!("{} is not executable", path.display()))
        }
        Ok(_) => None,
    }
}

fn default_state_dir() -> PathBuf {
    // systemd's StateDirectory= sets this; elsewhere fall back to the XDG location.
    if let Some(d) = std::env::var_os("STATE_DIRECTORY").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(d).join("gatecmd");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".local/state/gatecmd");
    }
    PathBuf::from("/var/lib/gatecmd")
}

/// Finds the line of a key in YAML text, for errors that relate several fields.
///
/// serde_yaml keeps no spans after parsing; this searches the text instead. It looks for
/// the list item whose `name:` is the given name and then the key within that item.
struct Locator<'a> {
    lines: Vec<&'a str>,
}

impl<'a> Locator<'a> {
    fn new(text: &'a str) -> Self {
        Locator {
            lines: text.lines().collect(),
        }
    }

    fn indent(line: &str) -> usize {
        line.len() - line.trim_start_matches([' ', '-']).len()
    }

    fn key_of(line: &str) -> Option<&str> {
        let t = line.trim_start_matches([' ', '-']);
        let (k, _) = t.split_once(':')?;
        Some(k.trim().trim_matches(['"', '\'']))
    }

    /// Line and column (1-based) of the first `key:` at or after `from`.
    fn key_line(&self, key: &str, from: usize) -> Option<(usize, usize)> {
        self.lines
            .iter()
            .enumerate()
            .skip(from)
            .find_map(|(n, l)| (Self::key_of(l) == Some(key)).then(|| (n + 1, Self::indent(l) + 1)))
    }

    /// The first line whose value part contains `value`.
    fn value_line(&self, value: &str) -> Option<(usize, usize)> {
        self.lines.iter().enumerate().find_map(|(n, l)| {
            let col = l.find(value)?;
            (!l.trim_start().starts_with('#')).then_some((n + 1, col + 1))
        })
    }

    /// `key:` inside the list item whose `name:` is `name`.
    fn item_key(&self, name: &str, key: &str) -> Option<(usize, usize)> {
        self.item_key_nth(name, key, 0)
    }

    /// `key: value` inside the item (for keys that repeat, such as `pattern`).
    fn item_value(&self, name: &str, key: &str, value: &str) -> Option<(usize, usize)> {
        let (start, _) = self.item_key(name, "name")?;
        self.lines
            .iter()
            .enumerate()
            .skip(start)
            .find_map(|(n, l)| {
                (Self::key_of(l) == Some(key) && l.contains(value))
                    .then(|| (n + 1, Self::indent(l) + 1))
            })
    }

    /// Like [`Self::item_key`], for the `nth` item with that name (0-based).
    fn item_key_nth(&self, name: &str, key: &str, nth: usize) -> Option<(usize, usize)> {
        let start = self
            .lines
            .iter()
            .enumerate()
            .filter(|(_, l)| {
                Self::key_of(l) == Some("name")
                    && l.split_once(':')
                        .map(|(_, v)| v.trim().trim_matches(['"', '\'']))
                        == Some(name)
            })
            .nth(nth)?
            .0;
        let item_indent = Self::indent(self.lines[start]);
        if key == "name" {
            return Some((start + 1, item_indent + 1));
        }
        for (n, l) in self.lines.iter().enumerate().skip(start + 1) {
            if l.trim().is_empty() || l.trim_start().starts_with('#') {
                continue;
            }
            if l.trim_start().starts_with('-')
                && Self::indent(l) <= item_indent
                && l.len() - l.trim_start().len() < item_indent
            {
                break;
            }
            if Self::indent(l) < item_indent {
                break;
            }
            if Self::key_of(l) == Some(key) {
                return Some((n + 1, Self::indent(l) + 1));
            }
        }
        Some((start + 1, item_indent + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<ConfigError> {
        match Config::parse(text, "test.yaml") {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn bundled_default_is_valid() {
        let c = Config::parse(EMBEDDED_DEFAULT, EMBEDDED_NAME).expect("bundled config");
        assert!(c.command("lsusb").is_some());
        assert_eq!(c.bind.to_string(), DEFAULT_BIND);
    }

    #[test]
    fn audit_defaults_and_overrides() {
        let c = Config::parse("{}", "t.yaml").expect("valid");
        assert_eq!(c.audit, AuditSettings::default());
        assert_eq!(c.audit.max_bytes, 10 * 1024 * 1024);
        assert_eq!(c.audit.keep, 5);
        let c = Config::parse("audit:\n  max_bytes: 65536\n  keep: 2\n", "t.yaml").expect("valid");
        assert_eq!(
            c.audit,
            AuditSettings {
                max_bytes: 65536,
                keep: 2
            }
        );
    }

    #[test]
    fn bad_audit_settings_name_line_and_field() {
        let e = errors("limits:\n  kill_grace_secs: 1\naudit:\n  max_bytes: 10\n  keep: 0\n");
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!((e[0].line, e[0].field.as_str()), (4, "audit.max_bytes"));
        assert!(e[0].message.contains("4096"), "{}", e[0]);
        assert_eq!((e[1].line, e[1].field.as_str()), (5, "audit.keep"));
        let e = errors("audit:\n  max_byte: 10000\n");
        assert!(e[0].message.contains("max_bytes"), "{}", e[0]);
    }

    #[test]
    fn simple_schema_is_accepted() {
        let c = Config::parse(
            "bind: 127.0.0.1:9000\nauth_token: s3cret\ncommands:\n  - name: echo\n    binary: /bin/echo\n    description: say\n    allowed_args:\n      - pattern: hello {who}\n    timeout_secs: 5\n",
            "t.yaml",
        )
        .expect("valid");
        assert_eq!(c.clients[0].name, "default");
        assert_eq!(
            c.command("echo").map(|c| c.timeout),
            Some(Duration::from_secs(5))
        );
    }

    #[test]
    fn relative_binary_names_line_and_field() {
        let e = errors(
            "commands:\n  - name: ls\n    binary: ls\n    allowed_args:\n      - pattern: \"\"\n",
        );
        assert_eq!(e[0].line, 3);
        assert_eq!(e[0].field, "commands[0].binary");
        assert!(e[0].message.contains("not an absolute path"), "{}", e[0]);
    }

    #[test]
    fn unknown_key_names_line_and_field() {
        let e = errors("commands:\n  - name: ls\n    binary: /bin/ls\n    alowed_args: []\n");
        assert_eq!(e[0].line, 4);
        assert!(
            e[0].message.contains("unknown field `alowed_args`"),
            "{}",
            e[0]
        );
        assert!(
            e[0].message.contains("allowed_args"),
            "lists valid keys: {}",
            e[0]
        );
    }

    #[test]
    fn bad_regex_names_line_and_field() {
        let e = errors(
            "commands:\n  - name: ls\n    binary: /bin/ls\n    params:\n      dir: \"[a-\"\n    allowed_args:\n      - pattern: \"{dir}\"\n",
        );
        assert_eq!(e[0].line, 5);
        assert_eq!(e[0].field, "commands[0].params.dir");
        assert!(e[0].message.contains("invalid regex"));
    }

    #[test]
    fn unknown_device_class_is_located() {
        let e = errors(
            "devices:\n  - name: rockusb\n    match: {vid: \"2207\"}\ncommands:\n  - name: rk\n    binary: /bin/true\n    device: rockus\n    allowed_args:\n      - pattern: ld\n",
        );
        assert_eq!((e[0].line, e[0].field.as_str()), (7, "commands[0].device"));
        assert!(
            e[0].message.contains("defined under `devices:`: rockusb"),
            "{}",
            e[0]
        );
    }

    #[test]
    fn file_args_must_name_a_slot_and_need_roots() {
        let e = errors(
            "commands:\n  - name: rk\n    binary: /bin/true\n    allowed_args:\n      - pattern: wl 0 {image}\n        file_args: [img]\n",
        );
        assert!(
            e.iter()
                .any(|e| e.message.contains("\"img\" is not a slot") && e.line == 6),
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.message.contains("need `file_roots:`")),
            "{e:?}"
        );
    }

    #[test]
    fn bad_hex_and_bad_bind() {
        let e = errors("bind: localhost\n");
        assert_eq!((e[0].line, e[0].field.as_str()), (1, "bind"));
        let e = errors("devices:\n  - name: x\n    match: {vid: \"22g7\"}\n");
        assert_eq!(e[0].line, 3);
        assert!(e[0].message.contains("4 hex digits"));
    }

    #[test]
    fn numeric_vid_is_read_as_hex_digits() {
        let c = Config::parse(
            "devices:\n  - name: rk\n    match: {vid: 2207, pid: 350b}\n",
            "t",
        )
        .expect("ok");
        assert_eq!((c.devices[0].vid, c.devices[0].pid), (0x2207, Some(0x350b)));
    }

    #[test]
    fn client_needs_exactly_one_token_source() {
        let e = errors("clients:\n  - name: vm-a\n    token: a\n    token_env: B\n");
        assert_eq!(e[0].line, 2);
        assert!(e[0].message.contains("exactly one of token"));
    }

    #[test]
    fn client_command_restriction_must_name_commands() {
        let e = errors(
            "clients:\n  - name: vm-a\n    token_env: T\n    commands: [nope]\ncommands:\n  - name: ls\n    binary: /bin/ls\n    allowed_args:\n      - pattern: \"\"\n",
        );
        assert_eq!((e[0].line, e[0].field.as_str()), (4, "clients[0].commands"));
        assert!(e[0].message.contains("defined commands: ls"));
    }

    #[test]
    fn duplicate_commands_and_missing_patterns() {
        let e = errors(
            "commands:\n  - name: a\n    binary: /bin/true\n    allowed_args: [{pattern: x}]\n  - name: a\n    binary: /bin/true\n",
        );
        assert!(e.iter().any(|e| e.message.contains("defined twice")));
        assert!(e.iter().any(|e| e.message.contains("no allowed_args")));
    }

    #[test]
    fn progress_regex_needs_a_group() {
        let e = errors(
            "commands:\n  - name: a\n    binary: /bin/true\n    progress: \"\\\\d+%\"\n    allowed_args: [{pattern: x}]\n",
        );
        assert_eq!(e[0].line, 4);
        assert!(e[0].message.contains("no capture group"));
    }

    #[test]
    fn missing_binary_is_not_fatal_to_parse() {
        let c = Config::parse(
            "commands:\n  - name: rk\n    binary: /nonexistent/rkdeveloptool\n    allowed_args: [{pattern: ld}]\n",
            "t",
        )
        .expect("parses");
        assert_eq!(c.unavailable_commands().len(), 1);
        assert!(
            c.commands[0]
                .unavailable
                .as_deref()
                .is_some_and(|w| w.contains("does not exist"))
        );
    }

    #[test]
    fn display_has_file_line_column_field() {
        let e = errors("commands:\n  - name: ls\n    binary: ls\n");
        let s = e[0].to_string();
        assert!(s.starts_with("test.yaml:3:5: commands[0].binary: "), "{s}");
    }
}
