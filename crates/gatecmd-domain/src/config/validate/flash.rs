//! The `flash:` section: its boards and clients must be configured ones, its loader paths
//! absolute and, unless `loaders_writable`, in no file root a client may write (the keys'
//! own bounds are declared in `flash.rs`).

use std::path::{Path, PathBuf};

use super::super::boards::BoardConfig;
use super::super::flash::FlashSettings;
use super::super::schema::ClientConfig;
use super::super::staging::StagingConfig;
use super::validator::Validator;

/// Who may write `root`: the configured clients whose `write_roots` hold it, or, with no
/// client configured, the generated token's `default` (it writes every root).
fn writers<'a>(root: &Path, clients: &'a [ClientConfig], staging: &StagingConfig) -> Vec<&'a str> {
    if clients.is_empty() {
        return vec!["default"];
    }
    clients
        .iter()
        .filter(|c| staging.policy(&c.name).write_roots.allows(root))
        .map(|c| c.name.as_str())
        .collect()
}

impl Validator {
    pub(super) fn flash(
        &mut self,
        flash: &FlashSettings,
        clients: &[ClientConfig],
        boards: &[BoardConfig],
        roots: (&[PathBuf], &StagingConfig),
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
            } else if !flash.loaders_writable {
                self.loader_out_of_reach(format!("flash.loaders[{i}]"), p, clients, roots);
            }
        }
        // A board's own `loaders` replace `flash.loaders` for it: the same rule holds.
        if !flash.loaders_writable {
            for b in boards {
                for (k, p) in b.loaders.iter().flatten().enumerate() {
                    if p.is_absolute() {
                        let field = format!("{}.loaders[{k}]", self.item_named("boards", &b.name));
                        self.loader_out_of_reach(field, p, clients, roots);
                    }
                }
            }
        }
        self.declared(flash, "flash");
    }

    /// Issue 46: a loader directory inside a root a client may write lets that client
    /// replace the loader `flash_board` sends to anyone's board.
    fn loader_out_of_reach(
        &mut self,
        field: String,
        loader: &Path,
        clients: &[ClientConfig],
        (file_roots, staging): (&[PathBuf], &StagingConfig),
    ) {
        for root in file_roots {
            if !(loader.starts_with(root) || root.starts_with(loader)) {
                continue;
            }
            let who = writers(root, clients, staging);
            if who.is_empty() {
                continue;
            }
            let at = self.at(&field);
            self.err(
                at,
                field,
                format!(
                    "{} lies in file root {}, which client(s) {} may write (write_file, PUT \
                     /upload): any of them could replace a loader flash_board sends to \
                     another client's board. Keep loaders in a file root that no client's \
                     write_roots lists (add it to file_roots only), or set \
                     flash.loaders_writable: true where every writer is trusted with every \
                     board",
                    loader.display(),
                    root.display(),
                    who.join(", ")
                ),
            );
            return;
        }
    }
}
