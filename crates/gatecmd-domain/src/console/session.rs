//! Talking to a board over its live console: send a line, then wait — on the ring's end
//! cursor, holding no lock, like `console_read` — until the output says what we wait for.
//! Every wait has a deadline and a cancel token, and a timeout names what was awaited.
//! Concurrent `console_read` readers see every byte as before: this only reads the ring.
//! The logic of what the bytes mean is src/console/shell.rs.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::board::{Console, WriteError};
use super::shell::{LAST_LINE_BYTES, Marker, Prompts, Seen, after_first_line, last_line};
use crate::config::LoginConfig;

/// How long the prompt is awaited after a Ctrl-C that stops a command.
pub const PROMPT_AFTER_INTERRUPT: Duration = Duration::from_secs(5);
/// Bytes scanned again before new output when looking for a marker split across appends.
const MARKER_MARGIN: u64 = 64;

/// Why a conversation stopped.
#[derive(Debug, thiserror::Error)]
pub enum TalkError {
    #[error("waited {secs} s for {awaited}; the console showed {last:?} last")]
    Timeout {
        awaited: String,
        secs: u64,
        last: String,
    },
    #[error("cancelled while waiting for {awaited}")]
    Cancelled { awaited: String },
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("the console of board {board} stopped (its capture ended)")]
    Gone { board: String },
    #[error("the login as {user:?} was refused: {why}")]
    LoginFailed { user: String, why: String },
    #[error(
        "the console shows a login prompt, and boards[].console.login is not configured for board {board}: add login: {{user: …}} (and password_env if it asks a password)"
    )]
    NoLogin { board: String },
    #[error(
        "the board asks for a password, and console.login.password_env is {0}; set it to the name of an environment variable of the server that holds the password"
    )]
    NoPassword(String),
    #[error(
        "the board asks for a password for {user:?}: call board_run again with login: {{user: {user:?}, password: …}}"
    )]
    NoCallerPassword { user: String },
}

/// A deadline, a cancel token and a label for the timeout message.
pub struct Wait<'a> {
    pub deadline: Instant,
    pub cancel: &'a CancellationToken,
}

impl Wait<'_> {
    fn secs_left_from(&self, started: Instant) -> u64 {
        self.deadline.saturating_duration_since(started).as_secs()
    }
}

/// The last line of output from `from` on (at most [`LAST_LINE_BYTES`] back).
pub fn last_line_since(console: &Console, from: u64) -> String {
    let (start, end) = console.bounds();
    let at = from
        .max(end.saturating_sub(LAST_LINE_BYTES as u64))
        .max(start);
    last_line(&console.slice(at, LAST_LINE_BYTES).bytes)
}

/// Waits until `check` gives a value; it is called at once and after every append.
pub async fn watch<T>(
    console: &Console,
    wait: &Wait<'_>,
    awaited: &str,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T, TalkError> {
    let started = Instant::now();
    // Subscribed before the first look: an append in between wakes the wait.
    let mut appended = console.subscribe();
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        tokio::select! {
            biased;
            _ = wait.cancel.cancelled() => {
                return Err(TalkError::Cancelled { awaited: awaited.to_string() });
            }
            changed = appended.changed() => {
                if changed.is_err() {
                    return Err(TalkError::Gone { board: console.board().to_string() });
                }
            }
            _ = tokio::time::sleep_until(wait.deadline) => {
                let (_, end) = console.bounds();
                return Err(TalkError::Timeout {
                    awaited: awaited.to_string(),
                    secs: wait.secs_left_from(started).max(1),
                    last: last_line_since(console, end.saturating_sub(LAST_LINE_BYTES as u64)),
                });
            }
        }
    }
}

/// Writes `bytes`, then waits for the last line after them to be one of the prompts that
/// `accept` takes. Returns what was seen and the cursor where the write began.
pub async fn send_and_await(
    console: &Console,
    prompts: &Prompts,
    bytes: &[u8],
    wait: &Wait<'_>,
    awaited: &str,
    accept: impl Fn(&Seen) -> bool,
) -> Result<(Seen, u64), TalkError> {
    let from = console.bounds().1;
    console.write(bytes).await?;
    // A prompt counts once a line end followed the write: the answer to it, not a prompt
    // still arriving from before (the tail of an earlier call).
    let answered = |from: u64| {
        let s = console.slice(from, LAST_LINE_BYTES);
        memchr::memchr(b'\n', &s.bytes).is_some()
    };
    let seen = watch(console, wait, awaited, || {
        if !answered(from) {
            return None;
        }
        prompts
            .classify(&last_line_since(console, from))
            .filter(&accept)
    })
    .await?;
    Ok((seen, from))
}

/// A newline, and what the board answers it with: a shell, login, password or U-Boot
/// prompt. The first step of every conversation (it also shows the board is alive).
pub async fn probe(
    console: &Console,
    prompts: &Prompts,
    wait: &Wait<'_>,
) -> Result<Seen, TalkError> {
    let awaited = format!(
        "a prompt after a newline (shell prompt /{}/, login prompt /{}/ or U-Boot's {:?})",
        prompts.shell.as_str(),
        prompts.login.as_str(),
        prompts.uboot
    );
    send_and_await(console, prompts, b"\n", wait, &awaited, |_| true)
        .await
        .map(|(s, _)| s)
}

/// Who logs in at a login prompt: the operator's configured `console.login` (which wins
/// whenever it is set), or the user and password the caller gave.
#[derive(Clone, Copy)]
pub enum LoginAs<'a> {
    Configured(&'a LoginConfig),
    Caller {
        user: &'a str,
        password: Option<&'a str>,
    },
}

impl LoginAs<'_> {
    fn user(&self) -> String {
        match self {
            LoginAs::Configured(c) => c.user.clone(),
            LoginAs::Caller { user, .. } => (*user).to_string(),
        }
    }

    /// The password, read when the board asks for it (never logged).
    fn password(&self) -> Result<String, TalkError> {
        match self {
            LoginAs::Configured(login) => match &login.password_env {
                None => Err(TalkError::NoPassword("not set".into())),
                Some(var) => std::env::var(var)
                    .map_err(|_| TalkError::NoPassword(format!("{var:?}, which is not set"))),
            },
            LoginAs::Caller {
                password: Some(p), ..
            } => Ok((*p).to_string()),
            LoginAs::Caller { user, .. } => Err(TalkError::NoCallerPassword {
                user: (*user).to_string(),
            }),
        }
    }
}

impl std::fmt::Debug for LoginAs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoginAs::Configured(c) => write!(f, "Configured({:?})", c.user),
            LoginAs::Caller { user, .. } => write!(f, "Caller({user:?})"),
        }
    }
}

/// Logs in at a login prompt; returns the shell prompt seen after it.
pub async fn login(
    console: &Console,
    prompts: &Prompts,
    login: Option<LoginAs<'_>>,
    wait: &Wait<'_>,
) -> Result<Seen, TalkError> {
    let Some(login) = login else {
        return Err(TalkError::NoLogin {
            board: console.board().to_string(),
        });
    };
    let user = login.user();
    let awaited = format!(
        "the shell prompt /{}/ (or a password prompt) after the user name",
        prompts.shell.as_str()
    );
    let line = format!("{user}\n");
    let (seen, _) =
        send_and_await(console, prompts, line.as_bytes(), wait, &awaited, |_| true).await?;
    let seen = match seen {
        Seen::Password => {
            let password = login.password()?;
            let awaited = format!(
                "the shell prompt /{}/ after the password",
                prompts.shell.as_str()
            );
            let line = format!("{password}\n");
            send_and_await(console, prompts, line.as_bytes(), wait, &awaited, |s| {
                !matches!(s, Seen::Password)
            })
            .await?
            .0
        }
        other => other,
    };
    match seen {
        Seen::Shell(p) => Ok(Seen::Shell(p)),
        other => Err(TalkError::LoginFailed {
            user,
            why: format!("the board answered with {}", other.describe()),
        }),
    }
}

/// What one framed command gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// `None` when the status could not be read (timed out, cancelled, no `$?`).
    pub exit_code: Option<i32>,
    pub output: String,
    pub truncated: bool,
    /// Console cursor where the command's output begins (console_read reads it all).
    pub output_cursor: u64,
}

/// A command that did not end: what it printed, and whether the prompt came back after
/// the Ctrl-C.
#[derive(Debug)]
pub struct Stopped {
    pub why: TalkError,
    pub partial: Ran,
    pub prompt_back: bool,
}

/// How a framed command is typed and cut out.
pub struct Frame<'a> {
    /// The bytes typed (command line(s), line ends included).
    pub typed: String,
    pub marker: &'a Marker,
    /// Cuts the output out of the region between the echo and the marker.
    pub cut: &'a (dyn Fn(&[u8]) -> String + Send + Sync),
    /// The prompt that ends a command that printed no marker (U-Boot without `echo`
    /// quoting): `Some` lets the prompt end the wait.
    pub prompt_ends: Option<&'a Prompts>,
}

/// Types `frame.typed`, waits for the marker, and cuts the output (at most `cap` raw
/// bytes of it). On timeout or cancel: Ctrl-C, then the prompt awaited.
pub async fn run_framed(
    console: &Console,
    prompts: &Prompts,
    frame: Frame<'_>,
    cap: usize,
    wait: &Wait<'_>,
) -> Result<Ran, Box<Stopped>> {
    let start = console.bounds().1;
    let stopped = |why: TalkError, partial: Ran| {
        Box::new(Stopped {
            why,
            partial,
            prompt_back: false,
        })
    };
    let empty = Ran {
        exit_code: None,
        output: String::new(),
        truncated: false,
        output_cursor: start,
    };
    if let Err(e) = console.write(frame.typed.as_bytes()).await {
        return Err(stopped(e.into(), empty));
    }
    let mut scanned = start;
    let awaited = format!("the end marker {}:<status>", frame.marker.token());
    let done = watch(console, wait, &awaited, || {
        let (_, end) = console.bounds();
        let from = scanned.saturating_sub(MARKER_MARGIN).max(start);
        let s = console.slice(from, (end - from) as usize);
        if let Some(f) = frame.marker.find(&s.bytes) {
            return Some((s.from + f.at as u64, f.status));
        }
        scanned = s.to;
        let p = frame.prompt_ends?;
        // Only once the typed line's echo is complete can a prompt be the next one.
        let echo_end = after_first_line(&console.slice(start, LAST_LINE_BYTES).bytes)?;
        matches!(
            p.classify(&last_line_since(console, start + echo_end as u64)),
            Some(Seen::Uboot)
        )
        .then_some((end, None))
    })
    .await;
    match done {
        Ok((at, status)) => {
            // The output is complete once the marker arrived: answer now, whatever the
            // prompt after it looks like (or whenever it comes). The next call's probe (a
            // newline answered by a prompt) finds the board at its prompt; nothing here
            // waits for it (docs/DECISIONS.md, "board_run answers at the marker").
            Ok(cut(console, start, at, status, cap, frame.cut))
        }
        Err(why) => {
            let (_, end) = console.bounds();
            let partial = cut(console, start, end, None, cap, frame.cut);
            let mut s = stopped(why, partial);
            s.prompt_back = interrupt(console, prompts, wait.cancel).await;
            Err(s)
        }
    }
}

/// The output between the echo of the typed line (from `start`) and `at`.
fn cut(
    console: &Console,
    start: u64,
    at: u64,
    exit_code: Option<i32>,
    cap: usize,
    how: &(dyn Fn(&[u8]) -> String + Send + Sync),
) -> Ran {
    let head = console.slice(start, LAST_LINE_BYTES);
    let from = match after_first_line(&head.bytes) {
        Some(i) => head.from + i as u64,
        None => at,
    };
    let from = from.min(at);
    let len = (at - from) as usize;
    let region = console.slice(from, len.min(cap));
    let truncated = len > cap || region.dropped > 0;
    Ran {
        exit_code,
        output: how(&region.bytes),
        truncated,
        output_cursor: from,
    }
}

/// Ctrl-C, then the shell's (or U-Boot's) prompt awaited: whether it came back.
pub async fn interrupt(console: &Console, prompts: &Prompts, cancel: &CancellationToken) -> bool {
    // A cancelled call still gets its Ctrl-C and prompt; only this wait's own deadline
    // bounds it (the caller's token is already cancelled).
    let _ = cancel;
    let own = CancellationToken::new();
    let wait = Wait {
        deadline: Instant::now() + PROMPT_AFTER_INTERRUPT,
        cancel: &own,
    };
    send_and_await(
        console,
        prompts,
        b"\x03",
        &wait,
        "a prompt after Ctrl-C",
        |s| matches!(s, Seen::Shell(_) | Seen::Uboot),
    )
    .await
    .is_ok()
}
