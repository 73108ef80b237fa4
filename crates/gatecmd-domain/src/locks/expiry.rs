//! The background task that ends leases whose TTL ran out.

use std::sync::Arc;

use tokio::time::{self, Instant};

use super::lane::Shared;

/// Ends due leases, then sleeps until the next deadline or until woken
/// because a deadline moved (a new lease, or a lease whose command ended).
/// Exits once the manager is shut down.
///
/// `Notify::notify_one` stores a permit when the task is not waiting, so a
/// change made between the scan and the `select!` is not lost.
pub(super) async fn run(shared: Arc<Shared>) {
    loop {
        let next = {
            let mut state = shared.lock();
            if state.shutdown {
                break;
            }
            state.expire_due(Instant::now())
        };
        match next {
            Some(when) => {
                tokio::select! {
                    _ = time::sleep_until(when) => {}
                    _ = shared.expiry.notified() => {}
                }
            }
            None => shared.expiry.notified().await,
        }
    }
    tracing::debug!("lock expiry task stopped");
}
