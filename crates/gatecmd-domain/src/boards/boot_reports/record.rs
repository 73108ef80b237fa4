//! One boot: what started it, when, the stages and faults seen with their times from the
//! power-on, its bounded transcript, and the outcome derived from them; and how the tools
//! and resources show it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Serialize;

use super::patterns::{FaultKind, Stage};

/// How a boot ended (or that it runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A login prompt, nothing worse since.
    Login,
    /// A shell prompt.
    Shell,
    /// Stopped at U-Boot's prompt (no kernel started since).
    Uboot,
    /// The kernel panicked.
    Panic,
    /// The boot started over before login (a `reset` fault), or this boot follows two
    /// or more that did.
    ResetLoop,
    /// Nothing at all came from the console within `boots.silent_secs` of the power-on.
    Silent,
    /// Still going: none of the above yet.
    Booting,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Login => "login",
            Outcome::Shell => "shell",
            Outcome::Uboot => "uboot",
            Outcome::Panic => "panic",
            Outcome::ResetLoop => "reset_loop",
            Outcome::Silent => "silent",
            Outcome::Booting => "booting",
        }
    }
}

/// What started a boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Trigger {
    /// `power_board`, `boot_board`, `flash_board`, `labgrid` (a power action that switched
    /// the board on or reset it) or `console` (a boot seen starting on the console: a
    /// reset, or a power-on gatecmd did not make).
    pub action: String,
    /// The client whose call it was (`labgrid:<place>` for the labgrid bridge); none for
    /// `console`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// e.g. "on", "cycle", "to shell", "reset after write".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Trigger {
    pub fn action(action: &str, by: &str, detail: &str) -> Trigger {
        Trigger {
            action: action.to_string(),
            by: Some(by.to_string()),
            detail: (!detail.is_empty()).then(|| detail.to_string()),
        }
    }

    pub(crate) fn console(detail: &str) -> Trigger {
        Trigger {
            action: "console".into(),
            by: None,
            detail: Some(detail.into()),
        }
    }
}

/// A stage as first seen in a boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct StageSeen {
    pub stage: Stage,
    /// Milliseconds from the boot's start (the power action, or the first banner).
    pub at_ms: u64,
    /// The console line that showed it (control characters removed, at most 1 KiB).
    pub line: String,
}

/// A fault seen in a boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct FaultSeen {
    pub kind: FaultKind,
    pub at_ms: u64,
    pub line: String,
}

/// Why a boot is over, when it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    /// A later power action started the next boot.
    Power,
    /// The board started over by itself (see the `reset` fault).
    Reset,
    /// The board rebooted after reaching login or a shell.
    Reboot,
}

/// The console bytes of a boot: the first half of the bound and the newest half, with
/// how much fell between them.
#[derive(Debug)]
pub(crate) struct Transcript {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    half: usize,
    dropped: u64,
}

impl Transcript {
    pub(crate) fn new(bound: usize) -> Transcript {
        Transcript {
            head: Vec::new(),
            tail: VecDeque::new(),
            half: bound / 2,
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        let room = self.half.saturating_sub(self.head.len());
        if room > 0 {
            let n = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.len() >= self.half {
            self.dropped += (self.tail.len() + bytes.len() - self.half) as u64;
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.half..]);
            return;
        }
        let over = (self.tail.len() + bytes.len()).saturating_sub(self.half);
        if over > 0 {
            self.tail.drain(..over);
            self.dropped += over as u64;
        }
        self.tail.extend(bytes);
    }

    /// Takes back the last `n` bytes (a banner line that belongs to the next boot), as
    /// far as they are still held.
    pub(crate) fn pop_last(&mut self, n: usize) -> Vec<u8> {
        let from_tail = n.min(self.tail.len());
        let mut out: Vec<u8> = self.tail.drain(self.tail.len() - from_tail..).collect();
        let rest = (n - from_tail).min(if self.dropped == 0 {
            self.head.len()
        } else {
            0
        });
        if rest > 0 {
            let mut h = self.head.split_off(self.head.len() - rest);
            h.extend(out);
            out = h;
        }
        out
    }

    pub(crate) fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// As text (invalid UTF-8 replaced); a line says where bytes were dropped.
    pub(crate) fn text(&self) -> String {
        let (a, b) = self.tail.as_slices();
        if self.dropped == 0 {
            let mut all = Vec::with_capacity(self.len());
            all.extend_from_slice(&self.head);
            all.extend_from_slice(a);
            all.extend_from_slice(b);
            return String::from_utf8_lossy(&all).into_owned();
        }
        let mut tail = Vec::with_capacity(self.tail.len());
        tail.extend_from_slice(a);
        tail.extend_from_slice(b);
        format!(
            "{}\n[gatecmd: {} bytes of this boot not kept (boots.transcript_bytes)]\n{}",
            String::from_utf8_lossy(&self.head),
            self.dropped,
            String::from_utf8_lossy(&tail)
        )
    }
}

/// Faults kept per boot; more are counted in `faults_dropped`.
pub const MAX_FAULTS: usize = 64;

/// One boot of one board.
#[derive(Debug)]
pub struct Boot {
    pub(crate) n: u64,
    pub(crate) trigger: Trigger,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) started: Instant,
    pub(crate) stages: Vec<StageSeen>,
    /// Firmware banner patterns matched in this boot (the same one again is a reset).
    pub(crate) banners: Vec<usize>,
    pub(crate) faults: Vec<FaultSeen>,
    pub(crate) faults_dropped: u64,
    /// The line number of the last fault of each kind (one Oops prints several matching
    /// lines: a kind again within [`SAME_FAULT_LINES`] lines is the same fault).
    pub(crate) last_fault_line: Vec<(FaultKind, u64)>,
    pub(crate) lines: u64,
    pub(crate) panicked: bool,
    /// U-Boot's prompt was seen and no kernel started since.
    pub(crate) at_uboot_prompt: bool,
    pub(crate) ended_by: Option<EndedBy>,
    /// Boots right before this one that ended in a reset.
    pub(crate) resets_in_a_row: u32,
    pub(crate) bytes: u64,
    pub(crate) last_byte: Option<Instant>,
    pub(crate) transcript: Transcript,
    /// The outcome last announced to subscribers.
    pub(crate) announced: Outcome,
}

/// A fault kind seen again within this many lines of the last one is the same fault.
pub const SAME_FAULT_LINES: u64 = 16;

impl Boot {
    pub(crate) fn new(n: u64, trigger: Trigger, transcript_bytes: usize) -> Boot {
        Boot {
            n,
            trigger,
            started_at: Utc::now(),
            started: Instant::now(),
            stages: Vec::new(),
            banners: Vec::new(),
            faults: Vec::new(),
            faults_dropped: 0,
            last_fault_line: Vec::new(),
            lines: 0,
            panicked: false,
            at_uboot_prompt: false,
            ended_by: None,
            resets_in_a_row: 0,
            bytes: 0,
            last_byte: None,
            transcript: Transcript::new(transcript_bytes),
            announced: Outcome::Booting,
        }
    }

    pub(crate) fn at_ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.started).as_millis() as u64
    }

    pub(crate) fn has(&self, s: Stage) -> bool {
        self.stages.iter().any(|x| x.stage == s)
    }

    /// The latest stage reached.
    pub(crate) fn furthest(&self) -> Option<Stage> {
        self.stages.iter().map(|s| s.stage).max()
    }

    pub(crate) fn reached_login(&self) -> bool {
        self.has(Stage::Login) || self.has(Stage::Shell)
    }

    /// The outcome now (`silent_after`: `boots.silent_secs`).
    pub fn outcome(&self, now: Instant, silent_after: Duration) -> Outcome {
        if self.panicked {
            Outcome::Panic
        } else if self.ended_by == Some(EndedBy::Reset) {
            Outcome::ResetLoop
        } else if self.has(Stage::Shell) {
            Outcome::Shell
        } else if self.has(Stage::Login) {
            Outcome::Login
        } else if self.at_uboot_prompt {
            Outcome::Uboot
        } else if self.bytes == 0 && now.saturating_duration_since(self.started) >= silent_after {
            Outcome::Silent
        } else if self.resets_in_a_row >= 2 && self.ended_by.is_none() {
            Outcome::ResetLoop
        } else {
            Outcome::Booting
        }
    }

    /// The report without its transcript.
    pub fn summary(&self, board: &str, now: Instant, silent_after: Duration) -> BootSummary {
        BootSummary {
            board: board.to_string(),
            boot: self.n,
            trigger: self.trigger.clone(),
            started_at: self
                .started_at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            stages: self.stages.clone(),
            faults: self.faults.clone(),
            faults_dropped: self.faults_dropped,
            outcome: self.outcome(now, silent_after),
            ended_by: self.ended_by,
            resets_in_a_row: self.resets_in_a_row,
            console_bytes: self.bytes,
            last_output_ms: self.last_byte.map(|t| self.at_ms(t)),
            transcript_bytes: self.transcript.len() as u64,
            transcript_dropped_bytes: self.transcript.dropped(),
        }
    }

    pub fn report(&self, board: &str, now: Instant, silent_after: Duration) -> BootReport {
        BootReport {
            summary: self.summary(board, now, silent_after),
            transcript: self.transcript.text(),
        }
    }
}

/// A boot as the resources' list, `boot_board` and `flash_board` show it (no transcript).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct BootSummary {
    pub board: String,
    /// Its number on this board (1, 2, … since the server started).
    pub boot: u64,
    pub trigger: Trigger,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// Each stage the first time it was seen, in the order seen.
    pub stages: Vec<StageSeen>,
    pub faults: Vec<FaultSeen>,
    /// Faults beyond the 64 kept.
    #[serde(skip_serializing_if = "is_zero")]
    pub faults_dropped: u64,
    pub outcome: Outcome,
    /// Set once a later boot started: by a power action, a reset, or a reboot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<EndedBy>,
    /// How many boots right before this one ended in a reset.
    pub resets_in_a_row: u32,
    /// Console bytes this boot received.
    pub console_bytes: u64,
    /// When its last byte came, in ms from its start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_output_ms: Option<u64>,
    /// Bytes of the transcript kept, and those not kept (boots.transcript_bytes).
    pub transcript_bytes: u64,
    pub transcript_dropped_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `boot_report`'s answer and `gatecmd://boards/{board}/boots/{n}`: the summary and the
/// console transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct BootReport {
    #[serde(flatten)]
    pub summary: BootSummary,
    /// What the console printed during this boot (invalid UTF-8 replaced; the first and
    /// the last halves of `boots.transcript_bytes` when it printed more).
    pub transcript: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_keeps_its_head_and_its_newest_tail() {
        let mut t = Transcript::new(8);
        t.push(b"abc");
        assert_eq!(t.text(), "abc");
        t.push(b"defg");
        assert_eq!((t.text().as_str(), t.dropped()), ("abcdefg", 0));
        t.push(b"hijkl");
        assert_eq!(t.dropped(), 4);
        assert!(t.text().starts_with("abcd\n[gatecmd: 4 bytes"));
        assert!(t.text().ends_with("\nijkl"));
        t.push(b"0123456789");
        assert_eq!(t.dropped(), 14);
        assert!(t.text().ends_with("\n6789"));
        assert_eq!(t.pop_last(2), b"89");
    }

    #[test]
    fn pop_last_reaches_into_the_head_while_nothing_was_dropped() {
        let mut t = Transcript::new(16);
        t.push(b"0123456789ab");
        assert_eq!(t.pop_last(6), b"6789ab");
        assert_eq!(t.text(), "012345");
    }
}
