//! This host's own agents' lab waits, as the other hosts ask about them (docs/LAB.md, "One
//! queue for the lab"). A host that frees a board for a lab waiter of this host asks first
//! whether the waiter still wants it (`POST /lab/waits/ID/claim`): the first host to ask is
//! told yes and the waiter is its; any other is told no at once, and gives the board to its
//! next waiter instead of granting it to a waiter that is served (a grant and a release, a
//! round trip through both hosts, each time). So a burst of freed boards walks the queues
//! at the speed of a small HTTP exchange, not of a lease given and given back.
//!
//! A claim the claimer does not follow with its grant within [`CLAIM_HOLD`] (it stopped,
//! or the link did) lapses, and another host may claim the waiter.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a claim holds the waiter for its claimer before another host may claim it.
pub const CLAIM_HOLD: Duration = Duration::from_secs(10);
/// Most of this host's lab waits open at once (each is an agent's `lock_board` call).
pub const MAX_OPEN: usize = 1024;

#[derive(Debug, Clone)]
enum State {
    Waiting,
    Claimed { by: String, at: Instant },
    Served,
}

/// What a claim is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimAnswer {
    /// The waiter is the claimer's (first to ask, or asking again).
    Yours,
    /// The waiter is served, or claimed by another host (named) a moment ago.
    Taken(String),
    /// No such wait here (ended, or never this host's).
    Unknown,
}

/// This host's open lab waits, by id.
#[derive(Default)]
pub struct Claims {
    // A std mutex: map work only, never held across an await.
    map: Mutex<HashMap<String, State>>,
}

/// An open lab wait; dropping it closes it (later claims are `Unknown`).
pub struct Open<'a> {
    claims: &'a Claims,
    id: String,
}

impl Claims {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<String, State>) -> R) -> R {
        let mut g = self.map.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// Opens the wait `id` (`None` when [`MAX_OPEN`] are open: the wait then goes without
    /// claims, its grants sorted out by releases as before).
    pub fn open(&self, id: &str) -> Option<Open<'_>> {
        self.with(|m| {
            (m.len() < MAX_OPEN).then(|| {
                m.insert(id.to_string(), State::Waiting);
            })
        })?;
        Some(Open {
            claims: self,
            id: id.to_string(),
        })
    }

    /// Host `by` asks for the waiter `id`.
    pub fn claim(&self, id: &str, by: &str) -> ClaimAnswer {
        self.with(|m| match m.get_mut(id) {
            None => ClaimAnswer::Unknown,
            Some(State::Served) => ClaimAnswer::Taken("served".into()),
            Some(State::Claimed { by: other, at }) if other != by && at.elapsed() < CLAIM_HOLD => {
                ClaimAnswer::Taken(other.clone())
            }
            Some(s) => {
                *s = State::Claimed {
                    by: by.to_string(),
                    at: Instant::now(),
                };
                ClaimAnswer::Yours
            }
        })
    }
}

impl Open<'_> {
    /// The waiter is served (a lease was accepted): every later claim is told no.
    pub fn served(&self) {
        self.claims
            .with(|m| m.insert(self.id.clone(), State::Served));
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.claims.with(|m| m.remove(&self.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_host_to_claim_gets_the_waiter_and_the_others_are_told_no() {
        let c = Claims::default();
        assert_eq!(c.claim("w", "bench-2"), ClaimAnswer::Unknown);
        let open = c.open("w").expect("open");
        assert_eq!(c.claim("w", "bench-2"), ClaimAnswer::Yours);
        assert_eq!(c.claim("w", "bench-2"), ClaimAnswer::Yours, "asking again");
        assert_eq!(
            c.claim("w", "bench-3"),
            ClaimAnswer::Taken("bench-2".into())
        );
        open.served();
        assert_eq!(c.claim("w", "bench-2"), ClaimAnswer::Taken("served".into()));
        drop(open);
        assert_eq!(c.claim("w", "bench-3"), ClaimAnswer::Unknown);
    }
}
