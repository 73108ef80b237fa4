//! Whether a refusal's next step is a call that exists (issue 47): every tool its message
//! names is in `tools/list`, every `TOOL {arg: …}` names arguments TOOL takes, every
//! argument it asks to pass (`pass ARG`, `retry with ARG`, `pass VALUE as ARG`) is one the caller or
//! a tool the message names takes, and a board tool is not sent to `lock_device`.

use std::collections::BTreeSet;

use regex::Regex;
use rmcp::model::Tool;

/// Verbs a tool name starts with: a word that starts so and is no tool is a wrong name.
const TOOL_VERBS: &[&str] = &[
    "lock_",
    "unlock_",
    "list_",
    "execute_",
    "flash_",
    "power_",
    "wait_for_",
    "wait_job",
    "cancel_",
    "write_file",
    "stat_",
    "remove_",
    "boot_board",
    "boot_report",
    "board_run",
    "uboot_",
    "console_read",
    "console_write",
];

/// The arguments `tool` takes (its input schema's properties), if it is a tool.
fn arguments(tools: &[Tool], tool: &str) -> Option<BTreeSet<String>> {
    let t = tools.iter().find(|t| t.name == tool)?;
    Some(
        t.input_schema
            .get("properties")
            .and_then(|p| p.as_object())
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default(),
    )
}

/// What is wrong with the calls `message` (a refusal to `caller`) names; empty when each
/// exists.
pub fn hint_errors(tools: &[Tool], caller: &str, message: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let word = Regex::new(r"(^|[^.\w])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b(\.?)").expect("regex");
    let mut named: Vec<String> = vec![caller.to_string()];
    for c in word.captures_iter(message) {
        let w = &c[2];
        // `flash.loaders`, `leases.max_waiters_per_client`: config keys, not calls.
        if !c[3].is_empty()
            && message[c.get(3).expect("dot").end()..].starts_with(char::is_alphanumeric)
        {
            continue;
        }
        if arguments(tools, w).is_some() {
            named.push(w.to_string());
        } else if TOOL_VERBS.iter().any(|v| w.starts_with(v)) && !is_field(w) {
            bad.push(format!("names {w:?}, which is no tool"));
        }
    }
    // `TOOL {arg: …, arg: …}`.
    let call = Regex::new(r"\b([a-z][a-z0-9_]*) \{([^{}]*)\}").expect("regex");
    let key = Regex::new(r"(?:^|[,{]\s*)([a-z_]+):").expect("regex");
    for c in call.captures_iter(message) {
        let Some(args) = arguments(tools, &c[1]) else {
            continue;
        };
        for k in key.captures_iter(&c[2]) {
            if !args.contains(&k[1]) {
                bad.push(format!("{} takes no argument {:?}", &c[1], &k[1]));
            }
        }
    }
    // `pass ARG`, `pass ARG: …`, `retry with ARG`, `pass VALUE as ARG` (VALUE an answer field).
    let asked = Regex::new(
        r"(?i)\b(?:pass|retry with|retry without) (?:its |the returned )?([a-z][a-z_]*)\b(:?)(?: as `?([a-z][a-z_]*))?",
    )
    .expect("regex");
    for c in asked.captures_iter(message) {
        let (arg, explicit) = match c.get(3) {
            Some(a) => (a.as_str(), true),
            None => (&c[1], false),
        };
        // Only argument-looking words: snake_case, `NAME:` (`pass lease: "…"`), `as NAME`.
        if !explicit && !arg.contains('_') && c[2].is_empty() {
            continue;
        }
        if arguments(tools, arg).is_some() || is_field(arg) {
            continue;
        }
        let takes = named
            .iter()
            .any(|t| arguments(tools, t).is_some_and(|a| a.contains(arg)));
        if !takes {
            bad.push(format!(
                "asks to pass {arg:?}, which neither {caller} nor any tool it names takes"
            ));
        }
    }
    // A board tool's caller leased with lock_board: it is not sent to lock_device.
    if let Some(args) = arguments(tools, caller)
        && args.contains("board")
        && !args.contains("device")
        && Regex::new(r"(^|[^a-z_])lock_device\b")
            .expect("regex")
            .is_match(message)
    {
        bad.push(format!("sends {caller}'s caller to lock_device"));
    }
    bad
}

/// Answer fields and values a hint may mention (`lease_id`, the value to pass): not calls.
fn is_field(w: &str) -> bool {
    ["lease_id", "lock_keys", "shared_lock_keys", "power_state"].contains(&w)
}

/// Panics naming what is wrong when `message` names a call that does not exist.
pub fn assert_hint_exists(tools: &[Tool], caller: &str, message: &str) {
    let bad = hint_errors(tools, caller, message);
    assert!(
        bad.is_empty(),
        "{caller}'s refusal names calls that do not exist: {bad:?}\n{message}"
    );
}
