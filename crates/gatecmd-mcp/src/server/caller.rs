//! Who is calling: the client identity of a request and its legacy session, read from
//! what the HTTP guard and the session manager put into the request's parts.

use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use super::GatecmdServer;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::locks::SessionId;

impl GatecmdServer {
    /// The authenticated caller of a request.
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
