//! Forgets finished jobs when their retention time is up: a task that sleeps until the
//! next deadline or until woken (a job ended, the settings changed), like mini-redis's
//! `purge_expired_tasks`. It holds the table weakly and ends when the table is gone.

use std::sync::Weak;
use std::time::Duration;

use super::{Shared, sweep};

/// The expiry loop.
pub(super) async fn run(shared: Weak<Shared>) {
    loop {
        let next = {
            let Some(s) = shared.upgrade() else { return };
            let mut t = s.table.lock().unwrap_or_else(|p| p.into_inner());
            sweep(&mut t, None);
            let keep = Duration::from_secs(t.settings.keep_finished_secs);
            t.jobs
                .values()
                .filter_map(|j| j.ended_at())
                .map(|at| (at + keep).saturating_duration_since(std::time::Instant::now()))
                .min()
        };
        let Some(s) = shared.upgrade() else { return };
        // A minute at most between looks: the strong handle held while waiting goes then,
        // so a dropped table ends the task within a minute.
        let wait = next.unwrap_or(Duration::MAX).min(Duration::from_secs(60));
        let _ = tokio::time::timeout(wait, s.expiry.notified()).await;
    }
}
