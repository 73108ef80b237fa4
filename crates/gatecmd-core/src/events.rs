//! A broadcast of events whose ring holds pointers to them, not the events.
//!
//! tokio's broadcast channel allocates and writes every slot of its ring when it is made,
//! and a slot is as large as the event. The device registry's 256 events (two `Device`s
//! each, ~600 bytes) and the lock table's 1,024 (a key, a client, a reason) made 300 KiB
//! resident before the first event, a third of the server's idle heap (docs/PERFORMANCE.md,
//! "Idle RSS beside the peer"). Here a slot holds an `Arc` (8 bytes), and each receiver
//! still gets its own copy, as from a plain channel, so no subscriber changes.

use std::sync::Arc;

use tokio::sync::broadcast;
pub use tokio::sync::broadcast::error::{RecvError, TryRecvError};

/// The sending side; clones send into the same ring.
#[derive(Debug)]
pub struct Broadcast<T>(broadcast::Sender<Arc<T>>);

impl<T> Clone for Broadcast<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: Clone> Broadcast<T> {
    /// A ring of `capacity` events: a receiver further behind gets [`RecvError::Lagged`].
    ///
    /// # Panics
    /// When `capacity` is 0 (as tokio's channel).
    pub fn new(capacity: usize) -> Self {
        Self(broadcast::channel(capacity).0)
    }

    /// Sends to every receiver subscribed now; returns how many. None is not an error: an
    /// event nobody listens for is simply gone.
    pub fn send(&self, event: T) -> usize {
        self.0.send(Arc::new(event)).unwrap_or(0)
    }

    /// A receiver of every event sent from now on.
    pub fn subscribe(&self) -> Events<T> {
        Events(self.0.subscribe())
    }
}

/// The receiving side: the events sent after it subscribed, in order.
#[derive(Debug)]
pub struct Events<T>(broadcast::Receiver<Arc<T>>);

impl<T: Clone> Events<T> {
    /// The next event; [`RecvError::Lagged`] when this receiver fell more than the ring
    /// behind (resynchronise from a snapshot), [`RecvError::Closed`] when every sender is
    /// gone. Cancel-safe, as tokio's.
    pub async fn recv(&mut self) -> Result<T, RecvError> {
        self.0.recv().await.map(Arc::unwrap_or_clone)
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        self.0.try_recv().map(Arc::unwrap_or_clone)
    }

    /// A new receiver of the same ring, starting from now.
    pub fn resubscribe(&self) -> Self {
        Self(self.0.resubscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_receiver_gets_every_event_in_order_and_a_slow_one_hears_it_lagged() {
        let tx = Broadcast::new(2);
        let mut fast = tx.subscribe();
        let mut slow = tx.subscribe();
        assert_eq!(tx.send("a".to_string()), 2);
        assert_eq!(fast.recv().await.unwrap(), "a");
        assert_eq!(tx.send("b".to_string()), 2);
        assert_eq!(fast.recv().await.unwrap(), "b");
        tx.send("c".to_string());
        assert_eq!(fast.try_recv().unwrap(), "c");
        assert!(matches!(fast.try_recv(), Err(TryRecvError::Empty)));
        // Three sent into a ring of two: the first is lost to the slow receiver, and it
        // is told so before it gets the rest.
        assert!(matches!(slow.recv().await, Err(RecvError::Lagged(1))));
        assert_eq!(slow.recv().await.unwrap(), "b");
        assert_eq!(slow.recv().await.unwrap(), "c");
        drop(tx);
        assert!(matches!(slow.recv().await, Err(RecvError::Closed)));
    }

    #[test]
    fn an_event_nobody_hears_is_not_an_error() {
        let tx = Broadcast::new(4);
        assert_eq!(tx.send(1u8), 0);
        let mut late = tx.subscribe();
        assert!(matches!(late.try_recv(), Err(TryRecvError::Empty)));
    }
}
