//! Sections of plain settings whose values relate to each other (`limits:` and `leases:`),
//! and `allowed_origins:`. Each key's own bounds are declared with it (`sections.rs`).

use super::super::sections::{LeaseSettings, Limits};
use super::validator::Validator;

impl Validator {
    pub(super) fn limits(&mut self, limits: &Limits, leases: &LeaseSettings) {
        self.declared(limits, "limits");
        self.declared(leases, "leases");
        // Relations between keys are checked here; each key's own bounds are declared.
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
