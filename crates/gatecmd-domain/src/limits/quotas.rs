//! Per-client shares of what a client may hold open at once beyond its commands: resource
//! subscriptions, `subscriptions/listen` streams, answers not yet read, console reads
//! waiting for a pattern. Each is a count per client name, taken as an RAII [`Ticket`]
//! that gives its units back when dropped, so a share can never leak past the thing it
//! counts (a closed stream, a dropped answer, an ended session).
//!
//! Client names, not connections or addresses: NAT guests all come from 127.0.0.1, and a
//! client may open many connections (docs/SECURITY.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What a share counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// URIs subscribed to, over all of the client's sessions and listen streams.
    Subscriptions,
    /// Open `subscriptions/listen` streams.
    ListenStreams,
    /// `/mcp` requests whose answer has not been sent in full.
    OpenAnswers,
    /// `console_read` calls waiting for `wait_for`.
    WaitingReads,
    /// The bench page's open event streams (`GET /events`).
    PageStreams,
}

impl Kind {
    /// The configuration key that sets this share (refusals name it).
    pub fn key(self) -> &'static str {
        match self {
            Kind::Subscriptions => "limits.max_subscriptions_per_client",
            Kind::ListenStreams => "limits.max_listen_streams_per_client",
            Kind::OpenAnswers => "limits.max_open_answers_per_client",
            Kind::WaitingReads => "limits.max_waiting_reads_per_client",
            Kind::PageStreams => "page.max_streams_per_client",
        }
    }
}

/// Every client's shares. Cheap to clone (one `Arc`).
#[derive(Debug, Clone, Default)]
pub struct Quotas {
    // A std mutex: every critical section is a map lookup and an add, never across an await.
    inner: Arc<Mutex<HashMap<(String, Kind), usize>>>,
}

/// Units of one share, given back on drop.
#[derive(Debug)]
pub struct Ticket {
    quotas: Quotas,
    client: String,
    kind: Kind,
    units: usize,
}

/// A share is full: what it is, how much is held, and the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Full {
    pub kind: Kind,
    pub held: usize,
    pub cap: usize,
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is {} for this client and {} are held now",
            self.kind.key(),
            self.cap,
            self.held
        )
    }
}

impl Quotas {
    /// Takes `units` of `client`'s `kind` share, or says it would pass `cap`.
    pub fn take(&self, client: &str, kind: Kind, units: usize, cap: usize) -> Result<Ticket, Full> {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let held = map.get(&(client.to_string(), kind)).copied().unwrap_or(0);
        if held.saturating_add(units) > cap {
            return Err(Full { kind, held, cap });
        }
        *map.entry((client.to_string(), kind)).or_insert(0) += units;
        Ok(Ticket {
            quotas: self.clone(),
            client: client.to_string(),
            kind,
            units,
        })
    }

    /// How much of `client`'s `kind` share is held now.
    pub fn held(&self, client: &str, kind: Kind) -> usize {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(client.to_string(), kind)).copied().unwrap_or(0)
    }

    fn give_back(&self, client: &str, kind: Kind, units: usize) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let key = (client.to_string(), kind);
        if let Some(n) = map.get_mut(&key) {
            *n = n.saturating_sub(units);
            // An emptied entry goes, so the map holds only clients that hold something.
            if *n == 0 {
                map.remove(&key);
            }
        }
    }
}

impl Ticket {
    /// Adds `units` to this ticket (one more subscription in a session), within `cap`.
    pub fn grow(&mut self, units: usize, cap: usize) -> Result<(), Full> {
        let more = self.quotas.take(&self.client, self.kind, units, cap)?;
        self.units += more.units;
        // `more`'s units are now this ticket's: give nothing back when it drops.
        std::mem::forget(more);
        Ok(())
    }

    /// Gives back `units` of this ticket now (an unsubscribe).
    pub fn shrink(&mut self, units: usize) {
        let units = units.min(self.units);
        self.units -= units;
        self.quotas.give_back(&self.client, self.kind, units);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.quotas.give_back(&self.client, self.kind, self.units);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_per_client_and_given_back_on_drop() {
        let q = Quotas::default();
        let a = q.take("vm-a", Kind::ListenStreams, 2, 2).expect("within");
        let full = q.take("vm-a", Kind::ListenStreams, 1, 2).expect_err("full");
        assert_eq!((full.held, full.cap), (2, 2));
        // Another client, or another kind, is not affected.
        let _b = q.take("vm-b", Kind::ListenStreams, 2, 2).expect("vm-b");
        let _c = q.take("vm-a", Kind::OpenAnswers, 2, 2).expect("other kind");
        drop(a);
        assert_eq!(q.held("vm-a", Kind::ListenStreams), 0);
        let mut t = q.take("vm-a", Kind::Subscriptions, 0, 3).expect("empty");
        t.grow(3, 3).expect("grow");
        assert!(t.grow(1, 3).is_err());
        t.shrink(2);
        assert_eq!(q.held("vm-a", Kind::Subscriptions), 1);
        drop(t);
        assert_eq!(q.held("vm-a", Kind::Subscriptions), 0);
    }
}
