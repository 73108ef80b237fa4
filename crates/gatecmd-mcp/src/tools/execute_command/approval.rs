//! A call an `approvals:` rule covers (docs/APPROVALS.md): every check that can refuse it
//! has passed and nothing has touched the board. It becomes a job in state
//! `awaiting_approval` and a pending request showing exactly what will run (the argv,
//! the board and its holder, each file argument's SHA-256 and size). A background or task
//! call is answered with the job at once; a foreground call waits on it, telling its
//! client who it waits for every few seconds, and if the client gives up the request and
//! its job stay (the client finds them with list_jobs and wait_job).
//!
//! The job's task waits for the decision. On a yes the call is checked again on the state
//! of that moment (`prepare` on a new snapshot: a reload, a board that re-enumerated), and
//! bound to what was shown: the same argv, the same lock keys, and each file re-hashed
//! through the open file the child will get; any difference refuses it
//! (`changed_since_approval`) and nothing runs. Then it takes its locks and runs as a job.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, ProgressNotificationParam};
use rmcp::service::RequestContext;

use crate::calls::answer::{refusal, structured};
use crate::calls::approvals::{self, LeaseWatch};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::metrics;
use gatecmd_core::refusal::{Refusal, RefusalReason};
use gatecmd_core::sanitizer::Args;
use gatecmd_domain::approvals::{NewRequest, Request};
use gatecmd_domain::audit::{self, ApprovalRecord, JobRecord};
use gatecmd_domain::config::{
    ApprovalRule, Approvers, BoardConfig, CancelPolicy, Gated, approval_rule,
};
use gatecmd_domain::jobs::{Job, JobEnd, JobSpec, JobState, Origin};
use gatecmd_domain::locks::{LeaseId, LockKey, SessionId};
use gatecmd_domain::state::AppState;

use super::interface::{DeviceArg, ExecuteRequest, ExecuteResult};
use super::prepare::{Prepared, Snapshot, prepare};
use super::stages::{Begun, Refuser, begin, hold, new_result};

/// The rule that holds for a prepared call, if any: the first of `approvals:` for its
/// command and arguments on every board it touches. Nothing but an `is_empty` test when
/// no rule is configured.
pub(super) fn rule_for<'a>(prepared: &Prepared<'a>) -> Option<&'a ApprovalRule> {
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

/// The request as asked, kept to be checked again once approved (`prepare` consumes it).
#[derive(Default)]
pub(super) struct Again {
    command: String,
    args: Vec<String>,
    timeout_secs: Option<u64>,
    device: Option<gatecmd_devices::DeviceId>,
    board: Option<String>,
    wait_secs: Option<u64>,
    note: Option<String>,
}

impl Again {
    pub(super) fn of(req: &ExecuteRequest) -> Again {
        Again {
            command: req.command.clone(),
            args: req.args.clone().into_vec(),
            timeout_secs: req.timeout_secs,
            device: match &req.device {
                Some(DeviceArg::Id(id)) => Some(id.clone()),
                _ => None,
            },
            board: req.board.clone(),
            wait_secs: req.wait_secs,
            note: req.note.clone(),
        }
    }

    fn request(&self) -> ExecuteRequest {
        ExecuteRequest {
            command: self.command.clone(),
            args: Args::List(self.args.clone()),
            timeout_secs: self.timeout_secs,
            dry_run: false,
            device: self.device.clone().map(DeviceArg::Id),
            board: self.board.clone(),
            lease: None,
            wait_secs: self.wait_secs,
            background: false,
            note: None,
        }
    }
}

/// What [`ask`] needs of the call.
pub(super) struct Ask<'a, 'p> {
    pub state: &'a Arc<AppState>,
    pub who: &'a ClientIdentity,
    pub session: Option<SessionId>,
    pub again: Again,
    pub lease: Option<LeaseId>,
    pub prepared: &'a Prepared<'p>,
    pub rule: &'p ApprovalRule,
    pub refuser: &'a Refuser<'a>,
    pub result: ExecuteResult,
    pub ctx: &'a RequestContext<RoleServer>,
    pub task: bool,
}

/// Makes the request and its job, starts the job's task, and answers (or waits).
pub(super) async fn ask(a: Ask<'_, '_>) -> CallToolResponse {
    let Ask {
        state,
        who,
        session,
        again,
        lease,
        prepared,
        rule,
        refuser,
        mut result,
        ctx,
        task,
    } = a;
    // `by: requester` with nobody configured to answer for this client: refused before
    // anything waits.
    if rule.by == Approvers::Requester
        && let Err(r) = approvals::person_for(
            state,
            &who.name,
            &super::render::shell_words(&result.argv),
            &rule.describe(),
        )
    {
        state
            .audit
            .execute_refused(&refuser.call, &refuser.asked, r.reason.as_str(), &r.message);
        return refusal(r).into();
    }
    let files = match approvals::hash_files(&prepared.files) {
        Ok(f) => f,
        Err(r) => return refusal(r).into(),
    };
    let as_job = prepared.background || task;
    let origin = match (as_job, task) {
        (true, true) => Origin::Task,
        (true, false) => Origin::Background,
        (false, _) => Origin::Foreground,
    };
    let board = prepared.board.map(|b| b.name.clone()).or_else(|| {
        prepared.keys.iter().find_map(|k| match k {
            LockKey::Board(n) => Some(n.clone()),
            _ => None,
        })
    });
    let job = state.jobs.start_awaiting(JobSpec {
        client: who.name.clone(),
        command: result.command.clone(),
        argv: result.argv.clone(),
        lock_keys: result.lock_keys.clone(),
        device: result.device.clone(),
        board: board.clone(),
        timeout_secs: result.timeout_secs,
        uncancellable: prepared.cancel == CancelPolicy::Never,
        origin,
    });
    let lease_watch = LeaseWatch::find(state, &prepared.keys, lease.as_ref());
    let request = approvals::open(
        state,
        NewRequest {
            client: who.name.clone(),
            note: again.note.clone(),
            tool: "execute_command".into(),
            what: super::render::shell_words(&result.argv),
            argv: Some(result.argv.clone()),
            holder: board
                .as_deref()
                .and_then(|b| approvals::board_holder(state, b)),
            board,
            files,
            rule: rule.describe(),
            approvers: rule.by.clone(),
            timeout: rule.timeout,
            job: Some(job.id.0.clone()),
        },
    );
    let request = match request {
        Ok(r) => r,
        Err(r) => {
            state.jobs.forget(&job.id);
            return refusal(r).into();
        }
    };
    state.audit.record(&JobRecord::started(
        &who.name,
        &job.id.0,
        "awaiting_approval",
    ));
    job.set_approval(&request.id.0);
    approvals::tell_person(state, ctx, &request);
    let view = request.view();
    tokio::spawn(decided(Decided {
        state: state.clone(),
        who: who.clone(),
        session,
        again,
        lease,
        lease_watch,
        call: refuser.call.clone(),
        request: request.clone(),
        job: job.clone(),
    }));
    result.job = Some(job.id.0.clone());
    result.started_at = Some(job.started_at.to_rfc3339());
    result.approval = Some(request.id.0.clone());
    match origin {
        Origin::Task => crate::calls::jobs::task_handle(&job),
        Origin::Background => {
            let text = format!(
                "{}. Nothing runs until then. Follow it with wait_job {{\"job\": \"{}\"}} (each \
                 wait returns after at most 110 s); cancel_job withdraws it.\n",
                approvals::waiting_line(&view),
                job.id
            );
            structured(&result, text).into()
        }
        _ => {
            let _telling = Telling::start(ctx, &job, &view);
            super::job_calls::wait_foreground(state, &job, ctx)
                .await
                .into()
        }
    }
}

/// Tells a waiting foreground call's client, every few seconds, what it waits for (who
/// must approve, then the run); stopped when dropped (the call answered or went away).
struct Telling(Option<tokio::task::JoinHandle<()>>);

impl Telling {
    fn start(
        ctx: &RequestContext<RoleServer>,
        job: &Arc<Job>,
        view: &gatecmd_domain::approvals::RequestView,
    ) -> Telling {
        let Some(token) = ctx.meta.get_progress_token() else {
            return Telling(None);
        };
        let (peer, job, line) = (ctx.peer.clone(), job.clone(), approvals::waiting_line(view));
        Telling(Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(approvals::PROGRESS_EVERY);
            let mut n = 0.0;
            loop {
                tick.tick().await;
                n += 1.0;
                let message = match job.state() {
                    JobState::AwaitingApproval => line.clone(),
                    s => format!("approved; job {} {}", job.id, s.as_str()),
                };
                let p = ProgressNotificationParam::new(token.clone(), n).with_message(message);
                if peer.notify_progress(p).await.is_err() {
                    return;
                }
            }
        })))
    }
}

impl Drop for Telling {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.abort();
        }
    }
}

/// What the job's task takes with it.
struct Decided {
    state: Arc<AppState>,
    who: ClientIdentity,
    session: Option<SessionId>,
    again: Again,
    lease: Option<LeaseId>,
    lease_watch: Option<LeaseWatch>,
    call: audit::ExecuteCall,
    request: Arc<Request>,
    job: Arc<Job>,
}

/// The job's task: waits for the decision, then runs (or ends refused).
async fn decided(d: Decided) {
    let Decided {
        state,
        who,
        session,
        again,
        lease,
        lease_watch,
        call,
        request,
        job,
    } = d;
    let cancel = job.cancel_token();
    let decision = approvals::await_decision(&state, &request, lease_watch.as_ref(), &cancel).await;
    let view = request.view();
    if let Some(r) = approvals::decision_refusal(&view, &decision) {
        return end_refused(&state, &job, r);
    }
    // Approved: every check again, on the configuration and devices of now.
    let snap = Snapshot::take(&state);
    let refuser = Refuser {
        state: &state,
        who: &who,
        call,
        asked: again.args.clone(),
    };
    let prepared = match prepare(&snap, &who, again.request()) {
        Ok(p) => p,
        Err(e) => return end_refused(&state, &job, refuser.refusal(e)),
    };
    let mut result = new_result(&prepared);
    if let Some(why) = binding(&prepared, &result, &job, &view) {
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
            &result.command,
            true,
            &who.name,
            metrics::CommandOutcome::Refused,
            Some(r.reason),
        );
        return end_refused(&state, &job, r);
    }
    job.approved();
    state.jobs.changed(&job.id);
    let held = match hold(&state, &who, session, lease, &prepared, &cancel).await {
        Ok(h) => h,
        Err(e) => return end_refused(&state, &job, refuser.refusal(e)),
    };
    let Begun {
        spec,
        held,
        trail,
        running,
        left,
    } = match begin(&state, &who, &refuser, &prepared, held, &mut result) {
        Ok(b) => b,
        Err(e) => return end_refused(&state, &job, refuser.refusal(e)),
    };
    result.job = Some(job.id.0.clone());
    result.approval = Some(view.id.0.clone());
    let launch = super::background::Launch {
        executor: state.executor.clone(),
        jobs: state.jobs.clone(),
        audit: state.audit.clone(),
        spec,
        held,
        progress: prepared.progress.clone(),
        result,
        trail,
        running,
        reporter: None,
        uncancellable: prepared.cancel == CancelPolicy::Never,
        origin: job.view().origin,
        left,
        registry: state.registry.clone(),
    };
    super::background::run_job(launch, job).await;
}

/// What differs between the approved request and the call as it stands now, in words.
fn binding(
    prepared: &Prepared<'_>,
    result: &ExecuteResult,
    job: &Job,
    view: &gatecmd_domain::approvals::RequestView,
) -> Option<String> {
    if view.argv.as_ref() != Some(&result.argv) {
        return Some(format!(
            "the command line is now {} (approved: {})",
            super::render::shell_words(&result.argv),
            view.what
        ));
    }
    if job.spec.lock_keys != result.lock_keys {
        return Some(format!(
            "it now acts on {} (approved: {})",
            result.lock_keys.join(", "),
            job.spec.lock_keys.join(", ")
        ));
    }
    approvals::files_changed(&view.files, &prepared.files)
}

/// Ends an approval job without running anything: its answer is the refusal.
fn end_refused(state: &AppState, job: &Arc<Job>, r: Refusal) {
    let stop = format!("{}: {}", r.reason, r.message);
    crate::calls::jobs::end_job(
        &state.jobs,
        &state.audit,
        job,
        JobState::Failed,
        JobEnd {
            stop_reason: Some(stop),
            result: serde_json::to_value(refusal(r)).ok(),
            ..JobEnd::default()
        },
    );
}
