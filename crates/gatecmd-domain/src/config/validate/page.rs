//! The `page:` section: viewers must be configured clients; idle expiry and caps in range.

use super::super::page::{PAGE_MAX_IDLE_SECS, PAGE_MIN_IDLE_SECS, PageSettings};
use super::super::schema::ClientConfig;
use super::validator::Validator;

impl Validator {
    pub(super) fn page(&mut self, page: &PageSettings, clients: &[ClientConfig]) {
        for (i, name) in page.viewers.iter().flatten().enumerate() {
            // With no client configured, the generated token's client is `default`.
            let known = clients.iter().any(|c| &c.name == name)
                || (clients.is_empty() && name == "default");
            if !known {
                let at = self.at(&format!("page.viewers[{i}]"));
                let names: Vec<_> = clients.iter().map(|c| c.name.as_str()).collect();
                self.err(
                    at,
                    format!("page.viewers[{i}]"),
                    format!(
                        "unknown client {name:?}; configured clients: {}",
                        if names.is_empty() {
                            "default (the generated token)".to_string()
                        } else {
                            names.join(", ")
                        }
                    ),
                );
            }
        }
        if !(PAGE_MIN_IDLE_SECS..=PAGE_MAX_IDLE_SECS).contains(&page.session_idle_secs) {
            let at = self.at("page.session_idle_secs");
            self.err(
                at,
                "page.session_idle_secs".into(),
                format!(
                    "must be between {PAGE_MIN_IDLE_SECS} and {PAGE_MAX_IDLE_SECS} (a week); default {}",
                    PageSettings::default().session_idle_secs
                ),
            );
        }
        for (key, v) in [
            ("max_sessions", page.max_sessions),
            ("max_streams", page.max_streams),
            ("max_sessions_per_client", page.max_sessions_per_client),
            ("max_streams_per_client", page.max_streams_per_client),
        ] {
            if v == 0 {
                let at = self.at(&format!("page.{key}"));
                self.err(at, format!("page.{key}"), "must be at least 1".into());
            }
        }
    }
}
