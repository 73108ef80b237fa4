//! The YAML configuration (`allowed_commands.yaml`): schema, defaults and validation.
//!
//! The text is read by serde-saphyr (a maintained YAML crate; serde_yaml is deprecated
//! upstream), whose errors carry line and column; `positions` indexes the same parser's
//! events by field path, so a type error is named by its field and the validator's checks
//! (single values and those that relate several fields) are located by the field they
//! blame. Either way a [`ConfigError`] names file, line, column and field and says what
//! would be valid.
//!
//! - `schema`: the validated [`Config`] and its parts.
//! - `declare`: one setting declared once (type, default, bounds, docs row, reload), and
//!   what is derived from the declarations ([`Setting`], [`settings`]).
//! - `sections`: the sections of plain settings (`limits`, `leases`, `monitor`,
//!   `isolation`, `audit`), declared.
//! - `jobs`, `page`: the `jobs:` and `page:` sections, declared.
//! - `approvals`: which actions wait for an approver's yes, and the lookup.
//! - `flash`: the `flash:` section (`flash_board`'s policy), declared.
//! - `boards`: the named boards (usb port, console, power).
//! - `power/`: a board's power switch, one file per backend behind one trait.
//! - `shell`: how to talk to a board over its console (prompts, login, U-Boot, boot time).
//! - `staging`: the file staging policy (limits, write roots per client).
//! - `lab`: gatecmd as a labgrid exporter (coordinator, name, console bind).
//! - `peers`: `labgrid.peers`, the other gatecmd hosts of the lab and their tokens.
//! - `metrics`: who may read `/metrics`, and the loopback-only metrics listener.
//! - `command`: one allowlisted command as validated, and the sanitizer's view of it.
//! - `raw`: the schema as written in YAML (the top level declared).
//! - `values`: checks of single values (names, paths, addresses, USB port paths).
//! - `validate/`: cross-field validation, one file per part of the schema.
//! - `load`: the search order, reading a file, its permissions, serde errors located.
//! - `host`: whether a binary can run here; the default state directory.
//! - `positions`: where each field path is in the YAML text.
//! - `error`: [`ConfigError`] and [`ConfigErrors`].
//!
//! The argument patterns are the sanitizer's grammar; the configuration compiles them and
//! hands the sanitizer its policy through [`gatecmd_core::sanitizer::CommandPolicy`].

pub mod approvals;
mod boards;
pub mod boot_patterns;
mod boots;
mod command;
pub(crate) mod declare;
mod error;
mod flash;
mod host;
mod jobs;
mod lab;
mod load;
mod metrics;
mod page;
mod peers;
mod positions;
pub mod power;
mod raw;
mod schema;
mod sections;
mod shell;
mod staging;
mod validate;
mod value_error;
mod values;

pub use approvals::{ApprovalRule, Approvers, Gated, GatedTool, approval_rule};
pub use boards::{
    BoardConfig, ConsoleConfig, DEFAULT_CONSOLE_BUFFER_BYTES, MAX_CONSOLE_BUFFER_BYTES,
    MIN_CONSOLE_BUFFER_BYTES, OnRelease, STANDARD_BAUDS, UsbplugPair, power_boards_of,
};
pub use boots::BootSettings;
pub use command::{CancelPolicy, CommandConfig, PatternConfig};
pub use declare::{Setting, Value, Written};
pub use error::{ConfigError, ConfigErrors};
pub use flash::{FlashSettings, loader_in};
pub use host::binary_problem;
pub use jobs::JobSettings;
pub use lab::{DEFAULT_LAB_HOLD_SECS, LabPerson, LabSettings, MAX_LAB_HOLD_SECS};
pub use load::{ConfigLocation, EMBEDDED_DEFAULT, EMBEDDED_NAME, SYSTEM_PATH, find_config};
pub use metrics::MetricsSettings;
pub use page::{PAGE_MAX_IDLE_SECS, PAGE_MIN_IDLE_SECS, PageSettings};
pub use peers::{LabPeer, PeerToken, peer};
pub use power::uhubctl::DEFAULT_UHUBCTL;
pub use power::{PowerAction, PowerConfig, Recovery};
pub use raw::settings;
pub use schema::{ClientConfig, Config, DEFAULT_BIND, DeviceClass, TokenSource};
pub use sections::{
    AUDIT_MIN_BYTES, AUDIT_MIN_RECORD_BYTES, AuditSettings, IsolationSettings, LeaseSettings,
    Limits, MonitorSettings,
};
pub use shell::{
    DEFAULT_BOOT_TIMEOUT_SECS, DEFAULT_LOGIN_PROMPT, DEFAULT_PROMPT, DEFAULT_UBOOT_INTERRUPT,
    DEFAULT_UBOOT_PROMPT, LoginConfig, MAX_BOOT_TIMEOUT_SECS, PASSWORD_PROMPT, ShellConfig,
    UbootConfig, prompt_regex,
};
pub use staging::{
    CHUNK_ENVELOPE_BYTES, ClientStaging, RawStaging, StagingConfig, StagingLimits, WriteRoots,
    base64_len,
};
pub use value_error::ValueError;
pub use values::valid_port_path;
// A file slot's kind is the sanitizer's; callers that read it from a `PatternConfig` keep
// finding it here.
pub use gatecmd_core::sanitizer::FileKind;

#[cfg(test)]
mod approvals_tests;
#[cfg(test)]
mod boards_tests;
#[cfg(test)]
mod docs_tests;
#[cfg(test)]
mod shell_tests;
#[cfg(test)]
mod staging_tests;
#[cfg(test)]
mod tests;
