//! The `jobs:` section: how many finished jobs are kept per client, and for how long
//! (docs/CONFIG.md). Running jobs are bounded by `limits.max_concurrent_per_client`.

use serde::Deserialize;

/// `jobs:` as written and as used (plain numbers; reloadable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobSettings {
    /// Finished jobs kept per client; past it the oldest finished one is forgotten.
    pub keep_finished: usize,
    /// A finished job is forgotten this long after it ended.
    pub keep_finished_secs: u64,
    /// Bytes of each of stdout and stderr a job keeps for `wait_job` (the newest; older
    /// bytes are counted as dropped).
    pub output_bytes: usize,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            keep_finished: 16,
            keep_finished_secs: 3600,
            output_bytes: 1024 * 1024,
        }
    }
}
