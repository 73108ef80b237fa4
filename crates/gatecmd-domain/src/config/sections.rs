//! The sections of plain settings: `limits:`, `leases:`, `monitor:`, `isolation:` and
//! `audit:`, each key declared once (`declare.rs`): its type, default, bounds, docs/CONFIG.md
//! row and whether a reload applies it. As written is as used: the validator checks the
//! declared bounds (and the relations between keys) and hands them on unchanged.

use std::path::PathBuf;

use serde::Deserialize;

use super::declare::{absolute, at_least_one, settings};

settings! {
    /// Resource limits; every one has a default.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct Limits {
        max_output_bytes: usize {
            default: 1024 * 1024,
            docs: "bytes kept of each of stdout and stderr; the rest is counted and dropped \
                (`stdout_truncated`).",
        },
        max_concurrent_children: usize {
            default: 16,
            check: at_least_one,
            docs: "children running at once, all clients together; further calls wait.",
        },
        max_concurrent_per_client: usize {
            default: 8,
            check: at_least_one,
            docs: "commands one client may run at once (a `flash_board` counts as one); more are \
                refused at once with this limit named.",
        },
        max_request_body_bytes: usize {
            default: 4 * 1024 * 1024,
            docs: "largest HTTP request body (413 beyond).",
        },
        kill_grace_secs: u64 {
            default: 3,
            docs: "SIGTERM → SIGKILL delay when a command is stopped.",
        },
        max_timeout_secs: u64 {
            default: 3600,
            docs: "reserved upper bound for timeouts.",
        },
        session_idle_secs: u64 {
            default: 4 * 3600,
            note: "(4 h)",
            docs: "an idle 2025-11-25 session is closed after this long, and its leases with it \
                (rmcp's default of 300 s would drop a client that only listens for hotplug \
                events; a day kept a crashed VM's sessions around for a working day).",
            restart: "rmcp's session manager takes its keep-alive once, when the router is built",
        },
        max_sessions_per_client: usize {
            default: 64,
            docs: "2025-11-25 sessions one client may hold. Opening one more closes that \
                client's longest-idle session first (its leases end with it; the log says \
                `max_sessions_per_client`), so a client that never sends DELETE neither \
                grows the server nor locks itself out. Other clients' sessions are never \
                touched.",
        },
        max_connections: usize {
            default: 512,
            docs: "open HTTP connections; past this a new connection is answered 503 \
                (`\"error\":\"busy\"`) and closed. Keep it well below the open-file limit \
                (`LimitNOFILE=2048` in the shipped unit). Read at start.",
            restart: "the accept loop takes its caps and timeouts once, when it starts",
        },
        max_unauthenticated_connections: usize {
            default: 64,
            docs: "connections on which no request has passed the token check yet; past this \
                the **oldest** of them is closed, not the new one. Read at start.",
            restart: "the accept loop takes its caps and timeouts once, when it starts",
        },
        max_unauthenticated_per_peer: usize {
            default: 32,
            docs: "the same per peer address. NAT guests all arrive from 127.0.0.1, so here too \
                the oldest is closed rather than the newcomer refused. Read at start.",
            restart: "the accept loop takes its caps and timeouts once, when it starts",
        },
        header_read_timeout_secs: u64 {
            default: 10,
            docs: "a connection must pass the token check within this long after it opens, or \
                it is closed whatever it sent (half a header, a byte at a time, `/health` \
                calls). Read at start.",
            restart: "the accept loop takes its caps and timeouts once, when it starts",
        },
        max_subscriptions_per_session: usize {
            default: 64,
            docs: "URIs one 2025-11-25 session may subscribe to with `resources/subscribe`, and \
                URIs one `subscriptions/listen` request may name; past it the call is \
                refused (`limit`, naming the key). A URI longer than 256 bytes, or naming \
                nothing that exists or could (an unconfigured board, a device id longer than \
                32 bytes), is refused too.",
        },
        max_subscriptions_per_client: usize {
            default: 256,
            docs: "URIs one client holds subscribed over all its sessions and listen streams; \
                past it refused (`limit`).",
        },
        max_listen_streams_per_client: usize {
            default: 8,
            docs: "`subscriptions/listen` streams one client holds open; past it refused \
                (`limit`). Other clients are not touched.",
        },
        max_open_answers_per_client: usize {
            default: 16,
            docs: "`/mcp` requests of one client whose answer has not been read in full (listen \
                streams are counted above instead); past it `429` JSON with a `limit` \
                refusal. Each answer is bounded (`max_output_bytes` per stream measured \
                after conversion, 16 KiB of text content), so one client's unread answers \
                hold at most about 16 × 2 MiB.",
        },
        max_waiting_reads_per_client: usize {
            default: 8,
            docs: "`console_read` calls with `wait_for` one client has waiting; past it refused \
                (`limit`).",
        },
        http_idle_timeout_secs: u64 {
            default: 120,
            docs: "an authenticated connection waits at most this long for its next request \
                header (keep-alive idle; a header that starts but does not finish in this \
                time closes it too), and is closed after this long without traffic either \
                way (SSE streams send a keep-alive every 15 s, so an open stream is not \
                idle). Read at start.",
            restart: "the accept loop takes its caps and timeouts once, when it starts",
        },
    }
}

settings! {
    /// Lease lifetimes, and how much of the lock table one client may fill.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct LeaseSettings {
        default_ttl_secs: u64 {
            default: 600,
            docs: "lease lifetime when the caller gives none.",
        },
        max_ttl_secs: u64 {
            default: 3600,
            docs: "longest lease a caller may ask for.",
        },
        max_leases_per_client: usize {
            default: 32,
            docs: "leases one client may hold (its waiting lease requests count too); more are \
                refused until one ends.",
        },
        max_waiters_per_client: usize {
            default: 32,
            docs: "requests one client may have waiting in lock queues (`wait_secs`); more are \
                refused, not queued.",
        },
        max_note_bytes: usize {
            default: 1024,
            docs: "longest lease `note`; a longer one is refused, not cut.",
        },
        max_listed: usize {
            default: 256,
            docs: "keys in one `list_locks` answer; the rest are counted in `omitted`. See \
                docs/LOCKS.md, \"Limits\".",
        },
    }
}

settings! {
    /// How the device registry is kept current.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct MonitorSettings {
        backend: String {
            default: "auto".into(),
            check: known_backend,
            docs: "`auto` (udev monitor when a udev daemon runs, else kernel uevents, else \
                sysfs rescan), `udev`, `libusb`, `poll` (sysfs rescan).",
            restart: "the device monitor is started once",
        },
        poll_interval_ms: u64 {
            default: 1000,
            docs: "rescan interval of the polling sources.",
            restart: "the device monitor is started once",
        },
        removal_grace_ms: u64 {
            default: 0,
            docs: "keep a vanished device this long in case its port re-enumerates (then one \
                `changed` instead of `removed` + `added`); 0 reports removals at once. See \
                docs/DEVICES.md.",
            restart: "the device monitor is started once",
        },
        sysfs_root: PathBuf {
            default: PathBuf::from("/sys"),
            docs: "where sysfs is mounted (tests point it at a testbed).",
            restart: "the device monitor is started once",
        },
    }
}

/// `monitor.backend` names a backend the device layer has.
#[allow(clippy::ptr_arg)] // a check takes its key's declared type
fn known_backend(backend: &String) -> Option<String> {
    backend
        .parse::<gatecmd_devices::Backend>()
        .is_err()
        .then(|| format!("unknown backend {backend:?}; use auto, udev, libusb or poll"))
}

settings! {
    /// Where the real sysfs and devfs are, for building isolated views (docs/ISOLATION.md).
    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct IsolationSettings {
        sysfs_root: PathBuf {
            default: PathBuf::from("/sys"),
            check: absolute,
            docs: "the view replaces `<sysfs_root>/bus/usb/devices`.",
        },
        devfs_root: PathBuf {
            default: PathBuf::from("/dev"),
            check: absolute,
            docs: "the view replaces `<devfs_root>/bus/usb`.",
        },
    }
}

impl IsolationSettings {
    /// The roots as the isolation module takes them.
    pub fn roots(&self) -> crate::exec::isolation::Roots {
        crate::exec::isolation::Roots {
            sysfs: self.sysfs_root.clone(),
            devfs: self.devfs_root.clone(),
        }
    }
}

settings! {
    /// Retention, record size and refusal aggregation of the audit log (docs/AUDIT.md).
    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct AuditSettings {
        max_bytes: u64 {
            default: 10 * 1024 * 1024,
            note: "(10 MiB)",
            check: audit_max_bytes,
            docs: "`audit.log` is rotated before a line would take it past this size (at least \
                4096).",
        },
        keep: u32 {
            default: 5,
            check: audit_keep,
            docs: "rotated files kept: `audit.log.1` (newest) … `audit.log.5`; older ones are \
                deleted (at least 1).",
        },
        max_record_bytes: u64 {
            default: 8 * 1024,
            check: audit_max_record_bytes,
            docs: "longest line, its `prev` and `sig` included (at least 1024); longer fields \
                are cut and logged with their length and SHA-256.",
        },
        max_age_days: u32 {
            default: 90,
            docs: "a rotated file whose newest line is older than this is deleted; 0: only \
                `keep` limits them.",
        },
        refusal_burst: u32 {
            default: 5,
            docs: "refusals of one kind from one client written in full per window; later ones \
                are counted (0: only the summary).",
        },
        refusal_window_secs: u64 {
            default: 60,
            check: audit_refusal_window,
            docs: "length of a client's refusal window; a `refusals_summarized` record closes \
                it (at least 1).",
        },
    }
}

/// Smallest accepted `audit.max_bytes`: below this, rotation would happen every few lines.
pub const AUDIT_MIN_BYTES: u64 = 4096;

/// Smallest accepted `audit.max_record_bytes`: room for a cut record's lengths and hashes.
pub const AUDIT_MIN_RECORD_BYTES: u64 = 1024;

fn audit_max_bytes(v: &u64) -> Option<String> {
    (*v < AUDIT_MIN_BYTES).then(|| {
        format!(
            "{v} is too small: rotate at {AUDIT_MIN_BYTES} bytes or more (the default is {})",
            AuditSettings::default().max_bytes
        )
    })
}

fn audit_keep(v: &u32) -> Option<String> {
    (*v == 0).then(|| "must be at least 1: rotation keeps the previous file as audit.log.1".into())
}

fn audit_max_record_bytes(v: &u64) -> Option<String> {
    (*v < AUDIT_MIN_RECORD_BYTES).then(|| {
        format!(
            "{v} is too small: at least {AUDIT_MIN_RECORD_BYTES} bytes leave room for a cut field's length and SHA-256 (the default is {})",
            AuditSettings::default().max_record_bytes
        )
    })
}

fn audit_refusal_window(v: &u64) -> Option<String> {
    (*v == 0)
        .then(|| "must be at least 1: refusals are counted per window of this many seconds".into())
}
