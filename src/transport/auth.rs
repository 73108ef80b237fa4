//! Who is calling: bearer tokens of named clients, compared in constant time, and the
//! `Origin`/`Host` checks that keep a browser page from reaching the server (DNS rebinding).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::config::{ClientConfig, Config, TokenSource};

struct Entry {
    digest: [u8; 32],
    identity: ClientIdentity,
    /// `peer: true`: another gatecmd host, which may act for its agents.
    peer: bool,
}

/// The token table. Only SHA-256 digests are kept in memory.
#[derive(Clone)]
pub struct Credentials {
    entries: Arc<Vec<Entry>>,
}

/// Why the credentials could not be loaded (at start or reload).
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("client {client:?}: cannot read token_file {path}: {source}")]
    TokenFile {
        client: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "client {client:?}: token_file {path} is readable by group or others (mode {mode:o}); run `chmod 600 {path}`"
    )]
    TokenFileMode {
        client: String,
        path: PathBuf,
        mode: u32,
    },
    #[error("client {client:?}: environment variable {var} (token_env) is not set or empty")]
    TokenEnv { client: String, var: String },
    #[error("client {client:?}: the token is empty")]
    Empty { client: String },
    #[error("could not create the generated token at {path}: {source}")]
    Generate {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Why a request was refused. 401 for credentials, 403 for Origin/Host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing Authorization header: send `Authorization: Bearer <token>`")]
    Missing,
    #[error("invalid bearer token")]
    Invalid,
    #[error("Origin {0:?} is not allowed: add it to allowed_origins in the server's config")]
    Origin(String),
    #[error(
        "Host {0:?} is not allowed: connect by the server's address or add it to allowed_hosts"
    )]
    Host(String),
    /// A `Gatecmd-On-Behalf-Of` header from a client that is not a peer.
    #[error(
        "client {0:?} is not a peer (peer: true) and may not act for another host's agent; send no Gatecmd-On-Behalf-Of header"
    )]
    NotPeer(String),
    /// A `Gatecmd-On-Behalf-Of` value that is not a client name.
    #[error(
        "Gatecmd-On-Behalf-Of must be one client name of 1-64 of [A-Za-z0-9_.-] (the agent's name on its own host)"
    )]
    OnBehalf,
    /// A peer acting for one agent more than it may (`on_behalf::MAX_AGENTS_PER_PEER`).
    #[error(
        "peer {peer:?} acts for {max} distinct agents already (each counted until a day after its last request); a host acts for its own configured clients: the operator of that host checks its agents"
    )]
    TooManyAgents { peer: String, max: usize },
}

impl Credentials {
    /// Loads every client's token (files and environment are read now).
    pub fn load(clients: &[ClientConfig]) -> Result<Self, CredentialError> {
        let mut entries = Vec::new();
        for c in clients {
            let digest = match &c.token {
                TokenSource::Sha256(d) => *d,
                TokenSource::Inline(t) => digest_nonempty(t, &c.name)?,
                TokenSource::Env(var) => {
                    let t = std::env::var(var).unwrap_or_default();
                    if t.trim().is_empty() {
                        return Err(CredentialError::TokenEnv {
                            client: c.name.clone(),
                            var: var.clone(),
                        });
                    }
                    digest_nonempty(t.trim(), &c.name)?
                }
                TokenSource::File(path) => {
                    digest_nonempty(&read_token_file(path, &c.name)?, &c.name)?
                }
            };
            entries.push(Entry {
                digest,
                identity: ClientIdentity {
                    name: c.name.clone(),
                    commands: c.commands.clone(),
                    admin: c.admin,
                },
                peer: c.peer,
            });
        }
        Ok(Credentials {
            entries: Arc::new(entries),
        })
    }

    /// Whether any client is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks the whole `Authorization` header value.
    ///
    /// The scheme must be exactly `Bearer` followed by one space; the token's digest is
    /// compared with every client's in constant time, without stopping at a match, so
    /// timing says nothing about which byte or which client differed.
    pub fn authenticate(&self, header: Option<&[u8]>) -> Result<ClientIdentity, AuthError> {
        let header = header.ok_or(AuthError::Missing)?;
        let token = header.strip_prefix(b"Bearer ").ok_or(AuthError::Invalid)?;
        let digest: [u8; 32] = Sha256::digest(token).into();
        let mut found: Option<&ClientIdentity> = None;
        for e in self.entries.iter() {
            if bool::from(e.digest.ct_eq(&digest)) {
                found = Some(&e.identity);
            }
        }
        found.cloned().ok_or(AuthError::Invalid)
    }
}

impl Credentials {
    /// Whether the client named `name` is a peer (`peer: true`).
    pub fn is_peer(&self, name: &str) -> bool {
        self.entries
            .iter()
            .any(|e| e.peer && e.identity.name == name)
    }

    /// A fingerprint of `client`'s token as loaded now, for what was granted with it (a
    /// page session): it changes when the token changes, is gone when the client is, and
    /// is a digest of the digest, so a saved copy is no token and no token digest.
    pub fn fingerprint(&self, client: &str) -> Option<String> {
        let e = self.entries.iter().find(|e| e.identity.name == client)?;
        let mut h = Sha256::new();
        h.update(b"gatecmd page session\0");
        h.update(e.digest);
        Some(hex::encode(&h.finalize()[..16]))
    }
}

fn digest_nonempty(token: &str, client: &str) -> Result<[u8; 32], CredentialError> {
    if token.is_empty() {
        return Err(CredentialError::Empty {
            client: client.into(),
        });
    }
    Ok(Sha256::digest(token.as_bytes()).into())
}

fn read_token_file(path: &Path, client: &str) -> Result<String, CredentialError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| CredentialError::TokenFile {
        client: client.into(),
        path: path.into(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(err)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(CredentialError::TokenFileMode {
            client: client.into(),
            path: path.into(),
            mode,
        });
    }
    Ok(std::fs::read_to_string(path)
        .map_err(err)?
        .trim()
        .to_string())
}

/// The generated token's file: `<state_dir>/token`.
pub fn generated_token_path(state_dir: &Path) -> PathBuf {
    state_dir.join("token")
}

/// With no client configured, the server makes one token (once) and keeps it owner-only in
/// the state directory; the client is named `default`. Returns the path and whether it was
/// created now.
pub fn ensure_generated_token(
    state_dir: &Path,
) -> Result<(ClientConfig, PathBuf, bool), CredentialError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let path = generated_token_path(state_dir);
    let err = |source| CredentialError::Generate {
        path: path.clone(),
        source,
    };
    let client = ClientConfig {
        name: "default".into(),
        token: TokenSource::File(path.clone()),
        commands: None,
        admin: false,
        peer: false,
    };
    if path.exists() {
        return Ok((client, path, false));
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir)
        .map_err(err)?;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| err(std::io::Error::other(e.to_string())))?;
    let token = hex::encode(bytes);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(err)?;
    f.write_all(format!("{token}\n").as_bytes()).map_err(err)?;
    Ok((client, path, true))
}

/// Whether an address is loopback (127.0.0.0/8 or ::1).
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// The Origin and Host policy for one bind address.
#[derive(Debug, Clone)]
pub struct OriginPolicy {
    allowed_origins: Vec<String>,
    allowed_hosts: BTreeSet<String>,
    any_host: bool,
}

/// The address NAT guests (VirtualBox, QEMU user networking) use to reach the host's loopback.
pub const NAT_HOST_ADDR: &str = "10.0.2.2";

impl OriginPolicy {
    /// Builds the policy for `config` served on `bind` (auth on or off).
    pub fn new(config: &Config, bind: SocketAddr, auth_on: bool) -> Self {
        let mut hosts: BTreeSet<String> = ["localhost", "127.0.0.1", "::1"]
            .into_iter()
            .map(String::from)
            .collect();
        hosts.insert(bind.ip().to_string());
        if bind.ip().is_loopback() || bind.ip().is_unspecified() {
            hosts.insert(NAT_HOST_ADDR.into());
        }
        hosts.extend(config.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()));
        OriginPolicy {
            allowed_origins: config
                .allowed_origins
                .iter()
                .map(|o| match parse_origin(o) {
                    Some(u) => u.origin().ascii_serialization(),
                    None => o.trim_end_matches('/').to_ascii_lowercase(),
                })
                .collect(),
            allowed_hosts: hosts,
            // On a wildcard bind the guest may use any of the host's addresses; the token guards it.
            any_host: bind.ip().is_unspecified() && auth_on,
        }
    }

    /// Checks the `Origin` (absent is fine) and `Host` headers. Both are parsed as URL
    /// authorities (WHATWG rules, as a browser does); anything that does not parse whole,
    /// carries user info, a path or a query, is refused rather than guessed at.
    pub fn check(&self, origin: Option<&str>, host: Option<&str>) -> Result<(), AuthError> {
        if let Some(origin) = origin {
            let ok = parse_origin(origin).is_some_and(|u| {
                self.allowed_origins
                    .contains(&u.origin().ascii_serialization())
                    || host_of(&u).is_some_and(|h| is_loopback_name(&h))
            });
            if !ok {
                return Err(AuthError::Origin(origin.into()));
            }
        }
        if let Some(host) = host {
            self.check_host(host)?;
        }
        Ok(())
    }

    /// Checks one authority (`Host` header, or the authority of an absolute-form request
    /// target such as `POST http://evil.example/mcp`) against the host policy.
    pub fn check_host(&self, authority: &str) -> Result<(), AuthError> {
        let refused = || AuthError::Host(authority.into());
        let url = parse_authority(authority).ok_or_else(refused)?;
        if self.any_host {
            return Ok(());
        }
        let name = host_of(&url).ok_or_else(refused)?;
        let with_port = url.port().map(|p| match url.host() {
            Some(url::Host::Ipv6(_)) => format!("[{name}]:{p}"),
            _ => format!("{name}:{p}"),
        });
        if self.allowed_hosts.contains(&name)
            || with_port.is_some_and(|hp| self.allowed_hosts.contains(&hp))
        {
            Ok(())
        } else {
            Err(refused())
        }
    }
}

/// `http(s)://host[:port]` and nothing else (a trailing `/` is tolerated).
fn parse_origin(origin: &str) -> Option<url::Url> {
    let u = url::Url::parse(origin).ok()?;
    let plain = matches!(u.scheme(), "http" | "https")
        && u.username().is_empty()
        && u.password().is_none()
        && u.path() == "/"
        && u.query().is_none()
        && u.fragment().is_none();
    plain.then_some(u)
}

/// `host[:port]` parsed as the authority of an `http://` URL, with nothing around it.
fn parse_authority(authority: &str) -> Option<url::Url> {
    // Characters that would end the authority inside a URL: they have no place in a Host.
    if authority.is_empty() || authority.contains(['/', '\\', '?', '#', '@']) {
        return None;
    }
    parse_origin(&format!("http://{authority}"))
}

/// The host of a parsed URL: lowercase name, or an IP address without brackets.
fn host_of(u: &url::Url) -> Option<String> {
    match u.host()? {
        url::Host::Domain(d) => Some(d.to_ascii_lowercase()),
        url::Host::Ipv4(a) => Some(a.to_string()),
        url::Host::Ipv6(a) => Some(a.to_string()),
    }
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        let c = |name: &str, t: &str| ClientConfig {
            name: name.into(),
            token: TokenSource::Inline(t.into()),
            commands: None,
            admin: false,
            peer: false,
        };
        let hashed = ClientConfig {
            name: "hashed".into(),
            token: TokenSource::Sha256(Sha256::digest(b"h4sh").into()),
            commands: Some(["lsusb".to_string()].into()),
            admin: false,
            peer: false,
        };
        Credentials::load(&[c("vm-a", "alpha"), c("vm-b", "beta"), hashed]).expect("load")
    }

    #[test]
    fn accepts_exact_bearer_tokens() {
        let c = creds();
        assert_eq!(
            c.authenticate(Some(b"Bearer alpha")).map(|i| i.name),
            Ok("vm-a".into())
        );
        assert_eq!(
            c.authenticate(Some(b"Bearer beta")).map(|i| i.name),
            Ok("vm-b".into())
        );
        let h = c.authenticate(Some(b"Bearer h4sh")).expect("hashed");
        assert!(h.may_run("lsusb") && !h.may_run("rkdeveloptool"));
    }

    #[test]
    fn refuses_near_misses() {
        let c = creds();
        assert_eq!(c.authenticate(None), Err(AuthError::Missing));
        for bad in [
            &b"bearer alpha"[..],
            b"BEARER alpha",
            b"Bearer  alpha",
            b"Bearer alpha ",
            b"Bearer alph",
            b"Bearer alphaa",
            b"Basic alpha",
            b"alpha",
            b"Bearer ",
            b"",
        ] {
            assert_eq!(
                c.authenticate(Some(bad)),
                Err(AuthError::Invalid),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn token_file_must_be_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("t");
        std::fs::write(&p, "tok\n").expect("w");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let cfg = ClientConfig {
            name: "f".into(),
            token: TokenSource::File(p.clone()),
            commands: None,
            admin: false,
            peer: false,
        };
        assert!(matches!(
            Credentials::load(std::slice::from_ref(&cfg)),
            Err(CredentialError::TokenFileMode { .. })
        ));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let c = Credentials::load(&[cfg]).expect("load");
        assert!(c.authenticate(Some(b"Bearer tok")).is_ok());
    }

    #[test]
    fn generated_token_is_owner_only_and_stable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tmp");
        let state = dir.path().join("state");
        let (client, path, created) = ensure_generated_token(&state).expect("gen");
        assert!(created);
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let token = std::fs::read_to_string(&path).expect("read");
        assert_eq!(token.trim().len(), 64);
        let (_, _, again) = ensure_generated_token(&state).expect("gen");
        assert!(!again);
        let c = Credentials::load(&[client]).expect("load");
        assert!(
            c.authenticate(Some(format!("Bearer {}", token.trim()).as_bytes()))
                .is_ok()
        );
    }

    fn policy(bind: &str, auth: bool, origins: &[&str], hosts: &[&str]) -> OriginPolicy {
        let mut cfg = gatecmd_domain::config::Config::parse("", "t").expect("empty config");
        cfg.allowed_origins = origins.iter().map(|s| s.to_string()).collect();
        cfg.allowed_hosts = hosts.iter().map(|s| s.to_string()).collect();
        OriginPolicy::new(&cfg, bind.parse().expect("addr"), auth)
    }

    #[test]
    fn origin_rules() {
        let p = policy("127.0.0.1:9222", true, &["https://ide.example.com"], &[]);
        assert!(p.check(None, None).is_ok());
        assert!(p.check(Some("http://localhost:3000"), None).is_ok());
        assert!(p.check(Some("http://127.0.0.1"), None).is_ok());
        assert!(p.check(Some("http://[::1]:8080"), None).is_ok());
        assert!(p.check(Some("https://ide.example.com"), None).is_ok());
        assert!(p.check(Some("http://evil.example"), None).is_err());
        assert!(
            p.check(Some("http://localhost.evil.example"), None)
                .is_err()
        );
        assert!(p.check(Some("null"), None).is_err());
    }

    #[test]
    fn host_rules_include_nat_guests() {
        let p = policy("127.0.0.1:9222", true, &[], &[]);
        for ok in [
            "localhost:9222",
            "127.0.0.1:9222",
            "[::1]:9222",
            "10.0.2.2:9222",
            "LOCALHOST",
        ] {
            assert!(p.check(None, Some(ok)).is_ok(), "{ok}");
        }
        assert!(p.check(None, Some("evil.example:9222")).is_err());
        assert!(p.check(None, Some("192.168.56.1:9222")).is_err());
        let p = policy("192.168.56.1:9222", true, &[], &["bench.lan"]);
        assert!(p.check(None, Some("192.168.56.1:9222")).is_ok());
        assert!(p.check(None, Some("bench.lan:9222")).is_ok());
        assert!(p.check(None, Some("10.0.2.2:9222")).is_err());
        let p = policy("0.0.0.0:9222", true, &[], &[]);
        assert!(p.check(None, Some("anything:9222")).is_ok());
        assert!(p.check(None, Some("[::1]evil.example")).is_err());
    }

    #[test]
    fn authorities_are_parsed_not_sliced() {
        let p = policy("127.0.0.1:9222", true, &["https://ide.example.com"], &[]);
        for bad in [
            "[::1]evil.example",
            "[::1]evil.example:9222",
            "localhost@evil.example",
            "evil.example@localhost",
            "localhost/evil",
            "localhost:9222:1",
            "localhost:port",
            "[::1",
            "",
            "localhost evil",
        ] {
            assert!(p.check(None, Some(bad)).is_err(), "Host {bad:?}");
            assert!(p.check_host(bad).is_err(), "target {bad:?}");
        }
        for bad in [
            "http://[::1]evil.example",
            "http://[::1]evil.example:80",
            "http://localhost@evil.example",
            "http://evil.example@localhost",
            "http://localhost/path",
            "http://localhost?q",
            "ftp://localhost",
            "localhost",
            "https://ide.example.com.evil.example",
        ] {
            assert!(p.check(Some(bad), None).is_err(), "Origin {bad:?}");
        }
        assert!(p.check(Some("HTTPS://IDE.example.com:443/"), None).is_ok());
        assert!(p.check(None, Some("[::1]:9222")).is_ok());
        assert!(p.check_host("localhost:9222").is_ok());
    }
}
