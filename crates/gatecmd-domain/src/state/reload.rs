//! What a configuration reload cannot apply: the restart-only keys, derived from the
//! settings' declarations (a key declared with `restart: "why"`, `config/declare.rs`).
//!
//! Everything else takes effect on reload: commands, clients and tokens, origins and hosts,
//! device classes, file roots, staging, isolation roots, audit rotation, lease TTLs, and
//! every `limits` key but the restart-only ones (see `AppState::replace_config` and
//! docs/CONFIG.md). A reload names the restart-only keys whose value as written changed.

use std::sync::LazyLock;

use crate::config::Config;

/// A key whose new value waits for a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartOnly {
    /// The key as written in the YAML file (`limits.max_connections`).
    pub key: String,
    /// Why a running server cannot apply it (shown in docs/CONFIG.md's table).
    pub why: &'static str,
}

/// Every restart-only key, in the declarations' order: the settings declared `restart`
/// (`crate::config::settings`), never listed here by hand.
pub static RESTART_ONLY: LazyLock<Vec<RestartOnly>> = LazyLock::new(|| {
    crate::config::settings()
        .into_iter()
        .filter_map(|s| s.restart.map(|why| RestartOnly { key: s.key, why }))
        .collect()
});

/// The restart-only keys whose value as written differs between `old` and `new`.
pub fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    RESTART_ONLY
        .iter()
        .filter(|k| old.written(&k.key) != new.written(&k.key))
        .map(|k| k.key.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Config {
        Config::parse(yaml, "test.yaml").expect("valid config")
    }

    #[test]
    fn only_changed_restart_only_keys_are_named() {
        let old = config("bind: 127.0.0.1:9222\nlimits: {session_idle_secs: 60}\n");
        let same =
            config("bind: 127.0.0.1:9222\nlimits: {session_idle_secs: 60, max_output_bytes: 10}\n");
        assert!(restart_only_changes(&old, &same).is_empty());
        let new = config(
            "bind: 127.0.0.1:9333\nlimits: {session_idle_secs: 61}\nmonitor: {backend: poll}\n",
        );
        assert_eq!(
            restart_only_changes(&old, &new),
            ["bind", "limits.session_idle_secs", "monitor.backend"]
        );
        // Each key of a restart-only section; labgrid's keys but its peers.
        let lab = config("labgrid: {coordinator: \"127.0.0.1:20408\", name: a}\n");
        let moved = config("labgrid: {coordinator: \"127.0.0.1:20408\", name: b}\n");
        assert_eq!(restart_only_changes(&lab, &moved), ["labgrid.name"]);
        let peer = config(
            "labgrid: {coordinator: \"127.0.0.1:20408\", name: a, peers: [{name: b, url: \"http://127.0.0.1:1/mcp\", token: t}]}\n",
        );
        assert!(restart_only_changes(&lab, &peer).is_empty());
        let m = config("metrics: {bind: \"127.0.0.1:9300\", enabled: false}\n");
        // An absent key is its default: `bind` did not change.
        assert_eq!(
            restart_only_changes(&old, &m),
            ["limits.session_idle_secs", "metrics.bind"]
        );
    }

    #[test]
    fn the_keys_are_unique() {
        let mut keys: Vec<_> = RESTART_ONLY.iter().map(|k| k.key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), RESTART_ONLY.len());
    }

    /// docs/CONFIG.md's table of restart-only keys is the list, row for row.
    #[test]
    fn docs_config_lists_every_restart_only_key() {
        let doc = include_str!("../../../../docs/CONFIG.md");
        let table: Vec<&str> = doc
            .lines()
            .skip_while(|l| !l.starts_with("Restart-only keys"))
            .skip_while(|l| !l.starts_with("| key | why |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        let rows: Vec<String> = RESTART_ONLY
            .iter()
            .map(|k| format!("| `{}` | {} |", k.key, k.why))
            .collect();
        assert_eq!(
            table,
            rows,
            "docs/CONFIG.md's restart-only table, as the declarations give it:\n{}",
            rows.join("\n")
        );
    }
}
