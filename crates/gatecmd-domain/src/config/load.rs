//! Finding and loading the configuration: the search order, reading the file, refusing a
//! file that holds a token but is readable by others, and turning the deserializer's errors
//! into located [`ConfigError`]s.

use std::fmt;
use std::path::{Path, PathBuf};

use super::error::{ConfigError, ConfigErrors};
use super::positions::Positions;
use super::raw::RawConfig;
use super::schema::{Config, TokenSource};
use super::validate::Validator;

/// The configuration bundled with the binary: `gatecmd serve` runs on it when no file is found.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../../../allowed_commands.yaml");
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
        let positions = Positions::new(text);
        let raw: RawConfig = parse_yaml(text, &positions, file)?;
        // `include:` paths are taken from the file's directory; the embedded default has
        // none (only absolute ones work there).
        let base = (file != EMBEDDED_NAME)
            .then(|| Path::new(file).parent().map(Path::to_path_buf))
            .flatten();
        Validator::new(positions, file).with_base(base).finish(raw)
    }
}

/// YAML text deserialized, or the deserializer's error located in it. An empty file (or
/// one of comments only) is an empty mapping: all defaults.
pub(crate) fn parse_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
    positions: &Positions,
    file: &str,
) -> Result<T, ConfigErrors> {
    let empty = text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
    let options = serde_saphyr::options! {
        // The error is one line `file:line:column: field: message`; no source snippet.
        with_snippet: false,
    };
    serde_saphyr::from_str_with_options(if empty { "{}" } else { text }, options)
        .map_err(|e| ConfigErrors(vec![located(&e, positions, file)]))
}

/// A deserializer error as a [`ConfigError`]: its position, the field found there, and the
/// message without the position serde-saphyr appends.
fn located(e: &serde_saphyr::Error, positions: &Positions, file: &str) -> ConfigError {
    // Some errors concern the whole file (e.g. a second document) and come without a
    // location: they are reported at its start, so every error has a line to jump to.
    let (line, column) = e
        .location()
        .map(|l| (l.line() as usize, l.column() as usize))
        .filter(|&(l, _)| l > 0)
        .unwrap_or((1, 1));
    // The wording meant for the person editing the file (the default one suggests API
    // calls to the programmer).
    let full = e.render_with_formatter(&serde_saphyr::UserMessageFormatter);
    let mut message = match full.rfind(" at line ") {
        Some(i) => full[..i].to_string(),
        None => full,
    };
    let field = match positions.field_at((line, column)) {
        // An unknown key is wrong for the mapping that holds it.
        Some((path, false)) if message.starts_with("unknown field") => {
            super::positions::parent(path).unwrap_or("").to_string()
        }
        Some((path, _)) => path.to_string(),
        None => String::new(),
    };
    // serde-saphyr says only "invalid u64" for `-3`: name the value and what would do.
    if let Some(ty) = message.strip_prefix("invalid ")
        && let Some(range) = integer_range(ty)
    {
        let written = positions.text(&field).unwrap_or("this value");
        message = format!("{written:?} is not a valid {ty}: write a whole number from {range}");
    }
    ConfigError {
        file: file.into(),
        line,
        column,
        field,
        message,
    }
}

fn integer_range(ty: &str) -> Option<String> {
    Some(match ty {
        "u8" => format!("0 to {}", u8::MAX),
        "u16" => format!("0 to {}", u16::MAX),
        "u32" => format!("0 to {}", u32::MAX),
        "u64" | "usize" => format!("0 to {}", u64::MAX),
        "i32" => format!("{} to {}", i32::MIN, i32::MAX),
        "i64" => format!("{} to {}", i64::MIN, i64::MAX),
        _ => return None,
    })
}

fn check_owner_only(path: &Path, text: &str, file: &str) -> Result<(), ConfigErrors> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode())
        .unwrap_or(0);
    if mode & 0o077 != 0 {
        let (line, column) = Positions::new(text)
            .first(|p| p == "auth_token" || p.ends_with(".token"))
            .unwrap_or((1, 1));
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
