//! Counts over the lock table for the metrics scrape: leases and waiters per client, the
//! oldest lease, commands running on keys. One short read of the table, no event stream.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::manager::LockManager;

/// What the lock table holds now, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockCensus {
    /// Live leases by holder.
    pub leases: BTreeMap<String, u64>,
    /// Queued requests (commands and leases) by client.
    pub waiters: BTreeMap<String, u64>,
    /// Keys with a command running on them.
    pub running: u64,
    /// When the oldest live lease was granted.
    pub oldest_lease: Option<DateTime<Utc>>,
}

impl LockManager {
    /// Counts the table now (every key, not only the `max_listed` a snapshot shows).
    pub fn census(&self) -> LockCensus {
        self.shared.read(|state| {
            let mut c = LockCensus::default();
            for lane in state.lanes.values() {
                if let Some(l) = &lane.lease {
                    *c.leases.entry(l.holder.0.clone()).or_default() += 1;
                    c.oldest_lease = Some(
                        c.oldest_lease
                            .map_or(l.acquired_at, |o| o.min(l.acquired_at)),
                    );
                }
                if lane.running.is_some() {
                    c.running += 1;
                }
                for w in &lane.waiters {
                    *c.waiters.entry(w.want.client().0.clone()).or_default() += 1;
                }
            }
            c
        })
    }
}
