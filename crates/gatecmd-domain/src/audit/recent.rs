//! The last decisions, in memory, for the bench page: a ring of [`RECENT`] short entries
//! made from the same records the audit file gets (and kept when the file is off).
//!
//! An entry is a summary, not the record: the event, the client, one line saying what, and
//! for a refusal its stable reason. Argument lists are cut, so a ring entry stays small
//! whatever a client sent. Every push moves a version on a `watch` channel.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;

/// How many decisions the ring keeps.
pub const RECENT: usize = 50;

/// The longest `what` line kept, in bytes.
const MAX_WHAT: usize = 240;

/// One decision as the page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    pub at: DateTime<Utc>,
    /// `run`, `refused`, `lease`, `approval` or `server`.
    pub kind: &'static str,
    /// The audit record's event (`execute_finished`, `lock`, …) or lock event kind.
    pub event: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// One line: the command line, the key, the outcome.
    pub what: String,
    /// A refusal's stable reason (`refusal.reason` in the audit record).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The ring; cheap to clone.
#[derive(Clone)]
pub struct Recent {
    inner: Arc<Inner>,
}

struct Inner {
    // A std mutex: one push or one copy under it, never an await.
    ring: Mutex<VecDeque<Decision>>,
    changed: watch::Sender<u64>,
}

impl Default for Recent {
    fn default() -> Self {
        Recent {
            inner: Arc::new(Inner {
                ring: Mutex::new(VecDeque::with_capacity(RECENT)),
                changed: watch::channel(0).0,
            }),
        }
    }
}

impl Recent {
    /// Summarizes an audit record (a JSON object with `event`) into the ring; records
    /// that are no decision (lease renewals, a command's own key events) are skipped.
    pub fn push_record(&self, record: &impl Serialize) {
        let Ok(v) = serde_json::to_value(record) else {
            return;
        };
        if let Some(d) = summarize(&v) {
            self.push(d);
        }
    }

    fn push(&self, d: Decision) {
        {
            let mut ring = self.lock();
            if ring.len() == RECENT {
                evict_one(&mut ring);
            }
            ring.push_back(d);
        }
        self.inner.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The kept decisions, newest first.
    pub fn newest_first(&self) -> Vec<Decision> {
        self.lock().iter().rev().cloned().collect()
    }

    /// Moves with each new decision.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Decision>> {
        match self.inner.ring.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

/// Makes room in a full ring: the oldest entry of the client with the most entries goes
/// (server entries count as one more client), so each client keeps a fair share and no
/// client's activity pushes another's decisions off the page (issue 22).
fn evict_one(ring: &mut VecDeque<Decision>) {
    let mut counts: std::collections::HashMap<Option<&str>, usize> = Default::default();
    for d in ring.iter() {
        *counts.entry(d.client.as_deref()).or_insert(0) += 1;
    }
    let Some(top) = counts.values().copied().max() else {
        return;
    };
    let heaviest: Vec<Option<String>> = counts
        .iter()
        .filter(|(_, n)| **n == top)
        .map(|(c, _)| c.map(str::to_string))
        .collect();
    if let Some(i) = ring.iter().position(|d| heaviest.contains(&d.client)) {
        ring.remove(i);
    }
}

fn summarize(v: &Value) -> Option<Decision> {
    let event = v["event"].as_str()?;
    let client = v["client"].as_str().map(str::to_string);
    let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let argv = || {
        v["argv"]
            .as_array()
            .or_else(|| v["args"].as_array())
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    };
    let (kind, event, what, reason) = match event {
        "execute_started" => ("run", event.to_string(), argv(), None),
        "execute_dry_run" => (
            "run",
            event.to_string(),
            format!("dry run: {}", argv()),
            None,
        ),
        "execute_finished" => {
            let outcome = match (v["outcome"].as_str(), v["exit_code"].as_i64()) {
                (Some("exited"), Some(code)) => format!("exit {code}"),
                (Some(o), _) => o.to_string(),
                _ => String::new(),
            };
            let ms = v["duration_ms"].as_u64().unwrap_or(0);
            (
                "run",
                event.to_string(),
                format!("{} ({outcome}, {ms} ms)", s("command")),
                None,
            )
        }
        "execute_refused" => (
            "refused",
            event.to_string(),
            format!("{} {}: {}", s("command"), argv(), s("reason")),
            v["refusal"]["reason"].as_str().map(str::to_string),
        ),
        "lock" => {
            let kind = v["kind"].as_str()?;
            if matches!(kind, "renewed" | "command_started" | "command_finished") {
                return None;
            }
            let key = s("key");
            let detail = v["reason"].as_str().map(|r| format!(": {r}"));
            (
                if kind == "refused" {
                    "refused"
                } else {
                    "lease"
                },
                kind.to_string(),
                format!("{key}{}", detail.unwrap_or_default()),
                (kind == "refused").then(|| "lock_busy".to_string()),
            )
        }
        "approval_requested" => (
            "approval",
            event.to_string(),
            format!("{} {}: waits for {}", s("approval"), s("what"), {
                let a: Vec<&str> = (v["approvers"].as_array().into_iter().flatten())
                    .filter_map(Value::as_str)
                    .collect();
                a.join(", ")
            }),
            None,
        ),
        "approval_decided" => {
            let by = v["by"].as_str().map(|b| format!(" by {b}"));
            let note = v["note"].as_str().map(|n| format!(": {n}"));
            (
                "approval",
                event.to_string(),
                format!(
                    "{} {}{}{} ({} ms)",
                    s("approval"),
                    s("outcome"),
                    by.unwrap_or_default(),
                    note.unwrap_or_default(),
                    v["after_ms"].as_u64().unwrap_or(0)
                ),
                None,
            )
        }
        "approval_binding_failed" => (
            "refused",
            event.to_string(),
            format!("{}: {}", s("approval"), s("why")),
            Some("changed_since_approval".to_string()),
        ),
        other => ("server", other.to_string(), String::new(), None),
    };
    Some(Decision {
        at: Utc::now(),
        kind,
        event,
        client,
        what: cut(what),
        reason,
    })
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_WHAT {
        let mut end = MAX_WHAT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_the_last_fifty_newest_first_with_refusal_reasons() {
        let r = Recent::default();
        for i in 0..60 {
            r.push_record(&json!({"event": "execute_started", "client": "vm-a", "argv": [format!("/bin/x{i}")]}));
        }
        r.push_record(
            &json!({"event": "execute_refused", "client": "vm-b", "command": "flash",
            "args": ["wl", "../x"], "refusal": {"reason": "policy"}, "reason": "no match"}),
        );
        r.push_record(
            &json!({"event": "lock", "kind": "renewed", "key": "board:b1", "client": "vm-a"}),
        );
        let got = r.newest_first();
        assert_eq!(got.len(), RECENT);
        assert_eq!(got[0].kind, "refused");
        assert_eq!(got[0].reason.as_deref(), Some("policy"));
        assert_eq!(got[0].what, "flash wl ../x: no match");
        assert_eq!(got[1].what, "/bin/x59");
        assert_eq!(got[RECENT - 1].what, "/bin/x11");
    }

    #[test]
    fn one_clients_activity_does_not_push_anothers_decisions_off() {
        let r = Recent::default();
        for i in 0..3 {
            r.push_record(&json!({"event": "execute_started", "client": "vm-b", "argv": [format!("/bin/b{i}")]}));
        }
        // 25 lock/unlock cycles of vm-a: 50 decisions (the finding in issue 22).
        for i in 0..50 {
            r.push_record(&json!({"event": "execute_started", "client": "vm-a", "argv": [format!("/bin/a{i}")]}));
        }
        let got = r.newest_first();
        assert_eq!(got.len(), RECENT);
        let b = got
            .iter()
            .filter(|d| d.client.as_deref() == Some("vm-b"))
            .count();
        assert_eq!(b, 3, "vm-b's decisions stay");
        assert_eq!(got[0].what, "/bin/a49");
    }

    #[test]
    fn long_lines_are_cut() {
        let r = Recent::default();
        let long = "é".repeat(400);
        r.push_record(&json!({"event": "execute_started", "argv": [long]}));
        assert!(r.newest_first()[0].what.len() <= MAX_WHAT + '…'.len_utf8());
    }
}
