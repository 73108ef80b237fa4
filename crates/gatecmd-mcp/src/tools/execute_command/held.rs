//! What an allowed run holds until its child is gone: the client's slot, the lock guards
//! and the bench page's row. The foreground path (`run.rs`) and a job's task
//! (`background.rs`) hold it the same way, so locks live exactly as long as the child.

use crate::calls::progress;
use gatecmd_domain::locks::CommandGuard;

/// What an allowed run holds until its child (and process group) is gone; both are
/// released by dropping them.
pub(super) struct Held {
    /// One of the client's `limits.max_concurrent_per_client` slots.
    pub(super) _slot: gatecmd_domain::permits::Permit,
    pub(super) _locks: CommandGuard,
    /// The run's row on the bench page, fed its progress from the output.
    pub(super) run: Option<gatecmd_domain::running::RunGuard>,
    pub(super) client: String,
    pub(super) board: Option<String>,
}

impl Held {
    /// Offers an output line to the page's row, then to the client's progress reporter;
    /// whether either took it (the `LineTap::Latest` contract).
    pub(super) fn offer(&self, reporter: Option<&progress::Tap>, line: &str) -> bool {
        let page = self.run.as_ref().is_some_and(|r| r.offer(line));
        reporter.is_some_and(|tap| tap.offer(line)) || page
    }

    /// Whether output must be split into lines: a client asked for progress, or the
    /// page shows this command's percentage.
    pub(super) fn watches_output(&self, reporter: Option<&progress::Tap>) -> bool {
        reporter.is_some() || self.run.as_ref().is_some_and(|r| r.watches_output())
    }
}
