//! `list_locks`: every lock key that is leased, in use or waited for, as the caller may see
//! it (the view is `LockList` in `views/locks.rs`, which the `gatecmd://locks` resource
//! shows too), rendered as text for people.

use rmcp::handler::server::tool::schema_for_output;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};

use crate::calls::answer::structured;
use crate::handler::{GatecmdServer, answers_at_once};
use crate::views::{LockList, locks_view};
use gatecmd_domain::state::AppState;

#[tool_router(router = list_locks_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Lists leases, running commands and waiters.
    #[tool(
        description = "See who holds or waits for what, before you lock or when something is busy: every \
                       lock key that is leased, in use or waited for, with holder, note, since, lease expiry, \
                       running command and queue length (your own leases among them).",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<LockList>(),
        meta = answers_at_once()
    )]
    async fn list_locks(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(list(&self.state, &who.name, who.admin))
    }
}

/// `list_locks`.
pub fn list(state: &AppState, caller: &str, admin: bool) -> CallToolResult {
    let v = locks_view(state, caller, admin);
    let mut text = String::new();
    for l in &v.locks {
        text.push_str(&format!("{}: ", l.key));
        match (&l.holder, &l.held_by) {
            (Some(h), Some(by)) => text.push_str(&format!("held by {h} ({by})")),
            _ => text.push_str("free"),
        }
        if let Some(e) = l.lease_expires_at {
            text.push_str(&format!(
                ", lease expires {}",
                e.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ));
        }
        if let Some(r) = &l.running {
            text.push_str(&format!(", running {r:?}"));
        }
        for h in &l.shared_by {
            text.push_str(&format!(
                ", shared by {} ({} {})",
                h.via, h.holder, h.held_by
            ));
        }
        text.push_str(&format!(", {} waiting\n", l.queue_len));
    }
    if v.omitted > 0 {
        text.push_str(&format!(
            "{} more keys in use are not listed (the limit leases.max_listed); list_devices shows the lock of each attached device.\n",
            v.omitted
        ));
    }
    if v.locks.is_empty() && v.omitted == 0 {
        text.push_str("No device is locked.\n");
    }
    structured(&v, text)
}
