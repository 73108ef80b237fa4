//! Which devices a call means: the filter `list_devices` takes and `wait_for_device`
//! takes as its `match`, checked against the configuration, and why one is refused.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use gatecmd_core::refusal::{Classified, RefusalReason};
use gatecmd_devices::{Device, families};
use gatecmd_domain::config::Config;
use gatecmd_domain::locks::class_of;

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

    /// The filter in words (`vid=2207, mode=maskrom`, or `any device`).
    pub fn describe(&self) -> String {
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
