//! One step at the board's shell, as `board_run` runs a command line: a newline probe (the
//! board is alive and at a prompt), a login when a login prompt shows, then the command
//! framed by a fresh marker (`crate::console::session::run_framed`, which answers as soon
//! as the marker and its status arrive and sends Ctrl-C on a timeout or cancel). The
//! conversation is the domain's, the same functions `board_run` calls.

use crate::config::LoginConfig;
use crate::console::Console;
use crate::console::session::{self, Frame, Ran, Stopped, TalkError, Wait};
use crate::console::shell::{Marker, Prompts, Seen};

/// How a step's command line went.
pub enum Outcome {
    /// It ran to its end (the marker arrived).
    Ran(Ran),
    /// It was stopped (timeout, cancel, the console gone): what it printed, Ctrl-C sent.
    Stopped(Box<Stopped>),
    /// It was never typed: the board did not answer at a shell prompt.
    NotRun(NotRun),
}

/// Why a step's command line was not typed.
#[derive(Debug, thiserror::Error)]
pub enum NotRun {
    #[error("{0}")]
    Talk(#[from] TalkError),
    /// The board shows something else than a shell (U-Boot, a password prompt).
    #[error("the board shows {0}, not a shell; boot_board {{to: \"shell\"}} boots the system")]
    NotAtShell(&'static str),
}

/// Runs `line` at the shell of the board on `console`; `cap`: most raw output bytes cut.
pub async fn run_line(
    console: &Console,
    prompts: &Prompts,
    login: Option<&LoginConfig>,
    line: &str,
    cap: usize,
    wait: &Wait<'_>,
) -> Outcome {
    let seen = match session::probe(console, prompts, wait).await {
        Ok(Seen::Login) => {
            session::login(
                console,
                prompts,
                login.map(session::LoginAs::Configured),
                wait,
            )
            .await
        }
        other => other,
    };
    let seen_prompt = match seen {
        Ok(Seen::Shell(p)) => p,
        Ok(other) => return Outcome::NotRun(NotRun::NotAtShell(other.describe())),
        Err(e) => return Outcome::NotRun(e.into()),
    };
    let marker = Marker::random();
    let shell_re = prompts.shell.clone();
    let m = marker.clone();
    let cut = move |region: &[u8]| m.output(region, &shell_re, Some(&seen_prompt));
    let frame = Frame {
        typed: format!("{line}\n{}\n", marker.status_line()),
        marker: &marker,
        cut: &cut,
        prompt_ends: None,
    };
    match session::run_framed(console, prompts, frame, cap, wait).await {
        Ok(ran) => Outcome::Ran(ran),
        Err(stopped) => Outcome::Stopped(stopped),
    }
}
