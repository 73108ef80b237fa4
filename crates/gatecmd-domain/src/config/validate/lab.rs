//! `labgrid:`: a coordinator address, a name labgrid accepts as an exporter name, an IP to
//! bind the console and power ports on, a bounded hold.

use std::net::IpAddr;
use std::time::Duration;

use super::super::lab::{LabSettings, MAX_LAB_HOLD_SECS, RawLab};
use super::validator::Validator;

/// `[A-Za-z0-9_.-]`, 1-64: a path segment of labgrid's `EXPORTER/GROUP/CLASS/NAME`.
fn valid_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// This machine's host name, or `localhost` where it has none.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length; gethostname NUL-terminates within it
    // (the last byte stays 0 either way).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
    match std::str::from_utf8(&buf[..end]) {
        Ok(h) if rc == 0 && !h.is_empty() => h.to_string(),
        _ => "localhost".into(),
    }
}

impl Validator {
    pub(super) fn lab(&mut self, raw: RawLab) -> Option<LabSettings> {
        let coordinator = raw.coordinator.clone()?;
        let at = self.at("labgrid.coordinator");
        let valid_addr = coordinator
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p != 0));
        if !valid_addr || coordinator.contains('/') {
            self.err(
                at,
                "labgrid.coordinator".into(),
                format!(
                    "{coordinator:?} is not HOST:PORT; write the coordinator's address as labgrid-client -x takes it, e.g. \"coordinator.lab:20408\" or \"127.0.0.1:20408\""
                ),
            );
        }
        let name = raw.name.clone().unwrap_or_else(hostname);
        if !valid_name(&name) {
            let at = self.at("labgrid.name");
            self.err(
                at,
                "labgrid.name".into(),
                format!(
                    "{name:?} cannot be an exporter name: use 1-64 of [A-Za-z0-9_.-] (it is the first part of labgrid's EXPORTER/GROUP/CLASS/NAME)"
                ),
            );
        }
        let console_bind = match raw.console_bind.parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) => {
                let at = self.at("labgrid.console_bind");
                self.err(
                    at,
                    "labgrid.console_bind".into(),
                    format!(
                        "{:?} is not an IP address; write e.g. 127.0.0.1 (the default: people reach it through labgrid's SSH proxy) or this host's lab address",
                        raw.console_bind
                    ),
                );
                IpAddr::from([127, 0, 0, 1])
            }
        };
        // Checked only when the bridge is on, as the keys above.
        self.declared(&raw, "labgrid");
        Some(LabSettings {
            coordinator,
            name,
            console_bind,
            host: raw.host.unwrap_or_else(|| console_bind.to_string()),
            proxy: raw.proxy.unwrap_or_else(hostname),
            proxy_required: raw.proxy_required.unwrap_or(console_bind.is_loopback()),
            hold: Duration::from_secs(raw.hold_secs.clamp(1, MAX_LAB_HOLD_SECS)),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn off_by_default_and_checked_when_set() {
        let ok = Config::parse("{}", "t.yaml").expect("valid");
        assert!(ok.labgrid.is_none());
        let ok = Config::parse(
            "labgrid:\n  coordinator: 127.0.0.1:20408\n  name: bench-1\n",
            "t.yaml",
        )
        .expect("valid");
        let lab = ok.labgrid.expect("on");
        assert_eq!(lab.name, "bench-1");
        assert!(lab.console_bind.is_loopback() && lab.proxy_required);
        assert_eq!(lab.hold.as_secs(), 60);
        let e = Config::parse(
            "labgrid:\n  coordinator: nowhere\n  name: a/b\n  console_bind: lab\n  hold_secs: 0\n",
            "t.yaml",
        )
        .expect_err("refused")
        .to_string();
        for field in [
            "labgrid.coordinator",
            "labgrid.name",
            "labgrid.console_bind",
            "labgrid.hold_secs",
        ] {
            assert!(e.contains(field), "{field}: {e}");
        }
        assert!(e.contains("t.yaml:2"), "{e}");
    }
}
