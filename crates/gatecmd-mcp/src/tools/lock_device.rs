//! `lock_device`: a lease that holds a device (or a board's port, or any lock key) across
//! commands; `unlock_device` ends it, `list_locks` shows it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::calls::answer::{refusal, structured};
use crate::calls::reasons::{lock_refusal, unknown_board};
use crate::handler::{GatecmdServer, session_id};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::common::{UnknownBoard, WaitTooLong};
use gatecmd_core::refusal::{Classified, RefusalReason};
use gatecmd_devices::DeviceId;
use gatecmd_domain::boards::lease_shared_keys;
use gatecmd_domain::locks::{
    ClientName, LeaseInfo, LeaseRequest, LockKey, MAX_WAIT_SECS, ParseLockKeyError, SessionId,
};
use gatecmd_domain::locks::{class_of, lock_key_of};
use gatecmd_domain::state::AppState;

/// Arguments of `lock_device`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LockRequest {
    /// Device id from list_devices (e.g. "1-2"): leases that board ("port:1-2") when its
    /// class has isolated commands, else its VID:PID key.
    #[serde(default)]
    pub device: Option<String>,
    /// Or a lock key directly: "usb:2207:350b" (every board of that VID:PID), "group:NAME",
    /// or "port:1-2" (one board, for isolated commands) — works for a board that is not
    /// plugged in yet.
    #[serde(default)]
    pub key: Option<String>,
    /// Lease lifetime in seconds (default from the server's config); renewed by each command
    /// run under the lease.
    #[serde(default)]
    pub ttl_secs: Option<u64>,
    /// How long to queue if the key is busy (default 0: answer at once).
    #[serde(default)]
    pub wait_secs: Option<u64>,
    /// Shown to others who find the device busy (e.g. "flashing rk3588 image").
    #[serde(default)]
    pub note: Option<String>,
}

/// Result of `lock_device` (or a refusal in its place, see [`crate::calls::answer::or_refusal`]).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct LeaseResult {
    /// Pass this as `lease` with each execute_command on the device, and to unlock_device.
    pub lease_id: String,
    pub key: String,
    pub holder: String,
    #[schemars(with = "String")]
    pub expires_at: DateTime<Utc>,
    pub ttl_secs: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Keys the lease also holds shared: a board lease's VID:PID key (nobody takes the
    /// whole VID:PID while the board is leased; other boards stay free).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_keys: Vec<String>,
}

impl From<&LeaseInfo> for LeaseResult {
    fn from(l: &LeaseInfo) -> Self {
        LeaseResult {
            lease_id: l.lease_id.0.clone(),
            key: l.key.to_string(),
            holder: l.holder.0.clone(),
            expires_at: l.expires_at,
            ttl_secs: l.ttl_secs,
            note: l.note.clone(),
            shared_keys: vec![],
        }
    }
}

#[tool_router(router = lock_device_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Takes a lease on a device's lock.
    #[tool(
        description = "Lease a device (by device id, or by lock key such as usb:2207:350b) so that only you \
                       run commands on it across several calls, e.g. db → re-enumeration → wl → rd. Pass \
                       the returned lease_id as `lease` to execute_command. The lease renews with each \
                       command and expires after ttl_secs of inactivity. wait_secs queues fairly if busy.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = schema_for_output::<LeaseResult>()
    )]
    async fn lock_device(
        &self,
        Parameters(req): Parameters<LockRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(lock(&self.state, &who, session_id(&ctx), req, &ctx).await)
    }
}

/// Why `lock_device` refused before asking the lock manager (whose own refusals are a
/// `LockError`, classified by `lock_reason`).
#[derive(Debug, thiserror::Error)]
enum KeyError {
    #[error("give either device or key, not both")]
    Both,
    #[error(
        "give device (an id from list_devices) or key (e.g. \"usb:2207:350b\" or \"port:1-2\")"
    )]
    Neither,
    #[error("{0}")]
    BadKey(#[from] ParseLockKeyError),
    #[error("{0}")]
    BadDevice(#[from] gatecmd_devices::DeviceError),
    #[error(
        "device {0} is not attached. To lease a board that is not plugged in yet, pass its key \
         (e.g. key: \"usb:2207:350b\", or key: \"port:{0}\" for that port); list_devices shows what is attached."
    )]
    NotAttached(String),
    #[error(transparent)]
    UnknownBoard(#[from] UnknownBoard),
    #[error(transparent)]
    WaitTooLong(#[from] WaitTooLong),
    #[error("cancelled while waiting for the lock")]
    Cancelled,
}

impl Classified for KeyError {
    fn reason(&self) -> RefusalReason {
        match self {
            KeyError::Both | KeyError::Neither | KeyError::BadKey(_) | KeyError::BadDevice(_) => {
                RefusalReason::InvalidRequest
            }
            KeyError::NotAttached(_) => RefusalReason::DeviceAbsent,
            KeyError::UnknownBoard(e) => e.reason(),
            KeyError::WaitTooLong(e) => e.reason(),
            KeyError::Cancelled => RefusalReason::Cancelled,
        }
    }
}

/// Resolves `device` or `key` to a lock key, and the keys the lease holds shared.
///
/// - `key: "port:1-2"` leases that board; when a board is attached there, its VID:PID
///   (or group) key is held shared, so nobody takes the whole VID:PID meanwhile.
/// - `device: "1-2"` leases the board (`port:1-2`, as above) when its class is used by
///   an isolated command — such commands lock per board; otherwise the device's
///   VID:PID (or group) key, which covers every board of that VID:PID.
/// - `key: "usb:…"` / `"group:…"` as given.
fn key_for(
    state: &AppState,
    device: Option<&str>,
    key: Option<&str>,
) -> Result<(LockKey, Vec<LockKey>), KeyError> {
    let config = state.config();
    let board_shared = |id: &DeviceId| -> Vec<LockKey> {
        state
            .registry
            .get(id)
            .map(|dev| vec![lock_key_of(&config, &dev)])
            .unwrap_or_default()
    };
    match (device, key) {
        (Some(_), Some(_)) => Err(KeyError::Both),
        (None, None) => Err(KeyError::Neither),
        (None, Some(k)) => {
            let key = k.parse::<LockKey>()?;
            let shared = match &key {
                LockKey::Port(id) => id
                    .parse::<DeviceId>()
                    .map(|id| board_shared(&id))
                    .unwrap_or_default(),
                // The same holds as lock_board's, so that both ways lease the same thing.
                LockKey::Board(name) => {
                    let Some(b) = config.board(name) else {
                        return Err(unknown_board(&config, name).into());
                    };
                    lease_shared_keys(&config, b, state.registry.get(&b.usb).as_ref())
                }
                _ => vec![],
            };
            Ok((key, shared))
        }
        (Some(d), None) => {
            let id: DeviceId = d.parse()?;
            match state.registry.get(&id) {
                Some(dev) => {
                    let isolated =
                        class_of(&config, &dev).is_some_and(|c| config.class_is_isolated(&c.name));
                    if isolated {
                        Ok((LockKey::Port(id.to_string()), board_shared(&id)))
                    } else {
                        Ok((lock_key_of(&config, &dev), vec![]))
                    }
                }
                None => Err(KeyError::NotAttached(d.to_string())),
            }
        }
    }
}

/// `lock_device`.
pub async fn lock(
    state: &AppState,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: LockRequest,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let (key, shared) = match key_for(state, req.device.as_deref(), req.key.as_deref()) {
        Ok(k) => k,
        Err(e) => return refusal(e.into()),
    };
    let wait = match WaitTooLong::check(req.wait_secs.unwrap_or(0), MAX_WAIT_SECS) {
        Ok(w) => w,
        Err(e) => return refusal(KeyError::from(e).into()),
    };
    let lease_req = LeaseRequest {
        key,
        client: ClientName(who.name.clone()),
        session,
        ttl: req.ttl_secs.map(Duration::from_secs),
        note: req.note.filter(|n| !n.trim().is_empty()),
        wait,
        shared: shared.clone(),
    };
    // A cancelled request leaves the queue at once: dropping the future removes the waiter.
    let taken = tokio::select! {
        r = state.locks.lock(lease_req) => r,
        _ = ctx.ct.cancelled() => return refusal(KeyError::Cancelled.into()),
    };
    match taken {
        Ok(info) => {
            let mut r = LeaseResult::from(&info);
            r.shared_keys = shared.iter().map(|k| k.to_string()).collect();
            let text = format!(
                "lease {} on {} for {}; expires at {} unless renewed (each command under the lease renews it for {} s).\n\
                 Pass lease: \"{}\" with execute_command; release with unlock_device.",
                r.lease_id,
                r.key,
                r.holder,
                r.expires_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                r.ttl_secs,
                r.lease_id
            );
            structured(&r, text)
        }
        Err(e) => refusal(lock_refusal(&e)),
    }
}
