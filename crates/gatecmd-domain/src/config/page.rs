//! The `page:` section: the bench page (`GET /`, docs/OPERATING.md) and who may view it.

use serde::Deserialize;

use super::declare::{at_least_one, settings};

settings! {
    /// Settings of the bench page. Every key applies on reload (read per request).
    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct PageSettings {
        enabled: bool {
            default: true,
            docs: "serve the page; `false`: every page path answers 404.",
        },
        viewers: Option<Vec<String>> {
            default: None,
            shown: "all clients",
            docs: "names of the clients whose token may sign in to the page; each must be a \
                configured client (`default` when only the generated token exists).",
        },
        session_idle_secs: u64 {
            default: 8 * 3600,
            note: "(8 h)",
            check: idle_in_range,
            docs: "a session unused this long ends (60 … 604800). An open page keeps its \
                session in use.",
        },
        max_sessions: usize {
            default: 64,
            check: at_least_one,
            docs: "signed-in sessions kept at once; past it the longest-unused session of the \
                client that holds the most ends, so a sign-in always succeeds and one \
                client's sign-ins never end another's sessions while it holds more (at least \
                1).",
        },
        max_sessions_per_client: usize {
            default: 8,
            check: at_least_one,
            docs: "signed-in sessions one client keeps; past it that client's own \
                longest-unused session ends (at least 1).",
        },
        max_streams: usize {
            default: 32,
            check: at_least_one,
            docs: "open event streams (`GET /events`, one per open page) of non-admin viewers \
                at once; past it a new one gets 503 (at least 1). An admin's streams are not \
                counted here, so an admin can always open the page.",
        },
        max_streams_per_client: usize {
            default: 4,
            check: at_least_one,
            docs: "open event streams one client (admins too) holds; past it 503 naming the key \
                (at least 1).",
        },
    }
}

/// Shortest accepted `page.session_idle_secs`.
pub const PAGE_MIN_IDLE_SECS: u64 = 60;
/// Longest accepted `page.session_idle_secs` (a week).
pub const PAGE_MAX_IDLE_SECS: u64 = 7 * 24 * 3600;

fn idle_in_range(v: &u64) -> Option<String> {
    (!(PAGE_MIN_IDLE_SECS..=PAGE_MAX_IDLE_SECS).contains(v)).then(|| {
        format!(
            "must be between {PAGE_MIN_IDLE_SECS} and {PAGE_MAX_IDLE_SECS} (a week); default {}",
            PageSettings::default().session_idle_secs
        )
    })
}

impl PageSettings {
    /// Whether client `name` may view the page.
    pub fn may_view(&self, name: &str) -> bool {
        self.viewers
            .as_ref()
            .is_none_or(|v| v.iter().any(|c| c == name))
    }
}
