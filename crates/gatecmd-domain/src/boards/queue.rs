//! The fair queue of `lock_board {match}` requests. The lock manager queues per key; a
//! match names several boards, so its waiters queue here instead, in arrival order, and a
//! waiter may try only the boards that no earlier waiter could also take. A freed board
//! therefore goes to the oldest waiter that wants it, and two waiters never race for one
//! board. Waiters for disjoint sets of boards do not hold each other up.
//!
//! "Arrival" is a time, not only a turn: a waiter of this host arrives when it joins; a lab
//! waiter another host queued here arrives when it reached its own host
//! (`crate::lab::waits`, believed within a few seconds), so two lab waiters are ordered
//! alike on every host whichever of their entries reached this one first.

use std::sync::Mutex;

use tokio::sync::Notify;

/// Most match requests queued at once, over all clients.
pub const MAX_MATCH_WAITERS: usize = 256;

/// The queue (a field of `Boards`).
#[derive(Default)]
pub struct MatchQueue {
    // A std mutex: held for a scan of at most MAX_MATCH_WAITERS entries, never across an await.
    inner: Mutex<Inner>,
    changed: Notify,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// In arrival order: (ticket, client, boards it could take now, arrival in Unix ms).
    entries: Vec<(u64, String, Vec<String>, i64)>,
}

/// Why a request could not join the queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueFull {
    #[error(
        "{waiting} lock_board requests are already queued (at most {max}); try again later or lock a board by name"
    )]
    Total { waiting: usize, max: usize },
    #[error(
        "client {client:?} already has {waiting} requests queued (at most {max}, leases.max_waiters_per_client); wait for one to finish"
    )]
    Client {
        client: String,
        waiting: usize,
        max: usize,
    },
}

/// A place in the queue; dropping it leaves the queue (and wakes the others: boards it
/// wanted may now be theirs to try).
pub struct QueueTicket<'a> {
    queue: &'a MatchQueue,
    id: u64,
}

impl MatchQueue {
    /// Joins the queue at its end, wanting `candidates`.
    pub fn join(
        &self,
        client: &str,
        candidates: Vec<String>,
        max_per_client: usize,
    ) -> Result<QueueTicket<'_>, QueueFull> {
        self.join_at(client, candidates, max_per_client, None)
    }

    /// Joins the queue as arrived at `arrived_ms` (Unix ms; `None`: now), behind everyone
    /// who arrived at that time or before, ahead of those who arrived after.
    pub fn join_at(
        &self,
        client: &str,
        candidates: Vec<String>,
        max_per_client: usize,
        arrived_ms: Option<i64>,
    ) -> Result<QueueTicket<'_>, QueueFull> {
        let at = arrived_ms.map_or_else(crate::lab::waits::now_ms, crate::lab::waits::believed);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.entries.len() >= MAX_MATCH_WAITERS {
            return Err(QueueFull::Total {
                waiting: inner.entries.len(),
                max: MAX_MATCH_WAITERS,
            });
        }
        let mine = inner.entries.iter().filter(|e| e.1 == client).count();
        if mine >= max_per_client {
            return Err(QueueFull::Client {
                client: client.to_string(),
                waiting: mine,
                max: max_per_client,
            });
        }
        inner.next += 1;
        let id = inner.next;
        let pos = inner.entries.partition_point(|e| e.3 <= at);
        inner
            .entries
            .insert(pos, (id, client.to_string(), candidates, at));
        Ok(QueueTicket { queue: self, id })
    }

    /// How many requests are queued.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .len()
    }

    /// Whether nobody is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queued requests that could take `board`.
    pub fn waiting_for(&self, board: &str) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .iter()
            .filter(|e| e.2.iter().any(|b| b == board))
            .count()
    }
}

impl QueueTicket<'_> {
    /// Records the boards this waiter could take now and returns those of them that no
    /// earlier waiter could also take, in the given order: the ones it may try.
    pub fn mine(&self, candidates: Vec<String>) -> Vec<String> {
        let mut inner = self.queue.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(pos) = inner.entries.iter().position(|e| e.0 == self.id) else {
            return vec![];
        };
        inner.entries[pos].2 = candidates.clone();
        let earlier = &inner.entries[..pos];
        candidates
            .into_iter()
            .filter(|b| !earlier.iter().any(|e| e.2.contains(b)))
            .collect()
    }

    /// Resolves when the queue changes (someone left). Create it before looking at the
    /// queue, so that a change in between is not missed.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.queue.changed.notified()
    }
}

impl Drop for QueueTicket<'_> {
    fn drop(&mut self) {
        let mut inner = self.queue.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.entries.retain(|e| e.0 != self.id);
        drop(inner);
        self.queue.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_later_waiter_tries_only_boards_no_earlier_waiter_wants() {
        let q = MatchQueue::default();
        let a = q.join("a", names(&["b1", "b2"]), 8).unwrap();
        let b = q.join("b", names(&["b1", "b2", "b3"]), 8).unwrap();
        assert_eq!(a.mine(names(&["b1", "b2"])), names(&["b1", "b2"]));
        assert_eq!(b.mine(names(&["b1", "b2", "b3"])), names(&["b3"]));
        drop(a);
        assert_eq!(
            b.mine(names(&["b1", "b2", "b3"])),
            names(&["b1", "b2", "b3"])
        );
        assert_eq!(q.len(), 1);
        drop(b);
        assert!(q.is_empty());
    }

    #[test]
    fn a_lab_waiter_that_arrived_earlier_elsewhere_is_ahead_of_a_later_local_one() {
        let q = MatchQueue::default();
        let now = crate::lab::waits::now_ms();
        let local = q.join("local", names(&["b1"]), 8).unwrap();
        // Arrived at its own host 300 ms ago; its entry reached this host just now.
        let lab = q
            .join_at("bench-1/vm-a", names(&["b1"]), 8, Some(now - 300))
            .unwrap();
        assert_eq!(lab.mine(names(&["b1"])), names(&["b1"]));
        assert!(
            local.mine(names(&["b1"])).is_empty(),
            "the local waiter came later"
        );
        // A claimed arrival far in the past counts as MAX_SKEW ago, not earlier.
        let liar = q.join_at("bench-2/x", names(&["b1"]), 8, Some(0)).unwrap();
        assert_eq!(liar.mine(names(&["b1"])), names(&["b1"]));
        drop(liar);
        let late = q
            .join_at("bench-3/y", names(&["b1"]), 8, Some(now + 60_000))
            .unwrap();
        assert!(
            late.mine(names(&["b1"])).is_empty(),
            "the future counts as now"
        );
    }

    #[test]
    fn the_queue_is_bounded_per_client() {
        let q = MatchQueue::default();
        let _a = q.join("a", vec![], 1).unwrap();
        assert!(matches!(
            q.join("a", vec![], 1),
            Err(QueueFull::Client { .. })
        ));
        assert!(q.join("b", vec![], 1).is_ok());
    }
}
