//! The session manager: rmcp's in-memory [`LocalSessionManager`], plus three duties.
//!
//! - A 2025-11-25 session belongs to the client that opened it: `http.rs` answers 404 to a
//!   request naming another client's session ([`LeaseReleasingSessions::owned_by`]), exactly
//!   as for an unknown one.
//! - One client holds at most `limits.max_sessions_per_client`; opening one more closes its
//!   longest-idle session first (its leases end with it), so a client that never sends
//!   DELETE cannot grow the server's memory, and never locks itself out either.
//! - When a session ends (DELETE, idle timeout, eviction, server shutdown), the leases
//!   taken in it end too, so a VM that crashed never leaves a board locked beyond its session.
//!
//! Only a request routed through a session gets its [`SessionId`] (in the request parts'
//! extensions, where the tools read it): a stateless 2026-07-28 request claims none, whatever
//! header it carries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, GetExtensions, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId as McpSessionId, SessionManager,
};

use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::locks::SessionId;
use gatecmd_domain::state::AppState;

/// Who opened a session, and when it was last used.
struct Owner {
    client: String,
    last_active: Instant,
}

/// [`LocalSessionManager`] with owners, a per-client cap, and lease release on close.
pub struct LeaseReleasingSessions {
    inner: LocalSessionManager,
    state: Arc<AppState>,
    // A std mutex: a few map operations, never held across an await.
    owners: Mutex<HashMap<String, Owner>>,
}

impl LeaseReleasingSessions {
    pub fn new(inner: LocalSessionManager, state: Arc<AppState>) -> Self {
        LeaseReleasingSessions {
            inner,
            state,
            owners: Mutex::new(HashMap::new()),
        }
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<String, Owner>> {
        match self.owners.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Whether session `id` is live and was opened by `client`.
    pub fn owned_by(&self, id: &str, client: &str) -> bool {
        self.owners().get(id).is_some_and(|o| o.client == client)
    }

    fn mark_active(&self, id: &McpSessionId) {
        if let Some(o) = self.owners().get_mut(id.as_ref()) {
            o.last_active = Instant::now();
        }
    }

    /// Records use of `id` and hands the tools its session id (legacy path only).
    fn touch(&self, id: &McpSessionId, message: &mut ClientJsonRpcMessage) {
        self.mark_active(id);
        let ext = match message {
            ClientJsonRpcMessage::Request(r) => r.request.extensions_mut(),
            ClientJsonRpcMessage::Notification(n) => n.notification.extensions_mut(),
            _ => return,
        };
        if let Some(parts) = ext.get_mut::<http::request::Parts>() {
            parts.extensions.insert(SessionId(id.to_string()));
        }
    }

    /// The client's longest-idle sessions that must close so that one more fits the cap.
    fn over_cap(&self, client: &str, new: &str) -> Vec<String> {
        let cap = self.state.config().limits.max_sessions_per_client.max(1);
        let owners = self.owners();
        let mut mine: Vec<(&String, Instant)> = owners
            .iter()
            .filter(|(id, o)| o.client == client && id.as_str() != new)
            .map(|(id, o)| (id, o.last_active))
            .collect();
        let excess = (mine.len() + 1).saturating_sub(cap);
        mine.sort_by_key(|(_, t)| *t);
        mine.into_iter()
            .take(excess)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

impl gatecmd_core::metrics::SessionCensus for LeaseReleasingSessions {
    fn open_by_client(&self) -> Vec<(String, u64)> {
        let mut by: HashMap<&str, u64> = HashMap::new();
        let owners = self.owners();
        for o in owners.values() {
            *by.entry(o.client.as_str()).or_default() += 1;
        }
        by.into_iter().map(|(c, n)| (c.to_string(), n)).collect()
    }
}

/// The client named in an initialize request (the request guard put it there).
fn client_of(message: &ClientJsonRpcMessage) -> Option<String> {
    let ClientJsonRpcMessage::Request(r) = message else {
        return None;
    };
    r.request
        .extensions()
        .get::<http::request::Parts>()?
        .extensions
        .get::<ClientIdentity>()
        .map(|c| c.name.clone())
}

impl SessionManager for LeaseReleasingSessions {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(McpSessionId, Self::Transport), Self::Error> {
        self.inner.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &McpSessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        // Over HTTP the guard always names the client; a session without one belongs to
        // nobody, so no request can use it after the handshake.
        let client = client_of(&message).unwrap_or_default();
        for old in self.over_cap(&client, id.as_ref()) {
            tracing::warn!(client = %client, session = %old,
                "session cap (limits.max_sessions_per_client): closing the client's longest-idle session");
            let old: McpSessionId = old.into();
            if let Err(e) = self.close_session(&old).await {
                tracing::debug!(error = %e, "closing an evicted session");
            }
        }
        self.owners().insert(
            id.to_string(),
            Owner {
                client,
                last_active: Instant::now(),
            },
        );
        let answer = self.inner.initialize_session(id, message).await;
        if answer.is_err() {
            self.owners().remove(id.as_ref());
        }
        answer
    }

    async fn has_session(&self, id: &McpSessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &McpSessionId) -> Result<(), Self::Error> {
        self.owners().remove(id.as_ref());
        let released = self.state.locks.release_session(&SessionId(id.to_string()));
        for l in &released {
            tracing::info!(key = %l.key, holder = %l.holder.0, "session ended: its lease was released");
        }
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &McpSessionId,
        mut message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id, &mut message);
        self.inner.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &McpSessionId,
        mut message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id, &mut message);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &McpSessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.mark_active(id);
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &McpSessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.mark_active(id);
        self.inner.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: McpSessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.inner.restore_session(id).await
    }
}
