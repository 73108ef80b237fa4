//! One command line at a leased board's prompt, its shell (logging in when a login prompt
//! shows) or U-Boot's: the request, the result and the conversation that `board_run` and
//! `uboot_run` share (framing: `gatecmd_domain::console::shell`). Each call holds the
//! board's key like a command; every call is audited with the command line, the exit code
//! and the output's length and SHA-256.

use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::access::{take_board, talk_refusal};
use super::login::{CallerLogin, login_as};
use super::refusal::TalkRefusal;
use crate::calls::answer::{refusal, structured, structured_error};
use crate::calls::approvals;
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::Refusal;
use gatecmd_domain::approvals::NewRequest;
use gatecmd_domain::audit::{
    BoardCommandRecord, CommandOutcome, CommandRan, Prompt, RefusedDetail,
};
use gatecmd_domain::config::{BoardConfig, Gated, GatedTool, approval_rule};
use gatecmd_domain::console::Console;
use gatecmd_domain::console::session::{self, Ran, Stopped, TalkError, Wait};
use gatecmd_domain::console::shell::{Prompts, Seen, command_problem};
use gatecmd_domain::console::uboot;
use gatecmd_domain::locks::SessionId;
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::shell_line::{self, NotRun};

/// Default and longest `timeout_secs` of one command.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
pub const MAX_TIMEOUT_SECS: u64 = 1800;
/// Longest wait for the first prompt (and for a login), within the call's timeout.
const PROMPT_WAIT: Duration = Duration::from_secs(10);
/// Most raw bytes of output returned; the rest is in the console ring (`output_cursor`).
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// Longest command line (a Linux tty's canonical line holds 4095 bytes).
pub const MAX_COMMAND_BYTES: usize = 4000;

/// Arguments of `board_run` and `uboot_run`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BoardRunRequest {
    /// A board name from list_boards; you must hold its lease.
    pub board: String,
    /// One command line, printable text only (no line ends, tabs or other control
    /// characters), e.g. "uname -a".
    pub command: String,
    /// Longest run in seconds (default 30, at most 1800); then Ctrl-C is sent.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Your board lease (from lock_board); a 2025-11-25 session that took it may omit it.
    #[serde(default)]
    pub lease: Option<String>,
    /// board_run only: who to log in as when the board shows a login prompt and the
    /// operator configured no login for it (a configured login always wins).
    #[serde(default)]
    pub login: Option<CallerLogin>,
}

/// Result of `board_run` / `uboot_run` (or a refusal in its place).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct BoardRunResult {
    pub board: String,
    pub command: String,
    /// The command's exit status; null when it did not end (timed_out, cancelled) or the
    /// shell cannot say (U-Boot without `$?`).
    pub exit_code: Option<i32>,
    /// Exactly what the command printed (not its echo, not the prompt), cleaned like
    /// console_read's text: `\r\n` → `\n`, ANSI codes removed.
    pub output: String,
    pub duration_ms: u64,
    /// This call logged in at a login prompt first.
    pub logged_in: bool,
    /// The output is longer than 262144 bytes (or the console buffer lost part of it);
    /// console_read from output_cursor has what the buffer holds.
    pub truncated: bool,
    /// Console cursor of the output's first byte.
    pub output_cursor: u64,
    /// The command did not end within timeout_secs; Ctrl-C was sent.
    pub timed_out: bool,
    /// The call was cancelled; Ctrl-C was sent.
    pub cancelled: bool,
}

/// Which prompt the command runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    Shell,
    Uboot,
}

impl At {
    /// The tool that runs a command at this prompt.
    pub fn tool(self) -> &'static str {
        match self {
            At::Shell => "board_run",
            At::Uboot => "uboot_run",
        }
    }

    /// The tool as the audit log names it.
    fn prompt(self) -> Prompt {
        match self {
            At::Shell => Prompt::BoardRun,
            At::Uboot => Prompt::UbootRun,
        }
    }

    /// The tool as an `approvals:` rule names it.
    fn gated(self) -> GatedTool {
        match self {
            At::Shell => GatedTool::BoardRun,
            At::Uboot => GatedTool::UbootRun,
        }
    }
}

/// `board_run` (`At::Shell`) and `uboot_run` (`At::Uboot`). When an `approvals:` rule
/// holds (the tool's own, or one on the board), the call waits for a yes after every check
/// and before a byte is typed, holding nothing (the board's key goes back and is taken
/// again after the yes).
pub async fn run(
    state: &AppState,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: BoardRunRequest,
    at: At,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let cancel = &ctx.ct;
    let started = Instant::now();
    let audit = |outcome: CommandOutcome<'_>| {
        state.audit.record(&BoardCommandRecord {
            event: at.prompt(),
            client: &who.name,
            board: &req.board,
            command: &req.command,
            outcome,
        });
    };
    let refuse = |r: Refusal| {
        audit(CommandOutcome::Refused(RefusedDetail {
            reason: r.reason.as_str(),
            message: &r.message,
        }));
        refusal(r)
    };
    let secs = match checked_secs(&req) {
        Ok(secs) => secs,
        Err(r) => return refuse(r),
    };
    let config = state.config();
    let take = || {
        take_board(
            state,
            &config,
            who,
            session.clone(),
            &req.board,
            req.lease.as_deref(),
            at.tool(),
        )
    };
    let mut leased = match take().await {
        Ok(l) => l,
        Err(r) => return refuse(r),
    };
    if leased.console.is_none() {
        let e = TalkRefusal::NoConsole {
            board: req.board.clone(),
        };
        return refuse(e.into());
    }
    let held = Gated::Tool {
        tool: at.gated(),
        action: "",
    };
    if let Some(rule) = approval_rule(&config.approvals, held, &[&leased.board]) {
        // Every check passed and nothing was typed: wait for a yes holding nothing, then
        // take the board again like any call (refused busy if another call has it now).
        let key = gatecmd_domain::locks::LockKey::Board(leased.board.name.clone());
        drop(leased);
        let spec = NewRequest {
            client: who.name.clone(),
            note: None,
            tool: at.tool().into(),
            what: format!("{} {}: {}", at.tool(), req.board, req.command),
            argv: None,
            board: Some(req.board.clone()),
            holder: approvals::board_holder(state, &req.board),
            files: vec![],
            rule: rule.describe(),
            approvers: rule.by.clone(),
            timeout: rule.timeout,
            job: None,
        };
        let lease = req.lease.clone().map(gatecmd_domain::locks::LeaseId);
        let watch = approvals::LeaseWatch::find(state, std::slice::from_ref(&key), lease.as_ref());
        if let Err(r) = approvals::wait_in_call(state, spec, watch, ctx).await {
            return refuse(r);
        }
        leased = match take().await {
            Ok(l) => l,
            Err(r) => return refuse(r),
        };
    }
    let Some(console) = leased.console.clone() else {
        let e = TalkRefusal::NoConsole {
            board: req.board.clone(),
        };
        return refuse(e.into());
    };
    let timeout = Duration::from_secs(secs);
    let deadline = tokio::time::Instant::now() + timeout;
    let first = Wait {
        deadline: tokio::time::Instant::now() + PROMPT_WAIT.min(timeout),
        cancel,
    };
    let prompts = &leased.prompts;
    let wait = Wait { deadline, cancel };
    let talked = talk(at, &console, &leased.board, prompts, &req, &first, &wait).await;
    let (ran, logged_in) = match talked {
        Ok(t) => t,
        Err(r) => return refuse(r),
    };
    drop(leased.guard);
    let (ran, stopped): (Ran, Option<Box<Stopped>>) = match ran {
        Ok(r) => (r, None),
        Err(s) => (s.partial.clone(), Some(s)),
    };
    let result = BoardRunResult {
        board: req.board.clone(),
        command: req.command.clone(),
        exit_code: ran.exit_code,
        duration_ms: started.elapsed().as_millis() as u64,
        logged_in,
        truncated: ran.truncated,
        output_cursor: ran.output_cursor,
        timed_out: (stopped.as_deref()).is_some_and(|s| matches!(s.why, TalkError::Timeout { .. })),
        cancelled: (stopped.as_deref())
            .is_some_and(|s| matches!(s.why, TalkError::Cancelled { .. })),
        output: ran.output,
    };
    let sha256 = hex::encode(Sha256::digest(result.output.as_bytes()));
    let ran = CommandRan {
        exit_code: result.exit_code,
        output_bytes: result.output.len(),
        output_sha256: &sha256,
        truncated: result.truncated,
        logged_in,
        duration_ms: result.duration_ms,
        stopped: stopped.as_ref().map(|s| s.why.to_string()),
    };
    audit(if stopped.is_some() {
        CommandOutcome::Stopped(ran)
    } else {
        CommandOutcome::Ran(ran)
    });
    answer(at, &req.board, &result, stopped.as_deref())
}

/// The request's own checks (the command line, the login, the time limit): the time limit
/// in seconds, or the refusal.
fn checked_secs(req: &BoardRunRequest) -> Result<u64, Refusal> {
    if let Some(why) = command_problem(&req.command, MAX_COMMAND_BYTES) {
        let control = req.command.chars().any(char::is_control);
        return Err(TalkRefusal::BadCommand { why, control }.into());
    }
    if let Some(e) = req.login.as_ref().and_then(CallerLogin::problem) {
        return Err(e.into());
    }
    let secs = req.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
    if secs == 0 || secs > MAX_TIMEOUT_SECS {
        let e = TalkRefusal::TimeoutOutOfRange {
            given: secs,
            max: MAX_TIMEOUT_SECS,
        };
        return Err(e.into());
    }
    Ok(secs)
}

/// The refusal of a board at another prompt than the tool's.
fn wrong_state(at: At, board: &str, shows: &str) -> Refusal {
    let next = match at {
        At::Shell => "board_run needs a shell: boot_board {to: \"shell\"} boots the system",
        At::Uboot => "uboot_run needs U-Boot's prompt: boot_board {to: \"uboot\"} stops there",
    };
    TalkRefusal::WrongState {
        board: board.to_string(),
        shows: shows.to_string(),
        next,
    }
    .into()
}

/// The command line run at the tool's prompt: at a shell, the probe, the login and the
/// framed line of the domain (`usecases::shell_line`, a test plan's steps run the same);
/// at U-Boot's prompt, as U-Boot takes it. The output (or why it stopped) and whether
/// this call logged in, or the refusal of a board elsewhere.
async fn talk(
    at: At,
    console: &Console,
    board: &BoardConfig,
    prompts: &Prompts,
    req: &BoardRunRequest,
    first: &Wait<'_>,
    wait: &Wait<'_>,
) -> Result<(Result<Ran, Box<Stopped>>, bool), Refusal> {
    match at {
        At::Shell => {
            let line = shell_line::Line {
                console,
                prompts,
                login: login_as(board, req.login.as_ref()),
                line: &req.command,
                cap: MAX_OUTPUT_BYTES,
                first,
                wait,
            };
            match shell_line::run(line).await {
                Ok(typed) => Ok((typed.ran, typed.logged_in)),
                Err(NotRun::Talk(TalkError::NoLogin { .. })) => Err(TalkRefusal::LoginNeeded {
                    board: req.board.clone(),
                }
                .into()),
                Err(NotRun::Talk(e)) => Err(talk_refusal(&req.board, e)),
                Err(NotRun::NotAtShell(shows)) => Err(wrong_state(at, &req.board, shows)),
            }
        }
        // Where is the board? A newline tells.
        At::Uboot => match session::probe(console, prompts, first).await {
            Ok(Seen::Uboot) => Ok((
                uboot::run(console, prompts, &req.command, MAX_OUTPUT_BYTES, wait).await,
                false,
            )),
            Ok(other) => Err(wrong_state(at, &req.board, other.describe())),
            Err(e) => Err(talk_refusal(&req.board, e)),
        },
    }
}

/// The call's answer: a head line (the exit code, or why it stopped), the output.
fn answer(
    at: At,
    board: &str,
    result: &BoardRunResult,
    stopped: Option<&Stopped>,
) -> CallToolResult {
    let head = match (stopped, result.exit_code) {
        (Some(s), _) => format!(
            "{} {}: {}; Ctrl-C sent, {}",
            at.tool(),
            board,
            s.why,
            if s.prompt_back {
                "the prompt is back"
            } else {
                "no prompt came back after it (console_read shows the board)"
            }
        ),
        (None, Some(code)) => format!("{} {}: exit {code}", at.tool(), board),
        (None, None) => format!("{} {}: done (no exit status)", at.tool(), board),
    };
    let text = format!(
        "{head}, {} ms{}{}\n{}",
        result.duration_ms,
        if result.logged_in { ", logged in" } else { "" },
        if result.truncated {
            ", output truncated"
        } else {
            ""
        },
        result.output
    );
    if stopped.is_some() || result.exit_code.is_some_and(|c| c != 0) {
        structured_error(result, text)
    } else {
        structured(result, text)
    }
}
