//! The `metrics:` section: who may read `GET /metrics`, and the optional second listener
//! that serves it alone, to the same tokens (docs/METRICS.md, docs/CONFIG.md).

use std::net::SocketAddr;

use serde::Deserialize;

/// `metrics:` as written in YAML.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawMetrics {
    pub enabled: bool,
    pub clients: Vec<String>,
    pub bind: Option<String>,
}

impl Default for RawMetrics {
    fn default() -> Self {
        RawMetrics {
            enabled: true,
            clients: Vec::new(),
            bind: None,
        }
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
