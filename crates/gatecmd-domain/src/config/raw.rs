//! The schema as written in YAML (the checks of single values are in `values.rs`).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::command::CancelPolicy;
use super::schema::{AuditSettings, IsolationSettings, LeaseSettings, Limits, MonitorSettings};
use super::staging::StagingLimits;
use super::value_error::ValueError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub(crate) bind: Option<String>,
    pub(crate) auth_token: Option<String>,
    #[serde(default)]
    pub(crate) clients: Vec<RawClient>,
    #[serde(default)]
    pub(crate) file_roots: Vec<String>,
    #[serde(default)]
    pub(crate) allow_hardlinked_inputs: bool,
    #[serde(default)]
    pub(crate) devices: Vec<RawDeviceClass>,
    #[serde(default)]
    pub(crate) allowed_origins: Vec<String>,
    #[serde(default)]
    pub(crate) allowed_hosts: Vec<String>,
    pub(crate) state_dir: Option<String>,
    #[serde(default)]
    pub(crate) limits: Limits,
    #[serde(default)]
    pub(crate) leases: LeaseSettings,
    #[serde(default)]
    pub(crate) monitor: MonitorSettings,
    #[serde(default)]
    pub(crate) isolation: IsolationSettings,
    #[serde(default)]
    pub(crate) audit: AuditSettings,
    #[serde(default)]
    pub(crate) staging: RawStaging,
    #[serde(default)]
    pub(crate) commands: Vec<RawCommand>,
    #[serde(default)]
    pub(crate) boards: Vec<RawBoard>,
    #[serde(default)]
    pub(crate) page: super::page::PageSettings,
    #[serde(default)]
    pub(crate) metrics: super::metrics::RawMetrics,
    #[serde(default)]
    pub(crate) jobs: super::jobs::JobSettings,
    #[serde(default)]
    pub(crate) labgrid: super::lab::RawLab,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawClient {
    pub(crate) name: String,
    pub(crate) token: Option<String>,
    pub(crate) token_file: Option<String>,
    pub(crate) token_env: Option<String>,
    pub(crate) token_sha256: Option<String>,
    pub(crate) commands: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) admin: bool,
    // File staging: read by `Validator::staging`, not by `Validator::clients`.
    pub(crate) write_roots: Option<Vec<String>>,
    pub(crate) staging: Option<RawStagingOverride>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDeviceClass {
    pub(crate) name: String,
    #[serde(rename = "match")]
    pub(crate) matches: RawMatch,
    pub(crate) lock_group: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMatch {
    pub(crate) vid: RawUsbId,
    pub(crate) pid: Option<RawUsbId>,
}

/// A USB id as YAML typed it: `"2207"` is text, a plain `2207` a number. The validator
/// reads the digits from the text itself where it can ([`parse_hex16`]).
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum RawUsbId {
    Text(String),
    Number(u64),
    Other(serde::de::IgnoredAny),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCommand {
    pub(crate) name: String,
    pub(crate) binary: String,
    #[serde(default)]
    pub(crate) description: String,
    #[serde(default)]
    pub(crate) allowed_args: Vec<RawPattern>,
    pub(crate) timeout_secs: Option<u64>,
    #[serde(default)]
    pub(crate) params: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) device: Option<String>,
    pub(crate) progress: Option<String>,
    /// `None`: [`CancelPolicy::default_for`] the command's `destructive`.
    pub(crate) cancel: Option<CancelPolicy>,
    #[serde(default)]
    pub(crate) read_only: bool,
    #[serde(default)]
    pub(crate) destructive: bool,
    #[serde(default)]
    pub(crate) isolate: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPattern {
    pub(crate) pattern: String,
    #[serde(default)]
    pub(crate) file_args: Vec<String>,
    #[serde(default)]
    pub(crate) output_args: Vec<String>,
    pub(crate) timeout_secs: Option<u64>,
    pub(crate) progress: Option<String>,
    pub(crate) cancel: Option<CancelPolicy>,
    pub(crate) isolate: Option<bool>,
}

// Values are read as plain YAML and checked by the validator, which locates each error by
// its field path (`positions.rs`) and reports every error of the file, not only the first;
// the checks of single values are in `values.rs`.

/// `written` is the scalar as it stands in the file, when it is one.
pub(crate) fn parse_hex16(v: &RawUsbId, written: Option<&str>) -> Result<u16, ValueError> {
    // YAML reads 2207 as a number (and 0x2207 as 8711); the digits as written are the hex
    // digits they were meant as.
    let s = match (written, v) {
        (Some(w), RawUsbId::Text(_) | RawUsbId::Number(_)) => w.to_string(),
        (None, RawUsbId::Text(s)) => s.clone(),
        (None, RawUsbId::Number(n)) => n.to_string(),
        (_, RawUsbId::Other(_)) => "a list or mapping".to_string(),
    };
    let t = s.trim_start_matches("0x");
    if t.len() == 4
        && t.chars().all(|c| c.is_ascii_hexdigit())
        && let Ok(n) = u16::from_str_radix(t, 16)
    {
        return Ok(n);
    }
    Err(ValueError::NotUsbId(s))
}

// Plain fields rather than a flattened `StagingLimits`: serde cannot combine `flatten`
// with `deny_unknown_fields`, and a misspelt key must be an error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawStaging {
    pub(crate) max_file_bytes: u64,
    pub(crate) max_chunk_bytes: u64,
    pub(crate) quota_bytes_per_root: u64,
    pub(crate) quota_entries_per_root: u64,
    pub(crate) max_depth: u64,
    pub(crate) max_new_dirs_per_call: u64,
    pub(crate) stale_upload_secs: u64,
}

impl Default for RawStaging {
    fn default() -> Self {
        let l = StagingLimits::default();
        RawStaging {
            max_file_bytes: l.max_file_bytes,
            max_chunk_bytes: l.max_chunk_bytes,
            quota_bytes_per_root: l.quota_bytes_per_root,
            quota_entries_per_root: l.quota_entries_per_root,
            max_depth: l.max_depth,
            max_new_dirs_per_call: l.max_new_dirs_per_call,
            stale_upload_secs: 24 * 3600,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStagingOverride {
    pub(crate) max_file_bytes: Option<u64>,
    pub(crate) max_chunk_bytes: Option<u64>,
    pub(crate) quota_bytes_per_root: Option<u64>,
    pub(crate) quota_entries_per_root: Option<u64>,
    pub(crate) max_depth: Option<u64>,
    pub(crate) max_new_dirs_per_call: Option<u64>,
}

/// A client's staging keys, taken out before `Validator::clients` consumes the entry.
pub(crate) struct RawClientStaging {
    pub(crate) index: usize,
    pub(crate) name: String,
    pub(crate) write_roots: Option<Vec<String>>,
    pub(crate) overrides: RawStagingOverride,
}

pub(crate) fn take_client_staging(clients: &mut [RawClient]) -> Vec<RawClientStaging> {
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBoard {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) tags: BTreeMap<String, String>,
    pub(crate) usb: String,
    pub(crate) console: Option<RawConsole>,
    pub(crate) power: Option<super::power::RawPower>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConsole {
    pub(crate) port: Option<String>,
    pub(crate) path: Option<String>,
    pub(crate) baud: u32,
    pub(crate) buffer_bytes: Option<u64>,
    // Talking to the board (board_run, uboot_run, boot_board): `validate/shell.rs`.
    pub(crate) login: Option<RawLogin>,
    pub(crate) prompt: Option<String>,
    pub(crate) login_prompt: Option<String>,
    pub(crate) uboot: Option<RawUboot>,
    pub(crate) boot_timeout_secs: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLogin {
    pub(crate) user: String,
    pub(crate) password_env: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUboot {
    pub(crate) interrupt: Option<String>,
    pub(crate) prompt: Option<String>,
}
