//! `list_commands`: what the caller may run, and with which arguments.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use crate::calls::answer::structured;
use crate::handler::{GatecmdServer, answers_at_once};
use crate::views::{CommandList, command_infos};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::config::Config;

#[tool_router(router = list_commands_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Lists the allowlisted commands with every allowed argument pattern.
    #[tool(
        description = "List the host commands you may run, each with its allowed argument patterns \
                       ({slot} = a value you choose), timeout and the device class it touches. \
                       Call this before execute_command.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<CommandList>(),
        meta = answers_at_once()
    )]
    async fn list_commands(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(list(&self.state.config(), &who))
    }
}

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
