//! One command line at a leased board's shell, the one conversation `board_run` and a test
//! plan's steps share: a newline probe (the board is alive, and where), a login when a
//! login prompt shows, then the line framed by a fresh marker
//! (`crate::console::session::run_framed`, which answers as soon as the marker and its
//! status arrive and sends Ctrl-C on a timeout or cancel). The surfaces word what it
//! answers: `board_run` as refusals and its result, the plan as a step's verdict.

use crate::console::Console;
use crate::console::session::{self, Frame, LoginAs, Ran, Stopped, TalkError, Wait};
use crate::console::shell::{Marker, Prompts, Seen};

/// What to type where.
pub struct Line<'a> {
    pub console: &'a Console,
    pub prompts: &'a Prompts,
    /// Who logs in when a login prompt shows; none: the line is not run
    /// ([`TalkError::NoLogin`]).
    pub login: Option<LoginAs<'a>>,
    /// The command line (checked by the surface: printable, bounded).
    pub line: &'a str,
    /// Most raw output bytes kept; the rest is cut.
    pub cap: usize,
    /// The probe's and the login's wait (`board_run`: 10 s within its timeout).
    pub first: &'a Wait<'a>,
    /// The command's wait.
    pub wait: &'a Wait<'a>,
}

/// A line that was typed: how it went, and whether this call logged in first.
pub struct Typed {
    /// It ran to its end (the marker arrived), or was stopped (timeout, cancel, the
    /// console gone: what it printed, Ctrl-C sent).
    pub ran: Result<Ran, Box<Stopped>>,
    pub logged_in: bool,
}

/// Why the line was never typed.
#[derive(Debug, thiserror::Error)]
pub enum NotRun {
    /// The board did not answer the probe, or the login failed (`NoLogin`: nobody to log in as).
    #[error("{0}")]
    Talk(#[from] TalkError),
    /// The board shows something else than a shell (U-Boot, a password prompt).
    #[error("the board shows {0}, not a shell; boot_board {{to: \"shell\"}} boots the system")]
    NotAtShell(&'static str),
}

/// Runs `l.line` at the shell of the board on `l.console`.
pub async fn run(l: Line<'_>) -> Result<Typed, NotRun> {
    let (seen, logged_in) = match session::probe(l.console, l.prompts, l.first).await? {
        Seen::Login => (
            session::login(l.console, l.prompts, l.login, l.first).await?,
            true,
        ),
        other => (other, false),
    };
    let seen_prompt = match seen {
        Seen::Shell(p) => p,
        other => return Err(NotRun::NotAtShell(other.describe())),
    };
    let marker = Marker::random();
    let shell_re = l.prompts.shell.clone();
    let m = marker.clone();
    let cut = move |region: &[u8]| m.output(region, &shell_re, Some(&seen_prompt));
    let frame = Frame {
        typed: format!("{}\n{}\n", l.line, marker.status_line()),
        marker: &marker,
        cut: &cut,
        prompt_ends: None,
    };
    let ran = session::run_framed(l.console, l.prompts, frame, l.cap, l.wait).await;
    Ok(Typed { ran, logged_in })
}
