//! `flash_board {board, image, bmap?, loader?, wait_for?, background?, timeout_secs?, note?}`: a
//! leased board from whatever state it is in to the image written, verified and booted,
//! natively over rockusb. The work is gatecmd-domain's `usecases::flash` (the checks, an
//! approval's hashes and re-check, the job, the audit); this file holds the request, the
//! answer, the refusals' wording and the MCP side: the approval round trip
//! (`calls::approvals`), progress notifications, the foreground wait that continues as a
//! job when the client gives up (`calls::jobs`), the task handle.

use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResponse;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::{refusal, structured};
use crate::calls::approvals::{self, LeaseWatch};
use crate::calls::progress;
use crate::handler::{GatecmdServer, session_id, wants_task};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::approvals::NewRequest;
use gatecmd_domain::flash::{Flashed, Seen, Step, StepRecord};
use gatecmd_domain::jobs::{Job, JobState, Origin};
use gatecmd_domain::locks::{LeaseId, LockKey, SessionId};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::flash::{self as usecase, Ask, Progress};
pub use loader_arg::LoaderArg;
pub use refusal::FlashRefusal;
use refusal::worded;
use render::render;

mod loader_arg;
mod refusal;
mod render;

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
    /// The Rockchip loader, needed when the board is (or is put) in MaskROM mode and its
    /// config names no DDR + usbplug pair: a packed loader's path (rkbin's
    /// *_spl_loader_*.bin, sent as rkdeveloptool db does), or {ddr, usbplug}: rkbin's DDR
    /// init blob and usbplug (sent as 0x471 then 0x472, as xrock maskrom does), whose reads
    /// verify the whole image on an RK3588.
    #[serde(default)]
    pub loader: Option<LoaderArg>,
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
        if let Some(r) = remote(&self.state, &who, &req, &ctx).await {
            return Ok(r.into());
        }
        let task = wants_task(&ctx);
        Ok(flash_call(&self.state, &who, session_id(&ctx), req, &ctx, task).await)
    }
}

/// A flash of `HOST/BOARD`, on that host (`lab::flash`); `None` for this host's board. A
/// task-augmented call on a remote board is answered as a foreground one.
async fn remote(
    state: &AppState,
    who: &ClientIdentity,
    req: &FlashRequest,
    ctx: &RequestContext<RoleServer>,
) -> Option<rmcp::model::CallToolResult> {
    crate::lab::names::remote(&req.board)?;
    let args = serde_json::json!({
        "loader": req.loader, "wait_for": req.wait_for,
        "timeout_secs": req.timeout_secs, "note": req.note,
    });
    let ask = crate::lab::flash::RemoteFlash {
        board: &req.board,
        lease: req.lease.as_deref(),
        image: &req.image,
        bmap: req.bmap.as_deref(),
        background: req.background,
        timeout_secs: req.timeout_secs,
        args,
    };
    crate::lab::flash::remote_flash(state, who, ask, ctx).await
}

/// The approval round trip of an MCP call: it waits in the call, telling the client who
/// it waits for; the client cancelling it withdraws the request.
struct InCall<'a> {
    state: &'a AppState,
    ctx: &'a RequestContext<RoleServer>,
}

impl usecase::Approve for InCall<'_> {
    async fn approve(
        &self,
        request: NewRequest,
        key: LockKey,
        lease: Option<LeaseId>,
    ) -> Result<String, Refusal> {
        let watch = LeaseWatch::find(self.state, std::slice::from_ref(&key), lease.as_ref());
        approvals::wait_in_call_for_id(self.state, request, watch, self.ctx).await
    }
}

/// Progress notifications for a waiting call that asked for them: the lines' percentages,
/// the last one delivered (within a second) before the answer.
fn notifications(origin: Origin, ctx: &RequestContext<RoleServer>) -> Progress {
    let reporter = (origin == Origin::Foreground)
        .then(|| progress::for_request(ctx, Regex::new(PERCENT).ok()))
        .flatten();
    let Some((tap, mut done)) = reporter else {
        return Progress::default();
    };
    Progress {
        line: Some(Box::new(move |line: &str| {
            tap.offer(line);
        })),
        flushed: Some(Box::pin(async move {
            if tokio::time::timeout(Duration::from_secs(1), &mut done)
                .await
                .is_err()
            {
                done.abort();
            }
        })),
    }
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
    let ask = Ask {
        tool: "flash_board",
        client: who.name.clone(),
        session,
        lease: req.lease,
        board: req.board,
        image: req.image,
        bmap: req.bmap,
        loader: req.loader.as_ref().and_then(LoaderArg::packed),
        usbplug: req.loader.and_then(LoaderArg::pair),
        wait_for: req.wait_for,
        timeout_secs: req.timeout_secs,
        note: req.note,
        // The `accept` step and the flash's `took_ms` count from here.
        received: std::time::Instant::now(),
    };
    let prepared = match usecase::prepare(state, &ask, &InCall { state, ctx }).await {
        Ok(p) => p,
        Err(e) => {
            let r = worded(e, &ask);
            usecase::audit_refused(state, &ask, r.reason.as_str(), &r.message);
            return refusal(r).into();
        }
    };
    // A task-augmented call (the client declared the tasks extension) is answered with a
    // task at once, `background` or not (as execute_command's job-shaped calls): the task
    // id is the job's.
    let origin = match (task, req.background) {
        (true, _) => Origin::Task,
        (false, true) => Origin::Background,
        (false, false) => Origin::Foreground,
    };
    let progress = notifications(origin, ctx);
    let job = usecase::launch(state, &ask, origin, prepared, progress, render);
    match origin {
        Origin::Task => crate::calls::jobs::task_handle(&job),
        Origin::Background => {
            let text = format!(
                "flashing {} to board {} as job {}; follow it with wait_job {{\"job\": \"{}\"}} \
                 (each wait returns after at most 110 s; the final result is in its `result`), \
                 stop it with cancel_job.",
                ask.image, ask.board, job.id, job.id
            );
            structured(&FlashResult::of(&job, JobState::Running), text).into()
        }
        _ => crate::calls::jobs::wait_foreground(state, &job, ctx)
            .await
            .into(),
    }
}

impl FlashResult {
    /// The answer's frame: no step, nothing verified, flashed or failed yet.
    fn of(job: &Job, state: JobState) -> FlashResult {
        FlashResult {
            board: job.spec.board.clone().unwrap_or_default(),
            job: job.id.0.clone(),
            state,
            steps: vec![],
            verified: false,
            flashed: None,
            failure: None,
        }
    }
}
