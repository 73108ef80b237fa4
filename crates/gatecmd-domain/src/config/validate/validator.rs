//! The [`Validator`]: the error list and the located-value helper every part uses, and the
//! walk over the whole file that builds the [`Config`].

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::super::declare::{Value, Written};
use super::super::error::{ConfigError, ConfigErrors};
use super::super::host::default_state_dir;
use super::super::positions::{At, Positions};
use super::super::raw::{RawConfig, take_client_staging};
use super::super::schema::Config;
use super::super::values::{parse_abs, parse_bind};

/// Collects every error of one file, each located in its text.
pub(crate) struct Validator {
    pub(super) pos: Positions,
    file: String,
    errors: Vec<ConfigError>,
    /// The directory `include:` paths are taken from (the file's own).
    pub(super) base: Option<PathBuf>,
}

impl Validator {
    /// A validator for the text indexed by `pos`, naming it `file` in errors.
    pub(crate) fn new(pos: Positions, file: &str) -> Self {
        Validator {
            pos,
            file: file.to_string(),
            errors: vec![],
            base: None,
        }
    }

    /// The directory relative `include:` paths are taken from.
    pub(crate) fn with_base(mut self, base: Option<PathBuf>) -> Self {
        self.base = base;
        self
    }

    /// Takes over another file's errors (an included fragment's, located in it).
    pub(super) fn absorb(&mut self, other: Validator) {
        self.errors.extend(other.errors);
    }

    /// Records an error that concerns a whole file, at its start.
    pub(super) fn err_in(&mut self, file: &str, message: String) {
        self.errors.push(ConfigError {
            file: file.to_string(),
            line: 1,
            column: 1,
            field: String::new(),
            message,
        });
    }

    /// Validates the whole file: the configuration, or every error found.
    pub(crate) fn finish(mut self, raw: RawConfig) -> Result<Config, ConfigErrors> {
        let config = self.validate(raw);
        if self.errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors(self.errors))
        }
    }

    /// Where `field` (a path such as `commands[1].binary`) is written, or the nearest
    /// enclosing field that is; pass it to [`Self::err`] or [`Self::value`].
    pub(super) fn at(&self, field: &str) -> Option<At> {
        self.pos.at(field)
    }

    /// The path (`clients[2]`) of the first item of the list `list` whose `name:` is
    /// `name`; the list itself when none is.
    pub(super) fn item_named(&self, list: &str, name: &str) -> String {
        (0..)
            .map(|k| format!("{list}[{k}]"))
            .take_while(|item| self.pos.exact(item).is_some())
            .find(|item| self.pos.text(&format!("{item}.name")) == Some(name))
            .unwrap_or_else(|| list.to_string())
    }

    /// How many errors are recorded so far (a part that builds an item only when its own
    /// checks passed compares before and after).
    pub(super) fn error_count(&self) -> usize {
        self.errors.len()
    }

    pub(super) fn err(&mut self, at: Option<At>, field: String, message: String) {
        let (line, column) = at.unwrap_or((1, 1));
        self.errors.push(ConfigError {
            file: self.file.clone(),
            line,
            column,
            field,
            message,
        });
    }

    /// Records what the declared checks of `section` (under `prefix`) refuse.
    pub(super) fn declared(&mut self, section: &impl Value, prefix: &str) {
        for (field, message) in section.refusals(prefix) {
            let at = self.at(&field);
            self.err(at, field, message);
        }
    }

    /// Runs a value check; on failure records it at `at` and yields `None`.
    pub(super) fn value<T, E: std::fmt::Display>(
        &mut self,
        r: Result<T, E>,
        at: Option<At>,
        field: String,
    ) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(m) => {
                self.err(at, field, m.to_string());
                None
            }
        }
    }

    /// Builds the configuration, recording errors as it goes; the parts are in sibling files.
    fn validate(&mut self, mut raw: RawConfig) -> Config {
        // What a reload compares to name the keys that wait for a restart.
        let mut written = Written::default();
        raw.written("", &mut written);
        let default_bind = SocketAddr::from(([127, 0, 0, 1], 9222));
        let at = self.at("bind");
        let bind = self
            .value(parse_bind(&raw.bind), at, "bind".into())
            .unwrap_or(default_bind);
        let client_staging = take_client_staging(&mut raw.clients);
        let raw_persons = super::super::raw::take_persons(&mut raw.clients);
        let clients = self.clients(raw.auth_token, raw.clients);
        let persons = self.persons(raw_persons, &clients, &raw.page);
        let mut devices = self.devices(raw.devices);
        let mut fragments = self.fragments(&raw.include);
        for f in &mut fragments {
            let theirs = f.validator.devices(std::mem::take(&mut f.raw.devices));
            f.add_devices(theirs, &mut devices);
        }
        let mut file_roots = Vec::new();
        for (i, r) in raw.file_roots.iter().enumerate() {
            let at = self.at(&format!("file_roots[{i}]"));
            if let Some(p) = self.value(parse_abs(r), at, format!("file_roots[{i}]")) {
                file_roots.push(p);
            }
        }
        let staging = self.staging(
            raw.staging,
            client_staging,
            &file_roots,
            raw.limits.max_request_body_bytes,
        );
        let state_dir = match raw.state_dir {
            None => default_state_dir(),
            Some(d) => {
                let at = self.at("state_dir");
                self.value(parse_abs(&d), at, "state_dir".into())
                    .unwrap_or_else(default_state_dir)
            }
        };
        let mut commands = Vec::new();
        let mut seen = BTreeSet::new();
        self.commands(
            raw.commands,
            &devices,
            &file_roots,
            &mut seen,
            &mut commands,
        );
        for mut f in fragments {
            let raw_commands = std::mem::take(&mut f.raw.commands);
            (f.validator).commands(
                raw_commands,
                &devices,
                &file_roots,
                &mut seen,
                &mut commands,
            );
            self.absorb(f.validator);
        }
        for c in &clients {
            for name in c.commands.iter().flatten() {
                if !commands.iter().any(|k| &k.name == name) {
                    // The entry's own index: `auth_token`'s client and skipped entries
                    // make the validated list's differ.
                    let item = self.item_named("clients", &c.name);
                    let field = format!("{item}.commands");
                    let at = self.at(&field);
                    let known: Vec<_> = commands.iter().map(|k| k.name.as_str()).collect();
                    self.err(
                        at,
                        field,
                        format!(
                            "unknown command {name:?}; defined commands: {}",
                            known.join(", ")
                        ),
                    );
                }
            }
        }
        let boards = self.boards(raw.boards, &commands, &file_roots);
        self.power_commands_unlisted(&clients, &boards);
        let approvals = self.approvals(raw.approvals, &commands, &boards, &clients, &persons);
        self.limits(&raw.limits, &raw.leases);
        self.declared(&raw.monitor, "monitor");
        self.declared(&raw.isolation, "isolation");
        self.declared(&raw.audit, "audit");
        self.page(&raw.page, &clients);
        self.flash(&raw.flash, &clients, &boards, (&file_roots, &staging));
        self.origins(&raw.allowed_origins);
        let metrics = self.metrics(raw.metrics, &clients, bind);
        let lab_peers = self.lab_peers(&raw.labgrid.peers);
        let labgrid = self.lab(raw.labgrid);
        Config {
            source: self.file.clone(),
            bind,
            clients,
            file_roots,
            allow_hardlinked_inputs: raw.allow_hardlinked_inputs,
            devices,
            commands,
            allowed_origins: raw.allowed_origins,
            allowed_hosts: raw.allowed_hosts,
            state_dir,
            limits: raw.limits,
            leases: raw.leases,
            staging,
            monitor: raw.monitor,
            isolation: raw.isolation,
            audit: raw.audit,
            boards,
            approvals,
            persons,
            page: raw.page,
            metrics,
            jobs: raw.jobs,
            boots: raw.boots,
            flash: raw.flash,
            labgrid,
            lab_peers,
            written,
        }
    }
}
