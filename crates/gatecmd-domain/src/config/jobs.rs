//! The `jobs:` section: how many finished jobs are kept per client, and for how long
//! (docs/CONFIG.md). Running jobs are bounded by `limits.max_concurrent_per_client`.

use serde::Deserialize;

use super::declare::settings;

settings! {
    /// `jobs:` as written and as used (plain numbers; reloadable).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct JobSettings {
        keep_finished: usize {
            default: 16,
            docs: "finished jobs kept per client; past it the oldest is forgotten (`wait_job` \
                then answers `not_found`).",
        },
        keep_finished_secs: u64 {
            default: 3600,
            docs: "a finished job is forgotten this long after it ended.",
        },
        output_bytes: usize {
            default: 1024 * 1024,
            docs: "bytes of each of stdout and stderr a job keeps for `wait_job` (the newest; \
                older ones are counted in `stdout_dropped`).",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CancelPolicy, Config};

    const CMD: &str = "commands:\n  - name: rk\n    binary: /bin/true\n    destructive: true\n";

    #[test]
    fn a_destructive_command_defaults_to_detach_and_others_to_kill() {
        let c = Config::parse(
            &format!("{CMD}    allowed_args:\n      - pattern: wl\n"),
            "t.yaml",
        )
        .expect("valid");
        assert_eq!(c.command("rk").expect("rk").cancel, CancelPolicy::Detach);
        let c = Config::parse(
            "commands:\n  - name: ls\n    binary: /bin/true\n    allowed_args:\n      - pattern: \"\"\n",
            "t.yaml",
        )
        .expect("valid");
        assert_eq!(c.command("ls").expect("ls").cancel, CancelPolicy::Kill);
        assert_eq!(c.jobs, super::JobSettings::default());
    }

    #[test]
    fn a_destructive_command_cannot_be_cancel_kill_with_file_line_and_field() {
        let text = format!("{CMD}    cancel: kill\n    allowed_args:\n      - pattern: wl\n");
        let e = Config::parse(&text, "t.yaml").expect_err("refused").0;
        let e = e
            .iter()
            .find(|e| e.field == "commands[0].cancel")
            .unwrap_or_else(|| panic!("{e:?}"));
        assert_eq!(e.line, 5, "{e}");
        assert!(e.message.contains("detach"), "{e}");
        // On a pattern, under its old name too.
        let text = format!(
            "{CMD}    allowed_args:\n      - pattern: ef\n      - pattern: wl\n        cancel: allow\n"
        );
        let e = Config::parse(&text, "t.yaml").expect_err("refused").0;
        let e = e
            .iter()
            .find(|e| e.field == "commands[0].allowed_args[1].cancel")
            .unwrap_or_else(|| panic!("{e:?}"));
        assert_eq!(e.line, 8, "{e}");
        // `never` and `detach` are fine.
        for ok in ["never", "detach"] {
            let text = format!("{CMD}    cancel: {ok}\n    allowed_args:\n      - pattern: wl\n");
            Config::parse(&text, "t.yaml").expect("valid");
        }
    }
}
