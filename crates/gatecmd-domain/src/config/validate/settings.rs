//! Sections of plain settings whose values relate to each other: `limits:`, `leases:`,
//! `monitor:`, `isolation:`, `audit:` and `allowed_origins:`.

use super::super::schema::{
    AUDIT_MIN_BYTES, AUDIT_MIN_RECORD_BYTES, AuditSettings, IsolationSettings, LeaseSettings,
    Limits, MonitorSettings,
};
use super::validator::Validator;

impl Validator {
    pub(super) fn limits(&mut self, limits: &Limits, leases: &LeaseSettings) {
        if limits.max_concurrent_per_client == 0 {
            let at = self.at("limits.max_concurrent_per_client");
            self.err(
                at,
                "limits.max_concurrent_per_client".into(),
                "must be at least 1".into(),
            );
        }
        if limits.max_concurrent_children == 0 {
            let at = self.at("limits.max_concurrent_children");
            self.err(
                at,
                "limits.max_concurrent_children".into(),
                "must be at least 1".into(),
            );
        }
        if leases.default_ttl_secs == 0 || leases.default_ttl_secs > leases.max_ttl_secs {
            let at = self.at("leases.default_ttl_secs");
            self.err(
                at,
                "leases.default_ttl_secs".into(),
                format!(
                    "must be between 1 and leases.max_ttl_secs ({})",
                    leases.max_ttl_secs
                ),
            );
        }
    }

    pub(super) fn monitor(&mut self, monitor: &MonitorSettings) {
        if monitor.backend.parse::<gatecmd_devices::Backend>().is_err() {
            let at = self.at("monitor.backend");
            self.err(
                at,
                "monitor.backend".into(),
                format!(
                    "unknown backend {:?}; use auto, udev, libusb or poll",
                    monitor.backend
                ),
            );
        }
    }

    pub(super) fn isolation(&mut self, isolation: &IsolationSettings) {
        for (key, p) in [
            ("sysfs_root", &isolation.sysfs_root),
            ("devfs_root", &isolation.devfs_root),
        ] {
            if !p.is_absolute() {
                let at = self.at(&format!("isolation.{key}"));
                self.err(
                    at,
                    format!("isolation.{key}"),
                    format!("{} is not an absolute path", p.display()),
                );
            }
        }
    }

    pub(super) fn audit(&mut self, audit: &AuditSettings) {
        if audit.max_bytes < AUDIT_MIN_BYTES {
            let at = self.at("audit.max_bytes");
            self.err(
                at,
                "audit.max_bytes".into(),
                format!(
                    "{} is too small: rotate at {AUDIT_MIN_BYTES} bytes or more (the default is {})",
                    audit.max_bytes,
                    AuditSettings::default().max_bytes
                ),
            );
        }
        if audit.keep == 0 {
            let at = self.at("audit.keep");
            self.err(
                at,
                "audit.keep".into(),
                "must be at least 1: rotation keeps the previous file as audit.log.1".into(),
            );
        }
        if audit.max_record_bytes < AUDIT_MIN_RECORD_BYTES {
            let at = self.at("audit.max_record_bytes");
            self.err(
                at,
                "audit.max_record_bytes".into(),
                format!(
                    "{} is too small: at least {AUDIT_MIN_RECORD_BYTES} bytes leave room for a cut field's length and SHA-256 (the default is {})",
                    audit.max_record_bytes,
                    AuditSettings::default().max_record_bytes
                ),
            );
        }
        if audit.refusal_window_secs == 0 {
            let at = self.at("audit.refusal_window_secs");
            self.err(
                at,
                "audit.refusal_window_secs".into(),
                "must be at least 1: refusals are counted per window of this many seconds".into(),
            );
        }
    }

    pub(super) fn origins(&mut self, origins: &[String]) {
        for (i, o) in origins.iter().enumerate() {
            if !(o.starts_with("http://") || o.starts_with("https://")) {
                let at = self.at(&format!("allowed_origins[{i}]"));
                self.err(
                    at,
                    format!("allowed_origins[{i}]"),
                    format!("{o:?} is not an origin: write scheme://host[:port], e.g. \"http://localhost:3000\""),
                );
            }
        }
    }
}
