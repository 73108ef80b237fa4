//! Leases kept for a holder outside MCP (a labgrid place, src/lab/): renewed while that
//! holder lives rather than by commands, and its note updated when the holder's user
//! becomes known. Both only for the lease's own holder.

use super::error::{LockError, Retake};
use super::ids::{ClientName, LeaseId};
use super::manager::LockManager;
use super::view::{LeaseInfo, LockEventKind};

impl LockManager {
    /// Pushes `client`'s lease `lease` back by its TTL from now, and, with `note`, replaces
    /// its note. Refuses `UnknownLease` for a lease that is gone and `NotYourLease` for
    /// another client's (neither changes anything).
    pub fn renew_outside(
        &self,
        lease: &LeaseId,
        client: &ClientName,
        note: Option<String>,
    ) -> Result<LeaseInfo, LockError> {
        self.shared.with_state(|state| {
            let unknown = || LockError::UnknownLease {
                lease_id: lease.clone(),
                retake: Retake::Either,
            };
            let key = state.lease_key(lease).cloned().ok_or_else(unknown)?;
            let lane = state.lanes.get_mut(&key).ok_or_else(unknown)?;
            let held = lane.lease.as_mut().ok_or_else(unknown)?;
            if held.holder != *client {
                return Err(LockError::NotYourLease {
                    lease_id: lease.clone(),
                    owner: held.holder.clone(),
                    client: client.clone(),
                    retake: Retake::for_keys([&key]),
                });
            }
            held.renew();
            if let Some(note) = note {
                held.note = Some(note);
            }
            let info = held.info(&key);
            state.emit(LockEventKind::Renewed, &key, client, Some(lease), None);
            Ok(info)
        })
    }
}
