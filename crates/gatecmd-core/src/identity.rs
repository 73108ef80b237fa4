//! Who is calling, once the transport has authenticated them: the identity every tool,
//! lease and audit line names. Kept apart from the transport's token table (`auth` in
//! `src/transport/`) so that the layers below the transport can name the caller without
//! importing it.

use std::collections::BTreeSet;

/// The identity of an authenticated caller, carried in request extensions to the tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The client's configured name: lock holder and audit identity.
    pub name: String,
    /// Commands it may run (`None`: all).
    pub commands: Option<BTreeSet<String>>,
    /// May release other clients' leases.
    pub admin: bool,
}

impl ClientIdentity {
    /// The identity used when authentication is off or the transport is stdio.
    pub fn local(name: &str) -> Self {
        ClientIdentity {
            name: name.into(),
            commands: None,
            admin: false,
        }
    }

    /// Whether this client may run `command`.
    pub fn may_run(&self, command: &str) -> bool {
        self.commands.as_ref().is_none_or(|c| c.contains(command))
    }
}

/// The address a connection reached (this side of it: the listener's address and port),
/// put in each of its requests' extensions by the accept loop. With the peer's address it
/// names the connection for a `sock_diag` lookup; a link gatecmd builds for a caller names
/// this port, never one the caller wrote in its `Host` header (issue 46).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalAddr(pub std::net::SocketAddr);
