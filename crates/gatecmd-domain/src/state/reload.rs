//! What a configuration reload cannot apply: the one list of restart-only keys.
//!
//! Everything else takes effect on reload: commands, clients and tokens, origins and hosts,
//! device classes, file roots, staging, isolation roots, audit rotation, lease TTLs, and
//! every `limits` key except the ones below (see `AppState::replace_config` and
//! docs/CONFIG.md).

use crate::config::Config;

/// A key whose new value waits for a restart, with how to tell it changed.
pub struct RestartOnly {
    /// The key as written in the YAML file.
    pub key: &'static str,
    /// Why a running server cannot apply it (shown in docs, kept next to the key).
    pub why: &'static str,
    changed: fn(&Config, &Config) -> bool,
}

/// Every restart-only key.
pub const RESTART_ONLY: &[RestartOnly] = &[
    RestartOnly {
        key: "bind",
        why: "the listening socket is opened once",
        changed: |a, b| a.bind != b.bind,
    },
    RestartOnly {
        key: "state_dir",
        why: "the audit log and the generated token are opened there at start",
        changed: |a, b| a.state_dir != b.state_dir,
    },
    RestartOnly {
        key: "monitor.backend",
        why: "the device monitor is started once",
        changed: |a, b| a.monitor.backend != b.monitor.backend,
    },
    RestartOnly {
        key: "monitor.poll_interval_ms",
        why: "the device monitor is started once",
        changed: |a, b| a.monitor.poll_interval_ms != b.monitor.poll_interval_ms,
    },
    RestartOnly {
        key: "monitor.removal_grace_ms",
        why: "the device monitor is started once",
        changed: |a, b| a.monitor.removal_grace_ms != b.monitor.removal_grace_ms,
    },
    RestartOnly {
        key: "monitor.sysfs_root",
        why: "the device monitor is started once",
        changed: |a, b| a.monitor.sysfs_root != b.monitor.sysfs_root,
    },
    RestartOnly {
        key: "limits.session_idle_secs",
        why: "rmcp's session manager takes its keep-alive once, when the router is built",
        changed: |a, b| a.limits.session_idle_secs != b.limits.session_idle_secs,
    },
    RestartOnly {
        key: "limits.max_connections",
        why: "the accept loop takes its caps and timeouts once, when it starts",
        changed: |a, b| a.limits.max_connections != b.limits.max_connections,
    },
    RestartOnly {
        key: "limits.max_unauthenticated_connections",
        why: "the accept loop takes its caps and timeouts once, when it starts",
        changed: |a, b| {
            a.limits.max_unauthenticated_connections != b.limits.max_unauthenticated_connections
        },
    },
    RestartOnly {
        key: "limits.max_unauthenticated_per_peer",
        why: "the accept loop takes its caps and timeouts once, when it starts",
        changed: |a, b| {
            a.limits.max_unauthenticated_per_peer != b.limits.max_unauthenticated_per_peer
        },
    },
    RestartOnly {
        key: "limits.header_read_timeout_secs",
        why: "the accept loop takes its caps and timeouts once, when it starts",
        changed: |a, b| a.limits.header_read_timeout_secs != b.limits.header_read_timeout_secs,
    },
    RestartOnly {
        key: "limits.http_idle_timeout_secs",
        why: "the accept loop takes its caps and timeouts once, when it starts",
        changed: |a, b| a.limits.http_idle_timeout_secs != b.limits.http_idle_timeout_secs,
    },
    RestartOnly {
        key: "metrics.bind",
        why: "the metrics listener is opened once, at start",
        changed: |a, b| a.metrics.bind != b.metrics.bind,
    },
    RestartOnly {
        key: "labgrid",
        why: "the labgrid exporter connects, binds its console and power ports and registers its boards once, at start (docs/LAB.md)",
        changed: |a, b| a.labgrid != b.labgrid,
    },
];

/// The restart-only keys whose value differs between `old` and `new`.
pub fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    RESTART_ONLY
        .iter()
        .filter(|k| (k.changed)(old, new))
        .map(|k| k.key)
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
            ["bind", "monitor.backend", "limits.session_idle_secs"]
        );
    }

    #[test]
    fn the_keys_are_unique() {
        let mut keys: Vec<_> = RESTART_ONLY.iter().map(|k| k.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), RESTART_ONLY.len());
    }

    #[test]
    fn docs_config_lists_every_restart_only_key() {
        let doc = include_str!("../../../../docs/CONFIG.md");
        for k in RESTART_ONLY {
            assert!(
                doc.contains(&format!("| `{}` |", k.key)),
                "docs/CONFIG.md's reload table lacks `{}` ({})",
                k.key,
                k.why
            );
        }
    }
}
