//! `labgrid.peers`: each a distinct exporter name, an `http://` MCP endpoint and exactly
//! one of `token` and `token_file` (an absolute path; its mode is checked when read).

use super::super::peers::{LabPeer, PeerToken, RawLabPeer};
use super::super::values::{check_name, parse_abs};
use super::validator::Validator;

impl Validator {
    pub(super) fn lab_peers(&mut self, raw: &[RawLabPeer]) -> Vec<LabPeer> {
        let mut out: Vec<LabPeer> = Vec::new();
        for (i, p) in raw.iter().enumerate() {
            let field = format!("labgrid.peers[{i}].name");
            let at = self.at(&field);
            if self.value(check_name(&p.name), at, field.clone()).is_none() {
                continue;
            }
            if out.iter().any(|o| o.name == p.name) {
                self.err(
                    at,
                    field,
                    format!("peer {:?} is listed twice; list each host once", p.name),
                );
                continue;
            }
            let url_ok = url_is_mcp(&p.url);
            if !url_ok {
                let field = format!("labgrid.peers[{i}].url");
                let at = self.at(&field);
                self.err(
                    at,
                    field,
                    format!(
                        "{:?} is not an http:// URL of a gatecmd MCP endpoint; write e.g. \"http://bench-2.lab:9222/mcp\"",
                        p.url
                    ),
                );
            }
            let token = match (&p.token, &p.token_file) {
                (Some(t), None) if !t.trim().is_empty() => Some(PeerToken::Inline(t.clone())),
                (None, Some(f)) => {
                    let field = format!("labgrid.peers[{i}].token_file");
                    let at = self.at(&field);
                    self.value(parse_abs(f), at, field).map(PeerToken::File)
                }
                _ => {
                    let field = format!("labgrid.peers[{i}]");
                    let at = self.at(&field);
                    self.err(
                        at,
                        field,
                        format!(
                            "peer {:?} needs exactly one of token and token_file (the token of a client with peer: true in that host's config)",
                            p.name
                        ),
                    );
                    None
                }
            };
            if let (Some(token), true) = (token, url_ok) {
                out.push(LabPeer {
                    name: p.name.clone(),
                    url: p.url.clone(),
                    token,
                });
            }
        }
        out
    }
}

/// `http://host[:port]/path` with nothing else (no user info, query or fragment).
fn url_is_mcp(s: &str) -> bool {
    url::Url::parse(s).is_ok_and(|u| {
        u.scheme() == "http"
            && u.host().is_some()
            && u.username().is_empty()
            && u.password().is_none()
            && u.query().is_none()
            && u.fragment().is_none()
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, PeerToken};

    #[test]
    fn peers_are_checked_with_their_lines() {
        let ok = "labgrid:\n  peers:\n    - {name: bench-2, url: \"http://127.0.0.1:9333/mcp\", token: s3cret}\n    - {name: bench-3, url: \"http://10.0.0.3:9222/mcp\", token_file: /etc/gatecmd/bench-3.token}\n";
        let c = Config::parse(ok, "t.yaml").expect("valid");
        assert_eq!(c.lab_peers.len(), 2);
        assert!(matches!(c.lab_peers[1].token, PeerToken::File(_)));
        assert!(
            !format!("{:?}", c.lab_peers).contains("s3cret"),
            "Debug shows no token"
        );
        let bad = "labgrid:\n  peers:\n    - {name: \"a/b\", url: \"http://x/mcp\", token: t}\n    - {name: b2, url: \"ftp://x\", token: t}\n    - {name: b3, url: \"http://x/mcp\"}\n    - {name: b4, url: \"http://x/mcp\", token: t, token_file: /t}\n    - {name: b5, url: \"http://x/mcp\", token_file: rel}\n";
        let e = Config::parse(bad, "t.yaml")
            .expect_err("refused")
            .to_string();
        for (field, line) in [
            ("labgrid.peers[0].name", "t.yaml:3"),
            ("labgrid.peers[1].url", "t.yaml:4"),
            ("labgrid.peers[2]", "t.yaml:5"),
            ("labgrid.peers[3]", "t.yaml:6"),
            ("labgrid.peers[4].token_file", "t.yaml:7"),
        ] {
            let hit = e
                .lines()
                .find(|l| l.contains(&format!("{field}:")) || l.contains(&format!("{field} ")));
            assert!(
                hit.is_some_and(|l| l.contains(line)),
                "{field} at {line}: {e}"
            );
        }
    }

    #[test]
    fn an_agent_through_a_peer_has_the_peer_clients_write_roots() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path().display();
        let text = format!(
            "file_roots: [{root}]\nclients:\n  - {{name: bench-1, token: t, peer: true}}\nflash:\n  enabled: true\n  clients: [bench-1]\n"
        );
        let c = Config::parse(&text, "t.yaml").expect("valid");
        let p = c.staging.policy("bench-1/vm-a");
        assert!(
            !p.write_roots.allows(dir.path()),
            "bench-1 has no write_roots, so neither has its agent"
        );
        assert!(
            c.staging.policy("default").write_roots.allows(dir.path()),
            "unlisted local names as before"
        );
        assert!(c.flash.allows_client("bench-1/vm-a") && !c.flash.allows_client("bench-2/vm-a"));
    }

    #[test]
    fn a_token_file_must_be_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("t");
        std::fs::write(&p, "tok\n").expect("w");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let t = PeerToken::File(p.clone());
        let e = t.read().expect_err("group-readable");
        assert!(e.contains("chmod 600") && !e.contains("tok\n"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(t.read().as_deref(), Ok("tok"));
    }
}
