//! The `page:` section: the bench page (`GET /`, docs/OPERATING.md) and who may view it.

use serde::Deserialize;

/// Settings of the bench page. Every key applies on reload (read per request).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PageSettings {
    /// Whether `GET /` serves the page (off: 404 on every page path).
    pub enabled: bool,
    /// The clients that may sign in to the page; absent: every configured client.
    pub viewers: Option<Vec<String>>,
    /// A session unused this long is gone (sign in again).
    pub session_idle_secs: u64,
    /// Signed-in sessions kept at once; past it, the longest-unused session of the client
    /// holding the most is ended.
    pub max_sessions: usize,
    /// Signed-in sessions one client keeps; past it, its own longest-unused one is ended.
    pub max_sessions_per_client: usize,
    /// Open event streams (`GET /events`) at once for non-admin viewers; past it, a new
    /// one is answered 503 (admins are bounded by their per-client share only).
    pub max_streams: usize,
    /// Open event streams one client may hold; past it, a new one is answered 503.
    pub max_streams_per_client: usize,
}

/// Shortest accepted `page.session_idle_secs`.
pub const PAGE_MIN_IDLE_SECS: u64 = 60;
/// Longest accepted `page.session_idle_secs` (a week).
pub const PAGE_MAX_IDLE_SECS: u64 = 7 * 24 * 3600;

impl Default for PageSettings {
    fn default() -> Self {
        PageSettings {
            enabled: true,
            viewers: None,
            session_idle_secs: 8 * 3600,
            max_sessions: 64,
            max_sessions_per_client: 8,
            max_streams: 32,
            max_streams_per_client: 4,
        }
    }
}

impl PageSettings {
    /// Whether client `name` may view the page.
    pub fn may_view(&self, name: &str) -> bool {
        self.viewers
            .as_ref()
            .is_none_or(|v| v.iter().any(|c| c == name))
    }
}
