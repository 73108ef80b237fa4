//! The JSON view of the bench the page renders: devices, boards, locks with their queues,
//! running commands, the last decisions, the event source, uptime and version. Built for
//! no particular client: no lease id appears in it (a lease id is half of the capability
//! to use a key), so the page never holds one.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::assets::secured;
use super::{Page, Viewer, denied};
use crate::transport::conn_limits::ConnTicket;
use gatecmd_domain::audit::Decision;
use gatecmd_domain::jobs::running::RunningCommand;
use gatecmd_mcp::views::BoardView;
use gatecmd_mcp::views::DeviceView;

/// No client's name: views built for it show nobody's lease id.
const NOBODY: &str = "";

/// Everything the page shows.
#[derive(Debug, Serialize)]
pub struct Snapshot {
    pub version: &'static str,
    /// The server's clock, so the page counts expiries down without trusting its own.
    pub now: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
    pub uptime_secs: u64,
    /// Where hotplug events come from (udev, kernel uevents, polling).
    pub source: String,
    pub viewer: ViewerInfo,
    pub devices: Vec<DeviceView>,
    pub boards: Vec<BoardView>,
    /// Each board's latest boot (boards with a console and a boot), without transcript.
    pub boots: Vec<gatecmd_domain::boards::boot_reports::BootSummary>,
    pub locks: Vec<LockRow>,
    /// Keys in use beyond `leases.max_listed`, not in `locks`.
    pub locks_omitted: usize,
    /// `lock_board {match}` requests waiting for any matching board.
    pub board_match_waiters: usize,
    pub running: Vec<RunningCommand>,
    /// Newest first, at most `audit::RECENT`.
    pub decisions: Vec<Decision>,
    /// Approval requests waiting, oldest first (docs/APPROVALS.md).
    pub approvals: Vec<PendingRow>,
}

/// A pending approval request, and whether the viewer may decide it (the page shows the
/// buttons only then; the POST checks again).
#[derive(Debug, Serialize)]
pub struct PendingRow {
    #[serde(flatten)]
    pub request: gatecmd_domain::approvals::RequestView,
    pub may_decide: bool,
}

#[derive(Debug, Serialize)]
pub struct ViewerInfo {
    pub client: String,
    /// Whether the page offers the release button.
    pub admin: bool,
}

/// One key in use, with who waits for it.
#[derive(Debug, Serialize)]
pub struct LockRow {
    pub key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// `lease`, `command`, or none (only shared holds or waiters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The command running on the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
    /// Clients waiting, in queue order.
    pub queue: Vec<String>,
    /// Boards holding the key through their own key (`port:…` by client).
    pub shared: Vec<String>,
}

/// Builds the snapshot for `viewer`.
pub fn build(p: &Page, viewer: &Viewer) -> Snapshot {
    let state = &p.state;
    let config = state.config();
    let locks = state.locks.snapshot();
    Snapshot {
        version: env!("CARGO_PKG_VERSION"),
        now: Utc::now(),
        started_at: p.started_at,
        uptime_secs: p.started.elapsed().as_secs(),
        source: state.registry.source().to_string(),
        viewer: ViewerInfo {
            client: viewer.client.clone(),
            admin: viewer.admin,
        },
        devices: state
            .registry
            .snapshot()
            .into_iter()
            .map(|d| DeviceView::new(state, &config, d, NOBODY))
            .collect(),
        boards: gatecmd_mcp::views::boards_view(state, NOBODY).boards,
        boots: state
            .boots
            .boards()
            .iter()
            .filter_map(|b| state.boots.summary(b, None).ok())
            .collect(),
        locks: locks
            .keys
            .into_iter()
            .map(|k| LockRow {
                key: k.key.to_string(),
                holder: k
                    .lease
                    .as_ref()
                    .map(|l| l.holder.0.clone())
                    .or_else(|| k.running.as_ref().map(|r| r.client.0.clone())),
                held_by: if k.lease.is_some() {
                    Some("lease")
                } else if k.running.is_some() {
                    Some("command")
                } else {
                    None
                },
                note: k.lease.as_ref().and_then(|l| l.note.clone()),
                since: k
                    .lease
                    .as_ref()
                    .map(|l| l.acquired_at)
                    .or(k.running.as_ref().map(|r| r.since)),
                expires_at: k.lease.as_ref().map(|l| l.expires_at),
                running: k.running.as_ref().map(|r| r.command.clone()),
                queue: k.waiting.iter().map(|c| c.0.clone()).collect(),
                shared: k
                    .shared
                    .iter()
                    .map(|s| format!("{} by {}", s.via, s.client.0))
                    .collect(),
            })
            .collect(),
        locks_omitted: locks.omitted,
        board_match_waiters: state.boards.queue.len(),
        running: state.running.list(),
        decisions: state.audit.recent().newest_first(),
        approvals: state
            .approvals
            .list_pending()
            .into_iter()
            .map(|r| PendingRow {
                may_decide: r.client != viewer.client && r.approvers.contains(&viewer.client),
                request: r,
            })
            .collect(),
    }
}

/// `GET /state`: the snapshot as JSON (401 without a session). The page uses it to tell
/// "signed out" from "server away" when its event stream drops.
pub(super) async fn state(State(p): State<Arc<Page>>, req: Request) -> Response {
    let ticket = req.extensions().get::<ConnTicket>();
    let viewer = match p.viewer(req.headers(), ticket) {
        Ok(v) => v,
        Err(d) => return denied(d),
    };
    match serde_json::to_string(&build(&p, &viewer)) {
        Ok(json) => secured(StatusCode::OK, "application/json", json),
        Err(e) => secured(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            e.to_string(),
        ),
    }
}
