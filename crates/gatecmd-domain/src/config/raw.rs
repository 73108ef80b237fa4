//! The schema as written in YAML (the checks of single values are in `values.rs`).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::boots::BootSettings;
use super::command::CancelPolicy;
use super::declare::{Setting, Value, settings};
use super::flash::FlashSettings;
use super::jobs::JobSettings;
use super::lab::RawLab;
use super::metrics::RawMetrics;
use super::page::PageSettings;
use super::schema::DEFAULT_BIND;
use super::sections::{AuditSettings, IsolationSettings, LeaseSettings, Limits, MonitorSettings};
use super::staging::RawStaging;
use super::value_error::ValueError;

settings! {
    /// The file as written: every top-level key, each section as its own declaration.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub(crate) struct RawConfig {
        bind: String {
            default: DEFAULT_BIND.into(),
            docs: "listen address. NAT guests reach it as `10.0.2.2:9222`. `--bind` overrides \
                it.",
            restart: "the listening socket is opened once",
        },
        auth_token: Option<String> {
            default: None,
            docs: "a single token; it is the client named `default`.",
        },
        clients: Vec<RawClient> {
            default: Vec::new(),
            docs: "named clients (below). With neither `auth_token` nor `clients`, `serve` \
                generates a token into `<state_dir>/token` once (owner-only) and says where.",
        },
        file_roots: Vec<String> {
            default: Vec::new(),
            docs: "absolute directories that file arguments are opened beneath (a symlink is \
                followed only while it stays beneath its root; absolute symlinks are \
                refused). Required when any pattern has `file_args`/`output_args`. Relative \
                file arguments are taken relative to the first root. The child gets the open \
                file (`/proc/self/fd/N`, for an input through a symlink that carries the \
                file's name; docs/TOOLS.md `passed_argv`).",
        },
        allow_hardlinked_inputs: bool {
            default: false,
            docs: "accept input file arguments with more than one hard link (a hard link can \
                make a file from outside the roots appear inside them).",
        },
        include: Vec<String> {
            default: Vec::new(),
            docs: "configuration fragments to add: files holding only `devices:` and \
                `commands:` (the bundled recipes, docs/FAMILIES.md), or directories whose \
                `*.yaml` files are read in name order (a `conf.d`). A relative path is taken \
                from this file's directory. A name defined twice, here or in two fragments, \
                is an error at its line; a fragment cannot include another. A reload reads \
                them again.",
        },
        devices: Vec<RawDeviceClass> {
            default: Vec::new(),
            docs: "named device classes (below).",
        },
        allowed_origins: Vec<String> {
            default: Vec::new(),
            docs: "extra browser origins accepted in `Origin` (`scheme://host[:port]`). \
                Loopback origins are always accepted; absent `Origin` is fine.",
        },
        allowed_hosts: Vec<String> {
            default: Vec::new(),
            docs: "extra names accepted in `Host`. Always accepted: `localhost`, `127.0.0.1`, \
                `::1`, the bind address, and `10.0.2.2` on a loopback or wildcard bind. On a \
                wildcard bind (`0.0.0.0`) with auth on, any Host is accepted.",
        },
        state_dir: Option<String> {
            default: None,
            shown: "`$STATE_DIRECTORY`, else `$XDG_STATE_HOME/gatecmd`, else \
            `~/.local/state/gatecmd`, else `/var/lib/gatecmd`",
            docs: "generated token and the audit log (`audit.log`). Created if missing; `serve` \
                refuses to start if it cannot write the audit log there.",
            restart: "the audit log and the generated token are opened there at start",
        },
        limits: Limits {
            default: Limits::default(),
            docs: "resource limits.",
        },
        leases: LeaseSettings {
            default: LeaseSettings::default(),
            docs: "lease lifetimes and per-client lock limits (device locks).",
        },
        monitor: MonitorSettings {
            default: MonitorSettings::default(),
            docs: "how the device registry is kept current.",
        },
        isolation: IsolationSettings {
            default: IsolationSettings::default(),
            docs: "where the real sysfs and devfs are, for isolated commands.",
        },
        audit: AuditSettings {
            default: AuditSettings::default(),
            docs: "retention, record size and refusal aggregation of the audit log.",
        },
        staging: RawStaging {
            default: RawStaging::default(),
            docs: "file staging limits (upload tools).",
        },
        page: PageSettings {
            default: PageSettings::default(),
            docs: "the bench page (`GET /`): on or off, who may view it, session expiry.",
        },
        metrics: RawMetrics {
            default: RawMetrics::default(),
            docs: "who may read `GET /metrics`, and an optional loopback-only metrics listener.",
        },
        jobs: JobSettings {
            default: JobSettings::default(),
            docs: "how many finished jobs are kept per client, how long, and how much of their \
                output.",
        },
        boots: BootSettings {
            default: BootSettings::default(),
            docs: "boot reports (docs/BOARDS.md \"Boot reports\"): how many per board, how much \
                console per boot, when a boot is silent.",
        },
        flash: FlashSettings {
            default: FlashSettings::default(),
            docs: "`flash_board` (docs/FLASHING.md): off unless enabled; which boards, \
                clients and loaders; where resume journals live; the USB write size.",
        },
        labgrid: RawLab {
            default: RawLab::default(),
            docs: "gatecmd as an exporter of a labgrid coordinator (docs/LAB.md); off unless \
                `coordinator` is set.",
        },
        commands: Vec<RawCommand> {
            default: Vec::new(),
            docs: "the allowlist (below).",
        },
        boards: Vec<RawBoard> {
            default: Vec::new(),
            docs: "named boards: a flashing USB port, a serial console and a power switch \
                under one lease (below; docs/BOARDS.md).",
        },
        approvals: Vec<super::approvals::RawApprovalRule> {
            default: Vec::new(),
            docs: "actions that wait for a named approver's yes (below; docs/APPROVALS.md). \
                A reload applies to the next call; a request already waiting keeps the rule \
                it was made under.",
        },
    }
}

/// Every declared setting of the file, top-level keys first, each section's keys after its
/// own row: what docs/CONFIG.md's tables show and the reload's restart-only list.
pub fn settings() -> Vec<Setting> {
    <RawConfig as Value>::nested("")
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
    /// Another gatecmd host of the lab (docs/LAB.md): may act for its agents.
    #[serde(default)]
    pub(crate) peer: bool,
    /// The configured client whose holder answers `by: requester` approvals for this one:
    /// read by `Validator::persons`, not by `Validator::clients`.
    pub(crate) person: Option<String>,
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
    pub(crate) vid: Option<RawUsbId>,
    pub(crate) pid: Option<RawUsbId>,
    /// A family of the families table (`fastboot`, `dfu`, …), whatever the vendor id.
    pub(crate) family: Option<String>,
    /// A mode of the families table (`maskrom`, `fastboot`, `dfu`, …).
    pub(crate) mode: Option<String>,
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

/// A file named by `include:`: device classes and commands, nothing else (no clients,
/// tokens or listeners come from a fragment).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFragment {
    #[serde(default)]
    pub(crate) devices: Vec<RawDeviceClass>,
    #[serde(default)]
    pub(crate) commands: Vec<RawCommand>,
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
    /// The device modes this pattern works in (`maskrom`, `loader`, a family's mode).
    #[serde(default)]
    pub(crate) modes: Vec<String>,
    /// File slots that are loaders sent to a board: held to `flash.loaders`.
    #[serde(default)]
    pub(crate) loader_args: Vec<String>,
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

/// `clients[N].person` as written: the entry's index, its name and the person named
/// (checked by `Validator::persons`).
pub(crate) struct RawPerson {
    pub(crate) index: usize,
    pub(crate) client: String,
    pub(crate) person: String,
}

/// Takes `person` out of each raw client (`Validator::clients` does not read it).
pub(crate) fn take_persons(clients: &mut [RawClient]) -> Vec<RawPerson> {
    clients
        .iter_mut()
        .enumerate()
        .filter_map(|(index, c)| {
            c.person.take().map(|person| RawPerson {
                index,
                client: c.name.clone(),
                person,
            })
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
    #[serde(default)]
    pub(crate) on_release: super::boards::OnRelease,
    pub(crate) loaders: Option<Vec<std::path::PathBuf>>,
    /// `usbplug: {ddr, usbplug}`: the board's default DDR + usbplug pair (`flash_board`).
    pub(crate) usbplug: Option<RawUsbplug>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUsbplug {
    pub(crate) ddr: String,
    pub(crate) usbplug: String,
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
    // Boot reports' own patterns for this board: `validate/boot_patterns.rs`.
    pub(crate) boot_patterns: Option<Vec<RawBootPattern>>,
}

/// One of `console.boot_patterns`: a stage or a fault word, its regex, and whether it
/// replaces that word's default patterns.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBootPattern {
    pub(crate) stage: Option<String>,
    pub(crate) fault: Option<String>,
    pub(crate) regex: String,
    #[serde(default)]
    pub(crate) replace: bool,
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
