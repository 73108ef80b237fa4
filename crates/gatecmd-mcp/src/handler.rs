//! The MCP handler as the tools see it: its state (`GatecmdServer`), who is calling
//! (`GatecmdServer::identity`, `session_id`), whether the client speaks the tasks
//! extension (`wants_task`), and the mark of a tool that answers at once
//! (`answers_at_once`). Each tool registers its `#[tool]` method on `GatecmdServer` in its
//! own file under `tools/` and imports this module; `server.rs` builds the handler, serves
//! the tools' routers summed, and implements the rest of MCP. Keeping the two apart keeps
//! the imports one way: tools → handler, server → tools.

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::MetaObject;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use crate::resources::notify::Subscriptions;
use crate::views::list_cache::ListCache;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::locks::SessionId;
use gatecmd_domain::state::AppState;

/// One MCP handler; rmcp makes one per session (legacy) or per request (stateless).
#[derive(Clone)]
pub struct GatecmdServer {
    pub(crate) state: Arc<AppState>,
    /// Kept `list_devices` answers, shared by every handler of one transport.
    pub(crate) lists: Arc<ListCache>,
    /// Who the stdio transport's client is (HTTP clients are identified per request).
    pub(crate) local_identity: Option<ClientIdentity>,
    /// URIs this (legacy) session subscribed to with `resources/subscribe`.
    pub(crate) subscriptions: Subscriptions,
    pub(crate) tool_router: ToolRouter<Self>,
}

impl GatecmdServer {
    /// The authenticated caller of a request, read from what the HTTP guard put into the
    /// request's parts (over stdio, the fixed local client).
    pub(crate) fn identity(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ClientIdentity, McpError> {
        if let Some(id) = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<ClientIdentity>())
        {
            return Ok(id.clone());
        }
        self.local_identity
            .clone()
            .ok_or_else(|| McpError::internal_error("request carries no client identity", None))
    }
}

/// The legacy (2025-11-25) session a request belongs to, if any: leases taken in it end with
/// it. Set by the session manager (src/transport/sessions.rs) on requests routed through a session the
/// caller owns, never taken from the header: a stateless request has none.
pub fn session_id(ctx: &RequestContext<RoleServer>) -> Option<SessionId> {
    let parts = ctx.extensions.get::<http::request::Parts>()?;
    parts.extensions.get::<SessionId>().cloned()
}

/// Whether a call's client declared the MCP tasks extension (per request in 2026-07-28,
/// at `initialize` in a session): then a long `execute_command` is answered as a task.
pub(crate) fn wants_task(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

/// The `_meta` key that marks a tool answering at once (no waiting, no child process, no
/// hashing of a whole file). A 2026-07-28 call to such a tool is answered by rmcp directly
/// as JSON (`is_quick` in `src/transport/json_answer.rs`); every other call streams, so that a long
/// one is never silent. A tool left unmarked is only slower; a slow tool marked could sit
/// silent past a client's read timeout. Clients see the mark in `tools/list` too.
pub const ANSWERS_AT_ONCE: &str = "gatecmd/answersAtOnce";

/// The `meta` of a `#[tool]` that answers at once. It also says that the tool never
/// becomes an MCP task (rmcp 3.11's `Tool` has no 2025-11-25 `execution.taskSupport`
/// field, so the same word travels in `_meta`; docs/TOOLS.md).
pub(crate) fn answers_at_once() -> MetaObject {
    let mut meta = MetaObject::new();
    meta.0.insert(ANSWERS_AT_ONCE.into(), true.into());
    meta.0.insert(
        rmcp::model::TASKS_EXTENSION_ID.into(),
        serde_json::json!({ "taskSupport": "forbidden" }),
    );
    meta
}
