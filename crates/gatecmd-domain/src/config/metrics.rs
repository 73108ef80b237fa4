//! The `metrics:` section: who may read `GET /metrics`, and the optional second listener
//! that serves it alone, to the same tokens (docs/METRICS.md, docs/CONFIG.md).

use std::net::SocketAddr;

use serde::Deserialize;

use super::declare::settings;

settings! {
    /// `metrics:` as written in YAML.
    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct RawMetrics {
        enabled: bool {
            default: true,
            docs: "serve `/metrics` on the main bind, behind the same Host/Origin checks as \
                `/mcp` and a configured client's bearer token (open under `--no-auth`, which \
                is loopback-only). `false`: 404 there.",
        },
        clients: Vec<String> {
            default: Vec::new(),
            note: "(every client)",
            docs: "the clients whose tokens may read `/metrics` on the main bind; any other \
                client gets 403. Names must be configured clients (`default` for the simple \
                schema or the generated token).",
        },
        bind: Option<String> {
            default: None,
            docs: "a second listener, loopback only (`127.0.0.1:PORT` or `[::1]:PORT`, not the \
                main bind), that serves `/metrics` alone without a token (Host and Origin \
                still checked). Any other address is refused at load. Its address is printed \
                at start: `gatecmd: metrics on http://127.0.0.1:PORT/metrics`.",
            restart: "the metrics listener is opened once, at start",
        },
    }
}

/// Who may read `/metrics`, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSettings {
    /// Serve `/metrics` on the main bind (to a client's bearer token). Reloadable.
    pub enabled: bool,
    /// The clients whose tokens may read it there; empty: every configured client.
    /// Reloadable.
    pub clients: Vec<String>,
    /// A second listener serving `/metrics` alone, to the same tokens as the main bind
    /// (and `clients`). Restart-only.
    pub bind: Option<SocketAddr>,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            enabled: true,
            clients: Vec::new(),
            bind: None,
        }
    }
}

impl MetricsSettings {
    /// Whether `client` (authenticated on the main bind) may read `/metrics`.
    pub fn may_scrape(&self, client: &str) -> bool {
        self.clients.is_empty() || self.clients.iter().any(|c| c == client)
    }
}
