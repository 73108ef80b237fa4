//! Who may use a board's labgrid ports (its console and its power switch), decided per
//! read, write and switch, never per address.
//!
//! labgrid's raw-TCP serial port and its `rest` power model carry no credential, and a NAT
//! guest reaches the host's loopback, so "bound to loopback" lets every VM on the host in.
//! The credential is the peer's local user, as the kernel reports it (`sock_diag`,
//! `transport::peer_user`): the port serves a connection only while a labgrid place holds
//! the board **and** the local user that owns the connection's socket has the name the
//! place was acquired under (`HOST/USER` from labgrid, its `USER` part). A person who
//! acquired `p1` as `alice` reaches the console from her own account (directly on the
//! bench host, or through labgrid's SSH proxy, whose forward runs as her SSH login); a VM
//! running under another account, or a remote peer with no socket on this host, gets
//! nothing. The limits of this (same-account processes, the SSH login name) are in
//! docs/LAB.md, "Who may use the ports".

use std::net::SocketAddr;

use super::Lab;
use super::holds::Hold;
use crate::transport::peer_user::{PeerUser, peer_user};
use gatecmd_domain::locks::{LeaseId, LockKey};

/// Why a connection or a request to a labgrid port was refused; the text is what the
/// client is told (console: one line before the close; power: the HTTP body).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortRefusal {
    #[error(
        "gatecmd: board {0} is not acquired through labgrid: acquire its place first (labgrid-client -p PLACE acquire)"
    )]
    NotAcquired(String),
    #[error(
        "gatecmd: this port serves local users only, as the user who acquired the place; reach it through labgrid's SSH proxy (the connection's owner could not be found on this host)"
    )]
    UnknownPeer,
    #[error(
        "gatecmd: board {board} is held by labgrid place {place}, acquired by another user; this connection belongs to local user {you} (docs/LAB.md, \"Who may use the ports\")"
    )]
    NotHolder {
        board: String,
        place: String,
        you: String,
    },
    #[error(
        "gatecmd: labgrid place {place} holds board {board}, but the coordinator has not said yet who acquired it; retry in a moment"
    )]
    HolderUnknown { board: String, place: String },
    #[error("gatecmd: the place's hold on board {0} ended")]
    HoldEnded(String),
    #[error("gatecmd: cannot tell who owns this connection: {0}")]
    Lookup(String),
}

/// A connection admitted to a board's port: whose it is and under which hold.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub board: String,
    pub hold: Hold,
    pub peer: PeerUser,
}

/// The `USER` part of labgrid's `HOST/USER` (the whole text when it has no `/`).
pub fn user_part(acquired_by: &str) -> &str {
    acquired_by
        .rsplit_once('/')
        .map(|(_, u)| u)
        .unwrap_or(acquired_by)
}

impl Lab {
    /// Admits the connection `peer` → `local` to `board`'s ports, or says why not.
    pub(super) fn admit(
        &self,
        board: &str,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> Result<Admitted, PortRefusal> {
        let hold = self
            .holds
            .get(board)
            .ok_or_else(|| PortRefusal::NotAcquired(board.to_string()))?;
        let who = peer_user(peer, local)
            .map_err(|e| PortRefusal::Lookup(e.to_string()))?
            .ok_or(PortRefusal::UnknownPeer)?;
        let admitted = Admitted {
            board: board.to_string(),
            hold,
            peer: who,
        };
        self.still_admitted(&admitted)?;
        Ok(admitted)
    }

    /// Whether an admitted connection may still act: the same hold (same lease, still the
    /// board's lease in the lock table) and the same user. Checked before every byte that
    /// crosses the port in either direction and before every switch.
    pub(super) fn still_admitted(&self, a: &Admitted) -> Result<(), PortRefusal> {
        let ended = || PortRefusal::HoldEnded(a.board.clone());
        let now = self.holds.get(&a.board).ok_or_else(ended)?;
        if now.lease != a.hold.lease || !self.lease_is_current(&a.board, &now.lease) {
            return Err(ended());
        }
        let Some(by) = now.user.as_deref() else {
            return Err(PortRefusal::HolderUnknown {
                board: a.board.clone(),
                place: now.place.clone(),
            });
        };
        if user_part(by) != a.peer.name {
            return Err(PortRefusal::NotHolder {
                board: a.board.clone(),
                place: now.place.clone(),
                you: a.peer.name.clone(),
            });
        }
        Ok(())
    }

    /// The lock table is the arbiter: the hold counts only while its lease is the board's.
    fn lease_is_current(&self, board: &str, lease: &LeaseId) -> bool {
        self.state
            .locks
            .key_state(&LockKey::Board(board.to_string()))
            .and_then(|s| s.lease)
            .is_some_and(|l| l.lease_id == *lease)
    }
}

#[cfg(test)]
mod tests {
    use super::user_part;

    #[test]
    fn the_user_is_the_last_part_of_host_user() {
        assert_eq!(user_part("desk-1/alice"), "alice");
        assert_eq!(user_part("alice"), "alice");
        assert_eq!(user_part("a/b/c"), "c");
    }
}
