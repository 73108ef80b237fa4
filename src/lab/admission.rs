//! Who may use a board's labgrid ports (its console and its power switch), decided per
//! read, write and switch, never per address.
//!
//! labgrid's raw-TCP serial port and its `rest` power model carry no credential, and a NAT
//! guest reaches the host's loopback, so "bound to loopback" lets every VM on the host in.
//! Two things are known of a connection, and neither alone is a credential: the name its
//! place was acquired under (labgrid's `HOST/USER`, self-declared at a coordinator that
//! authenticates nobody) and the local account that owns its socket (the kernel's answer,
//! `transport::peer_user`; a NAT guest's connections carry the account its emulator runs
//! under). The operator joins them: `labgrid.people` names each person who may hold boards
//! and the accounts that are theirs. A port serves a connection only while a labgrid place
//! holds the board, the place's `USER` is a listed person, **and** the connection's account
//! is one of that person's. Nothing else opens a port; with nobody listed, nobody gets in.
//!
//! What a refused peer is told names no local account and no acquirer (it may be anyone);
//! the operator's log and audit line say which rule refused it, with the names. The limits
//! of this (same-account processes, the SSH login name) are in docs/LAB.md, "Who may use
//! the ports".

use std::net::SocketAddr;

use super::Lab;
use super::holds::Hold;
use crate::transport::peer_user::{PeerUser, peer_user};
use gatecmd_domain::locks::{LeaseId, LockKey};

/// Why a connection or a request to a labgrid port was refused. `Display` is what the
/// peer is told (console: one line before the close; power: the HTTP body) and names no
/// account; [`PortRefusal::for_operator`] adds what the log and the audit line need.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortRefusal {
    #[error(
        "gatecmd: these labgrid ports are closed: the operator has named no one in labgrid.people yet (docs/LAB.md, \"Who may use the ports\")"
    )]
    NobodyListed,
    #[error(
        "gatecmd: board {0} is not held through labgrid: acquire its place first (labgrid-client -p PLACE acquire); only a place acquired by a person named in labgrid.people holds a board"
    )]
    NotAcquired(String),
    /// The connection is not the holder's: the peer is told that much, the operator why.
    #[error(
        "gatecmd: this connection may not use board {board}'s labgrid ports: they serve the person whose place holds the board, from a local account the operator listed for them (docs/LAB.md, \"Who may use the ports\")"
    )]
    NotServed { board: String, why: NotServed },
    #[error(
        "gatecmd: labgrid place {place} holds board {board}, but the coordinator has not said yet who acquired it; retry in a moment"
    )]
    HolderUnknown { board: String, place: String },
    #[error("gatecmd: the place's hold on board {0} ended")]
    HoldEnded(String),
    #[error("gatecmd: cannot tell who owns this connection: {0}")]
    Lookup(String),
}

/// Why a connection is not the holder's, for the operator (log and audit only).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotServed {
    #[error("no socket on this host owns the connection (a remote peer, or it closed)")]
    NoLocalOwner,
    #[error("place {place} was acquired by {acquirer:?}, who is not named in labgrid.people")]
    NotListed { place: String, acquirer: String },
    #[error(
        "the connection belongs to local account {account:?}, which labgrid.people does not list for {person:?} (who acquired place {place})"
    )]
    OtherAccount {
        place: String,
        person: String,
        account: String,
    },
}

impl PortRefusal {
    /// The refusal as the operator reads it (log, audit): the peer's text and, where the
    /// connection was not the holder's, why, with the names the peer is not told.
    pub fn for_operator(&self) -> String {
        match self {
            PortRefusal::NotServed { why, .. } => format!("{self} [{why}]"),
            _ => self.to_string(),
        }
    }
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
    /// Whether a place acquired by `acquired_by` (`HOST/USER`) is a listed person's: only
    /// such a place takes a board (`holds.rs`) and opens its ports.
    pub(super) fn serves(&self, acquired_by: &str) -> bool {
        self.settings.person(user_part(acquired_by)).is_some()
    }

    /// Admits the connection `peer` → `local` to `board`'s ports, or says why not.
    pub(super) fn admit(
        &self,
        board: &str,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> Result<Admitted, PortRefusal> {
        if self.settings.people.is_empty() {
            return Err(PortRefusal::NobodyListed);
        }
        // A hold only a reservation stands for (no resource acquired yet) opens nothing:
        // labgrid gives the ports to whoever acquired the place.
        let hold = self
            .holds
            .get(board)
            .filter(|h| !h.resources.is_empty())
            .ok_or_else(|| PortRefusal::NotAcquired(board.to_string()))?;
        let who = peer_user(peer, local)
            .map_err(|e| PortRefusal::Lookup(e.to_string()))?
            .ok_or_else(|| PortRefusal::NotServed {
                board: board.to_string(),
                why: NotServed::NoLocalOwner,
            })?;
        let admitted = Admitted {
            board: board.to_string(),
            hold,
            peer: who,
        };
        self.still_admitted(&admitted)?;
        Ok(admitted)
    }

    /// Whether an admitted connection may still act: the same hold (same lease, still the
    /// board's lease in the lock table), still acquired (a place released while its
    /// reservation keeps the board is not), by a listed person, and the connection's
    /// account one of theirs. Checked before every byte that crosses the port in either
    /// direction and before every switch.
    pub(super) fn still_admitted(&self, a: &Admitted) -> Result<(), PortRefusal> {
        let ended = || PortRefusal::HoldEnded(a.board.clone());
        let now = self.holds.get(&a.board).ok_or_else(ended)?;
        if now.lease != a.hold.lease
            || now.resources.is_empty()
            || !self.lease_is_current(&a.board, &now.lease)
        {
            return Err(ended());
        }
        let Some(by) = now.user.as_deref() else {
            return Err(PortRefusal::HolderUnknown {
                board: a.board.clone(),
                place: now.place.clone(),
            });
        };
        let not_served = |why| PortRefusal::NotServed {
            board: a.board.clone(),
            why,
        };
        let Some(person) = self.settings.person(user_part(by)) else {
            return Err(not_served(NotServed::NotListed {
                place: now.place.clone(),
                acquirer: super::names::user_label(by),
            }));
        };
        if !person.accounts.contains(&a.peer.name) {
            return Err(not_served(NotServed::OtherAccount {
                place: now.place.clone(),
                person: person.name.clone(),
                account: a.peer.name.clone(),
            }));
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
    use super::{NotServed, PortRefusal, user_part};

    #[test]
    fn the_user_is_the_last_part_of_host_user() {
        assert_eq!(user_part("desk-1/alice"), "alice");
        assert_eq!(user_part("alice"), "alice");
        assert_eq!(user_part("a/b/c"), "c");
    }

    #[test]
    fn what_a_refused_peer_is_told_names_no_account() {
        let r = PortRefusal::NotServed {
            board: "rock5b-1".into(),
            why: NotServed::OtherAccount {
                place: "p1".into(),
                person: "alice".into(),
                account: "vmrun".into(),
            },
        };
        assert!(!r.to_string().contains("vmrun") && !r.to_string().contains("alice"));
        assert!(r.for_operator().contains("\"vmrun\"") && r.for_operator().contains("alice"));
    }
}
