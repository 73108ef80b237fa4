//! The allowlist as a client sees it: `list_commands` and the `gatecmd://commands`
//! resource render these (only the commands the client may run).

use schemars::JsonSchema;
use serde::Serialize;

use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::config::{CancelPolicy, CommandConfig, Config, FileKind, PatternConfig};

/// The result of `list_commands`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CommandList {
    pub commands: Vec<CommandInfo>,
}

/// One command the caller may run.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CommandInfo {
    pub name: String,
    pub description: String,
    /// Absolute path of the binary (no shell, no PATH lookup).
    pub binary: String,
    /// Allowed argument patterns; `{slot}` is a value you choose.
    pub patterns: Vec<PatternInfo>,
    /// Default timeout in seconds.
    pub timeout_secs: u64,
    /// Device class whose lock the command takes, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    pub read_only: bool,
    pub destructive: bool,
    /// Whether a running command can be cancelled.
    pub cancellable: bool,
    /// Whether the binary exists on this host.
    pub available: bool,
    /// Why not, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_reason: Option<String>,
}

/// One allowed argument pattern.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PatternInfo {
    pub pattern: String,
    /// Slot name → the regex its value must match (slots without one take any plain word
    /// that does not start with '-').
    pub params: std::collections::BTreeMap<String, String>,
    /// Slots that take a file path (inside the server's file roots).
    pub file_args: Vec<String>,
    /// Slots that name an output file (may be new).
    pub output_args: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// The device modes the pattern works in (e.g. ["loader"]); absent: any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub modes: Vec<String>,
    /// File slots that are loaders: only the board's allowed loaders (list_boards).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub loader_args: Vec<String>,
}

/// Every command `who` may run, in config order, each beside its configuration (a text
/// rendering names what the view leaves out, such as the full command lines).
pub fn command_infos<'a>(
    config: &'a Config,
    who: &'a ClientIdentity,
) -> impl Iterator<Item = (&'a CommandConfig, CommandInfo)> + 'a {
    config
        .commands
        .iter()
        .filter(|c| who.may_run(&c.name))
        .map(|c| (c, info(c)))
}

/// The commands `who` may run.
pub fn commands_view(config: &Config, who: &ClientIdentity) -> CommandList {
    CommandList {
        commands: command_infos(config, who).map(|(_, i)| i).collect(),
    }
}

fn info(c: &CommandConfig) -> CommandInfo {
    // Checked at each look, not at load: a tool may be installed (or removed) meanwhile.
    let unavailable = gatecmd_domain::config::binary_problem(&c.binary);
    CommandInfo {
        name: c.name.clone(),
        description: c.description.clone(),
        binary: c.binary.display().to_string(),
        patterns: c
            .patterns
            .iter()
            .map(|p| {
                let slots: Vec<&str> = p.pattern.slot_names().collect();
                PatternInfo {
                    pattern: p.pattern.to_string(),
                    params: c
                        .params
                        .iter()
                        .filter(|(k, _)| slots.contains(&k.as_str()))
                        .map(|(k, v)| {
                            let s = v.as_str();
                            let s = s
                                .strip_prefix("^(?:")
                                .and_then(|s| s.strip_suffix(")$"))
                                .unwrap_or(s);
                            (k.clone(), s.to_string())
                        })
                        .collect(),
                    file_args: kinds(p, FileKind::Input),
                    output_args: kinds(p, FileKind::Output),
                    timeout_secs: p.timeout.map(|t| t.as_secs()),
                    modes: p.modes.clone(),
                    loader_args: p.loader_slots.iter().cloned().collect(),
                }
            })
            .collect(),
        timeout_secs: c.timeout.as_secs(),
        device: c.device.clone(),
        read_only: c.read_only,
        destructive: c.destructive,
        cancellable: c.cancel != CancelPolicy::Never,
        available: unavailable.is_none(),
        unavailable_reason: unavailable,
    }
}

fn kinds(p: &PatternConfig, kind: FileKind) -> Vec<String> {
    p.file_slots
        .iter()
        .filter(|(_, k)| **k == kind)
        .map(|(s, _)| s.clone())
        .collect()
}
