//! `list_commands`: what the caller may run, and with which arguments.

use rmcp::model::CallToolResult;

use crate::answer::structured;
use crate::views::{CommandList, command_infos};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::config::Config;

/// Lists the commands `who` may run.
pub fn list(config: &Config, who: &ClientIdentity) -> CallToolResult {
    let mut text = String::new();
    let mut commands = Vec::new();
    for (c, info) in command_infos(config, who) {
        text.push_str(&format!("{} — {}\n", c.name, c.description));
        for line in c.command_lines() {
            text.push_str(&format!("  {line}\n"));
        }
        if let Some(why) = &info.unavailable_reason {
            text.push_str(&format!("  (unavailable: {why})\n"));
        }
        commands.push(info);
    }
    if commands.is_empty() {
        text.push_str("No commands are allowed for this client.\n");
    }
    structured(&CommandList { commands }, text)
}
