//! The session manager: rmcp's in-memory [`LocalSessionManager`], plus one duty — when a
//! 2025-11-25 session ends (DELETE, idle timeout, server shutdown), the leases taken in it end
//! too, so a VM that crashed never leaves a board locked beyond its session.

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId as McpSessionId, SessionManager,
};

use crate::locks::{LockManager, SessionId};

/// [`LocalSessionManager`] that releases a session's leases when it closes.
pub struct LeaseReleasingSessions {
    inner: LocalSessionManager,
    locks: LockManager,
}

impl LeaseReleasingSessions {
    pub fn new(inner: LocalSessionManager, locks: LockManager) -> Self {
        LeaseReleasingSessions { inner, locks }
    }
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
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &McpSessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &McpSessionId) -> Result<(), Self::Error> {
        let released = self.locks.release_session(&SessionId(id.to_string()));
        for l in &released {
            tracing::info!(key = %l.key, holder = %l.holder.0, "session ended: its lease was released");
        }
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &McpSessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &McpSessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &McpSessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &McpSessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: McpSessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.inner.restore_session(id).await
    }
}
