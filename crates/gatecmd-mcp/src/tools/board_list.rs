//! `list_boards`: every configured board as the caller may see it (the view is
//! `BoardView` in `src/views/boards.rs`), rendered as text for people.

use rmcp::model::CallToolResult;

use crate::views::boards_view;
use gatecmd_domain::state::AppState;

/// `list_boards`.
pub fn list(state: &AppState, caller: &str) -> CallToolResult {
    let v = boards_view(state, caller);
    let mut text = String::new();
    for b in &v.boards {
        text.push_str(&format!("{} (usb {}", b.name, b.usb));
        if !b.tags.is_empty() {
            let tags: Vec<String> = b.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
            text.push_str(&format!(", {}", tags.join(" ")));
        }
        text.push_str("): ");
        match &b.device {
            Some(d) => text.push_str(&format!(
                "{:04x}:{:04x} attached{}",
                d.device.vid,
                d.device.pid,
                b.mode.map(|m| format!(" in {m}")).unwrap_or_default()
            )),
            None => text.push_str("nothing attached"),
        }
        if let Some(p) = &b.power {
            text.push_str(&format!(
                "; power {} ({})",
                serde_json::to_value(p.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                p.backend
            ));
        }
        match (&b.lock.holder, b.lock.held) {
            (Some(h), true) => text.push_str(&format!(
                "; held by {h} ({}), {} waiting",
                b.lock.held_by.as_deref().unwrap_or("lease"),
                b.lock.queue_len + b.match_waiting
            )),
            _ => text.push_str("; free"),
        }
        text.push('\n');
    }
    if v.boards.is_empty() {
        text.push_str("No boards are configured (the server's config has no boards: section).\n");
    }
    crate::answer::structured(&v, text)
}
