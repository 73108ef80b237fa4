//! `commands:`: binaries, patterns, slots, file arguments, timeouts and isolation.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use super::super::command::{CancelPolicy, CommandConfig, PatternConfig};
use super::super::host::binary_problem;
use super::super::raw::{RawCommand, RawPattern};
use super::super::schema::DeviceClass;
use super::super::values::{check_name, parse_abs, parse_progress};
use super::validator::Validator;
use gatecmd_core::sanitizer::{FileKind, Pattern, Word, slot_regex};

impl Validator {
    /// This file's `commands:`, added to `out`; `seen` holds the names of every file's so
    /// far (a name is defined once across the configuration and its fragments).
    pub(super) fn commands(
        &mut self,
        raw: Vec<RawCommand>,
        devices: &[DeviceClass],
        file_roots: &[PathBuf],
        seen: &mut BTreeSet<String>,
        out: &mut Vec<CommandConfig>,
    ) {
        for (i, rc) in raw.into_iter().enumerate() {
            if !seen.insert(rc.name.clone()) {
                let at = self.at(&format!("commands[{i}].name"));
                self.err(
                    at,
                    format!("commands[{i}].name"),
                    format!(
                        "command {:?} is defined twice (here and above, or in the main file \
                         and an included one); give each command a unique name",
                        rc.name
                    ),
                );
            }
            if let Some(c) = self.command(i, rc, devices, file_roots) {
                out.push(c);
            }
        }
    }

    pub(super) fn command(
        &mut self,
        i: usize,
        rc: RawCommand,
        devices: &[DeviceClass],
        file_roots: &[PathBuf],
    ) -> Option<CommandConfig> {
        let name = rc.name;
        let field = |f: &str| format!("commands[{i}].{f}");
        let at = self.at(&field("name"));
        self.value(check_name(&name), at, field("name"))?;
        let at = self.at(&field("binary"));
        let binary = self.value(parse_abs(&rc.binary), at, field("binary"));
        if let Some(d) = &rc.device
            && !devices.iter().any(|c| &c.name == d)
        {
            let at = self.at(&field("device"));
            let known: Vec<_> = devices.iter().map(|c| c.name.as_str()).collect();
            self.err(
                at,
                field("device"),
                format!(
                    "unknown device class {d:?}; defined under `devices:`: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            );
        }
        if rc.allowed_args.is_empty() {
            let at = self.at(&field("name"));
            self.err(
                at,
                field("allowed_args"),
                "no allowed_args: add at least one `- pattern: ...` (an empty pattern \"\" allows running with no arguments)".into(),
            );
        }
        for key in rc.env.keys() {
            let ok = !key.is_empty()
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !key.starts_with(|c: char| c.is_ascii_digit());
            if !ok || key.starts_with("LD_") || key == "PATH" {
                let at = self.at(&field(&format!("env.{key}")));
                self.err(
                    at,
                    field(&format!("env.{key}")),
                    format!("environment variable {key:?} may not be set (PATH is fixed; LD_* would change what runs)"),
                );
            }
        }
        let timeout = rc.timeout_secs.unwrap_or(60);
        if timeout == 0 {
            let at = self.at(&field("timeout_secs"));
            self.err(
                at,
                field("timeout_secs"),
                "must be at least 1 second".into(),
            );
        }
        let mut params = BTreeMap::new();
        for (k, v) in &rc.params {
            let at = self.at(&field(&format!("params.{k}")));
            if let Some(re) = self.value(slot_regex(v), at, field(&format!("params.{k}"))) {
                params.insert(k.clone(), re);
            }
        }
        let progress = match &rc.progress {
            None => None,
            Some(p) => {
                let at = self.at(&field("progress"));
                self.value(parse_progress(p), at, field("progress"))
            }
        };
        let mut patterns = Vec::new();
        for (j, rp) in rc.allowed_args.into_iter().enumerate() {
            if let Some(p) = self.pattern(i, j, rp, file_roots) {
                patterns.push(p);
            }
        }
        for key in rc.params.keys() {
            let used = patterns.iter().any(|p| {
                p.pattern
                    .words
                    .iter()
                    .any(|w| matches!(w, Word::Slot(s) if s == key))
            });
            if !used {
                let at = self.at(&field(&format!("params.{key}")));
                self.err(
                    at,
                    field(&format!("params.{key}")),
                    format!("{key:?} is not a slot of any pattern of this command"),
                );
            }
        }
        let isolated = rc.isolate || patterns.iter().any(|p| p.isolate == Some(true));
        if isolated && rc.device.is_none() {
            let at = self.at(&field("isolate"));
            self.err(
                at,
                field("isolate"),
                "an isolated command needs `device:` (the class whose board it runs on): the view holds one board of that class".into(),
            );
        }
        self.cancel_rule(i, rc.destructive, rc.cancel, &patterns);
        let binary = binary?;
        let unavailable = binary_problem(&binary);
        Some(CommandConfig {
            name,
            binary,
            description: rc.description,
            patterns,
            params,
            timeout: Duration::from_secs(timeout),
            env: rc.env,
            device: rc.device,
            progress,
            cancel: rc
                .cancel
                .unwrap_or(CancelPolicy::default_for(rc.destructive)),
            read_only: rc.read_only,
            destructive: rc.destructive,
            isolate: rc.isolate,
            unavailable,
        })
    }

    /// One entry of a command's `allowed_args:`: the pattern, its file slots (which must be
    /// slots of the pattern and need file roots), and its own progress and timeout.
    fn pattern(
        &mut self,
        i: usize,
        j: usize,
        rp: RawPattern,
        file_roots: &[PathBuf],
    ) -> Option<PatternConfig> {
        let pfield = format!("commands[{i}].allowed_args[{j}]");
        let at = self.at(&format!("{pfield}.pattern"));
        let pattern = self.value(
            rp.pattern.parse::<Pattern>(),
            at,
            format!("{pfield}.pattern"),
        )?;
        let slots: BTreeSet<&str> = pattern.slot_names().collect();
        let mut file_slots = BTreeMap::new();
        for (list, kind, key) in [
            (&rp.file_args, FileKind::Input, "file_args"),
            (&rp.output_args, FileKind::Output, "output_args"),
        ] {
            for s in list {
                if !slots.contains(s.as_str()) {
                    let at = self.at(&format!("{pfield}.{key}"));
                    self.err(
                        at,
                        format!("{pfield}.{key}"),
                        format!(
                            "{s:?} is not a slot of pattern \"{pattern}\"; its slots are: {}",
                            if slots.is_empty() {
                                "none".to_string()
                            } else {
                                slots.iter().copied().collect::<Vec<_>>().join(", ")
                            }
                        ),
                    );
                }
                file_slots.insert(s.clone(), kind);
            }
        }
        if !file_slots.is_empty() && file_roots.is_empty() {
            let at = self
                .pos
                .exact(&format!("{pfield}.file_args"))
                .or(self.at(&format!("{pfield}.output_args")));
            self.err(
                at,
                format!("{pfield}.file_args"),
                "file arguments need `file_roots:` (the directories they must resolve inside)"
                    .into(),
            );
        }
        let pprogress = match &rp.progress {
            None => None,
            Some(p) => {
                let at = self.at(&format!("{pfield}.progress"));
                self.value(parse_progress(p), at, format!("{pfield}.progress"))
            }
        };
        if rp.timeout_secs == Some(0) {
            let at = self.at(&format!("{pfield}.timeout_secs"));
            self.err(
                at,
                format!("{pfield}.timeout_secs"),
                "must be at least 1 second".into(),
            );
        }
        for s in &rp.loader_args {
            if file_slots.get(s) != Some(&FileKind::Input) {
                let at = self.at(&format!("{pfield}.loader_args"));
                self.err(
                    at,
                    format!("{pfield}.loader_args"),
                    format!(
                        "{s:?} is not one of this pattern's file_args (a loader is an input file)"
                    ),
                );
            }
        }
        for (k, m) in rp.modes.iter().enumerate() {
            let word = !m.is_empty()
                && m.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !word {
                let at = self.at(&format!("{pfield}.modes[{k}]"));
                self.err(
                    at,
                    format!("{pfield}.modes[{k}]"),
                    format!("{m:?} is not a device mode: a lowercase word as list_devices shows it (maskrom, loader, …)"),
                );
            }
        }
        Some(PatternConfig {
            pattern,
            file_slots,
            timeout: rp.timeout_secs.map(Duration::from_secs),
            progress: pprogress,
            cancel: rp.cancel,
            isolate: rp.isolate,
            modes: rp.modes,
            loader_slots: rp.loader_args.into_iter().collect(),
        })
    }
}

impl Validator {
    /// A `destructive` command may not be `cancel: kill`, on the command or on a pattern:
    /// a client that gives up on a call (the TypeScript SDK does after 60 s) would cut a
    /// board's write off mid-way.
    fn cancel_rule(
        &mut self,
        i: usize,
        destructive: bool,
        cancel: Option<CancelPolicy>,
        patterns: &[PatternConfig],
    ) {
        if !destructive {
            return;
        }
        let why = "a destructive command cannot be `cancel: kill`: a client's give-up would stop a \
                   write half-way. Use `detach` (the default: it continues as a job) or `never`";
        if cancel == Some(CancelPolicy::Kill) {
            let field = format!("commands[{i}].cancel");
            let at = self.at(&field);
            self.err(at, field, why.into());
        }
        for (j, p) in patterns.iter().enumerate() {
            if p.cancel == Some(CancelPolicy::Kill) {
                let field = format!("commands[{i}].allowed_args[{j}].cancel");
                let at = self.at(&field);
                self.err(at, field, why.into());
            }
        }
    }
}
