//! MCP resources: `gatecmd://devices`, `gatecmd://devices/{id}`, `gatecmd://locks`,
//! `gatecmd://commands`, `gatecmd://boards`, `gatecmd://boards/{name}`,
//! `gatecmd://boards/{name}/console`, `gatecmd://boards/{name}/boots`,
//! `gatecmd://boards/{name}/boots/{n}` (JSON), and which of them an event changes.

pub mod notify;
pub mod pace;
pub mod subscriptions;

use rmcp::ErrorData as McpError;
use rmcp::model::{ErrorCode, ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use serde::Serialize;

use crate::views::{DeviceView, render_device};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_devices::{DeviceEvent, DeviceId};
use gatecmd_domain::locks::lock_key_of;
use gatecmd_domain::locks::{LockEvent, LockKey};
use gatecmd_domain::state::AppState;

pub const DEVICES: &str = "gatecmd://devices";
pub const DEVICE_PREFIX: &str = "gatecmd://devices/";
pub const DEVICE_TEMPLATE: &str = "gatecmd://devices/{id}";
pub const LOCKS: &str = "gatecmd://locks";
pub const COMMANDS: &str = "gatecmd://commands";
pub const BOARDS: &str = "gatecmd://boards";
pub const BOARD_PREFIX: &str = "gatecmd://boards/";
pub const BOARD_TEMPLATE: &str = "gatecmd://boards/{name}";
pub const CONSOLE_SUFFIX: &str = "/console";
pub const CONSOLE_TEMPLATE: &str = "gatecmd://boards/{name}/console";
/// A board's boot reports: the list, newest first, and one boot by its number.
pub const BOOTS_SUFFIX: &str = "/boots";
pub const BOOTS_TEMPLATE: &str = "gatecmd://boards/{name}/boots";
pub const BOOT_TEMPLATE: &str = "gatecmd://boards/{name}/boots/{n}";
pub const JOBS: &str = "gatecmd://jobs";
/// Pending approval requests and the last decisions (docs/APPROVALS.md).
pub const APPROVALS: &str = "gatecmd://approvals";
pub const JOB_PREFIX: &str = "gatecmd://jobs/";
pub const JOB_TEMPLATE: &str = "gatecmd://jobs/{id}";

/// The URI of one job's resource.
pub fn job_uri(id: &str) -> String {
    format!("{JOB_PREFIX}{id}")
}

const JSON: &str = "application/json";

/// The URI of one board's resource.
pub fn board_uri(name: &str) -> String {
    format!("{BOARD_PREFIX}{name}")
}

/// The URI of one board's console resource.
pub fn console_uri(board: &str) -> String {
    format!("{BOARD_PREFIX}{board}{CONSOLE_SUFFIX}")
}

/// The URI of a board's boot list.
pub fn boots_uri(board: &str) -> String {
    format!("{BOARD_PREFIX}{board}{BOOTS_SUFFIX}")
}

/// The URI of one boot of a board.
pub fn boot_uri(board: &str, n: u64) -> String {
    format!("{BOARD_PREFIX}{board}{BOOTS_SUFFIX}/{n}")
}

/// The board and boot number (none: the list) a boots resource URI names.
pub fn boots_target(uri: &str) -> Option<(&str, Option<u64>)> {
    let rest = uri.strip_prefix(BOARD_PREFIX)?;
    let (board, tail) = rest.split_once(BOOTS_SUFFIX)?;
    if board.is_empty() || board.contains('/') {
        return None;
    }
    match tail {
        "" => Some((board, None)),
        _ => {
            let n = tail.strip_prefix('/')?;
            (!n.is_empty() && n.len() <= 20 && n.bytes().all(|b| b.is_ascii_digit()))
                .then(|| n.parse().ok().map(|n| (board, Some(n))))
                .flatten()
        }
    }
}

/// The board a console resource URI names.
fn console_board(uri: &str) -> Option<&str> {
    uri.strip_prefix(BOARD_PREFIX)?
        .strip_suffix(CONSOLE_SUFFIX)
        .filter(|b| !b.is_empty() && !b.contains('/'))
}

/// The URI of one device's resource.
pub fn device_uri(id: &DeviceId) -> String {
    format!("{DEVICE_PREFIX}{id}")
}

fn resource(uri: &str, name: &str, description: &str) -> Resource {
    Resource::new(uri, name)
        .with_description(description)
        .with_mime_type(JSON)
}

/// Every concrete resource: the fixed ones and one per attached device.
pub fn list(state: &AppState) -> Vec<Resource> {
    let mut out = vec![
        resource(
            DEVICES,
            "devices",
            "All attached USB devices with class and lock state",
        ),
        resource(
            LOCKS,
            "locks",
            "Leases, running commands and waiters per lock key",
        ),
        resource(
            COMMANDS,
            "commands",
            "The allowlisted commands and their argument patterns",
        ),
        resource(
            JOBS,
            "jobs",
            "Your jobs (background and detached commands): state, progress, exit code",
        ),
        resource(
            APPROVALS,
            "approvals",
            "Approval requests waiting for an approver (exactly what will run, who asked, who may decide) and the last decisions",
        ),
    ];
    let config = state.config();
    if !config.boards.is_empty() {
        out.push(resource(
            BOARDS,
            "boards",
            "The configured boards: device at the port, console, power, lease",
        ));
    }
    for b in &config.boards {
        out.push(resource(
            &board_uri(&b.name),
            &format!("board {}", b.name),
            "One board",
        ));
    }
    for d in state.registry.snapshot() {
        let uri = device_uri(&d.id);
        let title = format!("device {} ({:04x}:{:04x})", d.id, d.vid, d.pid);
        out.push(resource(&uri, &title, "One attached USB device"));
    }
    for board in state.boots.boards() {
        out.push(resource(
            &boots_uri(&board),
            &format!("boots of board {board}"),
            "A board's boot reports, newest first: trigger, stages, faults, outcome (needs the board's lease)",
        ));
    }
    for board in state.consoles.boards() {
        let title = format!("console of board {board}");
        out.push(resource(
            &console_uri(&board),
            &title,
            "A board's serial console: state and recent output (needs the board's lease)",
        ));
    }
    out
}

/// The resource templates.
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(DEVICE_TEMPLATE, "device")
            .with_description("One USB device by its id (physical port path, e.g. 1-2.3)")
            .with_mime_type(JSON),
        ResourceTemplate::new(BOARD_TEMPLATE, "board")
            .with_description("One configured board by name (see gatecmd://boards)")
            .with_mime_type(JSON),
        ResourceTemplate::new(JOB_TEMPLATE, "job")
            .with_description("One of your jobs by id (job-N); wait_job reads its output")
            .with_mime_type(JSON),
        ResourceTemplate::new(CONSOLE_TEMPLATE, "board console")
            .with_description(
                "A board's serial console: state and the last 4 KiB of output, cleaned \
                 (console_read reads more); needs the board's lease unless admin",
            )
            .with_mime_type(JSON),
        ResourceTemplate::new(BOOTS_TEMPLATE, "board boots")
            .with_description(
                "A board's boot reports, newest first (boots.keep of them): trigger, started_at, \
                 stages, faults, outcome; a new boot and a changed outcome notify subscribers; \
                 needs the board's lease unless admin",
            )
            .with_mime_type(JSON),
        ResourceTemplate::new(BOOT_TEMPLATE, "board boot")
            .with_description(
                "One boot of a board by its number, as boot_report answers it (with its \
                 transcript); needs the board's lease unless admin",
            )
            .with_mime_type(JSON),
    ]
}

fn json_contents(uri: &str, value: &impl Serialize) -> Result<ReadResourceResult, McpError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| McpError::internal_error(format!("cannot serialize {uri}: {e}"), None))?;
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type(JSON),
    ]))
}

/// Resource-not-found, with `data.uri` as the spec asks.
pub fn not_found(uri: &str, why: &str) -> McpError {
    McpError::new(
        ErrorCode::RESOURCE_NOT_FOUND,
        format!("resource {uri} not found: {why}"),
        Some(serde_json::json!({ "uri": uri })),
    )
}

/// Reads one resource for `who`.
pub fn read(
    state: &AppState,
    who: &ClientIdentity,
    uri: &str,
) -> Result<ReadResourceResult, McpError> {
    let config = state.config();
    match uri {
        DEVICES => {
            let devices: Vec<DeviceView> = state
                .registry
                .snapshot()
                .into_iter()
                .map(|d| DeviceView::new(state, &config, d, &who.name))
                .collect();
            json_contents(
                uri,
                &serde_json::json!({ "devices": devices, "event_source": state.registry.source().to_string() }),
            )
        }
        LOCKS => json_contents(uri, &crate::views::locks_view(state, &who.name, who.admin)),
        JOBS => json_contents(uri, &crate::views::jobs_view(state, who)),
        APPROVALS => json_contents(
            uri,
            &serde_json::json!({
                "pending": state.approvals.list_pending(),
                "decided": state.approvals.list_decided(),
            }),
        ),
        _ if uri.starts_with(JOB_PREFIX) => {
            let id = &uri[JOB_PREFIX.len()..];
            let v = crate::views::job_view(state, who, id)
                .ok_or_else(|| not_found(uri, "no such job of yours; see gatecmd://jobs"))?;
            json_contents(uri, &v)
        }
        BOARDS => json_contents(uri, &crate::views::boards_view(state, &who.name)),
        _ if boots_target(uri).is_some() => read_boots(state, who, uri),
        // `gatecmd://boards/{name}/console` is the console's, below.
        _ if uri.starts_with(BOARD_PREFIX) && console_board(uri).is_none() => {
            let name = &uri[BOARD_PREFIX.len()..];
            let b = config
                .board(name)
                .ok_or_else(|| not_found(uri, "no board of that name; see gatecmd://boards"))?;
            json_contents(uri, &crate::views::board_view(state, &config, b, &who.name))
        }
        COMMANDS => json_contents(uri, &crate::views::commands_view(&config, who)),
        _ if console_board(uri).is_some() => {
            let board = console_board(uri).unwrap_or_default();
            let boards = config.board_names();
            match crate::console::console_access::snapshot(&state.consoles, &boards, who, board) {
                Ok(s) => json_contents(uri, &s),
                Err(r)
                    if matches!(
                        r.reason,
                        gatecmd_core::refusal::RefusalReason::NotConfigured
                            | gatecmd_core::refusal::RefusalReason::NotFound
                    ) =>
                {
                    Err(not_found(uri, &r.message))
                }
                Err(r) => Err(McpError::invalid_request(
                    r.message.clone(),
                    Some(serde_json::json!({ "uri": uri, "refusal": r })),
                )),
            }
        }
        _ => {
            let Some(id) = uri.strip_prefix(DEVICE_PREFIX) else {
                return Err(not_found(
                    uri,
                    "gatecmd serves gatecmd://devices, gatecmd://devices/{id}, gatecmd://locks, gatecmd://commands",
                ));
            };
            let id: DeviceId = id
                .parse()
                .map_err(|_| not_found(uri, "not a device id (e.g. 1-2.3)"))?;
            let d = state.registry.get(&id).ok_or_else(|| {
                not_found(
                    uri,
                    "no device is attached on that port; see gatecmd://devices",
                )
            })?;
            let view = DeviceView::new(state, &config, d, &who.name);
            tracing::trace!(device = %render_device(&view), "read");
            json_contents(uri, &view)
        }
    }
}

/// A refusal as a resource error: what does not exist is not found, the rest (not the
/// board's holder) an invalid request carrying the refusal.
fn refused(uri: &str, r: gatecmd_core::refusal::Refusal) -> McpError {
    use gatecmd_core::refusal::RefusalReason as R;
    match r.reason {
        R::NotConfigured | R::NotFound => not_found(uri, &r.message),
        _ => McpError::invalid_request(
            r.message.clone(),
            Some(serde_json::json!({ "uri": uri, "refusal": r })),
        ),
    }
}

/// `gatecmd://boards/{name}/boots` and `.../boots/{n}`, for the board's holder or `admin`.
fn read_boots(
    state: &AppState,
    who: &ClientIdentity,
    uri: &str,
) -> Result<ReadResourceResult, McpError> {
    let Some((board, n)) = boots_target(uri) else {
        return Err(not_found(uri, "not a boots resource"));
    };
    let boards = state.config().board_names();
    crate::console::console_access::readable(&state.consoles, &boards, who, board)
        .map_err(|e| refused(uri, e.into()))?;
    // No such boot (none yet, or no longer kept) is not found, with what there is.
    let lookup =
        |e: gatecmd_domain::boards::boot_reports::BootLookup| not_found(uri, &e.to_string());
    match n {
        None => {
            let boots = state.boots.list(board).unwrap_or_default();
            json_contents(
                uri,
                &serde_json::json!({
                    "board": board,
                    "keep": state.config().boots.keep,
                    "boots": boots,
                }),
            )
        }
        Some(n) => json_contents(uri, &state.boots.report(board, Some(n)).map_err(lookup)?),
    }
}

/// Whether `uri` names a resource this server has (or may have: a device not attached now).
pub fn is_known(uri: &str) -> bool {
    matches!(uri, DEVICES | LOCKS | COMMANDS | BOARDS | JOBS | APPROVALS)
        || uri
            .strip_prefix(JOB_PREFIX)
            .is_some_and(|id| id.starts_with("job-") && id[4..].parse::<u64>().is_ok())
        || console_board(uri).is_some()
        || boots_target(uri).is_some()
        || uri
            .strip_prefix(BOARD_PREFIX)
            .is_some_and(|n| !n.is_empty() && !n.contains('/'))
        || uri
            .strip_prefix(DEVICE_PREFIX)
            .is_some_and(|id| id.parse::<DeviceId>().is_ok())
}

/// What one change means for subscribers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Change {
    /// Resources whose content changed.
    pub updated: Vec<String>,
    /// Whether the resource list changed (a device came or went).
    pub list_changed: bool,
}

impl Change {
    /// Everything may have changed (after missed events).
    pub fn everything(state: &AppState) -> Change {
        let mut updated = vec![DEVICES.to_string(), LOCKS.to_string()];
        updated.extend(state.registry.snapshot().iter().map(|d| device_uri(&d.id)));
        let config = state.config();
        if !config.boards.is_empty() {
            updated.push(BOARDS.to_string());
            updated.extend(config.boards.iter().map(|b| board_uri(&b.name)));
        }
        Change {
            updated,
            list_changed: true,
        }
    }

    /// A device event (and the board on its port, if any).
    pub fn from_device(state: &AppState, ev: &DeviceEvent) -> Change {
        let mut updated = vec![DEVICES.to_string(), device_uri(ev.id())];
        if let Some(b) = state.config().board_at(&ev.id().to_string()) {
            updated.push(BOARDS.to_string());
            updated.push(board_uri(&b.name));
        }
        Change {
            updated,
            list_changed: matches!(ev, DeviceEvent::Added(_) | DeviceEvent::Removed(_)),
        }
    }

    /// A boot started, or its outcome changed.
    pub fn from_boot(c: &gatecmd_domain::boards::boot_reports::BootChange) -> Change {
        Change {
            updated: vec![boots_uri(&c.board), boot_uri(&c.board, c.boot)],
            list_changed: false,
        }
    }

    /// A job's state, progress or detach changed.
    pub fn from_job(id: &str) -> Change {
        Change {
            updated: vec![JOBS.to_string(), job_uri(id)],
            list_changed: false,
        }
    }

    /// A lock event: the locks resource, and every attached device whose key it concerns.
    pub fn from_lock(state: &AppState, ev: &LockEvent) -> Change {
        let config = state.config();
        let mut updated = vec![LOCKS.to_string()];
        let devices: Vec<String> = state
            .registry
            .snapshot()
            .iter()
            .filter(|d| lock_key_of(&config, d) == ev.key)
            .map(|d| device_uri(&d.id))
            .collect();
        if !devices.is_empty() {
            updated.push(DEVICES.to_string());
            updated.extend(devices);
        }
        // A board's view shows its board key's lock, and its power state (which changes
        // while power_board holds that key); a port lease shows in its device.
        let board = match &ev.key {
            LockKey::Board(name) => config.board(name),
            LockKey::Port(id) => config.board_at(id),
            _ => None,
        };
        if let Some(b) = board {
            updated.push(BOARDS.to_string());
            updated.push(board_uri(&b.name));
        }
        Change {
            updated,
            list_changed: false,
        }
    }
}
