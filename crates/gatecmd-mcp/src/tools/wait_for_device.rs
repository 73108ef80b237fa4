//! `wait_for_device`: waits until a device matching a filter is attached, or until none
//! is, answered from the registry's change stream (no polling), with a progress
//! notification each second when the call carries a progress token.

use std::time::Duration;

use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use crate::calls::answer::{refusal, structured, structured_error};
use crate::calls::device_filter::{DeviceFilter, DevicesError};
use crate::handler::GatecmdServer;
use crate::views::{DeviceView, render_device};
use gatecmd_devices::Device;
use gatecmd_domain::state::AppState;

/// Arguments of `wait_for_device`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitRequest {
    /// Which device: any of id, vid, pid, class, mode (all given must match).
    #[serde(rename = "match", default)]
    pub filter: DeviceFilter,
    /// Wait until a matching device is attached, or until none is.
    pub state: WaitState,
    /// How long to wait (default 30, at most 3600).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// What `wait_for_device` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WaitState {
    Attached,
    Detached,
}

/// Result of `wait_for_device`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = crate::calls::answer::or_refusal)]
pub struct WaitResult {
    /// The matching device (attached), or the one that left (detached) if seen leaving.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceView>,
    pub state: WaitState,
    /// False when the timeout passed first.
    pub satisfied: bool,
    pub waited_ms: u64,
}

#[tool_router(router = wait_for_device_router, vis = "pub(crate)")]
impl GatecmdServer {
    /// Waits until a matching device is attached or detached.
    #[tool(
        description = "Wait until a device matching {id?, vid?, pid?, class?, mode?} is attached, or until none \
                       is (state: attached|detached), up to timeout_secs (default 30). Use it after a command \
                       that makes a board re-enumerate (rkdeveloptool db, rd). Returns the device.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = schema_for_output::<WaitResult>()
    )]
    async fn wait_for_device(
        &self,
        Parameters(req): Parameters<WaitRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let who = self.identity(&ctx)?;
        Ok(wait(&self.state, &who.name, req, &ctx).await)
    }
}

/// `wait_for_device`: answers from the registry's change stream, no polling.
pub async fn wait(
    state: &AppState,
    caller: &str,
    req: WaitRequest,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let config = state.config();
    if let Err(e) = req.filter.validate(&config) {
        return refusal(e.into());
    }
    let timeout = Duration::from_secs(req.timeout_secs.unwrap_or(30).clamp(1, 3600));
    // Subscribe before looking, so an event between the look and the wait is not lost.
    let mut events = state.registry.subscribe();
    let started = tokio::time::Instant::now();
    let deadline = started + timeout;
    let token = ctx.meta.get_progress_token();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut left: Option<Device> = None;
    let found = loop {
        let current: Vec<Device> = state
            .registry
            .snapshot()
            .into_iter()
            .filter(|d| req.filter.matches(&config, d))
            .collect();
        match req.state {
            WaitState::Attached if !current.is_empty() => break current.into_iter().next(),
            WaitState::Detached if current.is_empty() => break left.take(),
            _ => {}
        }
        tokio::select! {
            ev = events.recv() => match ev {
                Ok(gatecmd_devices::DeviceEvent::Removed(d)) if req.filter.matches(&config, &d) => left = Some(d),
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return refusal(DevicesError::MonitorStopped.into()),
            },
            _ = tick.tick() => {
                if let Some(t) = &token {
                    let secs = started.elapsed().as_secs_f64().floor();
                    let p = ProgressNotificationParam::new(t.clone(), secs)
                        .with_total(timeout.as_secs_f64())
                        .with_message(format!("waiting for {} to be {:?} ({secs:.0} s)", req.filter.describe(), req.state).to_lowercase());
                    let _ = ctx.peer.notify_progress(p).await;
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                let attached: Vec<String> = state.registry.snapshot().iter().map(|d| format!("{} ({:04x}:{:04x})", d.id, d.vid, d.pid)).collect();
                let result = WaitResult { device: None, state: req.state, satisfied: false, waited_ms: started.elapsed().as_millis() as u64 };
                let text = format!(
                    "timed out after {} s waiting for {} to be {}; attached now: {}",
                    timeout.as_secs(),
                    req.filter.describe(),
                    if req.state == WaitState::Attached { "attached" } else { "detached" },
                    if attached.is_empty() { "nothing".into() } else { attached.join(", ") }
                );
                return structured_error(&result, text);
            }
            _ = ctx.ct.cancelled() => return refusal(DevicesError::Cancelled.into()),
        }
    };
    let device = found.map(|d| DeviceView::new(state, &config, d, caller));
    let text = match (&device, req.state) {
        (Some(v), WaitState::Attached) => format!("attached: {}\n", render_device(v)),
        (Some(v), WaitState::Detached) => format!("detached: {}\n", render_device(v)),
        (None, _) => format!("no device matches {} (detached)\n", req.filter.describe()),
    };
    let result = WaitResult {
        device,
        state: req.state,
        satisfied: true,
        waited_ms: started.elapsed().as_millis() as u64,
    };
    structured(&result, text)
}
