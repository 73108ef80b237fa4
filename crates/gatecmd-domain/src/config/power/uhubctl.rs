//! `power: {uhubctl: {hub, port, binary?}}`: the board hangs on a port of a hub whose power
//! switching uhubctl drives (`uhubctl -l HUB -p PORT -a on|off`).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::super::values::{parse_abs, port_error, valid_port_path};
use super::backend::{Backend, Check, Context, SpecError};
use crate::exec::Spec;
use gatecmd_devices::DeviceId;

/// Where uhubctl is looked for when the section names no binary.
pub const DEFAULT_UHUBCTL: &str = "/usr/sbin/uhubctl";

/// How long one uhubctl call may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// `uhubctl:` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    hub: String,
    port: u32,
    binary: Option<String>,
}

/// A hub port switched by uhubctl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uhubctl {
    /// The hub's port path (`1-1`).
    pub hub: DeviceId,
    /// The hub port the board hangs on (1-255).
    pub port: u32,
    /// The uhubctl binary (absolute).
    pub binary: PathBuf,
}

impl Backend for Uhubctl {
    const NAME: &'static str = "uhubctl";
    const FORM: &'static str = "uhubctl: {hub, port, binary?}";
    type Raw = Raw;

    fn check(raw: Raw, c: &mut Check<'_>) -> Option<Self> {
        let hub = match raw.hub.parse::<DeviceId>() {
            Ok(id) if valid_port_path(&raw.hub) => Some(id),
            _ => {
                c.error("uhubctl.hub", port_error("hub", &raw.hub));
                None
            }
        };
        let port = if raw.port == 0 || raw.port > 255 {
            let e = format!("hub port {} is not a hub port number (1-255)", raw.port);
            c.error("uhubctl.port", e);
            None
        } else {
            Some(raw.port)
        };
        let binary = match raw.binary {
            None => Some(PathBuf::from(DEFAULT_UHUBCTL)),
            Some(b) => c.value(parse_abs(&b), "uhubctl.binary"),
        };
        Some(Uhubctl {
            hub: hub?,
            port: port?,
            binary: binary?,
        })
    }

    fn spec(&self, _: &Context<'_>, on: bool) -> Result<Spec, SpecError> {
        Ok(Spec {
            binary: self.binary.clone(),
            // Built from checked parts only (a port path and a number).
            args: vec![
                "-l".into(),
                self.hub.to_string(),
                "-p".into(),
                self.port.to_string(),
                "-a".into(),
                if on { "on" } else { "off" }.into(),
            ],
            env: Default::default(),
            timeout: TIMEOUT,
            isolation: None,
            inherit: vec![],
            live_output: false,
        })
    }

    fn describe(&self) -> String {
        format!(
            "{} -l {} -p {} -a on|off",
            self.binary.display(),
            self.hub,
            self.port
        )
    }
}
