//! `list_boards`: every configured board as the caller may see it (the view is
//! `BoardView` in `views/boards.rs`, which the board resources show too), rendered as text
//! for people.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::calls::answer::structured;
use crate::handler::{GatecmdServer, answers_at_once};
use crate::views::{BoardList, boards_view};
use gatecmd_domain::state::AppState;

/// Arguments of `list_boards`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListBoardsRequest {
    /// "lab": this host's boards and every other lab host's, remote ones as HOST/BOARD
    /// with host and reachable; hosts says which answered. Default "host".
    #[serde(default)]
    pub scope: Option<crate::lab::scope::Scope>,
}

#[tool_router(router = list_boards_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Lists the configured boards.
    #[tool(
        description = "List the configured boards: name, tags, the device at its usb port (or null) with SoC and \
                       mode, its console, its power switch and state, and who holds its lease.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<BoardList>(),
        meta = answers_at_once()
    )]
    async fn list_boards(
        &self,
        Parameters(req): Parameters<ListBoardsRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        if req.scope == Some(crate::lab::scope::Scope::Lab) {
            return Ok(crate::lab::boards::list(&self.state, &who.name).await);
        }
        Ok(list(&self.state, &who.name))
    }
}

/// `list_boards`.
pub fn list(state: &AppState, caller: &str) -> CallToolResult {
    let v = boards_view(state, caller);
    let mut text = String::new();
    for b in &v.boards {
        text.push_str(&format!("{} (usb {}", b.name, b.usb));
        if !b.tags.is_empty() {
            let tags: Vec<String> = b.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
            text.push_str(&format!(", {}", tags.join(" ")));
        }
        text.push_str("): ");
        match &b.device {
            Some(d) => text.push_str(&format!(
                "{:04x}:{:04x} attached{}",
                d.device.vid,
                d.device.pid,
                b.mode.map(|m| format!(" in {m}")).unwrap_or_default()
            )),
            None => text.push_str("nothing attached"),
        }
        if let Some(p) = &b.power {
            text.push_str(&format!(
                "; power {} ({})",
                serde_json::to_value(p.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                p.backend
            ));
        }
        match (&b.lock.holder, b.lock.held) {
            (Some(h), true) => text.push_str(&format!(
                "; held by {h} ({}), {} waiting",
                b.lock.held_by.as_deref().unwrap_or("lease"),
                b.lock.queue_len + b.match_waiting
            )),
            _ => text.push_str("; free"),
        }
        text.push('\n');
    }
    if v.boards.is_empty() {
        text.push_str("No boards are configured (the server's config has no boards: section).\n");
    }
    structured(&v, text)
}
