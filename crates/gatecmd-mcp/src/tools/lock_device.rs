//! `lock_device`: a lease that holds a device (or a board's port, or any lock key) across
//! commands; `unlock_device` ends it, `list_locks` shows it. The work is the lease use
//! case's (`gatecmd_domain::usecases::lease::key`); this file holds the request, the answer
//! and the wording.

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
use crate::calls::reasons::lock_refusal;
use crate::handler::{GatecmdServer, session_id};
use gatecmd_core::identity::ClientIdentity;
use gatecmd_core::refusal::common::{UnknownBoard, WaitTooLong};
use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_domain::locks::{LeaseInfo, MAX_WAIT_SECS, ParseLockKeyError, SessionId};
use gatecmd_domain::state::AppState;
use gatecmd_domain::usecases::lease::Ask;
use gatecmd_domain::usecases::lease::key::{self as lease, Target, lease_key};

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

/// Why `lock_device` refused: the request's shape, or the lease use case's refusal
/// (the lock manager's own is a `LockError`, classified by `lock_reason`).
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

/// The lease use case's refusal, worded for the agent.
fn refusal_of(e: lease::KeyError) -> Refusal {
    match e {
        lease::KeyError::BadKey(e) => KeyError::from(e).into(),
        lease::KeyError::BadDevice(e) => KeyError::from(e).into(),
        lease::KeyError::NotAttached(d) => KeyError::NotAttached(d).into(),
        lease::KeyError::UnknownBoard(e) => KeyError::from(e).into(),
        lease::KeyError::Cancelled => KeyError::Cancelled.into(),
        lease::KeyError::Lock(e) => lock_refusal(&e),
    }
}

/// `lock_device`: the lease use case (`gatecmd_domain::usecases::lease::key`) resolves the
/// device or key and takes the lease; this words the answer.
pub async fn lock(
    state: &AppState,
    who: &ClientIdentity,
    session: Option<SessionId>,
    req: LockRequest,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let target = match (req.device.as_deref(), req.key.as_deref()) {
        (Some(_), Some(_)) => return refusal(KeyError::Both.into()),
        (None, None) => return refusal(KeyError::Neither.into()),
        (Some(d), None) => Target::Device(d),
        (None, Some(k)) => Target::Key(k),
    };
    let wait = match WaitTooLong::check(req.wait_secs.unwrap_or(0), MAX_WAIT_SECS) {
        Ok(w) => w,
        Err(e) => return refusal(KeyError::from(e).into()),
    };
    let ask = Ask {
        client: &who.name,
        session,
        ttl: req.ttl_secs.map(Duration::from_secs),
        note: req.note.as_deref(),
        wait,
    };
    // A cancelled request leaves the queue at once: dropping the future removes the waiter.
    match lease_key(state, &ask, target, &ctx.ct).await {
        Ok(taken) => {
            let mut r = LeaseResult::from(&taken.info);
            r.shared_keys = taken.shared.iter().map(|k| k.to_string()).collect();
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
        Err(e) => refusal(refusal_of(e)),
    }
}
