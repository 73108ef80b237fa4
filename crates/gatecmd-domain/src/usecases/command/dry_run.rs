//! A dry run: every check a real run makes before its locks has passed (`prepare`); what
//! remains to show is the isolated view it would get (a real run builds it under its
//! locks) and whether each lock is free now. Audited (`execute_dry_run`) and counted.

use gatecmd_core::metrics;

use super::hold::Call;
use super::prepare::Prepared;
use super::refused::Refused;
use crate::exec::isolation::{Plan, Privilege, View};

/// What a dry run shows beyond the prepared call.
pub struct DryRun {
    /// The isolated view it would run in.
    pub view: Option<View>,
    /// Each key it would take (exclusive, then shared) and who holds it now.
    pub keys: Vec<KeyNow>,
}

/// A lock key as it stands now.
pub struct KeyNow {
    pub key: String,
    /// Its lease's holder, else the client whose command runs under it.
    pub holder: Option<String>,
    /// Calls queued for it.
    pub waiting: usize,
}

/// The view and the keys of a dry run of `prepared`, recorded as one.
pub fn dry_run(call: &Call<'_>, prepared: &Prepared<'_>) -> Result<DryRun, Refused> {
    let view = match prepared.isolate() {
        Some(id) => {
            let roots = prepared.snapshot.config.isolation.roots();
            Some(Plan::new(&roots, id, Privilege::current())?.view)
        }
        None => None,
    };
    let keys = (prepared.keys.iter().chain(&prepared.shared_keys))
        .map(|k| {
            let now = call.state.locks.key_state(k);
            let holder = now.as_ref().and_then(|s| {
                (s.lease.as_ref().map(|l| l.holder.0.clone()))
                    .or_else(|| s.running.as_ref().map(|r| r.client.0.clone()))
            });
            KeyNow {
                key: k.to_string(),
                holder,
                waiting: now.map_or(0, |s| s.queue_len),
            }
        })
        .collect();
    call.state
        .audit
        .execute_dry_run(&call.record, &prepared.argv());
    let outcome = metrics::CommandOutcome::DryRun;
    metrics::command_done(&prepared.command.name, true, &call.who.name, outcome, None);
    Ok(DryRun { view, keys })
}
