//! `list_commands`: what the caller may run, and with which arguments.

use rmcp::model::CallToolResult;
use schemars::JsonSchema;
use serde::Serialize;

use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::config::{CancelPolicy, Config};

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
}

/// Lists the commands `who` may run.
pub fn list(config: &Config, who: &ClientIdentity) -> CallToolResult {
    let mut text = String::new();
    let commands: Vec<CommandInfo> = config
        .commands
        .iter()
        .filter(|c| who.may_run(&c.name))
        .map(|c| {
            let unavailable = gatecmd_domain::config::binary_problem(&c.binary);
            text.push_str(&format!("{} — {}\n", c.name, c.description));
            for line in c.command_lines() {
                text.push_str(&format!("  {line}\n"));
            }
            if let Some(why) = &unavailable {
                text.push_str(&format!("  (unavailable: {why})\n"));
            }
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
                            file_args: kinds(p, gatecmd_domain::config::FileKind::Input),
                            output_args: kinds(p, gatecmd_domain::config::FileKind::Output),
                            timeout_secs: p.timeout.map(|t| t.as_secs()),
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
        })
        .collect();
    if commands.is_empty() {
        text.push_str("No commands are allowed for this client.\n");
    }
    super::structured(&CommandList { commands }, text)
}

fn kinds(
    p: &gatecmd_domain::config::PatternConfig,
    kind: gatecmd_domain::config::FileKind,
) -> Vec<String> {
    p.file_slots
        .iter()
        .filter(|(_, k)| **k == kind)
        .map(|(s, _)| s.clone())
        .collect()
}
