//! Lab waiters of other hosts queued here. A host whose agent waits lab-wide
//! (`lock_board {scope: "lab", wait_secs}`) queues it on every host with a matching board at
//! once, naming the wait (`Gatecmd-Lab-Wait: ID`) and when the agent arrived, by the agent's
//! host's clock (`Gatecmd-Lab-Arrival: UNIX-MS`). Here the wait is ordered by that arrival
//! among this host's own waiters (`boards::queue`), so that every host orders two lab
//! waiters alike; and it is registered under its acting name (`HOST/CLIENT`) and id, so
//! that the agent's host withdraws it (`DELETE /lab/waits/ID`) as soon as its agent is
//! served elsewhere: the board this host frees next goes to the next waiter, not to a
//! waiter that is gone (a grant, then a release one round trip later).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

/// Most lab waits registered at once (the match queue holds at most 256 waiters).
pub const MAX_WAITS: usize = 1024;
/// How far an arrival time from another host is believed: one older than this (a clock
/// behind, or a host that claims to have come first) counts as this much before now, one
/// in the future as now. Lab hosts keep their clocks within milliseconds (NTP); the bound
/// keeps a wrong clock, or a peer that lies, from jumping a queue by more than this.
pub const MAX_SKEW: Duration = Duration::from_secs(10);
/// Longest wait id taken (ids this host makes are 32 hex digits).
const MAX_ID: usize = 64;

/// A lab wait as a peer names it in its request's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabWait {
    pub id: String,
    /// When the agent arrived, in milliseconds since the Unix epoch (the agent's host's clock).
    pub arrived_ms: i64,
}

impl LabWait {
    /// The wait named by the two header values, when both are well-formed: an id of 1-64
    /// `[A-Za-z0-9-]`, a time in Unix milliseconds.
    pub fn parse(id: &str, arrived: &str) -> Option<LabWait> {
        let ok = !id.is_empty()
            && id.len() <= MAX_ID
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        let arrived_ms = arrived.trim().parse::<i64>().ok()?;
        ok.then(|| LabWait {
            id: id.to_string(),
            arrived_ms,
        })
    }

    /// A new wait arriving now, with a random id.
    pub fn now() -> LabWait {
        let mut b = [0u8; 16];
        // A failed random source leaves a time-based id: still unique enough per host.
        if getrandom::fill(&mut b).is_err() {
            b[..8].copy_from_slice(&now_ms().to_le_bytes());
        }
        LabWait {
            id: b.iter().map(|x| format!("{x:02x}")).collect(),
            arrived_ms: now_ms(),
        }
    }
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `arrived_ms` as this host believes it: within [`MAX_SKEW`] before now, never after.
pub fn believed(arrived_ms: i64) -> i64 {
    let now = now_ms();
    let skew = i64::try_from(MAX_SKEW.as_millis()).unwrap_or(i64::MAX);
    arrived_ms.clamp(now.saturating_sub(skew), now)
}

/// The registered lab waits of this host, by (acting client, id).
#[derive(Default)]
pub struct Waits {
    // A std mutex: map work only, never held across an await.
    map: Mutex<HashMap<(String, String), CancellationToken>>,
}

/// A registered wait; dropping it unregisters it.
pub struct Registered<'a> {
    waits: &'a Waits,
    key: (String, String),
    /// Cancelled when the wait is withdrawn (or when the call's own token is).
    pub token: CancellationToken,
}

/// Why a wait could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaitRefused {
    #[error("{0} lab waits are registered on this host (at most); try again later")]
    Full(usize),
    #[error("lab wait {0:?} is registered already")]
    Duplicate(String),
}

impl Waits {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<(String, String), CancellationToken>) -> R) -> R {
        let mut g = self.map.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// Registers `client`'s wait `id`; its token is a child of `call` (the call's own).
    pub fn register(
        &self,
        client: &str,
        id: &str,
        call: &CancellationToken,
    ) -> Result<Registered<'_>, WaitRefused> {
        let key = (client.to_string(), id.to_string());
        let token = call.child_token();
        self.with(|m| {
            if m.contains_key(&key) {
                return Err(WaitRefused::Duplicate(id.to_string()));
            }
            if m.len() >= MAX_WAITS {
                return Err(WaitRefused::Full(MAX_WAITS));
            }
            m.insert(key.clone(), token.clone());
            Ok(())
        })?;
        Ok(Registered {
            waits: self,
            key,
            token,
        })
    }

    /// Withdraws `client`'s wait `id`: whether it was registered (another client's wait of
    /// the same id is not touched).
    pub fn withdraw(&self, client: &str, id: &str) -> bool {
        let key = (client.to_string(), id.to_string());
        match self.with(|m| m.remove(&key)) {
            Some(t) => {
                t.cancel();
                true
            }
            None => false,
        }
    }

    /// How many waits are registered.
    pub fn len(&self) -> usize {
        self.with(|m| m.len())
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.waits.with(|m| m.remove(&self.key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_withdrawn_only_by_its_own_client_and_leaves_when_dropped() {
        let w = Waits::default();
        let call = CancellationToken::new();
        let r = w
            .register("bench-1/vm-a", "abc", &call)
            .expect("registered");
        assert!(matches!(
            w.register("bench-1/vm-a", "abc", &call),
            Err(WaitRefused::Duplicate(_))
        ));
        assert!(!w.withdraw("bench-3/vm-a", "abc"), "another client's id");
        assert!(!r.token.is_cancelled());
        assert!(w.withdraw("bench-1/vm-a", "abc"));
        assert!(r.token.is_cancelled());
        drop(r);
        assert!(w.is_empty());
        let r = w.register("c", "x", &call).expect("registered");
        drop(r);
        assert!(w.is_empty(), "dropping unregisters");
    }

    #[test]
    fn headers_are_parsed_strictly_and_arrivals_believed_within_the_skew() {
        assert_eq!(
            LabWait::parse("ab-12", "1700000000000"),
            Some(LabWait {
                id: "ab-12".into(),
                arrived_ms: 1_700_000_000_000
            })
        );
        for (id, at) in [
            ("", "1"),
            ("a b", "1"),
            ("a", "x"),
            (&"a".repeat(65)[..], "1"),
        ] {
            assert_eq!(LabWait::parse(id, at), None, "{id:?} {at:?}");
        }
        let now = now_ms();
        assert!(believed(now + 60_000) <= now_ms(), "the future is now");
        assert!(
            believed(0) >= now - 10_001,
            "an old arrival is 10 s ago at most"
        );
        let recent = now - 500;
        assert_eq!(believed(recent), recent);
        let id = LabWait::now().id;
        assert_eq!(id.len(), 32);
    }
}
