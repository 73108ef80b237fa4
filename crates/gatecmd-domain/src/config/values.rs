//! Checks of single values: names, absolute paths, addresses, hashes, regexes and USB port
//! paths. Each returns the parsed value or a [`ValueError`] that the validator records
//! with the file, line and field.

use std::net::SocketAddr;
use std::path::PathBuf;

use regex::Regex;

use super::value_error::ValueError;

pub(crate) fn check_name(s: &str) -> Result<(), ValueError> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ValueError::BadName(s.to_string()))
    }
}

pub(crate) fn parse_abs(s: &str) -> Result<PathBuf, ValueError> {
    let p = PathBuf::from(s);
    if !p.is_absolute() {
        return Err(ValueError::NotAbsolute(s.to_string()));
    }
    if p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(ValueError::ParentDir(s.to_string()));
    }
    Ok(p)
}

pub(crate) fn parse_bind(s: &str) -> Result<SocketAddr, ValueError> {
    s.parse().map_err(|_| ValueError::NotAddress(s.to_string()))
}

pub(crate) fn parse_sha256(s: &str) -> Result<[u8; 32], ValueError> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s.trim(), &mut out).map_err(|_| ValueError::NotSha256)?;
    Ok(out)
}

/// A progress regex: its first capture group gives the percentage, or with a second group
/// the two give a count of a total (`3/8`).
pub(crate) fn parse_progress(s: &str) -> Result<Regex, ValueError> {
    let re = Regex::new(s).map_err(|error| ValueError::BadRegex {
        pattern: s.to_string(),
        error,
    })?;
    if re.captures_len() < 2 {
        return Err(ValueError::NoCaptureGroup(s.to_string()));
    }
    Ok(re)
}

/// `^\d+-\d+(\.\d+)*$` and at most 64 characters: the sysfs name of a USB port.
pub fn valid_port_path(id: &str) -> bool {
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    id.len() <= 64
        && id
            .split_once('-')
            .is_some_and(|(bus, ports)| all_digits(bus) && ports.split('.').all(all_digits))
}

/// Why `p`, given as `what` (`usb`, `hub`, `console port`), is not a USB port path.
pub(crate) fn port_error(what: &str, p: &str) -> String {
    format!(
        "{what} {p:?} is not a USB port path: write BUS-PORT[.PORT...] as in sysfs (e.g. \"1-2\" or \"1-2.3\"); `gatecmd devices` shows the ports in use"
    )
}
