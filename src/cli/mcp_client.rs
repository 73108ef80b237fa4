//! The command line as an MCP client of the running server (`gatecmd approve`/`deny`,
//! `gatecmd leases`), with a client's token like any other: it calls a tool over `/mcp`,
//! so what the client may do is checked by the same code as every client's, and what it
//! does is audited under that client's name. Running on the host proves nothing (a NAT
//! guest reaches the host's loopback as 10.0.2.2): the token decides. It comes from
//! `$GATECMD_TOKEN` or `--token-file` (an owner-only file), never from the command line,
//! where every user of the host could read it in the process list.
//!
//! The HTTP is the least that talks to gatecmd's own `/mcp`: HTTP/1.0 requests (the answer
//! ends when the connection closes, no chunking to undo), JSON or one server-sent event.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest a call may take (an approval's answer comes as soon as it is decided).
const TIMEOUT: Duration = Duration::from_secs(30);
/// An answer larger than this is refused (a decision's answer is a few KiB).
const MAX_ANSWER: usize = 1 << 20;
const PROTOCOL: &str = "2025-11-25";

/// Where the server is and how to sign in.
pub struct Target {
    pub url: Option<String>,
    pub config: Option<PathBuf>,
    pub token_file: Option<PathBuf>,
}

/// A tool's answer: its text, and its structured content.
pub struct Answer {
    pub text: String,
    pub structured: Value,
}

/// Calls `tool` with `args` on the server `t` names, as the client whose token it holds: a
/// refusal (or any error result) is an `Err` naming its reason and message.
pub async fn call_tool(t: Target, tool: &str, args: Value) -> Result<Answer, String> {
    let token = token(t.token_file.as_deref())?;
    let url = match t.url {
        Some(u) => u,
        None => default_url(t.config.as_deref()),
    };
    let endpoint = Endpoint::parse(&url)?;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {},
        "clientInfo": {"name": "gatecmd-cli", "version": env!("CARGO_PKG_VERSION")}}});
    let (headers, _) = endpoint.post(&token, None, &init).await?;
    let session = header(&headers, "mcp-session-id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    endpoint
        .post(&token, session.as_deref(), &initialized)
        .await?;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": tool, "arguments": args}});
    let (_, answer) = endpoint.post(&token, session.as_deref(), &call).await?;
    let result = &answer["result"];
    if result.is_null() {
        return Err(format!(
            "the server answered with an error: {}",
            answer["error"]
        ));
    }
    let text = (result["content"].as_array().into_iter().flatten())
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("");
    if result["isError"].as_bool() == Some(true) {
        let reason = result["structuredContent"]["refusal"]["reason"]
            .as_str()
            .unwrap_or("refused");
        return Err(format!("{reason}: {}", text.trim_end()));
    }
    Ok(Answer {
        text,
        structured: result["structuredContent"].clone(),
    })
}

/// The token: `$GATECMD_TOKEN`, else the first line of `--token-file` (owner-only).
fn token(file: Option<&Path>) -> Result<String, String> {
    if let Some(p) = file {
        let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(format!(
                "{} is readable by other users; chmod 600 it (it holds a token)",
                p.display()
            ));
        }
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let t = text.lines().next().unwrap_or("").trim().to_string();
        if t.is_empty() {
            return Err(format!("{} holds no token", p.display()));
        }
        return Ok(t);
    }
    match std::env::var("GATECMD_TOKEN") {
        Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
        _ => Err(
            "no token: set GATECMD_TOKEN or pass --token-file (an owner-only file); the \
                  token is an approver's (docs/APPROVALS.md) or an admin client's (gatecmd leases)"
                .into(),
        ),
    }
}

/// The server's `/mcp` on the host: the configuration's `bind` (a wildcard bind reached on
/// loopback), else the default port.
fn default_url(config: Option<&Path>) -> String {
    let bind = gatecmd_domain::config::find_config(config)
        .load()
        .map(|c| c.bind)
        .unwrap_or_else(|_| ([127, 0, 0, 1], 9222).into());
    let host = if bind.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else if bind.is_ipv6() {
        format!("[{}]", bind.ip())
    } else {
        bind.ip().to_string()
    };
    format!("http://{host}:{}/mcp", bind.port())
}

struct Endpoint {
    /// `host:port`, for the connection and the `Host` header.
    authority: String,
    path: String,
}

impl Endpoint {
    fn parse(url: &str) -> Result<Endpoint, String> {
        let u = url::Url::parse(url).map_err(|e| format!("--url {url:?}: {e}"))?;
        if u.scheme() != "http" {
            return Err(format!("--url {url:?}: only http:// is supported"));
        }
        let host = u
            .host_str()
            .ok_or_else(|| format!("--url {url:?}: no host"))?;
        let port = u.port_or_known_default().unwrap_or(80);
        Ok(Endpoint {
            authority: format!("{host}:{port}"),
            path: u.path().to_string(),
        })
    }

    /// POSTs one JSON-RPC message; the answer's headers and its JSON-RPC message (`Null`
    /// for a notification's 202).
    async fn post(
        &self,
        token: &str,
        session: Option<&str>,
        body: &Value,
    ) -> Result<(String, Value), String> {
        let body = body.to_string();
        let mut req = format!(
            "POST {} HTTP/1.0\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             MCP-Protocol-Version: {PROTOCOL}\r\nContent-Length: {}\r\n",
            self.path,
            self.authority,
            body.len()
        );
        if let Some(s) = session {
            req.push_str(&format!("Mcp-Session-Id: {s}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(&body);
        let raw = tokio::time::timeout(TIMEOUT, async {
            let mut conn = tokio::net::TcpStream::connect(&self.authority)
                .await
                .map_err(|e| format!("cannot reach gatecmd at {}: {e}", self.authority))?;
            conn.write_all(req.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut raw = Vec::new();
            (&mut conn)
                .take(MAX_ANSWER as u64 + 1)
                .read_to_end(&mut raw)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(raw)
        })
        .await
        .map_err(|_| format!("gatecmd at {} did not answer in time", self.authority))??;
        if raw.len() > MAX_ANSWER {
            return Err("the answer is too large".into());
        }
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split(' ').nth(1).unwrap_or("");
        match status {
            "200" | "202" => {}
            "401" => return Err("the token was refused (401)".into()),
            s => return Err(format!("gatecmd answered HTTP {s}: {}", body.trim())),
        }
        let message = body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .find(|d| !d.is_empty())
            .unwrap_or(body.trim());
        let value = if message.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(message).map_err(|e| format!("unreadable answer: {e}"))?
        };
        Ok((head.to_string(), value))
    }
}

/// A header's value (names compare case-insensitively).
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}
