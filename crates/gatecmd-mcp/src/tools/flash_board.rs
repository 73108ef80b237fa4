//! `flash_board {board, image, bmap?, loader?, wait_for?, background?, timeout_secs?, note?}`: a
//! leased board from whatever state it is in to the image written, verified and booted,
//! natively over rockusb (gatecmd-domain's `flash`, on the `gatecmd-flash` engine).
//!
//! The call checks the policy (`flash:`), takes the board's key under the caller's lease,
//! opens the files beneath the file roots (the open files are what the engine reads), and
//! runs the flash as a job: `background: true` answers with its id at once; otherwise the
//! call waits, sending progress (bytes, rate, ETA), and if the client gives up (a cancel
//! notification, a dropped connection) the flash continues as a job the client's next
//! call is told about. `cancel_job` stops it between chunks (never inside the loader
//! download); the result then names the board's state. Every flash is audited.
//!
//! When an `approvals:` rule holds for the flash (`tool: flash_board`, or a rule on the
//! board alone), the call waits for a yes after every check and before the job starts,
//! holding nothing meanwhile (the board's key and the command slot are taken again after
//! the yes; the lease stays the caller's); the approver sees the image's, the
//! bmap's and the loader's SHA-256, and after the yes the same open files are hashed again:
//! bytes changed since are refused `changed_since_approval`, nothing written.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use regex::{Regex, RegexBuilder};
use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResponse, CallToolResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::{refusal, structured, structured_error};
use crate::calls::approvals;
use crate::calls::progress::{self, Sink};
use crate::console::board_talk::{TalkRefusal, take_leased};
use crate::server::handler::{GatecmdServer, session_id, wants_task};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_core::sanitizer::{FileArgError, FileKind, FileRules, open_file_arg};
use gatecmd_domain::approvals::{FileDigest, NewRequest};
use gatecmd_domain::audit::{self, Audit, Ended, FlashOutcome, FlashRecord, JobRecord, StepMs};
use gatecmd_domain::config::{Config, Gated, GatedTool, approval_rule};
use gatecmd_domain::flash::{
    Event, Failed, FlashFailure, Flashed, Inputs, OpenFile, Seen, Step, StepRecord,
};
use gatecmd_domain::jobs::{Job, JobEnd, JobSpec, JobState, Origin};
use gatecmd_domain::locks::{LeaseId, LockKey, SessionId};
use gatecmd_domain::permits::Permit;
use gatecmd_domain::running::{NewRun, RunGuard};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::take::Taken;

/// Default limit of one flash, everything included.
pub const DEFAULT_TIMEOUT_SECS: u64 = 1800;
/// Longest `wait_for` pattern, and the compiled regex's size limit (as `console_read`).
const MAX_PATTERN_LEN: usize = 256;
const REGEX_SIZE_LIMIT: usize = 1 << 16;
/// The percentage in a progress line (`write 12.0 MiB of 64.0 MiB (18.4%) …`).
const PERCENT: &str = r"\((\d+(?:\.\d+)?)%\)";

/// Arguments of `flash_board`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FlashRequest {
    /// A board name from list_boards; you must hold its lease.
    pub board: String,
    /// The disk image, a path in the file roots (upload it with PUT /upload or
    /// write_file): raw, Android sparse, either gzip-, zstd- or xz-compressed (detected
    /// from its bytes).
    pub image: String,
    /// A bmaptool bmap of the (raw) image: only its mapped ranges are written and
    /// verified.
    #[serde(default)]
    pub bmap: Option<String>,
    /// The Rockchip loader (rkbin's *_spl_loader_*.bin), needed when the board is (or is
    /// put) in MaskROM mode.
    #[serde(default)]
    pub loader: Option<String>,
    /// A regex awaited on the console after the reset (`login:`); the result then holds
    /// the boot log up to it.
    #[serde(default)]
    pub wait_for: Option<String>,
    /// Answer at once with a job id (follow it with wait_job).
    #[serde(default)]
    pub background: bool,
    /// Limit of the whole flash in seconds (default 1800, at most limits.max_timeout_secs).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Your board lease (from lock_board); a 2025-11-25 session that took it may omit it.
    #[serde(default)]
    pub lease: Option<String>,
    /// Why, shown to the approver when an approval rule holds for this flash.
    #[serde(default)]
    pub note: Option<String>,
}

/// Result of `flash_board` (or a refusal in its place). Field names are part of the
/// interface (docs/TOOLS.md).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct FlashResult {
    pub board: String,
    /// The job the flash runs as (wait_job, cancel_job, list_jobs).
    pub job: String,
    /// `running` (background, or continued after you gave up), `succeeded`, `failed`,
    /// `cancelled`, `timed_out`.
    pub state: JobState,
    /// The steps that ended, in order, each with its duration.
    pub steps: Vec<StepRecord>,
    /// Everything written in this call was read back equal.
    pub verified: bool,
    /// What the flash did (when it succeeded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flashed: Option<Flashed>,
    /// Why it stopped (when it did not succeed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureView>,
}

/// A flash that stopped, as the agent reads it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FailureView {
    /// The step it stopped in.
    pub step: Step,
    pub message: String,
    /// What the board showed: the device at its port, the console's last line.
    pub seen: Seen,
    /// Where the board was left: `maskrom`, `loader`, `off`, `not_on_usb`.
    pub board_state: String,
    /// Bytes written in this call before it stopped (the journal resumes them).
    pub bytes_written: u64,
    /// What to do next.
    pub next_action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub console_cursor: Option<u64>,
}

#[tool_router(router = flash_board_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Flashes an image to a leased board, verified, and boots it.
    #[tool(
        description = "Flash a disk image to a leased board natively over rockusb, from whatever state it is \
                       in (off, running, MaskROM, Loader): power.maskrom, the loader sent if it is in MaskROM, \
                       the image written (raw, bmap-mapped ranges only, Android sparse; gzip/zstd/xz streamed), \
                       every chunk read back and compared, reset, and optionally wait_for on the \
                       console. A flash cut part-way resumes from the last verified chunk on the next call with \
                       the same image. Runs as a job: background: true answers with its id (wait_job, \
                       cancel_job); otherwise it waits with progress, and continues as a job if you give up. \
                       The result names each step with its duration, and on failure the step, what was seen \
                       and the next action. Needs flash.enabled in the config; an approvals rule may make \
                       it wait for a person's yes first (pass note to say why).",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true),
        output_schema = schema_for_output::<FlashResult>()
    )]
    async fn flash_board(
        &self,
        Parameters(req): Parameters<FlashRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let who = self.identity(&ctx)?;
        let task = wants_task(&ctx);
        Ok(flash_call(&self.state, &who, session_id(&ctx), req, &ctx, task).await)
    }
}

/// Why `flash_board` said no before anything ran.
#[derive(Debug, thiserror::Error)]
pub enum FlashRefusal {
    #[error(
        "flash_board is off in this server's configuration (flash.enabled: false); an operator \
         turns it on (docs/CONFIG.md, `flash`). rkdeveloptool, where allowlisted, still works \
         through execute_command"
    )]
    Disabled,
    #[error(
        "board {board:?} is not among the boards flash_board may write (flash.boards: {allowed})"
    )]
    BoardNotAllowed { board: String, allowed: String },
    #[error("client {client:?} may not call flash_board (flash.clients)")]
    ClientNotAllowed { client: String },
    #[error(
        "the loader {path} is not among the loaders this server sends (flash.loaders: {allowed}); \
         pass one of those"
    )]
    LoaderNotAllowed { path: String, allowed: String },
    #[error("the {what} {value:?} cannot be used: {error}")]
    File {
        what: &'static str,
        value: String,
        error: FileArgError,
    },
    #[error("wait_for is not a usable regex: {why}")]
    BadPattern { why: String },
    #[error("timeout_secs must be 1 to {max}; {given} was given")]
    TimeoutOutOfRange { given: u64, max: u64 },
    /// A flash takes one of the client's command slots, as a command does.
    #[error(
        "client {client:?} already runs {max} commands at once (limits.max_concurrent_per_client; \
         a flash counts as one); wait for one to finish, then retry"
    )]
    TooManyRunning { client: String, max: usize },
    /// The approved files are not the bytes the flash would write now.
    #[error("{why}; nothing was written. Call flash_board again to ask for a new approval")]
    ChangedSinceApproval { why: String },
    #[error(transparent)]
    Talk(#[from] TalkRefusal),
}

impl Classified for FlashRefusal {
    fn reason(&self) -> RefusalReason {
        use RefusalReason as R;
        match self {
            FlashRefusal::Disabled => R::NotConfigured,
            FlashRefusal::BoardNotAllowed { .. }
            | FlashRefusal::ClientNotAllowed { .. }
            | FlashRefusal::LoaderNotAllowed { .. } => R::NotPermitted,
            FlashRefusal::File { error, .. } => file_reason(error),
            FlashRefusal::ChangedSinceApproval { .. } => R::ChangedSinceApproval,
            FlashRefusal::BadPattern { .. } => R::InvalidRequest,
            FlashRefusal::TimeoutOutOfRange { .. } => R::TimeoutTooLong,
            FlashRefusal::TooManyRunning { .. } => R::Limit,
            FlashRefusal::Talk(e) => e.reason(),
        }
    }
}

fn file_reason(e: &FileArgError) -> RefusalReason {
    use RefusalReason as R;
    match e {
        e if e.is_symlink() => R::Symlink,
        FileArgError::OutsideRoots { .. } | FileArgError::NoRoots => R::OutsideRoots,
        FileArgError::NotFound { .. } => R::NotFound,
        FileArgError::NotRegular { .. } => R::WrongFileType,
        FileArgError::ParentDir | FileArgError::BadPath { .. } => R::InvalidPath,
        _ => R::IoError,
    }
}

/// An input opened beneath the file roots, as the open file the engine reads.
fn open_input(
    config: &gatecmd_domain::config::Config,
    what: &'static str,
    value: &str,
) -> Result<OpenFile, FlashRefusal> {
    let refused = |error| FlashRefusal::File {
        what,
        value: value.to_string(),
        error,
    };
    let rules = FileRules {
        roots: &config.file_roots,
        allow_hardlinked_inputs: config.allow_hardlinked_inputs,
    };
    let opened = open_file_arg(value, FileKind::Input, rules).map_err(refused)?;
    let fd = opened
        .fd
        .try_clone()
        .map_err(|e| refused(FileArgError::Descriptor { why: e.to_string() }))?;
    Ok(OpenFile {
        file: File::from(fd),
        path: opened.real,
    })
}

/// One of the client's command slots, held until the flash ends (as execute_command's),
/// and the board's key under the caller's lease (with its console when `wait_for` needs
/// one).
async fn take_slot_and_board(
    state: &Arc<AppState>,
    config: &Config,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: &FlashRequest,
    needs_console: bool,
) -> Result<(Permit, Taken), Refusal> {
    let Some(slot) = state.client_slot(&who.name) else {
        return Err(FlashRefusal::TooManyRunning {
            client: who.name.clone(),
            max: config.limits.max_concurrent_per_client,
        }
        .into());
    };
    // The board and its key only: a flash talks to no prompt, so none is compiled.
    let leased = take_leased(
        state,
        config,
        who,
        session,
        &req.board,
        req.lease.as_deref(),
        "flash_board",
    )
    .await?;
    if needs_console && leased.console.is_none() {
        let e = TalkRefusal::NoConsole {
            board: req.board.clone(),
        };
        return Err(FlashRefusal::from(e).into());
    }
    Ok((slot, leased))
}

/// What `flash.` allows: flashing at all, this client, this board, this loader (checked
/// before anything runs, and again after an approval: a reload may have changed them).
fn policy_allows(
    config: &Config,
    who: &ClientIdentity,
    board: &str,
    loader: Option<&OpenFile>,
) -> Result<(), FlashRefusal> {
    let policy = &config.flash;
    if !policy.enabled {
        return Err(FlashRefusal::Disabled);
    }
    if !policy.allows_client(&who.name) {
        return Err(FlashRefusal::ClientNotAllowed {
            client: who.name.clone(),
        });
    }
    // The board's config is looked up only to word a refusal (flash.boards names only
    // configured boards): a call that passes scans it once, when the board is taken.
    if !policy.allows_board(board) && config.board(board).is_some() {
        let allowed = policy.boards.iter().flatten().cloned().collect::<Vec<_>>();
        return Err(FlashRefusal::BoardNotAllowed {
            board: board.to_string(),
            allowed: allowed.join(", "),
        });
    }
    if let Some(l) = loader
        && !policy.allows_loader(&l.path)
    {
        let allowed: Vec<String> = policy
            .loaders
            .iter()
            .flatten()
            .map(|p| p.display().to_string())
            .collect();
        return Err(FlashRefusal::LoaderNotAllowed {
            path: l.path.display().to_string(),
            allowed: allowed.join(", "),
        });
    }
    Ok(())
}

/// The flash's open files as an approval hashes them: image, bmap, loader, each by the
/// path it resolved to, through a descriptor of the very file the engine will read.
fn approval_files(
    image: &OpenFile,
    bmap: Option<&OpenFile>,
    loader: Option<&OpenFile>,
) -> Result<Vec<(String, Arc<OwnedFd>)>, Refusal> {
    std::iter::once(image)
        .chain(bmap)
        .chain(loader)
        .map(|f| {
            let fd = f.file.try_clone().map_err(|e| {
                Refusal::new(
                    RefusalReason::IoError,
                    format!(
                        "{} could not be opened again for the approval: {e}",
                        f.path.display()
                    ),
                )
            })?;
            Ok((f.path.display().to_string(), Arc::new(OwnedFd::from(fd))))
        })
        .collect()
}

/// [`approvals::hash_files`] off the async threads: an image may be gigabytes.
async fn hash_blocking(files: Vec<(String, Arc<OwnedFd>)>) -> Result<Vec<FileDigest>, Refusal> {
    tokio::task::spawn_blocking(move || approvals::hash_files(&files))
        .await
        .unwrap_or_else(|e| {
            Err(Refusal::new(
                RefusalReason::IoError,
                format!("the files could not be hashed for the approval: {e}"),
            ))
        })
}

fn pattern(p: &str) -> Result<Regex, FlashRefusal> {
    if p.is_empty() || p.len() > MAX_PATTERN_LEN {
        return Err(FlashRefusal::BadPattern {
            why: format!("it must be 1 to {MAX_PATTERN_LEN} bytes"),
        });
    }
    RegexBuilder::new(p)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| FlashRefusal::BadPattern { why: e.to_string() })
}

/// `flash_board`.
pub async fn flash_call(
    state: &Arc<AppState>,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: FlashRequest,
    ctx: &RequestContext<RoleServer>,
    task: bool,
) -> CallToolResponse {
    // The `accept` step and the flash's `took_ms` count from here.
    let received = std::time::Instant::now();
    let refuse = |r: Refusal| -> CallToolResponse {
        state.audit.record(&FlashRecord::<Step> {
            client: &who.name,
            board: &req.board,
            image: &req.image,
            outcome: FlashOutcome::Refused {
                reason: r.reason.as_str(),
                message: &r.message,
            },
        });
        refusal(r).into()
    };
    let config = state.config();
    let policy = &config.flash;
    if let Err(e) = policy_allows(&config, who, &req.board, None) {
        return refuse(e.into());
    }
    let max = config.limits.max_timeout_secs;
    let secs = req.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS.min(max));
    if secs == 0 || secs > max {
        return refuse(FlashRefusal::TimeoutOutOfRange { given: secs, max }.into());
    }
    let wait_for = match req.wait_for.as_deref().map(pattern).transpose() {
        Ok(p) => p,
        Err(e) => return refuse(e.into()),
    };
    let (mut slot, mut leased) = match take_slot_and_board(
        state,
        &config,
        who,
        session.clone(),
        &req,
        wait_for.is_some(),
    )
    .await
    {
        Ok(t) => t,
        Err(r) => return refuse(r),
    };
    let opened = (|| -> Result<_, FlashRefusal> {
        let image = open_input(&config, "image", &req.image)?;
        let bmap = req
            .bmap
            .as_deref()
            .map(|b| open_input(&config, "bmap", b))
            .transpose()?;
        let loader = req
            .loader
            .as_deref()
            .map(|l| open_input(&config, "loader", l))
            .transpose()?;
        policy_allows(&config, who, &req.board, loader.as_ref())?;
        Ok((image, bmap, loader))
    })();
    let (image, bmap, loader) = match opened {
        Ok(f) => f,
        Err(e) => return refuse(e.into()),
    };
    if let Some(rule) = approval_rule(
        &config.approvals,
        Gated::Tool {
            tool: GatedTool::FlashBoard,
            action: "flash",
        },
        &[&leased.board],
    ) {
        // Every check that can refuse has passed and nothing was done to the board. As for
        // every approval, nothing is held while a person decides (the board's key and the
        // command slot go back; the lease stays the caller's); after the yes both are taken
        // again and only the bytes approved are flashed.
        let files = match approval_files(&image, bmap.as_ref(), loader.as_ref()) {
            Ok(f) => f,
            Err(r) => return refuse(r),
        };
        let approved = match hash_blocking(files.clone()).await {
            Ok(d) => d,
            Err(r) => return refuse(r),
        };
        let mut what = format!("flash_board {} {}", req.board, image.path.display());
        for (name, f) in [("bmap", &bmap), ("loader", &loader)] {
            if let Some(f) = f {
                what.push_str(&format!(" {name} {}", f.path.display()));
            }
        }
        let spec = NewRequest {
            client: who.name.clone(),
            note: req.note.clone(),
            tool: "flash_board".into(),
            what,
            argv: None,
            board: Some(req.board.clone()),
            holder: approvals::board_holder(state, &req.board),
            files: approved.clone(),
            rule: rule.describe(),
            approvers: rule.by.clone(),
            timeout: rule.timeout,
            job: None,
        };
        let key = LockKey::Board(req.board.clone());
        let lease = req.lease.clone().map(LeaseId);
        let watch = approvals::LeaseWatch::find(state, std::slice::from_ref(&key), lease.as_ref());
        drop((slot, leased));
        if let Err(r) = approvals::wait_in_call(state, spec, watch, ctx).await {
            return refuse(r);
        }
        // A reload while it waited may have taken the permission away.
        let now = state.config();
        if let Err(e) = policy_allows(&now, who, &req.board, loader.as_ref()) {
            return refuse(e.into());
        }
        (slot, leased) =
            match take_slot_and_board(state, &now, who, session, &req, wait_for.is_some()).await {
                Ok(t) => t,
                Err(r) => return refuse(r),
            };
        let now = tokio::task::spawn_blocking(move || approvals::files_changed(&approved, &files))
            .await
            .unwrap_or_else(|e| Some(format!("the files could not be hashed again: {e}")));
        if let Some(why) = now {
            return refuse(FlashRefusal::ChangedSinceApproval { why }.into());
        }
    }
    let inputs = Inputs {
        board: leased.board.clone(),
        console: leased.console.clone(),
        image,
        bmap,
        loader,
        wait_for,
        timeout: Duration::from_secs(secs),
        journal_dir: policy.journal_dir(&config.state_dir),
        transfer_blocks: policy.transfer_blocks(),
        device_wait: Duration::from_secs(policy.device_wait_secs),
        received,
        client: who.name.clone(),
    };
    // A task-augmented call (the client declared the tasks extension) is answered with a
    // task at once, `background` or not (as execute_command's job-shaped calls): the task
    // id is the job's.
    let origin = match (task, req.background) {
        (true, _) => Origin::Task,
        (false, true) => Origin::Background,
        (false, false) => Origin::Foreground,
    };
    let job = state.jobs.start(JobSpec {
        client: who.name.clone(),
        command: "flash_board".into(),
        argv: vec!["flash_board".into(), req.board.clone(), req.image.clone()],
        lock_keys: vec![format!("board:{}", req.board)],
        device: Some(leased.board.usb.to_string()),
        board: Some(req.board.clone()),
        timeout_secs: secs,
        uncancellable: false,
        origin,
    });
    // The bench page's "running" row, with the flash's percentage.
    let row = Arc::new(state.running.start(NewRun {
        client: who.name.clone(),
        command: "flash_board".into(),
        argv: vec![
            "flash_board".into(),
            req.board.clone(),
            inputs.image.path.display().to_string(),
        ],
        device: Some(leased.board.usb.to_string()),
        board: Some(req.board.clone()),
        progress: None,
    }));
    row.set_job(&job.id.0);
    state
        .audit
        .record(&JobRecord::started(&who.name, &job.id.0, origin.as_str()));
    // Progress notifications for a waiting call that asked for them.
    let reporter = (origin == Origin::Foreground)
        .then(|| ctx.meta.get_progress_token())
        .flatten()
        .and_then(|token| {
            let re = Regex::new(PERCENT).ok()?;
            let sink = Sink {
                peer: ctx.peer.clone(),
                token,
            };
            Some(progress::spawn_reporter(sink, Some(re)))
        });
    let task = FlashTask {
        state: state.clone(),
        job: job.clone(),
        client: who.name.clone(),
        inputs,
        reporter,
        // The board key (under the caller's lease) lives as long as the flash.
        guard: leased.guard,
        slot,
        row,
    };
    let watched = job.clone();
    let jobs = state.jobs.clone();
    let handle = tokio::spawn(task.run());
    // A task that panicked leaves no outcome: the job is `lost`, not running forever.
    tokio::spawn(async move {
        if let Err(e) = handle.await {
            jobs.finish(
                &watched,
                JobState::Lost,
                JobEnd {
                    stop_reason: Some(format!("the flash's task ended without an outcome: {e}")),
                    ..JobEnd::default()
                },
            );
        }
    });
    if origin == Origin::Task {
        return crate::calls::jobs::task_handle(&job);
    }
    if origin == Origin::Background {
        let result = FlashResult {
            board: req.board.clone(),
            job: job.id.0.clone(),
            state: JobState::Running,
            steps: vec![],
            verified: false,
            flashed: None,
            failure: None,
        };
        let text = format!(
            "flashing {} to board {} as job {}; follow it with wait_job {{\"job\": \"{}\"}} \
             (each wait returns after at most 110 s; the final result is in its `result`), \
             stop it with cancel_job.",
            req.image, req.board, job.id, job.id
        );
        return structured(&result, text).into();
    }
    wait_foreground(state, &job, ctx).await.into()
}

/// What the flash's task takes with it.
struct FlashTask {
    state: Arc<AppState>,
    job: Arc<Job>,
    client: String,
    inputs: Inputs,
    reporter: Option<(progress::Tap, tokio::task::JoinHandle<()>)>,
    guard: gatecmd_domain::locks::CommandGuard,
    /// The client's command slot, given back when the flash ends.
    slot: Permit,
    /// The page's row; gone when the last holder (this task, the events) drops it.
    row: Arc<RunGuard>,
}

impl FlashTask {
    async fn run(self) {
        let FlashTask {
            state,
            job,
            client,
            inputs,
            reporter,
            guard,
            slot,
            row,
        } = self;
        let config = state.config();
        let board = inputs.board.name.clone();
        let image = inputs.image.path.display().to_string();
        let (tap_tx, mut tap_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let events: gatecmd_domain::flash::Events = {
            let job = job.clone();
            let jobs = state.jobs.clone();
            let row = row.clone();
            Arc::new(move |e: Event| {
                let line = match &e {
                    Event::Started(s) => format!("step {s} ..."),
                    Event::Done(r) => format!("step {} done in {} ms: {}", r.step, r.ms, r.detail),
                    Event::Bytes(b) => {
                        let t = gatecmd_domain::jobs::Transfer {
                            step: b.step.as_str().to_string(),
                            bytes_done: b.done,
                            bytes_total: b.total,
                            rate_bytes_per_s: b.rate.round(),
                            eta_secs: b.eta_secs.map(|s| (s * 10.0).round() / 10.0),
                        };
                        row.set_transfer(t.clone());
                        job.set_transfer(t);
                        row.set_progress(b.overall_percent());
                        if job.set_progress(b.overall_percent()) {
                            jobs.changed(&job.id);
                        }
                        b.line()
                    }
                };
                job.push_line(false, &line);
                let _ = tap_tx.send(line);
            })
        };
        // Lines reach the progress reporter from any thread through the channel.
        let forward = tokio::spawn(async move {
            let mut reporter = reporter;
            while let Some(line) = tap_rx.recv().await {
                if let Some((tap, _)) = &reporter {
                    tap.offer(&line);
                }
            }
            if let Some((tap, mut done)) = reporter.take() {
                drop(tap);
                if tokio::time::timeout(Duration::from_secs(1), &mut done)
                    .await
                    .is_err()
                {
                    done.abort();
                }
            }
        });
        let outcome = gatecmd_domain::flash::flash(
            &state,
            &config,
            inputs,
            job.cancel_token(),
            events.clone(),
        )
        .await;
        // The board key, the client's slot and the page's row go once the work is over.
        drop(guard);
        drop(events);
        drop(row);
        drop(slot);
        let _ = forward.await;
        let (job_state, result, text) = match outcome {
            Ok(f) => {
                audit_flash(&state.audit, &client, &job, &f);
                let verified = match f.verification.as_str() {
                    "read_back" => "verified it".to_string(),
                    _ => format!(
                        "verified {} of {} bytes ({}: {})",
                        f.verified_bytes,
                        f.verified_bytes + f.unverified_bytes,
                        f.verification,
                        f.steps
                            .iter()
                            .find(|s| s.step == Step::Verify)
                            .map(|s| s.detail.as_str())
                            .unwrap_or_default()
                    ),
                };
                let text = format!(
                    "flashed {} to board {} and {verified}: {} written, {} skipped (resumed), \
                     verify {} ms, {} in all ({} ms){}",
                    f.image.path,
                    f.board,
                    f.written.bytes_written,
                    f.written.bytes_skipped,
                    f.verify_ms,
                    f.board_state,
                    f.took_ms,
                    f.boot_log
                        .as_ref()
                        .map(|l| format!("\nboot log:\n{l}"))
                        .unwrap_or_default()
                );
                let r = FlashResult {
                    board: board.clone(),
                    job: job.id.0.clone(),
                    state: JobState::Succeeded,
                    steps: f.steps.clone(),
                    verified: f.verified,
                    flashed: Some(f),
                    failure: None,
                };
                (JobState::Succeeded, r, text)
            }
            Err(failed) => {
                let st = match &failed.failure {
                    FlashFailure::Cancelled { .. } => JobState::Cancelled,
                    FlashFailure::TimedOut { .. } => JobState::TimedOut,
                    _ => JobState::Failed,
                };
                audit_failure(&state.audit, &client, &job, &board, &image, &failed);
                let view = failure_view(&failed);
                let text = format!(
                    "flash_board {} failed at step {}: {}\nseen: {}{}\nthe board is left: {}\nnext: {}",
                    board,
                    view.step,
                    view.message,
                    view.seen.device,
                    view.seen
                        .console_last_line
                        .as_ref()
                        .map(|l| format!(", console: {l:?}"))
                        .unwrap_or_default(),
                    view.board_state,
                    view.next_action
                );
                let r = FlashResult {
                    board: board.clone(),
                    job: job.id.0.clone(),
                    state: st,
                    steps: failed.steps,
                    verified: false,
                    flashed: None,
                    failure: Some(view),
                };
                (st, r, text)
            }
        };
        job.push_line(false, text.lines().next().unwrap_or_default());
        let call = if job_state == JobState::Succeeded {
            structured(&result, text)
        } else {
            structured_error(&result, text)
        };
        let stop_reason = result.failure.as_ref().map(|f| f.message.clone());
        let elapsed = job.view().elapsed_ms;
        crate::calls::jobs::end_job(
            &state.jobs,
            &state.audit,
            &job,
            job_state,
            JobEnd {
                duration_ms: elapsed,
                stop_reason,
                ended_by: (job_state == JobState::TimedOut).then(|| "timeout".to_string()),
                result: serde_json::to_value(&call).ok(),
                ..JobEnd::default()
            },
        );
    }
}

fn failure_view(f: &Failed) -> FailureView {
    FailureView {
        step: f.step,
        message: f.failure.to_string(),
        seen: f.seen.clone(),
        board_state: f.board_state.clone(),
        bytes_written: f.bytes_written,
        next_action: f.failure.next_action(),
        console_cursor: f.console_cursor,
    }
}

fn timings(steps: &[StepRecord]) -> Vec<StepMs<Step>> {
    steps
        .iter()
        .map(|s| StepMs {
            step: s.step,
            ms: s.ms,
        })
        .collect()
}

/// The audit line of a flash that ended: what was written where, verified, and how long
/// each step took.
fn audit_flash(audit: &Audit, client: &str, job: &Job, f: &Flashed) {
    audit.record(&FlashRecord {
        client,
        board: &f.board,
        image: &f.image.path,
        outcome: FlashOutcome::Flashed(Box::new(audit::Flashed {
            job: &job.id.0,
            image_sha256: f.image.sha256.as_deref(),
            bmap: f.bmap.as_ref().map(|b| b.path.as_str()),
            loader: f.loader.as_ref().map(|l| l.path.as_str()),
            loader_sha256: f.loader.as_ref().and_then(|l| l.sha256.as_deref()),
            ranges: &f.written.ranges,
            ranges_total: f.written.ranges_total,
            bytes_written: f.written.bytes_written,
            bytes_skipped: f.written.bytes_skipped,
            verified: f.verified,
            verification: &f.verification,
            verified_bytes: f.verified_bytes,
            unverified_bytes: f.unverified_bytes,
            bmap_sha256: f.bmap.as_ref().and_then(|b| b.sha256.as_deref()),
            steps: timings(&f.steps),
            took_ms: f.took_ms,
        })),
    });
}

fn audit_failure(audit: &Audit, client: &str, job: &Job, board: &str, image: &str, f: &Failed) {
    let ended = Ended {
        job: &job.id.0,
        step: f.step,
        message: f.failure.to_string(),
        bytes_written: f.bytes_written,
        verified: false,
        board_state: &f.board_state,
        steps: timings(&f.steps),
    };
    audit.record(&FlashRecord {
        client,
        board,
        image,
        outcome: if f.failure.is_cancel() {
            FlashOutcome::Cancelled(ended)
        } else {
            FlashOutcome::Failed(ended)
        },
    });
}

/// A waiting call: answers with the flash's result; when the client gives up, the flash
/// runs on as a job and the answer (which nobody reads) says so.
async fn wait_foreground(
    state: &AppState,
    job: &Arc<Job>,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    if let Err(gave_up) = crate::calls::jobs::wait_or_detach(state, job, ctx).await {
        return gave_up;
    }
    let v = job.view();
    let answer = v
        .end
        .result
        .and_then(|r| serde_json::from_value::<CallToolResult>(r).ok())
        .unwrap_or_else(|| {
            structured_error(
                &serde_json::json!({"job": job.id.0}),
                format!(
                    "job {} ended without a result: {}",
                    job.id,
                    v.end.stop_reason.unwrap_or_default()
                ),
            )
        });
    // Answered: nobody needs the handle.
    state.jobs.forget(&job.id);
    answer
}
