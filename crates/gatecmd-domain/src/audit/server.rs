//! The server's own audit lines (docs/AUDIT.md): it started, a reload applied a
//! configuration or refused one.

use serde::Serialize;

/// The server's lifecycle and configuration; serialised with its `event`.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ServerRecord<'a> {
    /// `serve` started (a restart releases every lease: readers see where).
    ServerStarted { version: &'a str, config: &'a str },
    /// SIGHUP applied a configuration; `restart_only` names the keys that wait for a
    /// restart.
    ConfigReloaded {
        config: &'a str,
        restart_only: &'a [&'static str],
    },
    /// SIGHUP's configuration was refused; the old one stays in force.
    ConfigReloadRefused { config: &'a str, reason: &'a str },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_lines_keep_their_shape() {
        let v = |r: ServerRecord<'_>| serde_json::to_value(r).unwrap();
        assert_eq!(
            v(ServerRecord::ServerStarted {
                version: "1",
                config: "/c.yaml"
            }),
            json!({"event": "server_started", "version": "1", "config": "/c.yaml"})
        );
        assert_eq!(
            v(ServerRecord::ConfigReloaded {
                config: "/c.yaml",
                restart_only: &["bind"]
            }),
            json!({"event": "config_reloaded", "config": "/c.yaml", "restart_only": ["bind"]})
        );
        assert_eq!(
            v(ServerRecord::ConfigReloadRefused {
                config: "/c.yaml",
                reason: "r"
            }),
            json!({"event": "config_reload_refused", "config": "/c.yaml", "reason": "r"})
        );
    }
}
