//! The names the lock manager deals in: lock keys, client names, lease ids
//! and legacy session ids. Keys are parsed once at the boundary so the rest
//! of the manager never compares loosely formatted strings.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a lock is taken on.
///
/// Written and parsed as a string:
/// - `usb:VVVV:PPPP` — a USB vendor:product pair, 4-digit hex each. Parsing
///   accepts upper case; display is always lower case, so `usb:2207:350B` and
///   `usb:2207:350b` are the same key.
/// - `group:NAME` — a configured `lock_group` covering several VID:PIDs that
///   one tool cannot tell apart. NAME is 1–64 of `[A-Za-z0-9_.-]`.
/// - `port:ID` — a physical USB port path such as `1-2.3`.
/// - `board:NAME` — a configured board (docs/BOARDS.md); NAME as for groups.
///
/// Keys order by their variant and then their value; commands that lock
/// several keys take them in this order, which is what rules out deadlock.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockKey {
    /// `usb:VVVV:PPPP`.
    Usb {
        /// USB vendor id.
        vid: u16,
        /// USB product id.
        pid: u16,
    },
    /// `group:NAME`.
    Group(String),
    /// `port:1-2.3`.
    Port(String),
    /// `board:rock5b-1`.
    Board(String),
}

/// Why a string is not a [`LockKey`]. The message says what would be valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid lock key {input:?}: {reason}; expected usb:VVVV:PPPP (hex), group:NAME ([A-Za-z0-9_.-], 1-64 chars), port:BUS-PORT[.PORT...] (e.g. port:1-2.3, up to 64 chars) or board:NAME"
)]
pub struct ParseLockKeyError {
    input: String,
    reason: &'static str,
}

impl LockKey {
    /// The key for a USB vendor:product pair.
    pub fn usb(vid: u16, pid: u16) -> Self {
        LockKey::Usb { vid, pid }
    }
}

fn parse_hex4(s: &str) -> Option<u16> {
    if s.len() == 4 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        u16::from_str_radix(s, 16).ok()
    } else {
        None
    }
}

fn valid_group_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// `^\d+-\d+(\.\d+)*$`, the sysfs name of a USB device's port, at most 64
/// characters: a real one (bus, up to seven hub levels) is under 32, and a key
/// may be leased with no device behind it, so its length must be bounded here.
fn valid_port_id(id: &str) -> bool {
    if id.len() > 64 {
        return false;
    }
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let Some((bus, ports)) = id.split_once('-') else {
        return false;
    };
    all_digits(bus) && ports.split('.').all(all_digits)
}

impl FromStr for LockKey {
    type Err = ParseLockKeyError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let fail = |reason| ParseLockKeyError {
            input: input.to_owned(),
            reason,
        };
        let (kind, rest) = input
            .split_once(':')
            .ok_or_else(|| fail("missing the \"kind:\" prefix"))?;
        match kind {
            "usb" => {
                let (vid, pid) = rest
                    .split_once(':')
                    .ok_or_else(|| fail("usb keys need both VID and PID"))?;
                match (parse_hex4(vid), parse_hex4(pid)) {
                    (Some(vid), Some(pid)) => Ok(LockKey::Usb { vid, pid }),
                    _ => Err(fail("VID and PID must be exactly 4 hex digits each")),
                }
            }
            "group" if valid_group_name(rest) => Ok(LockKey::Group(rest.to_owned())),
            "group" => Err(fail("bad group name")),
            "port" if valid_port_id(rest) => Ok(LockKey::Port(rest.to_owned())),
            "port" => Err(fail("bad port path")),
            "board" if valid_group_name(rest) => Ok(LockKey::Board(rest.to_owned())),
            "board" => Err(fail("bad board name")),
            _ => Err(fail("unknown kind")),
        }
    }
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockKey::Usb { vid, pid } => write!(f, "usb:{vid:04x}:{pid:04x}"),
            LockKey::Group(name) => write!(f, "group:{name}"),
            LockKey::Port(id) => write!(f, "port:{id}"),
            LockKey::Board(name) => write!(f, "board:{name}"),
        }
    }
}

impl Serialize for LockKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for LockKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for LockKey {
    fn schema_name() -> Cow<'static, str> {
        "LockKey".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "usb:VVVV:PPPP (lowercase hex), group:NAME, port:BUS-PORT[.PORT...] or board:NAME",
            "pattern": r"^(usb:[0-9a-fA-F]{4}:[0-9a-fA-F]{4}|group:[A-Za-z0-9_.-]{1,64}|port:\d+-\d+(\.\d+)*|board:[A-Za-z0-9_.-]{1,64})$"
        })
    }
}

/// A client's name as its bearer token identifies it (`default` for the
/// single legacy `auth_token`). It is the identity shown as a lock's holder
/// and the one lease ownership is checked against.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ClientName(pub String);

/// A lease's id: `lease-` followed by a random UUID v4. Together with the
/// client name it is the capability to use a leased key; never show it to
/// other clients.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct LeaseId(pub String);

impl LeaseId {
    /// A fresh, unguessable id.
    pub(crate) fn generate() -> Self {
        LeaseId(format!("lease-{}", uuid::Uuid::new_v4()))
    }
}

/// The legacy (2025-11-25) MCP session id. A command from the session that
/// took a lease may omit the lease id; the lease ends when the session ends.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct SessionId(pub String);

macro_rules! display_inner {
    ($($ty:ty),*) => {$(
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl From<&str> for $ty {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }
    )*};
}
display_inner!(ClientName, LeaseId, SessionId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usb_keys_normalise_to_lower_case() {
        let key: LockKey = "usb:2207:350B".parse().unwrap();
        assert_eq!(key, LockKey::usb(0x2207, 0x350b));
        assert_eq!(key.to_string(), "usb:2207:350b");
        assert_eq!(LockKey::usb(0x1d6b, 0x2).to_string(), "usb:1d6b:0002");
    }

    #[test]
    fn group_and_port_keys_round_trip() {
        for text in ["group:rk-boards_1.x", "port:1-2", "port:3-1.4.2"] {
            let key: LockKey = text.parse().unwrap();
            assert_eq!(key.to_string(), text);
        }
    }

    #[test]
    fn malformed_keys_are_refused() {
        for text in [
            "",
            "usb",
            "usb:2207",
            "usb:220:350b",
            "usb:2207:350bb",
            "usb:22g7:350b",
            "usb:+207:350b",
            "group:",
            "group:a b",
            &format!("group:{}", "a".repeat(65)),
            "port:1",
            "port:1-",
            "port:1-2.",
            "port:a-2",
            &format!("port:1-{}", "1.".repeat(32) + "1"),
            "serial:1234",
        ] {
            assert!(text.parse::<LockKey>().is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn parse_error_says_what_is_valid() {
        let err = "usb:xyz".parse::<LockKey>().unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid lock key \"usb:xyz\": usb keys need both VID and PID; expected usb:VVVV:PPPP (hex), group:NAME ([A-Za-z0-9_.-], 1-64 chars), port:BUS-PORT[.PORT...] (e.g. port:1-2.3, up to 64 chars) or board:NAME"
        );
    }

    #[test]
    fn keys_serialize_as_strings() {
        let key = LockKey::usb(0x2207, 0x350b);
        assert_eq!(serde_json::to_string(&key).unwrap(), "\"usb:2207:350b\"");
        let back: LockKey = serde_json::from_str("\"usb:2207:350B\"").unwrap();
        assert_eq!(back, key);
        assert!(serde_json::from_str::<LockKey>("\"nope\"").is_err());
    }

    #[test]
    fn lease_ids_are_distinct_and_prefixed() {
        let a = LeaseId::generate();
        let b = LeaseId::generate();
        assert_ne!(a, b);
        assert!(a.0.starts_with("lease-"));
        assert_eq!(a.0.len(), "lease-".len() + 36);
    }
}
