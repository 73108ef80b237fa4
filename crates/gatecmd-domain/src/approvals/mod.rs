//! Approvals (issue 33): requests that wait for a named approver's yes before anything
//! runs, and their decisions.
//!
//! The table is a cheap-to-clone handle on one `std` mutex (a map operation under it,
//! never an await), like the jobs table. A request is decided once: the first of an
//! approval, a denial, its expiry, its requester's withdrawal or its lease's end wins, and
//! every waiter sees that one decision through the request's `watch` channel. Pending
//! requests are bounded ([`MAX_PENDING`], [`MAX_PENDING_PER_CLIENT`]); decided ones are
//! kept for the resource and the page up to [`KEEP_DECIDED`].
//!
//! Who may decide is fixed when the request is made (its rule's approvers), so a reload
//! that changes or removes the rule leaves a waiting request as it was shown to its
//! approvers (docs/DECISIONS.md).

pub mod files;
pub mod request;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use chrono::Utc;
use tokio::sync::watch;

pub use request::{
    ApprovalId, Decision, FileDigest, NewRequest, Outcome, Request, RequestView, Via,
};

use crate::config::Approvers;
use gatecmd_core::output::visible;

/// Requests pending at once, all clients together.
pub const MAX_PENDING: usize = 256;
/// Requests pending at once from one client.
pub const MAX_PENDING_PER_CLIENT: usize = 16;
/// Decided requests kept for `gatecmd://approvals` and the page.
pub const KEEP_DECIDED: usize = 50;
/// The longest note, in bytes (a requester's or an approver's).
pub const MAX_NOTE_BYTES: usize = 1024;

/// Why a request could not be made or decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    #[error(
        "no pending approval request {id}: it never existed, or it was already decided \
         (gatecmd://approvals lists the pending ones and the last decisions)"
    )]
    Unknown { id: String },
    #[error(
        "{by} may not decide approval request {id}: its approvers are {approvers} \
         ({rule})"
    )]
    NotAnApprover {
        id: String,
        by: String,
        approvers: String,
        rule: String,
    },
    #[error(
        "{by} made approval request {id} and cannot approve its own request: its rule \
         ({rule}) names the approvers {approvers}"
    )]
    OwnRequest {
        id: String,
        by: String,
        approvers: String,
        rule: String,
    },
    #[error(
        "approval request {id} (by: requester) was never given the person who answers for \
         its client; nobody can decide it"
    )]
    RequesterOnly { id: String },
    #[error(
        "too many approval requests pending ({pending}, at most {max}{whose}); wait for a \
         decision on one of them"
    )]
    TooMany {
        pending: usize,
        max: usize,
        whose: String,
    },
    #[error("the note is {len} bytes; at most {max}")]
    NoteTooLong { len: usize, max: usize },
}

/// The table; cheap to clone.
#[derive(Clone, Default)]
pub struct Approvals {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    table: Mutex<Table>,
    /// Moves on every change (a request made or decided): resources, the page, metrics.
    version: VersionSender,
}

struct VersionSender(watch::Sender<u64>);

impl Default for VersionSender {
    fn default() -> Self {
        VersionSender(watch::channel(0).0)
    }
}

#[derive(Default)]
struct Table {
    next: u64,
    pending: BTreeMap<u64, Arc<Request>>,
    /// Newest last.
    decided: VecDeque<Arc<Request>>,
    /// Decisions so far by outcome (`/metrics`).
    counts: BTreeMap<&'static str, u64>,
}

impl Approvals {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.shared.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.shared
            .version
            .0
            .send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Makes a pending request; it waits until decided or its deadline.
    pub fn request(&self, spec: NewRequest) -> Result<Arc<Request>, ApprovalError> {
        check_note(spec.note.as_deref())?;
        let spec = shown_as_it_acts(spec);
        let mut t = self.table();
        if t.pending.len() >= MAX_PENDING {
            return Err(ApprovalError::TooMany {
                pending: t.pending.len(),
                max: MAX_PENDING,
                whose: String::new(),
            });
        }
        let mine = (t.pending.values())
            .filter(|r| r.spec.client == spec.client)
            .count();
        if mine >= MAX_PENDING_PER_CLIENT {
            return Err(ApprovalError::TooMany {
                pending: mine,
                max: MAX_PENDING_PER_CLIENT,
                whose: format!(" for client {}", spec.client),
            });
        }
        t.next += 1;
        let n = t.next;
        let now = Instant::now();
        let since = Utc::now();
        let deadline =
            since + chrono::Duration::from_std(spec.timeout).unwrap_or(chrono::Duration::MAX);
        let req = Arc::new(Request {
            id: ApprovalId(format!("apr-{n}")),
            since,
            since_instant: now,
            deadline,
            deadline_instant: now + spec.timeout,
            decided: watch::channel(None).0,
            spec,
        });
        t.pending.insert(n, req.clone());
        drop(t);
        self.changed();
        Ok(req)
    }

    /// `by` approves (or denies) pending request `id`, `via` the page or MCP. `by` must be
    /// one of the rule's approvers (for `by: requester`, the person who answers for the
    /// requesting client) and never the requester: nothing the requester's own process
    /// says decides its request.
    pub fn decide(
        &self,
        id: &str,
        by: &str,
        via: Via,
        approve: bool,
        note: Option<String>,
    ) -> Result<(RequestView, Decision), ApprovalError> {
        check_note(note.as_deref())?;
        let note = note.map(|n| visible(&n));
        let req = self.pending(id)?;
        let unknown = || ApprovalError::Unknown { id: id.to_string() };
        let approvers = req.spec.approvers.to_string();
        let rule = req.spec.rule.clone();
        let names = match &req.spec.approvers {
            // Resolved when the request is made ([`Approvers::Person`]); never here.
            Approvers::Requester => {
                return Err(ApprovalError::RequesterOnly { id: id.to_string() });
            }
            Approvers::Clients(names) => names.clone(),
            Approvers::Person { person, .. } => vec![person.clone()],
        };
        if req.spec.client == by {
            return Err(ApprovalError::OwnRequest {
                id: id.to_string(),
                by: by.to_string(),
                approvers,
                rule,
            });
        }
        if !names.iter().any(|n| n == by) {
            return Err(ApprovalError::NotAnApprover {
                id: id.to_string(),
                by: by.to_string(),
                approvers,
                rule,
            });
        }
        let outcome = if approve {
            Outcome::Approved
        } else {
            Outcome::Denied
        };
        let d = self
            .end_by(&req, outcome, Some((by.to_string(), via)), note)
            .ok_or_else(unknown)?;
        Ok((req.view(), d))
    }

    /// Ends `req` with `outcome` unless it is decided already; the decision that holds,
    /// or `None` when another came first.
    pub fn end(
        &self,
        req: &Request,
        outcome: Outcome,
        by: Option<String>,
        note: Option<String>,
    ) -> Option<Decision> {
        self.end_by(req, outcome, by.map(|b| (b, Via::Mcp)), note)
    }

    /// [`Approvals::end`] with the approver and the way it decided.
    fn end_by(
        &self,
        req: &Request,
        outcome: Outcome,
        by: Option<(String, Via)>,
        note: Option<String>,
    ) -> Option<Decision> {
        let (by, via) = by.map_or((None, None), |(b, v)| (Some(b), Some(v)));
        let d = Decision {
            outcome,
            by,
            via,
            note,
            at: Utc::now(),
            after_ms: req.since_instant.elapsed().as_millis() as u64,
        };
        let mut t = self.table();
        // Under the table's lock: two deciders cannot both win.
        let first = req.decided.send_if_modified(|cur| {
            if cur.is_some() {
                return false;
            }
            *cur = Some(d.clone());
            true
        });
        if !first {
            return None;
        }
        let n = req.id.0.strip_prefix("apr-").and_then(|n| n.parse().ok());
        if let Some(n) = n
            && let Some(r) = t.pending.remove(&n)
        {
            if t.decided.len() == KEEP_DECIDED {
                t.decided.pop_front();
            }
            t.decided.push_back(r);
        }
        *t.counts.entry(outcome.as_str()).or_insert(0) += 1;
        drop(t);
        self.changed();
        Some(d)
    }

    /// Waits for `req`'s decision; at its deadline it expires. Cancel-safe: dropping the
    /// future leaves the request as it is (the caller withdraws it if it gives up).
    pub async fn wait(&self, req: &Request) -> Decision {
        let mut rx = req.decided.subscribe();
        let deadline = tokio::time::Instant::from_std(req.deadline_instant);
        loop {
            if let Some(d) = rx.borrow_and_update().clone() {
                return d;
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { break },
                _ = tokio::time::sleep_until(deadline) => {
                    if let Some(d) = self.end(req, Outcome::Expired, None, None) {
                        return d;
                    }
                }
            }
        }
        // The sender lives in `req`, which the caller holds: not reached.
        req.decision().unwrap_or(Decision {
            outcome: Outcome::Withdrawn,
            by: None,
            via: None,
            note: None,
            at: Utc::now(),
            after_ms: 0,
        })
    }

    /// The pending request `id`.
    pub fn pending(&self, id: &str) -> Result<Arc<Request>, ApprovalError> {
        let t = self.table();
        id.strip_prefix("apr-")
            .and_then(|n| n.parse::<u64>().ok())
            .and_then(|n| t.pending.get(&n))
            .cloned()
            .ok_or_else(|| ApprovalError::Unknown { id: id.to_string() })
    }

    /// Pending requests, oldest first.
    pub fn list_pending(&self) -> Vec<RequestView> {
        let list: Vec<Arc<Request>> = self.table().pending.values().cloned().collect();
        list.iter().map(|r| r.view()).collect()
    }

    /// The last decided requests, newest first.
    pub fn list_decided(&self) -> Vec<RequestView> {
        let list: Vec<Arc<Request>> = self.table().decided.iter().rev().cloned().collect();
        list.iter().map(|r| r.view()).collect()
    }

    /// How many are pending now, and how many were decided by each outcome so far.
    pub fn counts(&self) -> (usize, Vec<(&'static str, u64)>) {
        let t = self.table();
        let by = Outcome::ALL
            .iter()
            .map(|o| (o.as_str(), t.counts.get(o.as_str()).copied().unwrap_or(0)))
            .collect();
        (t.pending.len(), by)
    }

    /// Moves on every request made or decided.
    pub fn version(&self) -> watch::Receiver<u64> {
        self.shared.version.0.subscribe()
    }
}

fn check_note(note: Option<&str>) -> Result<(), ApprovalError> {
    match note {
        Some(n) if n.len() > MAX_NOTE_BYTES => Err(ApprovalError::NoteTooLong {
            len: n.len(),
            max: MAX_NOTE_BYTES,
        }),
        _ => Ok(()),
    }
}

/// A request as every view shows it (issue 46): what a person decides on, written out as
/// it will act, so that bidi controls and other invisible characters a requester put in its
/// command line, console text or note cannot reorder or hide what the approver reads, in
/// `gatecmd://approvals`, on the page, in the elicitation, the CLI and the audit. The text
/// that runs is not taken from here: the held call keeps its own.
fn shown_as_it_acts(mut spec: NewRequest) -> NewRequest {
    spec.what = visible(&spec.what);
    spec.note = spec.note.map(|n| visible(&n));
    spec.argv = spec
        .argv
        .map(|argv| argv.iter().map(|a| visible(a)).collect());
    spec
}

#[cfg(test)]
mod tests;
