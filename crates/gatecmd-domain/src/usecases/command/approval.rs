//! A call an `approvals:` rule holds (docs/APPROVALS.md): every check that can refuse it
//! has passed and nothing has touched the board. [`hold`] makes it a job in state
//! `awaiting_approval` and a pending request showing exactly what will run (the argv, the
//! board and its holder, each file argument's SHA-256 and size; `by: requester` with nobody
//! to answer for the client is refused first); the job's task waits for the decision. On a
//! yes (`run_approved`) the call is checked again on the state of that moment (`prepare`
//! on a new snapshot: a reload, a board that re-enumerated) and bound to what was shown:
//! the same argv, the same lock keys, and each file re-hashed through the open file the
//! child will get; any difference refuses it (`changed_since_approval`) and nothing runs.
//! Then it takes its locks and runs as a job. The surface answers the call with the job
//! (or waits on it) and tells whom it waits for.

use std::sync::Arc;

use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::metrics;
use gatecmd_core::refusal::{Refusal, RefusalReason};

use super::ask::Ask;
use super::hold::{Call, start};
use super::job::{Answer, Ran, run_job};
use super::prepare::{Prepared, prepare, shell_words};
use super::report::Report;
use super::snapshot::Snapshot;
use crate::approvals::Request;
use crate::approvals::{FileDigest, NewRequest, RequestView};
use crate::audit::{ApprovalRecord, JobRecord};
use crate::config::Approvers;
use crate::config::{ApprovalRule, BoardConfig, CancelPolicy, Gated, approval_rule};
use crate::jobs::{Job, JobEnd, JobSpec, JobState, Origin};
use crate::locks::{LeaseId, LockKey, SessionId};
use crate::state::AppState;
use crate::usecases::approval::{
    LeaseWatch, await_decision, board_holder, decision_refusal, files_changed, hash_files, open,
    person_for,
};
use crate::usecases::job::end_job;

/// The rule that holds for a prepared call, if any: the first of `approvals:` for its
/// command and arguments on every board it touches. Nothing but an `is_empty` test when
/// no rule is configured.
pub fn rule_for<'a>(prepared: &Prepared<'a>) -> Option<&'a ApprovalRule> {
    let config = &prepared.snapshot.config;
    if config.approvals.is_empty() {
        return None;
    }
    let boards: Vec<&BoardConfig> = (prepared.keys.iter())
        .filter_map(|k| match k {
            LockKey::Board(name) => config.board(name),
            _ => None,
        })
        .chain(prepared.board)
        .collect();
    let what = Gated::Command {
        name: &prepared.command.name,
        args: &prepared.shown_args,
        read_only: prepared.command.read_only,
    };
    approval_rule(&config.approvals, what, &boards)
}

/// Holds `prepared` for an approver's yes under `rule`: the job it waits in (of `origin`)
/// and the open request (`tell` is the surface's word to the approvers, before the job's
/// task waits), or the refusal when it cannot be held (nothing waits then).
pub fn hold<A: Answer>(
    call: Call<'_>,
    state: &Arc<AppState>,
    prepared: &Prepared<'_>,
    (rule, again, note): (&ApprovalRule, Ask, Option<String>),
    origin: Origin,
    tell: impl FnOnce(&Arc<Request>),
) -> Result<(Arc<Job>, Arc<Request>), Refusal> {
    let who = call.who;
    // `by: requester` with nobody configured to answer for this client: refused before
    // anything waits.
    if rule.by == Approvers::Requester {
        let what = shell_words(&prepared.argv());
        if let Err(r) = person_for(state, &who.name, &what, &rule.describe()) {
            let (reason, message) = (r.reason.as_str(), &r.message);
            (state.audit).execute_refused(&call.record, &call.asked, reason, message);
            return Err(r);
        }
    }
    let files = hash_files(&prepared.files)?;
    let holding = Holding {
        rule,
        tool: call.name,
        note,
        files,
    };
    let (job, mut spec) = awaiting(state, who, prepared, origin, holding);
    spec.holder = (spec.board.as_deref()).and_then(|b| board_holder(state, b));
    let lease_watch = LeaseWatch::find(state, &prepared.keys, call.lease.as_ref());
    let request = match open(state, spec) {
        Ok(r) => r,
        Err(r) => {
            state.jobs.forget(&job.id);
            return Err(r);
        }
    };
    requested(state, &job, &request.id.0);
    tell(&request);
    let approved = Approved {
        state: state.clone(),
        who: who.clone(),
        session: call.session,
        lease: call.lease,
        again,
        job: job.clone(),
        name: call.name,
    };
    tokio::spawn(decided::<A>(approved, request.clone(), lease_watch));
    Ok((job, request))
}

/// The job's task: waits for the decision, then runs the call (or ends refused).
async fn decided<A: Answer>(approved: Approved, request: Arc<Request>, lease: Option<LeaseWatch>) {
    let (state, job) = (approved.state.clone(), approved.job.clone());
    let cancel = job.cancel_token();
    let decision = await_decision(&state, &request, lease.as_ref(), &cancel).await;
    let view = request.view();
    if let Some(r) = decision_refusal(&view, &decision) {
        return end_refused::<A>(&state, &job, r);
    }
    run_approved::<A>(approved, &view).await;
}

/// The job a held call waits in (`awaiting_approval`), and the request to open for it:
/// what will run, the board it acts on (the one at its device's port, else the first whose
/// key it takes), each file's digest, the rule; who holds the board is the surface's to add.
fn awaiting(
    state: &AppState,
    who: &ClientIdentity,
    prepared: &Prepared<'_>,
    origin: Origin,
    held: Holding<'_>,
) -> (Arc<Job>, NewRequest) {
    let board = prepared.board.map(|b| b.name.clone()).or_else(|| {
        prepared.keys.iter().find_map(|k| match k {
            LockKey::Board(n) => Some(n.clone()),
            _ => None,
        })
    });
    let argv = prepared.argv();
    let job = state.jobs.start_awaiting(JobSpec {
        client: who.name.clone(),
        command: prepared.command.name.clone(),
        argv: argv.clone(),
        lock_keys: prepared.lock_keys(),
        device: prepared.device_id(),
        board: board.clone(),
        timeout_secs: prepared.spec.timeout.as_secs(),
        uncancellable: prepared.cancel == CancelPolicy::Never,
        origin,
    });
    let request = NewRequest {
        client: who.name.clone(),
        note: held.note,
        tool: held.tool.to_string(),
        what: shell_words(&argv),
        argv: Some(argv),
        holder: None,
        board,
        files: held.files,
        rule: held.rule.describe(),
        approvers: held.rule.by.clone(),
        timeout: held.rule.timeout,
        job: Some(job.id.0.clone()),
    };
    (job, request)
}

/// What holds a call: the rule, the surface's name for the action (`tool` of the request),
/// the caller's note, and each file argument's digest.
struct Holding<'a> {
    rule: &'a ApprovalRule,
    tool: &'a str,
    note: Option<String>,
    files: Vec<FileDigest>,
}

/// The request `approval` is open: the job names it, and the log says the job waits.
fn requested(state: &AppState, job: &Job, approval: &str) {
    state.audit.record(&JobRecord::started(
        &job.spec.client,
        &job.id.0,
        "awaiting_approval",
    ));
    job.set_approval(approval);
}

/// What an approved call's task takes with it: the caller, owned, and the call as asked.
struct Approved {
    state: Arc<AppState>,
    who: ClientIdentity,
    session: Option<SessionId>,
    lease: Option<LeaseId>,
    again: Ask,
    job: Arc<Job>,
    /// The surface's name for the action, in the log's lines.
    name: &'static str,
}

/// Runs an approved call as its job: every check again, on the configuration and devices
/// of now, bound to what `view` showed; then the locks and the run. Any refusal ends the
/// job, nothing run.
async fn run_approved<A: Answer>(approved: Approved, view: &RequestView) {
    let Approved {
        state,
        who,
        session,
        lease,
        again,
        job,
        name,
    } = approved;
    let snap = Snapshot::take(&state);
    let call = Call::new(&state, &who, (session, lease), &again, (name, A::refused));
    let prepared = match prepare(&snap, &who, again) {
        Ok(p) => p,
        Err(e) => return end_refused::<A>(&state, &job, call.refuse(e)),
    };
    let mut report = Report::of(&prepared);
    if let Some(why) = binding(&prepared, &job, view) {
        state.audit.record(&ApprovalRecord::BindingFailed {
            client: &who.name,
            approval: &view.id.0,
            why: &why,
        });
        let r = Refusal::new(
            RefusalReason::ChangedSinceApproval,
            format!(
                "approval request {} was approved, but {why}; nothing ran. Call again: a new \
                 request shows what is there now",
                view.id
            ),
        );
        metrics::command_done(
            &prepared.command.name,
            true,
            &who.name,
            metrics::CommandOutcome::Refused,
            Some(r.reason),
        );
        return end_refused::<A>(&state, &job, r);
    }
    job.approved();
    state.jobs.changed(&job.id);
    let mut begun = match start(&call, &prepared, &job.cancel_token()).await {
        Ok(b) => b,
        Err(e) => return end_refused::<A>(&state, &job, call.refuse(e)),
    };
    report.isolated_view = begun.view.take();
    let ran = Ran {
        state: state.clone(),
        begun,
        progress: prepared.progress.clone(),
        reporter: None,
        report,
        approved: Some((job.id.0.clone(), view.id.0.clone())),
    };
    run_job::<A>(ran, job).await;
}

/// What differs between the approved request and the call as it stands now, in words.
fn binding(prepared: &Prepared<'_>, job: &Job, view: &RequestView) -> Option<String> {
    let argv = prepared.argv();
    if view.argv.as_ref() != Some(&argv) {
        return Some(format!(
            "the command line is now {} (approved: {})",
            shell_words(&argv),
            view.what
        ));
    }
    let keys = prepared.lock_keys();
    if job.spec.lock_keys != keys {
        return Some(format!(
            "it now acts on {} (approved: {})",
            keys.join(", "),
            job.spec.lock_keys.join(", ")
        ));
    }
    files_changed(&view.files, &prepared.files)
}

/// Ends an approval's job without running anything: its answer is the refusal.
fn end_refused<A: Answer>(state: &AppState, job: &Arc<Job>, r: Refusal) {
    let stop = format!("{}: {}", r.reason, r.message);
    end_job(
        &state.jobs,
        &state.audit,
        job,
        JobState::Failed,
        JobEnd {
            stop_reason: Some(stop),
            result: A::refusal(r),
            ..JobEnd::default()
        },
    );
}
