//! The fair queue of `lock_board {match}` requests. The lock manager queues per key; a
//! match names several boards, so its waiters queue here instead, in arrival order, and a
//! waiter may try only the boards that no earlier waiter could also take. A freed board
//! therefore goes to the oldest waiter that wants it, and two waiters never race for one
//! board. Waiters for disjoint sets of boards do not hold each other up.

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
    /// In arrival order: (ticket, client, boards it could take now).
    entries: Vec<(u64, String, Vec<String>)>,
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
        inner.entries.push((id, client.to_string(), candidates));
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
