//! `labgrid.peers`: the other gatecmd hosts of this host's lab (docs/LAB.md, "One lab for
//! agents"): each by its exporter name, its MCP endpoint and the token this host presents
//! there (a client with `peer: true` on that host). The token is a secret like a client's:
//! written in this owner-only file, or read from an owner-only `token_file` when used;
//! never shown by `Debug`, never logged.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One entry of `labgrid.peers` as written.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLabPeer {
    pub name: String,
    pub url: String,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub token_file: Option<String>,
}

impl std::fmt::Debug for RawLabPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawLabPeer")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<secret>"))
            .field("token_file", &self.token_file)
            .finish()
    }
}

/// Where a peer's token comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum PeerToken {
    /// Written in this (owner-only) config file.
    Inline(String),
    /// Read from this owner-only file at each use (so a rotated token needs no reload).
    File(PathBuf),
}

impl std::fmt::Debug for PeerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerToken::Inline(_) => f.write_str("Inline(<secret>)"),
            PeerToken::File(p) => write!(f, "File({})", p.display()),
        }
    }
}

impl PeerToken {
    /// The token, or why it cannot be had (the file unreadable, readable by group or
    /// others, or empty). The message names the file, never the token.
    pub fn read(&self) -> Result<String, String> {
        match self {
            PeerToken::Inline(t) => Ok(t.clone()),
            PeerToken::File(p) => read_owner_only(p),
        }
    }
}

fn read_owner_only(path: &Path) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} is readable by group or others (mode {mode:o}); run `chmod 600 {}`",
            path.display(),
            path.display()
        ));
    }
    let t = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let t = t.trim();
    if t.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(t.to_string())
}

/// Another gatecmd host of the lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabPeer {
    /// That host's labgrid exporter name: the `HOST` of `HOST/BOARD`.
    pub name: String,
    /// Its MCP endpoint, `http://HOST:PORT/mcp`.
    pub url: String,
    /// What this host presents there (as a client with `peer: true`).
    pub token: PeerToken,
}

/// The configured client a caller's name is judged as by name-keyed policies
/// (`write_roots`, `staging`, `flash.clients`): an agent acting through a lab peer,
/// `HOST/CLIENT`, is the peer client `HOST` (a configured name never holds `/`); any other
/// name is itself. So a peer's token reaches no further than its own client's policy.
pub fn configured_client(name: &str) -> &str {
    name.split_once('/').map_or(name, |(host, _)| host)
}

/// The peer named `host`, if configured.
pub fn peer<'a>(peers: &'a [LabPeer], host: &str) -> Option<&'a LabPeer> {
    peers.iter().find(|p| p.name == host)
}
