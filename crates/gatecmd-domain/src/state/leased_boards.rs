//! A reload and the leases it would strand (issue 22): a board lease (`board:NAME`) is
//! held on the board's name, and the board is the hardware at its `usb` port. A reload
//! that renamed, removed or re-ported a leased board would leave the lease on a name that
//! no longer means that hardware, while another client could take the hardware under its
//! new name at once. Such a reload is refused, naming the board and its holder; the
//! operator releases the lease (or waits for it) and reloads again.

use crate::config::Config;
use crate::locks::{LockKey, LockManager};

/// Why the new configuration may not replace `old` while `locks` hold what they hold:
/// one line per leased (or busy) board that `new` renames, removes or moves to another
/// port. Empty: the reload may go ahead.
pub fn stranded_leases(old: &Config, new: &Config, locks: &LockManager) -> Vec<String> {
    let mut out = Vec::new();
    for b in &old.boards {
        let kept = new
            .boards
            .iter()
            .any(|n| n.name == b.name && n.usb == b.usb);
        if kept {
            continue;
        }
        let Some(state) = locks.key_state(&LockKey::Board(b.name.clone())) else {
            continue;
        };
        let holder = match (&state.lease, &state.running) {
            (Some(l), _) => format!("leased by {}", l.holder),
            (None, Some(_)) => "running a command".to_string(),
            (None, None) => continue,
        };
        let change = match new.boards.iter().find(|n| n.usb == b.usb) {
            Some(n) => format!("renames it to {:?}", n.name),
            None if new.board(&b.name).is_some() => "moves it to another usb port".to_string(),
            None => "removes it".to_string(),
        };
        out.push(format!(
            "board {:?} (usb {}) is {holder}, and the new configuration {change}: release the \
             lease (or wait for it to end) and reload again",
            b.name, b.usb
        ));
    }
    out
}
