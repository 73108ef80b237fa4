//! Text renderings of `execute_command` for people: the result, a dry run, the isolated
//! view.

pub use gatecmd_domain::usecases::command::shell_words;
use gatecmd_domain::usecases::command::{DryRun, Report};

use super::interface::ExecuteResult;
use crate::views::render_view;

pub fn render(answer: &ExecuteResult) -> String {
    let r = &answer.run;
    let mut s = format!("$ {}\n", shell_words(&r.argv));
    if let Some(v) = &r.isolated_view {
        s.push_str(&render_view(v));
    }
    match (&r.stop_reason, r.exit_code, r.signal) {
        (Some(why), _, _) if r.timed_out || r.cancelled => s.push_str(&format!("{why}\n")),
        (_, Some(c), _) => s.push_str(&format!("exit code {c} after {} ms\n", r.duration_ms)),
        (_, None, Some(sig)) => s.push_str(&format!(
            "killed by signal {sig} after {} ms\n",
            r.duration_ms
        )),
        _ => s.push_str(&format!("ended after {} ms\n", r.duration_ms)),
    }
    if let Some(left) = &answer.device_left {
        s.push_str(&format!("{}\n", left.message));
    }
    if let Some(hint) = &answer.mode_hint {
        s.push_str(&format!("{hint}\n"));
    }
    for (name, text, cut) in [
        ("stdout", &r.stdout, r.stdout_truncated),
        ("stderr", &r.stderr, r.stderr_truncated),
    ] {
        if !text.is_empty() {
            s.push_str(&format!(
                "--- {name}{} ---\n{text}",
                if cut { " (truncated)" } else { "" }
            ));
            if !text.ends_with('\n') {
                s.push('\n');
            }
        }
    }
    s
}

/// A dry run: what would run, the view it would get, each lock now.
pub fn render_dry_run(r: &Report, d: &DryRun) -> String {
    let mut s = format!(
        "dry run: would run {}\ntimeout {} s; nothing was run\n",
        shell_words(&r.argv),
        r.timeout_secs
    );
    if let Some(v) = &d.view {
        s.push_str(&render_view(v));
    }
    for k in &d.keys {
        match &k.holder {
            Some(h) => s.push_str(&format!(
                "lock {}: held by {h} now ({} waiting)\n",
                k.key, k.waiting
            )),
            None => s.push_str(&format!("lock {}: free now\n", k.key)),
        }
    }
    s
}
