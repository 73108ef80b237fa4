//! One rule for "at most one per interval, the last state always sent", used wherever a
//! fast-moving state is told to someone who needs to know it changed, not each step:
//! board and job resource updates (`src/pace.rs`), progress notifications
//! (`src/progress.rs`), the bench page's snapshots (`src/page/stream.rs`) and console
//! change announcements (`src/console/capture.rs`).
//!
//! The rule, for one [`Throttle`]:
//! - an event after a quiet interval (or the first one) goes at once;
//! - later ones go at most one per interval; one that comes too soon is held;
//! - a held event is not lost: it goes when the interval since the last one is up (a
//!   trailing send), and it stands for every event held since, so the receiver always ends
//!   up with the last state. Users keep the state itself elsewhere (a `watch`, a set of
//!   URIs, the bench): what the throttle holds is only "something is owed".
//!
//! Two ways to use it. A caller that waits for one source at a time awaits
//! [`Throttle::pass`] before each send. A caller that multiplexes many throttles in one
//! loop (one per resource URI) calls [`Throttle::offer`] per event, sleeps until the
//! earliest [`Throttle::due`], and sends what [`Throttle::take_due`] lets through.

use std::time::Duration;

use tokio::time::Instant;

/// The 10-per-second pace every user of [`Throttle`] keeps today.
pub const TEN_PER_SECOND: Duration = Duration::from_millis(100);

/// At most one event per `interval`; a held event goes when the interval is up.
#[derive(Debug, Clone)]
pub struct Throttle {
    interval: Duration,
    /// When the last event went.
    last: Option<Instant>,
    /// An event came too soon after `last` and has not gone yet.
    held: bool,
}

impl Throttle {
    pub const fn new(interval: Duration) -> Self {
        Throttle {
            interval,
            last: None,
            held: false,
        }
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Whether an event may go at `now`.
    fn open(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|t| now.saturating_duration_since(t) >= self.interval)
    }

    /// An event at `now`. `true`: send it now (it counts as sent). `false`: it is held;
    /// send the state it stands for once [`Throttle::take_due`] says so.
    pub fn offer(&mut self, now: Instant) -> bool {
        if self.open(now) {
            self.last = Some(now);
            self.held = false;
            true
        } else {
            self.held = true;
            false
        }
    }

    /// When the held event may go; `None` when nothing is held.
    pub fn due(&self) -> Option<Instant> {
        if !self.held {
            return None;
        }
        Some(self.last.map_or_else(Instant::now, |t| t + self.interval))
    }

    /// Whether a held event may go at `now`; if so it counts as sent now and is no longer
    /// held.
    pub fn take_due(&mut self, now: Instant) -> bool {
        if self.held && self.open(now) {
            self.held = false;
            self.last = Some(now);
            true
        } else {
            false
        }
    }

    /// Waits until an event that is here now may go, and counts it as sent: at once after a
    /// quiet interval, else when the interval since the last one is up. Read the state to
    /// send after this returns, so that what changed during the wait goes too. Dropped
    /// while waiting (cancelled), it counts nothing as sent.
    pub async fn pass(&mut self) {
        if !self.open(Instant::now())
            && let Some(t) = self.last
        {
            self.held = true;
            tokio::time::sleep_until(t + self.interval).await;
        }
        self.held = false;
        self.last = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GAP: Duration = TEN_PER_SECOND;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_event_goes_at_once() {
        let mut t = Throttle::new(GAP);
        assert!(t.offer(Instant::now()));
        assert_eq!(t.due(), None, "nothing held after an event that went");
        let mut t = Throttle::new(GAP);
        let before = Instant::now();
        t.pass().await;
        assert_eq!(Instant::now(), before, "pass waited for a first event");
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_held_and_its_last_state_follows_once() {
        let mut t = Throttle::new(GAP);
        let t0 = Instant::now();
        assert!(t.offer(t0));
        for n in 1..50 {
            assert!(!t.offer(t0 + ms(n)), "event at {n} ms went inside the gap");
        }
        assert_eq!(t.due(), Some(t0 + GAP));
        assert!(!t.take_due(t0 + ms(99)), "trailing send went early");
        assert!(t.take_due(t0 + GAP), "the held state was not sent");
        // One trailing send stands for the whole burst.
        assert!(!t.take_due(t0 + GAP + ms(1)));
        assert_eq!(t.due(), None);
        // The trailing send counts: the next event waits its gap from it.
        assert!(!t.offer(t0 + GAP + ms(50)));
        assert_eq!(t.due(), Some(t0 + GAP + GAP));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_interval_lets_the_next_event_go_at_once() {
        let mut t = Throttle::new(GAP);
        let t0 = Instant::now();
        assert!(t.offer(t0));
        assert!(!t.offer(t0 + ms(10)));
        assert!(t.take_due(t0 + GAP));
        // Quiet for a whole gap after the trailing send: no wait.
        assert!(t.offer(t0 + GAP + GAP));
        assert_eq!(t.due(), None);
        // An event arriving after its held one's due time goes itself, and owes nothing.
        assert!(!t.offer(t0 + GAP + GAP + ms(1)));
        assert!(t.offer(t0 + GAP * 3 + ms(5)));
        assert_eq!(t.due(), None, "the held event was sent with the later one");
    }

    #[tokio::test(start_paused = true)]
    async fn pass_waits_out_the_gap_then_counts_from_when_it_went() {
        let mut t = Throttle::new(GAP);
        let t0 = Instant::now();
        t.pass().await;
        tokio::time::advance(ms(30)).await;
        t.pass().await;
        assert_eq!(
            Instant::now(),
            t0 + GAP,
            "second pass did not wait out the gap"
        );
        t.pass().await;
        assert_eq!(Instant::now(), t0 + GAP + GAP);
        tokio::time::advance(GAP * 5).await;
        let quiet = Instant::now();
        t.pass().await;
        assert_eq!(Instant::now(), quiet, "waited after a quiet period");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_pass_counts_nothing_as_sent() {
        let mut t = Throttle::new(GAP);
        let t0 = Instant::now();
        t.pass().await;
        // Given up 20 ms into its wait (a stop signal won the select).
        let _ = tokio::time::timeout(ms(20), t.pass()).await;
        assert_eq!(t.due(), Some(t0 + GAP), "the owed event was forgotten");
        tokio::time::advance(GAP).await;
        let now = Instant::now();
        t.pass().await;
        assert_eq!(Instant::now(), now);
    }
}
