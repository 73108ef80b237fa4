//! `lock_board`: a lease on a named board, or on the first free board of a match, with
//! waiters for a match served in arrival order across every matching board
//! (docs/BOARDS.md). The work is the domain's (`gatecmd_domain::usecases::lease::board`); this
//! file holds the request, the answer and the wording.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::{refusal, structured};
use crate::calls::reasons::lock_reason;
use crate::handler::{GatecmdServer, session_id};
use crate::lab::queued_here::{lab_wait, register, settle};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::common::{UnknownBoard, WaitTooLong};
use gatecmd_core::refusal::{Classified, RefusalReason};
use gatecmd_domain::boards::{BoardMatch, QueueFull};
use gatecmd_domain::locks::{LockError, MAX_WAIT_SECS, SessionId};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::lease::Ask;
use gatecmd_domain::usecases::lease::board::{
    Hold, LeaseError, Leased, Which, lease_board_arrived,
};

/// Arguments of `lock_board`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LockBoardRequest {
    /// A board name from list_boards.
    #[serde(default)]
    pub board: Option<String>,
    /// Or any board with these tags (e.g. {"soc": "rk3588"}), optionally `mode`
    /// ("maskrom"/"loader") and `attached` (true/false): the first free one is leased;
    /// with wait_secs, requests queue in arrival order for the first matching board freed.
    #[serde(default, rename = "match")]
    pub matches: Option<BoardMatch>,
    /// Lease lifetime in seconds (default from the server's config); renewed by each command
    /// run under the lease.
    #[serde(default)]
    pub ttl_secs: Option<u64>,
    /// How long to queue if no board is free (default 0: answer at once).
    #[serde(default)]
    pub wait_secs: Option<u64>,
    /// Shown to others who find the board busy.
    #[serde(default)]
    pub note: Option<String>,
    /// "lab": a free matching board here first, else on another host of the lab
    /// (answered with `host`; a remote board and lease as HOST/NAME). Default "host".
    #[serde(default)]
    pub scope: Option<crate::lab::scope::Scope>,
}

impl LockBoardRequest {
    /// What the lab module needs of it.
    fn lab_ask(&self) -> crate::lab::lock::LockAsk<'_> {
        crate::lab::lock::LockAsk {
            scope: self.scope,
            board: self.board.as_deref(),
            matches: self.matches.as_ref(),
            ttl_secs: self.ttl_secs,
            note: self.note.as_deref(),
            wait_secs: self.wait_secs,
        }
    }

    /// The same request on this host alone, waiting `wait_secs` (0: one try) in its queue
    /// (a lab-wide lock's part here).
    pub fn local(&self, wait_secs: u64) -> LockBoardRequest {
        LockBoardRequest {
            board: self.board.clone(),
            matches: self.matches.clone(),
            ttl_secs: self.ttl_secs,
            wait_secs: (wait_secs > 0).then_some(wait_secs),
            note: self.note.clone(),
            scope: None,
        }
    }
}

/// Result of `lock_board` (or a refusal in its place).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct BoardLeaseResult {
    /// Pass this as `lease` with execute_command and power_board; end it with unlock_device.
    pub lease_id: String,
    pub board: String,
    /// `board:NAME`.
    pub key: String,
    pub holder: String,
    #[schemars(with = "String")]
    pub expires_at: DateTime<Utc>,
    pub ttl_secs: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The device at the board's usb port when the lease was taken (its id), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Keys the lease holds shared: the board's `port:` key and the VID:PID (or group) key
    /// of the device at its port, so that nobody else's command or lease reaches the board.
    pub shared_keys: Vec<String>,
}

#[tool_router(router = lock_board_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Leases a board (by name, or the first free one of a match).
    #[tool(
        description = "Lease a board: its flashing USB port (whatever enumerates there, in any mode), its \
                       console and its power switch, under one lease. Give board (a name from list_boards) or \
                       match ({soc: \"rk3588\", mode?: maskrom|loader, attached?: bool, other tags...}) for the \
                       first free matching board; wait_secs queues in arrival order for the first one freed. \
                       Returns lease_id, key and expires_at: pass lease_id as lease to the board tools \
                       (power_board, flash_board, boot_board, board_run, uboot_run, execute_command \
                       {board}); release with unlock_device.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<BoardLeaseResult>()
    )]
    async fn lock_board(
        &self,
        Parameters(req): Parameters<LockBoardRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        if let Some(ask) = crate::lab::lock::lab_ask(&who, req.lab_ask()) {
            let local = |wait| lock(&self.state, &who, session_id(&ctx), req.local(wait), &ctx);
            return Ok(crate::lab::lock::lab_lock(&self.state, ask, &ctx.ct, local).await);
        }
        Ok(lock(&self.state, &who, session_id(&ctx), req, &ctx).await)
    }
}

/// Why `lock_board` said no.
#[derive(Debug, thiserror::Error)]
pub enum LockBoardError {
    #[error(transparent)]
    WaitTooLong(#[from] WaitTooLong),
    #[error("give either board (a name from list_boards) or match (e.g. {{\"soc\": \"rk3588\"}})")]
    BoardOrMatch,
    #[error(transparent)]
    UnknownBoard(#[from] UnknownBoard),
    #[error("no configured board has {tags}; list_boards shows every board and its tags")]
    NoneTagged { tags: String },
    #[error("{0}")]
    QueueFull(#[from] QueueFull),
    /// No matching board came free in time; `holds` says who holds each.
    #[error(
        "{} {what} {}{}{}; {queued} other match request(s) queued. Pass wait_secs to queue (served in arrival order), or list_boards to see every board.",
        if holds.is_empty() { "no board has" } else { "every board with" },
        if holds.is_empty() { "now" } else { "is in use" },
        if *waited_secs > 0 { format!(" (waited {waited_secs} s)") } else { String::new() },
        holds.iter().map(|h| format!("; {h}")).collect::<String>()
    )]
    AllBusy {
        what: String,
        waited_secs: u64,
        holds: Vec<String>,
        queued: usize,
    },
    #[error("cancelled while waiting for a board")]
    Cancelled,
    #[error("{0}")]
    Lock(#[from] LockError),
}

impl Classified for LockBoardError {
    fn reason(&self) -> RefusalReason {
        match self {
            LockBoardError::WaitTooLong(e) => e.reason(),
            LockBoardError::BoardOrMatch => RefusalReason::InvalidRequest,
            LockBoardError::UnknownBoard(e) => e.reason(),
            LockBoardError::NoneTagged { .. } => RefusalReason::NotFound,
            LockBoardError::QueueFull(_) => RefusalReason::Limit,
            LockBoardError::AllBusy { .. } => RefusalReason::DeviceBusy,
            LockBoardError::Cancelled => RefusalReason::Cancelled,
            LockBoardError::Lock(e) => lock_reason(e),
        }
    }
}

/// `lock_board`.
pub async fn lock(
    state: &AppState,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: LockBoardRequest,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let wait = match WaitTooLong::check(req.wait_secs.unwrap_or(0), MAX_WAIT_SECS) {
        Ok(w) => w,
        Err(e) => return refusal(LockBoardError::from(e).into()),
    };
    let which = match (&req.board, &req.matches) {
        (Some(name), None) => Which::Named(name),
        (None, Some(m)) => Which::Matching(m),
        (Some(_), Some(_)) | (None, None) => return refusal(LockBoardError::BoardOrMatch.into()),
    };
    let ask = Ask {
        client: &who.name,
        session,
        ttl: req.ttl_secs.map(Duration::from_secs),
        note: req.note.as_deref(),
        wait,
    };
    let lab_wait = lab_wait(ctx).filter(|_| !wait.is_zero());
    let registered = match register(state, &who.name, lab_wait.as_ref(), &ctx.ct) {
        Ok(r) => r,
        Err(e) => return refusal(e),
    };
    let ct = registered.as_ref().map_or(&ctx.ct, |r| &r.token);
    let arrived = lab_wait.as_ref().map(|w| w.arrived_ms);
    let leased = lease_board_arrived(state, &ask, which, ct, arrived).await;
    match leased.map_err(|e| LockBoardError::from(e).into()) {
        Ok(l) => settle(state, who, lab_wait.as_ref(), l)
            .await
            .map_or_else(refusal, answer),
        Err(r) => refusal(r),
    }
}

impl From<LeaseError> for LockBoardError {
    fn from(e: LeaseError) -> Self {
        match e {
            LeaseError::UnknownBoard(e) => e.into(),
            LeaseError::NoneTagged { tags } => LockBoardError::NoneTagged { tags },
            LeaseError::QueueFull(e) => e.into(),
            LeaseError::AllBusy {
                what,
                waited,
                holds,
                queued,
            } => LockBoardError::AllBusy {
                what,
                waited_secs: waited.as_secs(),
                holds: holds.iter().map(held_by).collect(),
                queued,
            },
            LeaseError::Cancelled => LockBoardError::Cancelled,
            LeaseError::Lock(e) => e.into(),
        }
    }
}

/// Who holds a board a match wanted: its lease (holder, since, time left, note), or a
/// command or a port lease.
fn held_by(h: &Hold) -> String {
    match &h.lease {
        Some(l) => format!(
            "{}: leased by {} since {}, {} s left{}",
            h.board,
            l.holder.0,
            l.acquired_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            (l.expires_at - Utc::now()).num_seconds().max(0),
            l.note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ),
        None => format!("{}: in use by a command or a port lease", h.board),
    }
}

fn answer(leased: Leased) -> CallToolResult {
    let info = leased.info;
    let r = BoardLeaseResult {
        lease_id: info.lease_id.0.clone(),
        board: leased.board.name.clone(),
        key: info.key.to_string(),
        holder: info.holder.0.clone(),
        expires_at: info.expires_at,
        ttl_secs: info.ttl_secs,
        note: info.note.clone(),
        device: leased.device,
        shared_keys: leased.shared_keys.iter().map(|k| k.to_string()).collect(),
    };
    let text = format!(
        "lease {} on board {} ({}) for {}; expires at {} unless renewed (each command under the lease renews it for {} s).\n\
         Pass lease: \"{}\" with the board tools (power_board, flash_board, boot_board, board_run, uboot_run, \
         execute_command {{board: \"{}\"}}); release with unlock_device.",
        r.lease_id,
        r.board,
        r.device
            .as_deref()
            .map(|d| format!("device {d} attached"))
            .unwrap_or_else(|| "nothing attached at its port".into()),
        r.holder,
        r.expires_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        r.ttl_secs,
        r.lease_id,
        r.board
    );
    structured(&r, text)
}
