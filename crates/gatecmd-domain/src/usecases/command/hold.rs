//! What an allowed command runs under, taken in order: the client's slot, then the locks
//! (queueing up to the call's wait), then the run's beginning under them (the isolated
//! view, the audit trail's start, the bench page's row, the watch on its device). Shared by
//! a call run at once and a call run after its approval; and the one way a call's refusal
//! is logged, audited and counted ([`Call::refuse`]).

use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::metrics;
use gatecmd_core::refusal::Refusal;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::ask::Ask;
use super::device_left::Watch;
use super::prepare::Prepared;
use super::refused::Refused;
use crate::audit;
use crate::exec::Spec;
use crate::exec::isolation::{Plan, Privilege, View};
use crate::jobs::running::{NewRun, RunGuard};
use crate::limits::permits::Permit;
use crate::locks::{ClientName, CommandGuard, CommandLockRequest, LeaseId, SessionId};
use crate::state::AppState;

/// One command call: who asks, under which session and lease, and what its refusals are
/// recorded with.
pub struct Call<'a> {
    pub state: &'a AppState,
    pub who: &'a ClientIdentity,
    pub session: Option<SessionId>,
    pub lease: Option<LeaseId>,
    /// The audit log's call: client, session, command as asked.
    pub record: audit::ExecuteCall,
    /// The caller's arguments, unresolved (a refusal records them as sent).
    pub asked: Vec<String>,
    /// The surface's words for a refusal, with its stable class.
    pub words: fn(Refused) -> Refusal,
    /// The surface's name for the action, in the log's lines (`execute_command`).
    pub name: &'static str,
}

impl<'a> Call<'a> {
    /// The call of `who` asking `ask`, before `prepare` consumes it; `name` and `words`
    /// are the surface's.
    pub fn new(
        state: &'a AppState,
        who: &'a ClientIdentity,
        (session, lease): (Option<SessionId>, Option<LeaseId>),
        ask: &Ask,
        (name, words): (&'static str, fn(Refused) -> Refusal),
    ) -> Call<'a> {
        Call {
            record: audit::ExecuteCall::new(
                &who.name,
                session.as_ref().map(|s| s.0.as_str()),
                &ask.command,
            ),
            asked: ask.args.clone().into_vec(),
            state,
            who,
            session,
            lease,
            words,
            name,
        }
    }

    /// Words, logs, audits and counts a refusal before anything ran; the refusal, for the
    /// caller to answer.
    pub fn refuse(&self, why: Refused) -> Refusal {
        // An unknown name is counted as `other`: the label set stays the configured one.
        let configured = why.names_configured_command();
        let r = (self.words)(why);
        tracing::info!(
            client = %self.who.name, command = %self.record.command, verdict = "refused",
            refusal = %r.reason, reason = %r.message, "{}", self.name
        );
        // The reason is also the audit log's aggregation class: chosen in code, so a
        // client cannot invent classes to get more lines written.
        self.state
            .audit
            .execute_refused(&self.record, &self.asked, r.reason.as_str(), &r.message);
        metrics::command_done(
            &self.record.command,
            configured,
            &self.who.name,
            metrics::CommandOutcome::Refused,
            Some(r.reason),
        );
        r
    }
}

/// A surface's progress reporter for one call: offered each output line (whether it took
/// a percentage from it, the `LineTap::Latest` contract), and flushed once the run is over.
pub struct Reporter {
    pub tap: Box<dyn Fn(&str) -> bool + Send + Sync>,
    /// The reporter's task: it sends what it holds and ends when `tap` is dropped.
    pub done: JoinHandle<()>,
}

impl Reporter {
    /// Drops the tap and waits (at most a second) for the reporter to send what it holds,
    /// so that the last percentage arrives before the answer. A client that does not read
    /// may keep it waiting on its last notification: then it goes, not the answer.
    pub async fn flush(self) {
        drop(self.tap);
        wait_done(self.done).await;
    }
}

/// Waits at most a second for a reporter's task, else aborts it.
pub(super) async fn wait_done(mut done: JoinHandle<()>) {
    if tokio::time::timeout(std::time::Duration::from_secs(1), &mut done)
        .await
        .is_err()
    {
        done.abort();
    }
}

/// What an allowed run holds until its child (and process group) is gone: the client's
/// slot, the lock guards and the bench page's row, all released by dropping them. The
/// foreground path and a job's task hold it the same way, so locks live exactly as long as
/// the child.
pub struct Held {
    /// One of the client's `limits.max_concurrent_per_client` slots.
    _slot: Permit,
    _locks: CommandGuard,
    /// The run's row on the bench page, fed its progress from the output.
    pub(super) run: Option<RunGuard>,
    pub(super) client: String,
    pub(super) board: Option<String>,
}

impl Held {
    /// Offers an output line to the page's row, then to the client's progress reporter;
    /// whether either took it (the `LineTap::Latest` contract).
    pub(super) fn offer(
        &self,
        tap: Option<&(dyn Fn(&str) -> bool + Send + Sync)>,
        line: &str,
    ) -> bool {
        let page = self.run.as_ref().is_some_and(|r| r.offer(line));
        tap.is_some_and(|tap| tap(line)) || page
    }

    /// Whether output must be split into lines: a client asked for progress, or the
    /// page shows this command's percentage.
    pub(super) fn watches_output(&self, reporting: bool) -> bool {
        reporting || self.run.as_ref().is_some_and(|r| r.watches_output())
    }
}

/// A run whose locks are held, about to spawn: its spec (with the isolated view), what it
/// holds, its audit trail, its metrics, and the watch on its device.
pub struct Begun {
    pub spec: Spec,
    pub held: Held,
    pub trail: audit::RunTrail,
    pub running: metrics::RunningCommand,
    pub left: Option<Watch>,
    /// The isolated view it runs in, for the answer.
    pub view: Option<View>,
}

/// Takes the client's slot and the locks, then begins the run under them ([`begin`]).
pub async fn start(
    call: &Call<'_>,
    prepared: &Prepared<'_>,
    cancel: &CancellationToken,
) -> Result<Begun, Refused> {
    let held = hold(call, prepared, cancel).await?;
    begin(call, prepared, held)
}

/// Takes a client slot, then the device locks (queueing up to `prepared.wait`).
async fn hold(
    call: &Call<'_>,
    prepared: &Prepared<'_>,
    cancel: &CancellationToken,
) -> Result<Held, Refused> {
    let who = call.who;
    let Some(slot) = call.state.client_slot(&who.name) else {
        return Err(Refused::TooManyRunning {
            client: who.name.clone(),
            max: prepared.snapshot.config.limits.max_concurrent_per_client,
        });
    };
    let lock_req = CommandLockRequest {
        keys: prepared.keys.clone(),
        shared: prepared.shared_keys.clone(),
        client: ClientName(who.name.clone()),
        session: call.session.clone(),
        lease: call.lease.clone(),
        // The words as people read them: a file argument as the path the caller named
        // (resolved), never the `/proc/self/fd/N` link the child is handed.
        command: format!(
            "{} {}",
            prepared.command.name,
            prepared.shown_args.join(" ")
        )
        .trim_end()
        .to_string(),
    };
    // A request cancelled while queued leaves the queue at once (the future is dropped).
    let locks = tokio::select! {
        r = call.state.locks.acquire_for_command_wait(lock_req, prepared.wait) => r?,
        _ = cancel.cancelled() => return Err(Refused::CancelledWaiting),
    };
    Ok(Held {
        _slot: slot,
        _locks: locks,
        run: None,
        client: who.name.clone(),
        board: None,
    })
}

/// Builds the isolated view under the lock (a board that re-enumerated since `prepare`,
/// or since the last command, is seen with its current bus and device number), writes the
/// audit trail's start before the spawn (a crash mid-run still shows what was started) and
/// lists the run on the bench page until `held` is gone.
fn begin(call: &Call<'_>, prepared: &Prepared<'_>, mut held: Held) -> Result<Begun, Refused> {
    let (state, who) = (call.state, call.who);
    let config = &prepared.snapshot.config;
    let mut spec = prepared.spec.clone();
    let mut view = None;
    if let Some(id) = prepared.isolate() {
        let plan = Plan::new(&config.isolation.roots(), id, Privilege::current())?;
        spec.isolation = Some(plan.setup);
        view = Some(plan.view);
    }
    let command = &prepared.command.name;
    let (argv, device) = (prepared.argv(), prepared.device_id());
    tracing::info!(client = %who.name, command = %command, argv = ?argv, device = ?device, verdict = "allowed", "{}", call.name);
    let trail = audit::RunTrail::start(
        &state.audit,
        call.record.clone(),
        audit::RunStart {
            argv: argv.clone(),
            device: device.clone(),
            lock_keys: prepared.lock_keys(),
            timeout_secs: prepared.spec.timeout.as_secs(),
        },
    );
    held.board = prepared.board.map(|b| b.name.clone());
    held.run = Some(state.running.start(NewRun {
        client: who.name.clone(),
        command: command.clone(),
        argv,
        device,
        board: held.board.clone(),
        progress: prepared.progress.clone(),
    }));
    // Dropped unfinished (the request went away mid-run), it counts as cancelled.
    let running = metrics::command_running(command, &who.name);
    let left = Watch::start(state, config, prepared.device.map(|d| &d.id));
    Ok(Begun {
        spec,
        held,
        trail,
        running,
        left,
        view,
    })
}
