//! `lock_board {match: {...}}`: which boards a request may take.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::BoardConfig;
use gatecmd_devices::{Device, families};

/// A board selection: every given tag equal, and the device at its port of `family` / in
/// `mode` / attached when asked. `soc` is also read from the attached device when the
/// board's config has no `soc` tag.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct BoardMatch {
    /// The device at the board's usb port must be of this family (rockusb, fastboot, dfu,
    /// imx_sdp, sunxi_fel, …; docs/FAMILIES.md).
    #[serde(
        default,
        deserialize_with = "family",
        skip_serializing_if = "Option::is_none"
    )]
    pub family: Option<String>,
    /// The device at the board's usb port must be in this mode (maskrom, loader, fastboot,
    /// dfu, …; docs/FAMILIES.md).
    #[serde(
        default,
        deserialize_with = "mode",
        skip_serializing_if = "Option::is_none"
    )]
    pub mode: Option<String>,
    /// Whether a device must (true) or must not (false) be attached at the board's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached: Option<bool>,
    /// Tags that must be equal (e.g. soc: rk3588, model: rock-5b).
    #[serde(flatten)]
    pub tags: BTreeMap<String, String>,
}

impl BoardMatch {
    /// Whether `board`, with `device` at its usb port now, satisfies the match.
    pub fn matches(&self, board: &BoardConfig, device: Option<&Device>) -> bool {
        let tags_ok = self.tags.iter().all(|(k, v)| {
            match board.tags.get(k) {
                Some(t) => t.eq_ignore_ascii_case(v),
                // A board without a `soc` tag is what its rockusb device says it is.
                None if k == "soc" => device
                    .and_then(|d| d.soc)
                    .is_some_and(|s| s.eq_ignore_ascii_case(v)),
                None => false,
            }
        });
        let mode_ok = self
            .mode
            .as_deref()
            .is_none_or(|m| device.and_then(|d| d.mode) == Some(m));
        let family_ok = self
            .family
            .as_deref()
            .is_none_or(|f| device.and_then(|d| d.family) == Some(f));
        let attached_ok = self.attached.is_none_or(|a| device.is_some() == a);
        tags_ok && mode_ok && family_ok && attached_ok
    }

    /// The match in words, for refusals.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if let Some(f) = &self.family {
            parts.push(format!("family={f}"));
        }
        if let Some(m) = &self.mode {
            parts.push(format!("mode={m}"));
        }
        if let Some(a) = self.attached {
            parts.push(format!("attached={a}"));
        }
        if parts.is_empty() {
            "any board".into()
        } else {
            parts.join(", ")
        }
    }
}

/// A family name, parsed against the families table (an unknown one says what is known).
fn family<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let Some(name) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    families::family_named(&name)
        .map(|f| Some(f.to_string()))
        .ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown family {name:?}; known: {}",
                families::families().join(", ")
            ))
        })
}

/// A mode name, parsed against the families table.
fn mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let Some(name) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    families::mode_named(&name)
        .map(|m| Some(m.to_string()))
        .ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown mode {name:?}; known: {}",
                families::modes().join(", ")
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(tags: &[(&str, &str)]) -> BoardConfig {
        BoardConfig {
            name: "b".into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            usb: "1-2".parse().expect("a port path"),
            console: None,
            power: None,
            maskrom: None,
            recovery_action: None,
            shell: Default::default(),
            on_release: Default::default(),
            loaders: None,
            usbplug: None,
        }
    }

    fn m(json: serde_json::Value) -> BoardMatch {
        serde_json::from_value(json).expect("match")
    }

    #[test]
    fn tags_mode_and_attachment_all_count() {
        let b = board(&[("soc", "rk3588"), ("model", "rock-5b")]);
        assert!(m(serde_json::json!({"soc": "RK3588"})).matches(&b, None));
        assert!(!m(serde_json::json!({"soc": "rk3568"})).matches(&b, None));
        assert!(!m(serde_json::json!({"lab": "x"})).matches(&b, None));
        assert!(!m(serde_json::json!({"mode": "maskrom"})).matches(&b, None));
        assert!(m(serde_json::json!({"attached": false})).matches(&b, None));
        assert!(!m(serde_json::json!({"attached": true})).matches(&b, None));
        assert_eq!(
            m(serde_json::json!({"soc": "rk3588", "mode": "loader"})).describe(),
            "soc=rk3588, mode=loader"
        );
        // Family and mode come from the families table; an unknown one is refused whole.
        let fb = m(serde_json::json!({"family": "fastboot"}));
        assert_eq!(fb.family.as_deref(), Some("fastboot"));
        assert!(!fb.matches(&b, None));
        let e = serde_json::from_value::<BoardMatch>(serde_json::json!({"mode": "flying"}))
            .expect_err("unknown mode");
        assert!(e.to_string().contains("known: maskrom, loader"), "{e}");
    }
}
