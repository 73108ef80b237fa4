//! At most one `updated` notification per board resource per 100 ms (10 per second): a
//! power cycle or a flashing session moves a board's device and locks many times a second,
//! and a subscriber needs to know that it changed, not each step. A deferred update is
//! sent when its 100 ms are up, so the last change is never lost: one [`Throttle`] per
//! paced URI (the rule is written once, in `src/throttle.rs`).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::resources::BOARD_PREFIX;
use gatecmd_core::throttle::{TEN_PER_SECOND, Throttle};

/// Shortest gap between two updates of one board resource.
pub const BOARD_GAP: Duration = TEN_PER_SECOND;

/// One subscriber's pacing of board updates.
#[derive(Default)]
pub struct Pacer {
    uris: HashMap<String, Throttle>,
}

fn paced(uri: &str) -> bool {
    // A job's progress moves with its output: paced like a board.
    uri.starts_with(BOARD_PREFIX)
        || uri == crate::resources::BOARDS
        || uri.starts_with(crate::resources::JOBS)
}

impl Pacer {
    /// The URIs of `updated` to send now; the others are held back until
    /// [`Pacer::due`].
    pub fn admit(&mut self, updated: Vec<String>, now: Instant) -> Vec<String> {
        let mut out = Vec::with_capacity(updated.len());
        for uri in updated {
            if !paced(&uri) {
                out.push(uri);
                continue;
            }
            let go = match self.uris.get_mut(&uri) {
                Some(t) => t.offer(now),
                None => {
                    let mut t = Throttle::new(BOARD_GAP);
                    t.offer(now);
                    self.uris.insert(uri.clone(), t);
                    true
                }
            };
            if go {
                out.push(uri);
            }
        }
        out
    }

    /// When the earliest held-back update may go, if any is held back.
    pub fn next_due(&self) -> Option<Instant> {
        self.uris.values().filter_map(Throttle::due).min()
    }

    /// The held-back updates whose gap is over, counted as sent now: send them as they
    /// are (offered to [`Pacer::admit`] again, they would wait another gap).
    pub fn due(&mut self, now: Instant) -> Vec<String> {
        let mut ready: Vec<String> = self
            .uris
            .iter_mut()
            .filter_map(|(u, t)| t.take_due(now).then(|| u.clone()))
            .collect();
        ready.sort();
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_board_updates_becomes_two_and_others_pass() {
        let mut p = Pacer::default();
        let b = "gatecmd://boards/x".to_string();
        let d = "gatecmd://devices".to_string();
        let t0 = Instant::now();
        assert_eq!(
            p.admit(vec![b.clone(), d.clone()], t0),
            [b.clone(), d.clone()]
        );
        for ms in 1..50 {
            let now = t0 + Duration::from_millis(ms);
            assert_eq!(
                p.admit(vec![b.clone(), d.clone()], now),
                std::slice::from_ref(&d)
            );
        }
        assert_eq!(p.next_due(), Some(t0 + BOARD_GAP));
        assert!(p.due(t0 + Duration::from_millis(99)).is_empty());
        let later = t0 + BOARD_GAP;
        assert_eq!(p.due(later), std::slice::from_ref(&b));
        assert_eq!(p.next_due(), None);
        // The trailing update counts as sent: the next one waits its 100 ms from it.
        assert!(p.admit(vec![b.clone()], later).is_empty());
        assert_eq!(p.next_due(), Some(later + BOARD_GAP));
    }
}
