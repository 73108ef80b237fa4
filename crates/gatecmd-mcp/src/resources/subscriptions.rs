//! What a client may subscribe to, and how much of it (issue 22): every subscription is
//! bounded in URI length, in what it may name, per session or listen stream, and per
//! client over all of them.
//!
//! A URI is accepted when it names something that exists now (the fixed resources, an
//! attached device, a configured board, its console or its boots) or a template instance
//! whose name could exist: a configured board's, a boot number of a board with a console,
//! or a device id (`1-2.3`) of at most
//! [`MAX_DEVICE_ID_BYTES`], so that a client may wait for a board to be plugged in.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rmcp::ErrorData as McpError;

use crate::resources::{self, BOARD_PREFIX, CONSOLE_SUFFIX, DEVICE_PREFIX};
use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_devices::DeviceId;
use gatecmd_domain::limits::quotas::{Full, Kind, Ticket};
use gatecmd_domain::state::AppState;

/// Longest subscribable URI, in bytes (the longest real one is a board name's console).
pub const MAX_URI_BYTES: usize = 256;
/// Longest device id a subscription may name: a bus and seven hub tiers, with room.
pub const MAX_DEVICE_ID_BYTES: usize = 32;

/// Why a URI is not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unacceptable {
    /// Longer than [`MAX_URI_BYTES`].
    TooLong(usize),
    /// Names nothing that exists or could exist here.
    Unknown,
}

/// Whether `uri` may be subscribed to now.
pub fn check_uri(state: &AppState, uri: &str) -> Result<(), Unacceptable> {
    if uri.len() > MAX_URI_BYTES {
        return Err(Unacceptable::TooLong(uri.len()));
    }
    if matches!(
        uri,
        resources::DEVICES
            | resources::LOCKS
            | resources::COMMANDS
            | resources::JOBS
            | resources::APPROVALS
    ) {
        return Ok(());
    }
    // A job id is `job-N`: bounded and syntactic, since a client may subscribe to a job
    // it is about to start (its contents are per caller, see resources.rs).
    if let Some(id) = uri.strip_prefix(resources::JOB_PREFIX) {
        let digits = id.strip_prefix("job-").unwrap_or("");
        return if !digits.is_empty()
            && digits.len() <= 20
            && digits.bytes().all(|b| b.is_ascii_digit())
        {
            Ok(())
        } else {
            Err(Unacceptable::Unknown)
        };
    }
    let config = state.config();
    if uri == resources::BOARDS && !config.boards.is_empty() {
        return Ok(());
    }
    // A board's boots (the list or boot N, one not started yet included) while it has a
    // console.
    if let Some((board, _)) = resources::boots_target(uri) {
        return if state.boots.boards().iter().any(|b| b == board) {
            Ok(())
        } else {
            Err(Unacceptable::Unknown)
        };
    }
    if let Some(rest) = uri.strip_prefix(BOARD_PREFIX) {
        let (name, console) = match rest.strip_suffix(CONSOLE_SUFFIX) {
            Some(name) => (name, true),
            None => (rest, false),
        };
        let known = if console {
            state.consoles.get(name).is_some()
        } else {
            config.board(name).is_some()
        };
        return if known {
            Ok(())
        } else {
            Err(Unacceptable::Unknown)
        };
    }
    if let Some(id) = uri.strip_prefix(DEVICE_PREFIX)
        && id.len() <= MAX_DEVICE_ID_BYTES
        && id.parse::<DeviceId>().is_ok()
    {
        return Ok(());
    }
    Err(Unacceptable::Unknown)
}

/// Why a subscription (or a listen stream) was refused: every one is a limit.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SubscriptionRefusal {
    #[error(
        "{what} refused: {full}; unsubscribe or close a stream first (or ask the operator to raise {})",
        full.kind.key()
    )]
    ShareFull { what: &'static str, full: Full },
    #[error(
        "resource URI of {0} bytes refused: at most {MAX_URI_BYTES}; resources/list and \
         resources/templates/list show what exists"
    )]
    UriTooLong(usize),
    #[error(
        "resources/subscribe refused: limits.max_subscriptions_per_session is {cap} and this \
         session holds {held}; unsubscribe first"
    )]
    SessionFull { cap: usize, held: usize },
    #[error(
        "subscriptions/listen refused: it names {named} resources and \
         limits.max_subscriptions_per_session is {cap}; ask for fewer"
    )]
    TooManyNamed { named: usize, cap: usize },
}

impl Classified for SubscriptionRefusal {
    fn reason(&self) -> RefusalReason {
        match self {
            SubscriptionRefusal::ShareFull { .. }
            | SubscriptionRefusal::UriTooLong(_)
            | SubscriptionRefusal::SessionFull { .. }
            | SubscriptionRefusal::TooManyNamed { .. } => RefusalReason::Limit,
        }
    }
}

impl From<SubscriptionRefusal> for McpError {
    /// An invalid-params error carrying `{refusal}` in its data.
    fn from(e: SubscriptionRefusal) -> McpError {
        let r = Refusal::of(&e);
        McpError::invalid_params(r.message.clone(), Some(serde_json::json!({ "refusal": r })))
    }
}

/// The refusal of a full share, as an MCP error carrying `{refusal}` in its data.
pub fn limit_error(full: &Full, what: &'static str) -> McpError {
    SubscriptionRefusal::ShareFull {
        what,
        full: full.clone(),
    }
    .into()
}

/// A refusal for a URI that is too long or unknown, or a request naming too many URIs.
pub fn uri_error(uri: &str, why: &Unacceptable) -> McpError {
    match why {
        Unacceptable::TooLong(n) => SubscriptionRefusal::UriTooLong(*n).into(),
        Unacceptable::Unknown => resources::not_found(
            uri,
            "cannot subscribe: it names no resource here (a board must be configured; a device id \
             looks like 1-2.3)",
        ),
    }
}

/// The URIs one 2025-11-25 session subscribed to, counted in its client's share; the
/// share is given back when the session's handler is dropped (the session ended).
#[derive(Debug, Clone, Default)]
pub struct SessionSubscriptions {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    uris: HashSet<String>,
    ticket: Option<Ticket>,
}

impl SessionSubscriptions {
    /// Adds `uri` for `client`, within the per-session and per-client caps.
    pub fn add(&self, state: &AppState, client: &str, uri: String) -> Result<(), McpError> {
        check_uri(state, &uri).map_err(|why| uri_error(&uri, &why))?;
        let limits = state.config().limits.clone();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.uris.contains(&uri) {
            return Ok(());
        }
        if inner.uris.len() >= limits.max_subscriptions_per_session {
            return Err(SubscriptionRefusal::SessionFull {
                cap: limits.max_subscriptions_per_session,
                held: inner.uris.len(),
            }
            .into());
        }
        let cap = limits.max_subscriptions_per_client;
        match &mut inner.ticket {
            Some(t) => t.grow(1, cap),
            None => state
                .quotas
                .take(client, Kind::Subscriptions, 1, cap)
                .map(|t| inner.ticket = Some(t)),
        }
        .map_err(|full| limit_error(&full, "resources/subscribe"))?;
        inner.uris.insert(uri);
        Ok(())
    }

    /// Removes `uri` (nothing if it was not subscribed).
    pub fn remove(&self, uri: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.uris.remove(uri)
            && let Some(t) = &mut inner.ticket
        {
            t.shrink(1);
        }
    }

    /// Those of `uris` this session subscribed to.
    pub fn wanted(&self, uris: &[String]) -> Vec<String> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        uris.iter()
            .filter(|u| inner.uris.contains(*u))
            .cloned()
            .collect()
    }
}

/// What a `subscriptions/listen` stream holds: its stream slot and its URIs' share.
pub struct StreamShare {
    _stream: Ticket,
    _uris: Ticket,
}

/// [`admit_stream`] for a `subscriptions/listen` request as rmcp hands it over (what it
/// asked for, and how much of it rmcp accepted).
pub fn admit_listen(
    state: &AppState,
    client: &str,
    context: &rmcp::service::SubscriptionContext,
) -> Result<StreamShare, McpError> {
    let requested = context.requested().resource_subscriptions.as_deref();
    let accepted = context.accepted().resource_subscriptions.as_ref();
    admit_stream(
        state,
        client,
        requested.unwrap_or(&[]),
        accepted.map_or(0, Vec::len),
    )
}

/// Admits one listen stream of `client` asking for `requested` URIs: refused when it asks
/// for more than a session may, names a URI that is too long, or the client's streams or
/// subscriptions are at their caps. `accepted` is how many of them were accepted.
pub fn admit_stream(
    state: &AppState,
    client: &str,
    requested: &[String],
    accepted: usize,
) -> Result<StreamShare, McpError> {
    let limits = state.config().limits.clone();
    if requested.len() > limits.max_subscriptions_per_session {
        return Err(SubscriptionRefusal::TooManyNamed {
            named: requested.len(),
            cap: limits.max_subscriptions_per_session,
        }
        .into());
    }
    if let Some(long) = requested.iter().find(|u| u.len() > MAX_URI_BYTES) {
        return Err(uri_error(long, &Unacceptable::TooLong(long.len())));
    }
    let stream = state
        .quotas
        .take(
            client,
            Kind::ListenStreams,
            1,
            limits.max_listen_streams_per_client,
        )
        .map_err(|f| limit_error(&f, "subscriptions/listen"))?;
    let uris = state
        .quotas
        .take(
            client,
            Kind::Subscriptions,
            accepted,
            limits.max_subscriptions_per_client,
        )
        .map_err(|f| limit_error(&f, "subscriptions/listen"))?;
    Ok(StreamShare {
        _stream: stream,
        _uris: uris,
    })
}
