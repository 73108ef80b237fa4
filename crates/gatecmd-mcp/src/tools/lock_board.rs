//! `lock_board`: a lease on a named board, or on the first free board of a match, with
//! waiters for a match served in arrival order across every matching board
//! (docs/BOARDS.md).

use std::time::Duration;

use chrono::{DateTime, Utc};
use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::calls::answer::{refusal, structured};
use crate::calls::reasons::{lock_reason, unknown_board};
use crate::server::handler::{GatecmdServer, session_id};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::common::{UnknownBoard, WaitTooLong};
use gatecmd_core::refusal::{Classified, RefusalReason};
use gatecmd_domain::boards::{BoardMatch, QueueFull, lease_shared_keys};
use gatecmd_domain::config::{BoardConfig, Config};
use gatecmd_domain::locks::{
    ClientName, LeaseInfo, LeaseRequest, LockError, LockKey, MAX_WAIT_SECS, SessionId,
};
use gatecmd_domain::state::AppState;

/// How often a match waiter looks again when nothing told it to: a device arriving in the
/// asked mode is a registry change, not a lock event.
const RECHECK: Duration = Duration::from_millis(500);

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
                       Pass the lease_id as lease to execute_command {board} and power_board; release with \
                       unlock_device.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<BoardLeaseResult>()
    )]
    async fn lock_board(
        &self,
        Parameters(req): Parameters<LockBoardRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
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
        "{} {what} {}{}{}; {queued} match request(s) queued. Pass wait_secs to queue (served in arrival order), or list_boards to see every board.",
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

/// The lease request for `board`: `board:NAME`, holding its port key and the key of the
/// device at its port shared (`lease_shared_keys`).
fn board_lease_request(
    state: &AppState,
    config: &Config,
    board: &BoardConfig,
    client: &ClientName,
    session: Option<SessionId>,
    req: &LockBoardRequest,
    wait: Duration,
) -> LeaseRequest {
    LeaseRequest {
        key: LockKey::Board(board.name.clone()),
        client: client.clone(),
        session,
        ttl: req.ttl_secs.map(Duration::from_secs),
        note: req.note.clone().filter(|n| !n.trim().is_empty()),
        wait,
        shared: lease_shared_keys(config, board, state.registry.get(&board.usb).as_ref()),
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
    match lock_inner(state, who, session, &req, ctx).await {
        Ok((board, info)) => answer(state, &board, &info),
        Err(e) => refusal(e.into()),
    }
}

async fn lock_inner(
    state: &AppState,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: &LockBoardRequest,
    ctx: &RequestContext<RoleServer>,
) -> Result<(BoardConfig, LeaseInfo), LockBoardError> {
    let wait = WaitTooLong::check(req.wait_secs.unwrap_or(0), MAX_WAIT_SECS)?;
    let config = state.config();
    let client = ClientName(who.name.clone());
    match (&req.board, &req.matches) {
        (Some(_), Some(_)) | (None, None) => Err(LockBoardError::BoardOrMatch),
        (Some(name), None) => {
            let Some(board) = config.board(name) else {
                return Err(unknown_board(&config, name).into());
            };
            let lease = board_lease_request(state, &config, board, &client, session, req, wait);
            tokio::select! {
                r = state.locks.lock(lease) => Ok((board.clone(), r?)),
                _ = ctx.ct.cancelled() => Err(LockBoardError::Cancelled),
            }
        }
        (None, Some(m)) => {
            let tagged: Vec<&BoardConfig> = config
                .boards
                .iter()
                .filter(|b| tags_only(m).matches(b, state.registry.get(&b.usb).as_ref()))
                .collect();
            // With a wait, a board without a soc tag may still show one when its device
            // enumerates; without one, say plainly that nothing is configured so.
            if tagged.is_empty() && wait.is_zero() {
                return Err(LockBoardError::NoneTagged {
                    tags: tags_only(m).describe(),
                });
            }
            tokio::select! {
                r = by_match(state, &client, session, req, m, wait) => r,
                _ = ctx.ct.cancelled() => Err(LockBoardError::Cancelled),
            }
        }
    }
}

/// `m` without its mode and attachment conditions: what the configuration alone decides.
fn tags_only(m: &BoardMatch) -> BoardMatch {
    BoardMatch {
        tags: m.tags.clone(),
        ..BoardMatch::default()
    }
}

/// The first free board of `m`, queueing fairly with other match requests up to `wait`.
async fn by_match(
    state: &AppState,
    client: &ClientName,
    session: Option<SessionId>,
    req: &LockBoardRequest,
    m: &BoardMatch,
    wait: Duration,
) -> Result<(BoardConfig, LeaseInfo), LockBoardError> {
    let deadline = Instant::now() + wait;
    let max_waiters = state.locks.settings().max_waiters_per_client;
    // Joined with what it wants now, so that a request arriving just after it cannot
    // take those boards before its first look.
    let wanted = matching_boards(state, &state.config(), m);
    let ticket = state
        .boards
        .queue
        .join(&client.0, wanted, max_waiters.max(1))?;
    loop {
        // Subscribed before looking, so that a change in between wakes the wait below.
        let mut events = state.locks.subscribe();
        let changed = ticket.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let config = state.config();
        let matching: Vec<&BoardConfig> = config
            .boards
            .iter()
            .filter(|b| m.matches(b, state.registry.get(&b.usb).as_ref()))
            .collect();
        let mine = ticket.mine(matching_boards(state, &config, m));
        for board in matching.iter().filter(|b| mine.contains(&b.name)) {
            if !looks_free(state, board) {
                continue;
            }
            let lease = board_lease_request(
                state,
                &config,
                board,
                client,
                session.clone(),
                req,
                Duration::ZERO,
            );
            match state.locks.lock(lease).await {
                Ok(info) => return Ok(((*board).clone(), info)),
                // Taken in between, or this client holds it already: try the next one.
                Err(LockError::Busy(_) | LockError::AlreadyHeld { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        if Instant::now() >= deadline {
            return Err(all_busy(state, &matching, m, wait));
        }
        tokio::select! {
            _ = next_change(&mut events) => {}
            _ = changed => {}
            _ = tokio::time::sleep(RECHECK) => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
    }
}

/// The names of the boards `m` matches now, in config order.
fn matching_boards(state: &AppState, config: &Config, m: &BoardMatch) -> Vec<String> {
    config
        .boards
        .iter()
        .filter(|b| m.matches(b, state.registry.get(&b.usb).as_ref()))
        .map(|b| b.name.clone())
        .collect()
}

/// The next lock event that may have freed something: refusals (ours among them) do not.
async fn next_change(
    events: &mut tokio::sync::broadcast::Receiver<gatecmd_domain::locks::LockEvent>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match events.recv().await {
            Ok(ev) if ev.kind == gatecmd_domain::locks::LockEventKind::Refused => continue,
            Ok(_) | Err(RecvError::Lagged(_)) => return,
            // No more events: the periodic look is all there is.
            Err(RecvError::Closed) => return std::future::pending().await,
        }
    }
}

/// Whether `board` can be leased right now as far as the table shows: nobody uses or
/// waits for its key, and nothing holds its port. Trying only such boards keeps a queue
/// of waiters from filling the audit log with refusals at every wake-up.
fn looks_free(state: &AppState, board: &BoardConfig) -> bool {
    let port = state.locks.key_state(&LockKey::Port(board.usb.to_string()));
    state
        .locks
        .key_state(&LockKey::Board(board.name.clone()))
        .is_none()
        && port.is_none_or(|p| p.lease.is_none() && p.running.is_none())
}

/// The refusal when no matching board came free in time: who holds each.
fn all_busy(
    state: &AppState,
    matching: &[&BoardConfig],
    m: &BoardMatch,
    wait: Duration,
) -> LockBoardError {
    let holds = matching
        .iter()
        .map(|b| {
            let st = state.locks.key_state(&LockKey::Board(b.name.clone()));
            match st.as_ref().and_then(|s| s.lease.as_ref()) {
                Some(l) => format!(
                    "{}: leased by {} since {}, {} s left{}",
                    b.name,
                    l.holder.0,
                    l.acquired_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    (l.expires_at - Utc::now()).num_seconds().max(0),
                    l.note
                        .as_ref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default()
                ),
                None => format!("{}: in use by a command or a port lease", b.name),
            }
        })
        .collect();
    LockBoardError::AllBusy {
        what: m.describe(),
        waited_secs: wait.as_secs(),
        holds,
        queued: state.boards.queue.len(),
    }
}

fn answer(state: &AppState, board: &BoardConfig, info: &LeaseInfo) -> CallToolResult {
    let config = state.config();
    let dev = state.registry.get(&board.usb);
    let shared_keys = lease_shared_keys(&config, board, dev.as_ref())
        .iter()
        .map(|k| k.to_string())
        .collect();
    let r = BoardLeaseResult {
        lease_id: info.lease_id.0.clone(),
        board: board.name.clone(),
        key: info.key.to_string(),
        holder: info.holder.0.clone(),
        expires_at: info.expires_at,
        ttl_secs: info.ttl_secs,
        note: info.note.clone(),
        device: dev.map(|d| d.id.to_string()),
        shared_keys,
    };
    let text = format!(
        "lease {} on board {} ({}) for {}; expires at {} unless renewed (each command under the lease renews it for {} s).\n\
         Pass lease: \"{}\" with execute_command {{board: \"{}\"}} and power_board; release with unlock_device.",
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
