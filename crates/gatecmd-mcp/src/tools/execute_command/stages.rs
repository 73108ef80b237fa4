//! The stages of an allowed `execute_command` that a call run at once and a call run after
//! its approval (`approval.rs`) share: recording a refusal ([`Refuser`]), the result before
//! anything ran ([`new_result`]), taking the client's slot and the locks ([`hold`]), and
//! beginning the run under them ([`begin`]: the isolated view, the audit trail, the page
//! row). Beside `run.rs` rather than in it, so that `approval.rs` and `run.rs` do not import
//! each other.

use rmcp::model::CallToolResult;
use tokio_util::sync::CancellationToken;

use crate::calls::answer::refusal;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::metrics;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::audit;
use gatecmd_domain::exec::Spec;
use gatecmd_domain::isolation::{Plan, Privilege};
use gatecmd_domain::locks::{ClientName, CommandLockRequest, LeaseId, SessionId};
use gatecmd_domain::state::AppState;

use super::device_left::Watch;
use super::held::Held;
use super::interface::ExecuteResult;
use super::prepare::{Prepared, Rejected};

/// A run whose locks are held, about to spawn: its spec (with the isolated view), its
/// audit trail, its page row and metrics, and the watch on its device.
pub(super) struct Begun {
    pub spec: Spec,
    pub held: Held,
    pub trail: audit::RunTrail,
    pub running: metrics::RunningCommand,
    pub left: Option<Watch>,
}

/// Builds the isolated view under the lock (a board that re-enumerated since `prepare`,
/// or since the last command, is seen with its current bus and device number), writes the
/// audit trail's start before the spawn (a crash mid-run still shows what was started) and
/// lists the run on the bench page until `held` is gone.
pub(super) fn begin(
    state: &AppState,
    who: &ClientIdentity,
    refuser: &Refuser<'_>,
    prepared: &Prepared<'_>,
    mut held: Held,
    result: &mut ExecuteResult,
) -> Result<Begun, Rejected> {
    let config = &prepared.snapshot.config;
    let mut spec = prepared.spec.clone();
    if let Some(id) = prepared.isolate() {
        let plan = Plan::new(&config.isolation.roots(), id, Privilege::current())?;
        spec.isolation = Some(plan.setup);
        result.isolated_view = Some(plan.view);
    }
    tracing::info!(client = %who.name, command = %result.command, argv = ?result.argv, device = ?result.device, verdict = "allowed", "execute_command");
    let trail = audit::RunTrail::start(
        &state.audit,
        refuser.call.clone(),
        audit::RunStart {
            argv: result.argv.clone(),
            device: result.device.clone(),
            lock_keys: result.lock_keys.clone(),
            timeout_secs: result.timeout_secs,
        },
    );
    held.board = prepared.board.map(|b| b.name.clone());
    held.run = Some(state.running.start(gatecmd_domain::running::NewRun {
        client: who.name.clone(),
        command: result.command.clone(),
        argv: result.argv.clone(),
        device: result.device.clone(),
        board: held.board.clone(),
        progress: prepared.progress.clone(),
    }));
    // Dropped unfinished (the request went away mid-run), it counts as cancelled.
    let running = metrics::command_running(&result.command, &who.name);
    let left = Watch::start(state, config, prepared.device.map(|d| &d.id));
    Ok(Begun {
        spec,
        held,
        trail,
        running,
        left,
    })
}

/// Refuses a call before anything ran: logged, audited with its reason, answered.
pub(super) struct Refuser<'a> {
    pub state: &'a AppState,
    pub who: &'a ClientIdentity,
    pub call: audit::ExecuteCall,
    /// The caller's arguments, unresolved.
    pub asked: Vec<String>,
}

impl Refuser<'_> {
    pub(super) fn refuse(&self, why: Rejected) -> CallToolResult {
        refusal(self.refusal(why))
    }

    /// Logs, audits and counts a refusal; the refusal, for the caller to answer.
    pub(super) fn refusal(&self, why: Rejected) -> Refusal {
        // An unknown name is counted as `other`: the label set stays the configured one.
        let configured = why.names_configured_command();
        let r = Refusal::from(why);
        tracing::info!(
            client = %self.who.name, command = %self.call.command, verdict = "refused",
            refusal = %r.reason, reason = %r.message, "execute_command"
        );
        // The reason is also the audit log's aggregation class: chosen in code, so a
        // client cannot invent classes to get more lines written.
        self.state
            .audit
            .execute_refused(&self.call, &self.asked, r.reason.as_str(), &r.message);
        metrics::command_done(
            &self.call.command,
            configured,
            &self.who.name,
            metrics::CommandOutcome::Refused,
            Some(r.reason),
        );
        r
    }
}

/// The result before anything ran: what will run, with what timeout, on which keys.
pub(super) fn new_result(prepared: &Prepared<'_>) -> ExecuteResult {
    ExecuteResult {
        command: prepared.command.name.clone(),
        argv: prepared.argv(),
        passed_argv: (!prepared.spec.inherit.is_empty()).then(|| prepared.passed_argv()),
        exit_code: None,
        signal: None,
        stdout: String::new(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        duration_ms: 0,
        timed_out: false,
        cancelled: false,
        timeout_secs: prepared.spec.timeout.as_secs(),
        dry_run: prepared.dry_run,
        device: prepared.device.map(|d| d.id.to_string()),
        lock_keys: prepared.keys.iter().map(|k| k.to_string()).collect(),
        shared_lock_keys: prepared.shared_keys.iter().map(|k| k.to_string()).collect(),
        isolated_view: None,
        stop_reason: None,
        job: None,
        started_at: None,
        notices: Vec::new(),
        device_left: None,
        approval: None,
    }
}

/// Takes a client slot, then the device locks (queueing up to `prepared.wait`).
pub(super) async fn hold(
    state: &AppState,
    who: &ClientIdentity,
    session: Option<SessionId>,
    lease: Option<LeaseId>,
    prepared: &Prepared<'_>,
    cancel: &CancellationToken,
) -> Result<Held, Rejected> {
    let Some(slot) = state.client_slot(&who.name) else {
        return Err(Rejected::TooManyRunning {
            client: who.name.clone(),
            max: prepared.snapshot.config.limits.max_concurrent_per_client,
        });
    };
    let lock_req = CommandLockRequest {
        keys: prepared.keys.clone(),
        shared: prepared.shared_keys.clone(),
        client: ClientName(who.name.clone()),
        session,
        lease,
        command: format!("{} {}", prepared.command.name, prepared.spec.args.join(" "))
            .trim_end()
            .to_string(),
    };
    // A request cancelled while queued leaves the queue at once (the future is dropped).
    let locks = tokio::select! {
        r = state.locks.acquire_for_command_wait(lock_req, prepared.wait) => r?,
        _ = cancel.cancelled() => return Err(Rejected::CancelledWaiting),
    };
    Ok(Held {
        _slot: slot,
        _locks: locks,
        run: None,
        client: who.name.clone(),
        board: None,
    })
}
