//! Refusals from one client are counted, not written, after the first few of a kind.
//!
//! A refusal costs the caller nothing, so a client could otherwise fill the log with them and
//! push every other client's records out of retention. Per client, a window opens at its
//! first refusal and lasts `audit.refusal_window_secs`; within it, the first
//! `audit.refusal_burst` refusals of each kind are written in full, the rest only counted.
//! When the window closes (or at shutdown) one `refusals_summarized` record gives the counts
//! by kind. Kinds are `&'static str` chosen by the code, never derived from the request, so
//! a client cannot mint new kinds to get more records written.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

/// Most clients with an open window; beyond it the oldest window closes early. Client names
/// come from the configuration, so this is never reached on a sane bench.
const MAX_CLIENTS: usize = 1024;

/// What a refusal is, for counting: the record's `event` and a kind within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RefusalClass {
    /// The audit event, e.g. `execute_refused`.
    pub event: &'static str,
    /// A stable name for why, e.g. `policy`, `lock_busy`.
    pub kind: &'static str,
}

/// Whether a refusal is written in full or only counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit {
    /// Write it; `opened` when this refusal opened a new window (its close needs a timer).
    Write { opened: bool },
    /// Counted in the window's summary.
    Count,
}

/// The `refusals_summarized` record of one client's window.
#[derive(Debug, Serialize)]
pub(super) struct Summary {
    event: &'static str,
    client: String,
    /// Refusals in the window, written or not.
    refused: u64,
    /// Refusals counted but not written.
    suppressed: u64,
    /// When the window opened (UTC).
    since: String,
    window_secs: u64,
    /// Refusals not written, by `event/kind`.
    suppressed_by_reason: BTreeMap<String, u64>,
    message: String,
}

struct Window {
    opened: Instant,
    since: DateTime<Utc>,
    counts: BTreeMap<RefusalClass, (u64, u64)>,
}

/// The open windows, one per client.
pub(super) struct Refusals {
    burst: u32,
    window: Duration,
    clients: HashMap<String, Window>,
    /// Summaries of windows closed early, written with the next record.
    early: Vec<Summary>,
}

impl Refusals {
    pub(super) fn new(burst: u32, window: Duration) -> Refusals {
        Refusals {
            burst,
            window,
            clients: HashMap::new(),
            early: Vec::new(),
        }
    }

    /// New limits (a reload); open windows keep their start and use the new length.
    pub(super) fn configure(&mut self, burst: u32, window: Duration) {
        self.burst = burst;
        self.window = window;
    }

    /// Counts one refusal of `class` from `client` and says whether to write it.
    pub(super) fn admit(&mut self, client: &str, class: RefusalClass, now: Instant) -> Admit {
        let mut opened = false;
        if !self.clients.contains_key(client) {
            if self.clients.len() >= MAX_CLIENTS
                && let Some(oldest) = self
                    .clients
                    .iter()
                    .min_by_key(|(_, w)| w.opened)
                    .map(|(c, _)| c.clone())
                && let Some(w) = self.clients.remove(&oldest)
                && let Some(s) = self.summary(&oldest, w)
            {
                self.early.push(s);
            }
            self.clients.insert(
                client.to_string(),
                Window {
                    opened: now,
                    since: Utc::now(),
                    counts: BTreeMap::new(),
                },
            );
            opened = true;
        }
        let burst = u64::from(self.burst);
        let Some(w) = self.clients.get_mut(client) else {
            return Admit::Write { opened };
        };
        let (seen, suppressed) = w.counts.entry(class).or_default();
        *seen += 1;
        if *seen <= burst {
            Admit::Write { opened }
        } else {
            *suppressed += 1;
            Admit::Count
        }
    }

    /// When the next window closes, if any is open.
    pub(super) fn next_close(&self) -> Option<Instant> {
        self.clients.values().map(|w| w.opened + self.window).min()
    }

    /// Ends the windows that closed by `now` (every window with `all`), returning the
    /// summaries of those that suppressed anything.
    pub(super) fn close(&mut self, now: Instant, all: bool) -> Vec<Summary> {
        let mut out = std::mem::take(&mut self.early);
        let window = self.window;
        let due: Vec<String> = self
            .clients
            .iter()
            .filter(|(_, w)| all || w.opened + window <= now)
            .map(|(c, _)| c.clone())
            .collect();
        for client in due {
            if let Some(w) = self.clients.remove(&client)
                && let Some(s) = self.summary(&client, w)
            {
                out.push(s);
            }
        }
        out.sort_by(|a, b| a.since.cmp(&b.since));
        out
    }

    fn summary(&self, client: &str, w: Window) -> Option<Summary> {
        let refused: u64 = w.counts.values().map(|(seen, _)| seen).sum();
        let suppressed: u64 = w.counts.values().map(|(_, s)| s).sum();
        if suppressed == 0 {
            return None;
        }
        let by_reason: BTreeMap<String, u64> = w
            .counts
            .iter()
            .filter(|(_, (_, s))| *s > 0)
            .map(|(c, (_, s))| (format!("{}/{}", c.event, c.kind), *s))
            .collect();
        let listed: Vec<String> = by_reason.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        let secs = w.opened.elapsed().as_secs().max(1);
        Some(Summary {
            event: "refusals_summarized",
            client: client.to_string(),
            refused,
            suppressed,
            since: w.since.to_rfc3339_opts(SecondsFormat::Millis, true),
            window_secs: self.window.as_secs(),
            message: format!(
                "{suppressed} similar refusals from {client} in the last {secs} s were counted, not written \
                 ({}); the first {} of each kind were written in full",
                listed.join(", "),
                self.burst
            ),
            suppressed_by_reason: by_reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RefusalClass = RefusalClass {
        event: "execute_refused",
        kind: "policy",
    };
    const BUSY: RefusalClass = RefusalClass {
        event: "execute_refused",
        kind: "lock_busy",
    };

    #[test]
    fn the_first_few_of_a_kind_are_written_then_counted() {
        let t0 = Instant::now();
        let mut r = Refusals::new(2, Duration::from_secs(60));
        assert_eq!(r.admit("vm-b", POLICY, t0), Admit::Write { opened: true });
        assert_eq!(r.admit("vm-b", POLICY, t0), Admit::Write { opened: false });
        assert_eq!(r.admit("vm-b", POLICY, t0), Admit::Count);
        // Another kind, and another client, have their own counts.
        assert_eq!(r.admit("vm-b", BUSY, t0), Admit::Write { opened: false });
        assert_eq!(r.admit("vm-a", POLICY, t0), Admit::Write { opened: true });
        for _ in 0..10 {
            r.admit("vm-b", POLICY, t0);
        }
        assert_eq!(r.next_close(), Some(t0 + Duration::from_secs(60)));
        assert!(r.close(t0 + Duration::from_secs(59), false).is_empty());
        let s = r.close(t0 + Duration::from_secs(60), false);
        // vm-a suppressed nothing: no summary for it, but its window is gone too.
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].client.as_str(), s[0].refused, s[0].suppressed),
            ("vm-b", 14, 11)
        );
        assert_eq!(s[0].suppressed_by_reason["execute_refused/policy"], 11);
        assert!(
            s[0].message.contains("11 similar refusals from vm-b"),
            "{}",
            s[0].message
        );
        assert_eq!(r.next_close(), None);
        // A new window starts fresh.
        assert_eq!(r.admit("vm-b", POLICY, t0), Admit::Write { opened: true });
    }

    #[test]
    fn shutdown_closes_every_window() {
        let t0 = Instant::now();
        let mut r = Refusals::new(1, Duration::from_secs(600));
        r.admit("vm-b", POLICY, t0);
        r.admit("vm-b", POLICY, t0);
        let s = r.close(t0, true);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].suppressed, 1);
    }

    #[test]
    fn the_client_table_is_bounded() {
        let t0 = Instant::now();
        let mut r = Refusals::new(0, Duration::from_secs(600));
        for i in 0..=MAX_CLIENTS {
            r.admit(
                &format!("c{i}"),
                POLICY,
                t0 + Duration::from_millis(i as u64),
            );
        }
        assert_eq!(r.clients.len(), MAX_CLIENTS);
        let early = r.close(t0, false);
        assert_eq!(early.len(), 1);
        assert_eq!(early[0].client, "c0");
    }
}
