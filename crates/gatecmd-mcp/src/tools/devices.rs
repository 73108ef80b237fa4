//! `list_devices` and `wait_for_device`: the device registry as agents see it, with the
//! class label from the config and the lock state of each device's key.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use crate::list_cache::{ListCache, Stamp};
use crate::views::{DeviceView, render_device};
use gatecmd_core::refusal::{Classified, RefusalReason};
use gatecmd_devices::{Device, families};
use gatecmd_domain::config::Config;
use gatecmd_domain::locks::class_of;
use gatecmd_domain::state::AppState;

/// Why `list_devices` or `wait_for_device` said no.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DevicesError {
    #[error("{field} {value:?} is not 4 hex digits (e.g. \"2207\")")]
    NotHex { field: &'static str, value: String },
    #[error("mode {given:?} is not a mode of the families table; modes: {}", families::modes().join(", "), given = .0)]
    BadMode(String),
    #[error("family {given:?} is not in the families table; families: {}", families::families().join(", "), given = .0)]
    BadFamily(String),
    #[error(
        "unknown device class {class:?}; classes: {}",
        if known.is_empty() { "none configured".to_string() } else { known.join(", ") }
    )]
    UnknownClass { class: String, known: Vec<String> },
    #[error("the device monitor stopped; try again later")]
    MonitorStopped,
    #[error("cancelled")]
    Cancelled,
}

impl Classified for DevicesError {
    fn reason(&self) -> RefusalReason {
        match self {
            DevicesError::NotHex { .. }
            | DevicesError::BadMode(_)
            | DevicesError::BadFamily(_)
            | DevicesError::UnknownClass { .. } => RefusalReason::InvalidRequest,
            DevicesError::MonitorStopped => RefusalReason::ShuttingDown,
            DevicesError::Cancelled => RefusalReason::Cancelled,
        }
    }
}

/// Filters of `list_devices` (all optional; all must match).
#[derive(Debug, Default, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeviceFilter {
    /// Device id (physical port path, e.g. "1-2").
    #[serde(default)]
    pub id: Option<String>,
    /// Vendor id, 4 hex digits (e.g. "2207").
    #[serde(default)]
    pub vid: Option<String>,
    /// Product id, 4 hex digits (e.g. "350b").
    #[serde(default)]
    pub pid: Option<String>,
    /// Device class name from the server's config (e.g. "rockusb").
    #[serde(default)]
    pub class: Option<String>,
    /// Mode within the device's family: "maskrom" or "loader" (rockusb), "fastboot",
    /// "dfu", "sdps", "fel", … (docs/FAMILIES.md).
    #[serde(default)]
    pub mode: Option<String>,
    /// Family: "rockusb", "fastboot", "dfu", "imx_sdp", "sunxi_fel", … (docs/FAMILIES.md).
    #[serde(default)]
    pub family: Option<String>,
}

impl DeviceFilter {
    /// No filter given: every device matches.
    pub fn is_empty(&self) -> bool {
        [
            &self.id,
            &self.vid,
            &self.pid,
            &self.class,
            &self.mode,
            &self.family,
        ]
        .iter()
        .all(|v| v.is_none())
    }

    /// Checks the filter's values; the error tells the agent the valid forms.
    pub fn validate(&self, config: &Config) -> Result<(), DevicesError> {
        for (field, v) in [("vid", &self.vid), ("pid", &self.pid)] {
            if let Some(v) = v
                && (u16::from_str_radix(v, 16).is_err() || v.len() != 4)
            {
                return Err(DevicesError::NotHex {
                    field,
                    value: v.clone(),
                });
            }
        }
        if let Some(m) = &self.mode
            && families::mode_named(m).is_none()
        {
            return Err(DevicesError::BadMode(m.clone()));
        }
        if let Some(f) = &self.family
            && families::family_named(f).is_none()
        {
            return Err(DevicesError::BadFamily(f.clone()));
        }
        if let Some(c) = &self.class
            && config.device_class(c).is_none()
        {
            return Err(DevicesError::UnknownClass {
                class: c.clone(),
                known: config.devices.iter().map(|d| d.name.clone()).collect(),
            });
        }
        Ok(())
    }

    /// Whether `d` passes the filter.
    pub fn matches(&self, config: &Config, d: &Device) -> bool {
        let hex = |v: &Option<String>, x: u16| {
            v.as_ref()
                .is_none_or(|v| u16::from_str_radix(v, 16).is_ok_and(|n| n == x))
        };
        self.id.as_ref().is_none_or(|i| i == d.id.as_str())
            && hex(&self.vid, d.vid)
            && hex(&self.pid, d.pid)
            && self
                .class
                .as_ref()
                .is_none_or(|c| class_of(config, d).is_some_and(|k| &k.name == c))
            && self.mode.as_deref().is_none_or(|m| d.mode == Some(m))
            && self.family.as_deref().is_none_or(|f| d.family == Some(f))
    }

    fn describe(&self) -> String {
        let parts: Vec<String> = [
            ("id", &self.id),
            ("vid", &self.vid),
            ("pid", &self.pid),
            ("class", &self.class),
            ("mode", &self.mode),
        ]
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
        .collect();
        if parts.is_empty() {
            "any device".into()
        } else {
            parts.join(", ")
        }
    }
}

/// Result of `list_devices`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(transform = super::or_refusal)]
pub struct DeviceList {
    pub devices: Vec<DeviceView>,
    /// Which event source keeps the list current (udev monitor, kernel uevents, rescan…).
    pub event_source: String,
}

/// `list_devices`. The unfiltered answer comes from `lists` while nothing it shows has
/// changed.
pub fn list(
    state: &AppState,
    lists: &ListCache,
    caller: &str,
    filter: DeviceFilter,
) -> CallToolResult {
    if !filter.is_empty() {
        return build_list(state, &state.config(), caller, filter);
    }
    let stamp = Stamp::now(state.config(), &state.registry, &state.locks);
    if let Some(answer) = lists.get(&stamp, caller) {
        return answer;
    }
    let answer = build_list(state, &stamp.config().clone(), caller, filter);
    lists.put(stamp, caller, &answer);
    answer
}

fn build_list(
    state: &AppState,
    config: &Config,
    caller: &str,
    filter: DeviceFilter,
) -> CallToolResult {
    if let Err(e) = filter.validate(config) {
        return super::refusal(e.into());
    }
    let devices: Vec<DeviceView> = state
        .registry
        .snapshot()
        .into_iter()
        .filter(|d| filter.matches(config, d))
        .map(|d| DeviceView::new(state, config, d, caller))
        .collect();
    let mut text = if devices.is_empty() {
        format!("No device matches ({}).\n", filter.describe())
    } else {
        devices
            .iter()
            .map(render_device)
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    };
    let source = state.registry.source().to_string();
    text.push_str(&format!("(event source: {source})\n"));
    super::structured(
        &DeviceList {
            devices,
            event_source: source,
        },
        text,
    )
}

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
#[schemars(transform = super::or_refusal)]
pub struct WaitResult {
    /// The matching device (attached), or the one that left (detached) if seen leaving.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceView>,
    pub state: WaitState,
    /// False when the timeout passed first.
    pub satisfied: bool,
    pub waited_ms: u64,
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
        return super::refusal(e.into());
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
                Err(RecvError::Closed) => return super::refusal(DevicesError::MonitorStopped.into()),
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
                return super::structured_error(&result, text);
            }
            _ = ctx.ct.cancelled() => return super::refusal(DevicesError::Cancelled.into()),
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
    super::structured(&result, text)
}
