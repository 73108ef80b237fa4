//! `auth_token:` and `clients:`: names and token sources.

use super::super::raw::RawClient;
use super::super::schema::{ClientConfig, TokenSource};
use super::super::values::{check_name, parse_abs, parse_sha256};
use super::validator::Validator;

impl Validator {
    pub(super) fn clients(
        &mut self,
        auth_token: Option<String>,
        raw: Vec<RawClient>,
    ) -> Vec<ClientConfig> {
        let mut out = Vec::new();
        if let Some(t) = auth_token {
            if t.trim().is_empty() {
                let at = self.at("auth_token");
                self.err(
                    at,
                    "auth_token".into(),
                    "is empty; remove it or set a token".into(),
                );
            } else {
                out.push(ClientConfig {
                    name: "default".into(),
                    token: TokenSource::Inline(t),
                    commands: None,
                    admin: false,
                    peer: false,
                });
            }
        }
        for (i, rc) in raw.into_iter().enumerate() {
            let name = rc.name;
            let at = self.at(&format!("clients[{i}].name"));
            if self
                .value(check_name(&name), at, format!("clients[{i}].name"))
                .is_none()
            {
                continue;
            }
            let mut sources = Vec::new();
            if let Some(t) = rc.token {
                sources.push(TokenSource::Inline(t));
            }
            if let Some(p) = rc.token_file {
                let at = self.at(&format!("clients[{i}].token_file"));
                if let Some(p) = self.value(parse_abs(&p), at, format!("clients[{i}].token_file")) {
                    sources.push(TokenSource::File(p));
                }
            }
            if let Some(e) = rc.token_env {
                sources.push(TokenSource::Env(e));
            }
            if let Some(h) = rc.token_sha256 {
                let at = self.at(&format!("clients[{i}].token_sha256"));
                if let Some(d) =
                    self.value(parse_sha256(&h), at, format!("clients[{i}].token_sha256"))
                {
                    sources.push(TokenSource::Sha256(d));
                }
            }
            if sources.len() != 1 {
                self.err(
                    at,
                    format!("clients[{i}]"),
                    format!(
                        "client {name:?} needs exactly one of token, token_file, token_env, token_sha256 (has {})",
                        sources.len()
                    ),
                );
                continue;
            }
            if out.iter().any(|c: &ClientConfig| c.name == name) {
                self.err(
                    at,
                    format!("clients[{i}].name"),
                    format!("client name {name:?} is used twice (a top-level auth_token is the client \"default\")"),
                );
                continue;
            }
            out.push(ClientConfig {
                name,
                token: sources.remove(0),
                commands: rc.commands.map(|v| v.into_iter().collect()),
                admin: rc.admin,
                peer: rc.peer,
            });
        }
        out
    }
}
