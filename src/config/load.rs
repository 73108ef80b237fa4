//! Finding and loading the configuration: the search order, reading the file, refusing a
//! file that holds a token but is readable by others, and turning serde_yaml's errors into
//! located [`ConfigError`]s.

use std::fmt;
use std::path::{Path, PathBuf};

use super::error::{ConfigError, ConfigErrors};
use super::locate::Locator;
use super::raw::RawConfig;
use super::schema::{Config, TokenSource};
use super::validate::Validator;

/// The configuration bundled with the binary: `gatecmd serve` runs on it when no file is found.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../allowed_commands.yaml");
/// The name under which the embedded default appears in logs and errors.
pub const EMBEDDED_NAME: &str = "<embedded allowed_commands.yaml>";
/// Where a system-wide installation keeps its configuration.
pub const SYSTEM_PATH: &str = "/etc/gatecmd/allowed_commands.yaml";

/// Where to load the configuration from, in the documented search order.
pub fn find_config(explicit: Option<&Path>) -> ConfigLocation {
    if let Some(p) = explicit {
        return ConfigLocation::File(p.to_path_buf(), "--config");
    }
    if let Some(p) = std::env::var_os("GATECMD_CONFIG").filter(|v| !v.is_empty()) {
        return ConfigLocation::File(PathBuf::from(p), "$GATECMD_CONFIG");
    }
    if Path::new(SYSTEM_PATH).exists() {
        return ConfigLocation::File(PathBuf::from(SYSTEM_PATH), "system path");
    }
    ConfigLocation::Embedded
}

/// The configuration chosen by [`find_config`].
#[derive(Debug, Clone)]
pub enum ConfigLocation {
    /// A file, and which rule of the search order chose it.
    File(PathBuf, &'static str),
    Embedded,
}

impl fmt::Display for ConfigLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigLocation::File(p, why) => write!(f, "{} (from {why})", p.display()),
            ConfigLocation::Embedded => f.write_str(EMBEDDED_NAME),
        }
    }
}

impl ConfigLocation {
    /// Reads and validates the configuration.
    pub fn load(&self) -> Result<Config, ConfigErrors> {
        match self {
            ConfigLocation::Embedded => Config::parse(EMBEDDED_DEFAULT, EMBEDDED_NAME),
            ConfigLocation::File(path, _) => Config::load_file(path),
        }
    }
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load_file(path: &Path) -> Result<Config, ConfigErrors> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: file.clone(),
                line: 0,
                column: 0,
                field: String::new(),
                message: format!("cannot read the file: {e}"),
            }])
        })?;
        let config = Config::parse(&text, &file)?;
        if config
            .clients
            .iter()
            .any(|c| matches!(c.token, TokenSource::Inline(_)))
        {
            check_owner_only(path, &text, &file)?;
        }
        Ok(config)
    }

    /// Parses and validates configuration text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigErrors> {
        // An empty file (or one of comments only) is an empty mapping: all defaults.
        let empty = text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
        let raw: RawConfig =
            serde_yaml::from_str(if empty { "{}" } else { text }).map_err(|e| {
                // Some errors concern the whole file (e.g. a second document) and come
                // without a location: they are reported at its start, so every error of
                // a parsed file has a line to jump to.
                let (line, column) = e
                    .location()
                    .map(|l| (l.line(), l.column()))
                    .unwrap_or((1, 1));
                let full = e.to_string();
                let message = match full.rfind(" at line ") {
                    Some(i) => full[..i].to_string(),
                    None => full,
                };
                let (field, message) = split_field(&message);
                ConfigErrors(vec![ConfigError {
                    file: file.into(),
                    line,
                    column,
                    field,
                    message,
                }])
            })?;
        Validator::new(text, file).finish(raw)
    }
}

/// serde_yaml prefixes nested errors with their path ("commands[0].binary: ...").
fn split_field(message: &str) -> (String, String) {
    if let Some((head, rest)) = message.split_once(": ") {
        let looks_like_path = !head.contains(' ')
            && head
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.[]-".contains(c));
        if looks_like_path {
            return (head.to_string(), rest.to_string());
        }
    }
    (String::new(), message.to_string())
}

fn check_owner_only(path: &Path, text: &str, file: &str) -> Result<(), ConfigErrors> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode())
        .unwrap_or(0);
    if mode & 0o077 != 0 {
        let (line, column) = Locator::new(text).key_line("token", 0).unwrap_or((1, 1));
        return Err(ConfigErrors(vec![ConfigError {
            file: file.into(),
            line,
            column,
            field: "token".into(),
            message: format!(
                "this file holds a token but is readable by others (mode {:o}); \
                 run `chmod 600 {}`, or move the token to `token_file` or `token_env`",
                mode & 0o777,
                path.display()
            ),
        }]));
    }
    Ok(())
}
