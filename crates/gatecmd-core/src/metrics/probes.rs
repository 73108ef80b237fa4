//! What the state hands the metrics at scrape time that it does not own itself: the open
//! MCP sessions, which live in the HTTP layer's session manager (above the state).

use std::sync::{RwLock, Weak};

/// Something that can count open sessions per client (the session manager).
pub trait SessionCensus: Send + Sync {
    /// Open sessions by client name, every client with at least one.
    fn open_by_client(&self) -> Vec<(String, u64)>;
}

/// The state's hooks for the scrape: a field of `AppState`, filled when the router is built.
#[derive(Default)]
pub struct Probes {
    // Weak: the session manager belongs to the router; a scrape after it is gone reads none.
    sessions: RwLock<Option<Weak<dyn SessionCensus>>>,
}

impl Probes {
    /// Points the sessions gauge at `census` (the router does, once).
    pub fn set_sessions(&self, census: Weak<dyn SessionCensus>) {
        match self.sessions.write() {
            Ok(mut s) => *s = Some(census),
            Err(p) => *p.into_inner() = Some(census),
        }
    }

    /// Open sessions by client, or nothing when no session manager is attached (stdio).
    pub fn sessions(&self) -> Vec<(String, u64)> {
        let weak = match self.sessions.read() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        };
        weak.and_then(|w| w.upgrade())
            .map(|c| c.open_by_client())
            .unwrap_or_default()
    }
}
