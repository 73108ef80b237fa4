//! The `page:` section: viewers must be configured clients (idle expiry and caps are
//! declared with their bounds, `page.rs`).

use super::super::page::PageSettings;
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
        self.declared(page, "page");
    }
}
