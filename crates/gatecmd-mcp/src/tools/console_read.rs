//! `console_read`: a board's serial console, captured by the server (gatecmd-domain's
//! `console`), read since a cursor with an optional regex wait; needs the board's lease
//! unless the client is `admin`.

use std::time::Duration;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::calls::answer::{refusal, structured};
use crate::console::console_access::{ConsoleError, console_of};
use crate::handler::GatecmdServer;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::console::{ConsoleState, Consoles, ReadSpec};

/// Default and longest `timeout_secs` of a `wait_for`.
pub const DEFAULT_TIMEOUT_SECS: u64 = 10;
pub const MAX_TIMEOUT_SECS: u64 = 300;
/// Default `max_bytes`; the longest is the ring's size.
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024;
/// Longest `wait_for` pattern, and the compiled regex's size limit: an agent's regex must
/// not cost the server more than a small, fixed amount.
pub const MAX_PATTERN_CHARS: usize = 1024;
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Arguments of `console_read`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsoleReadRequest {
    /// Board name (see list_boards).
    pub board: String,
    /// Read from this cursor (a previous answer's next_cursor). Default: the newest bytes
    /// (the last 4 KiB, or the last max_bytes when given), or with wait_for, only output
    /// that arrives from now on.
    #[serde(default)]
    pub cursor: Option<u64>,
    /// Most bytes of raw output returned (default 65536); read on from next_cursor.
    /// Without a cursor: the newest max_bytes.
    #[serde(default)]
    pub max_bytes: Option<usize>,
    /// A regex to wait for in the (cleaned) output from the cursor on, e.g. "Hit any key"
    /// or "login:". The answer comes as soon as it appears, or after timeout_secs.
    #[serde(default)]
    pub wait_for: Option<String>,
    /// Longest wait for wait_for, in seconds (default 10, at most 300).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// Result of `console_read` (or a refusal in its place).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct ConsoleReadResult {
    pub board: String,
    /// Output from cursor to next_cursor, ANSI codes removed and `\r` overwrites applied.
    pub text: String,
    /// Cursor of the text's first byte (later than asked when the buffer lost output).
    pub cursor: u64,
    /// Pass as cursor to read on.
    pub next_cursor: u64,
    /// Bytes between the asked cursor and `cursor` that the buffer no longer held.
    pub dropped_bytes: u64,
    /// wait_for was found.
    pub matched: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub match_text: Option<String>,
    /// The console's state now: open, absent (adapter unplugged) or error.
    pub state: ConsoleState,
}

#[tool_router(router = console_read_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Reads a board's serial console.
    #[tool(
        description = "Read a board's serial console (captured continuously by the server): text since \
                       cursor (default: the last 4 KiB), ANSI codes and \\r overwrites cleaned. wait_for \
                       (a regex, e.g. \"Hit any key\" or \"login:\") waits up to timeout_secs for it in \
                       new output. Pass next_cursor as cursor to read on; dropped_bytes says what the \
                       buffer lost. Needs the board's lease (lock_board) unless you are admin.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<ConsoleReadResult>()
    )]
    async fn console_read(
        &self,
        Parameters(req): Parameters<ConsoleReadRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        if let Some(r) = crate::lab::forward::remote_call(
            &self.state,
            &who,
            "console_read",
            &req,
            req.timeout_secs.unwrap_or(10),
        )
        .await
        {
            return Ok(r);
        }
        Ok(read_for(&self.state, &who, req, &ctx.ct).await)
    }
}

/// Builds the read from the request, or the refusal.
fn read_spec(req: &ConsoleReadRequest, ring_bytes: usize) -> Result<ReadSpec, ConsoleError> {
    let max_bytes = req.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
    if max_bytes == 0 {
        return Err(ConsoleError::ZeroMaxBytes);
    }
    let timeout = req.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
    if timeout == 0 {
        return Err(ConsoleError::ZeroTimeout);
    }
    if timeout > MAX_TIMEOUT_SECS {
        return Err(ConsoleError::TimeoutTooLong {
            given: timeout,
            max: MAX_TIMEOUT_SECS,
        });
    }
    let wait_for = match &req.wait_for {
        None => None,
        Some(p) if p.chars().count() > MAX_PATTERN_CHARS => {
            return Err(ConsoleError::PatternTooLong {
                max: MAX_PATTERN_CHARS,
            });
        }
        Some(p) => Some(
            regex::RegexBuilder::new(p)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(ConsoleError::BadPattern)?,
        ),
    };
    Ok(ReadSpec {
        cursor: req.cursor,
        max_bytes: max_bytes.min(ring_bytes.max(1)),
        tail_bytes: req.max_bytes.map(|m| m as u64),
        wait_for,
        timeout: Duration::from_secs(timeout),
    })
}

/// `console_read` for a client of `state`: a read that waits for `wait_for` takes one of
/// the client's `limits.max_waiting_reads_per_client` for its wait.
pub async fn read_for(
    state: &gatecmd_domain::state::AppState,
    who: &ClientIdentity,
    req: ConsoleReadRequest,
    cancel: &CancellationToken,
) -> CallToolResult {
    let _waiting = if req.wait_for.is_some() {
        let cap = state.config().limits.max_waiting_reads_per_client;
        match state.quotas.take(
            &who.name,
            gatecmd_domain::limits::quotas::Kind::WaitingReads,
            1,
            cap,
        ) {
            Ok(t) => Some(t),
            Err(full) => return refusal(ConsoleError::WaitingReadsFull(full).into()),
        }
    } else {
        None
    };
    read(
        &state.consoles,
        &state.config().board_names(),
        who,
        req,
        cancel,
    )
    .await
}

/// `console_read`: needs the board's lease, unless the client is `admin`.
pub async fn read(
    consoles: &Consoles,
    boards: &[String],
    who: &ClientIdentity,
    req: ConsoleReadRequest,
    cancel: &CancellationToken,
) -> CallToolResult {
    let console = match console_of(consoles, boards, &req.board) {
        Ok(c) => c,
        Err(e) => return refusal(e.into()),
    };
    if !who.admin
        && let Err(e) = consoles.access().check_lease(&who.name, &req.board)
    {
        return refusal(ConsoleError::NoLease(e).into());
    }
    let spec = match read_spec(&req, console.config().buffer_bytes) {
        Ok(s) => s,
        Err(e) => return refusal(e.into()),
    };
    let r = match console.read(&spec, cancel).await {
        Ok(r) => r,
        Err(e) => return refusal(ConsoleError::from(e).into()),
    };
    let state = console.view().state;
    let text = render_read(&req.board, &r, state, spec.wait_for.is_some());
    let result = ConsoleReadResult {
        board: req.board,
        text: r.text,
        cursor: r.cursor,
        next_cursor: r.next_cursor,
        dropped_bytes: r.dropped_bytes,
        matched: r.matched,
        match_text: r.match_text,
        state,
    };
    structured(&result, text)
}

fn render_read(
    board: &str,
    r: &gatecmd_domain::console::Reading,
    state: ConsoleState,
    waited: bool,
) -> String {
    let mut head = format!(
        "console {board} ({}), bytes {}..{}",
        state.as_str(),
        r.cursor,
        r.next_cursor
    );
    if r.dropped_bytes > 0 {
        head.push_str(&format!(", {} bytes lost before cursor", r.dropped_bytes));
    }
    if waited {
        match &r.match_text {
            Some(m) => head.push_str(&format!(", matched {m:?}")),
            None => head.push_str(", wait_for not seen before the timeout"),
        }
    }
    format!("{head}; next_cursor {}\n{}", r.next_cursor, r.text)
}
