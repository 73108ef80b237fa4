//! The `flash:` section: its boards and clients must be configured ones and its loader
//! paths absolute (the keys' own bounds are declared in `flash.rs`).

use super::super::boards::BoardConfig;
use super::super::flash::FlashSettings;
use super::super::schema::ClientConfig;
use super::validator::Validator;

impl Validator {
    pub(super) fn flash(
        &mut self,
        flash: &FlashSettings,
        clients: &[ClientConfig],
        boards: &[BoardConfig],
    ) {
        for (i, name) in flash.boards.iter().flatten().enumerate() {
            if !boards.iter().any(|b| &b.name == name) {
                let field = format!("flash.boards[{i}]");
                let names: Vec<_> = boards.iter().map(|b| b.name.as_str()).collect();
                let at = self.at(&field);
                self.err(
                    at,
                    field,
                    format!(
                        "unknown board {name:?}; configured boards: {}",
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    ),
                );
            }
        }
        for (i, name) in flash.clients.iter().flatten().enumerate() {
            // With no client configured, the generated token's client is `default`.
            let known = clients.iter().any(|c| &c.name == name)
                || (clients.is_empty() && name == "default");
            if !known {
                let field = format!("flash.clients[{i}]");
                let names: Vec<_> = clients.iter().map(|c| c.name.as_str()).collect();
                let at = self.at(&field);
                self.err(
                    at,
                    field,
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
        for (i, p) in flash.loaders.iter().flatten().enumerate() {
            if !p.is_absolute() {
                let field = format!("flash.loaders[{i}]");
                let at = self.at(&field);
                self.err(
                    at,
                    field,
                    format!(
                        "{} is not an absolute path; write the loader file's (or its \
                         directory's) absolute path",
                        p.display()
                    ),
                );
            }
        }
        self.declared(flash, "flash");
    }
}
