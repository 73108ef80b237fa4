//! The plan's console monitor (LAVA's monitors): every complete line the console captures
//! while the plan runs, matched against the board's boot patterns — the boot report's own
//! fault detection (`crate::boards::boot_reports::patterns`), so a board's `console.boot_patterns` count
//! here too — and the plan's `fail_on` regexes. `kernel_panic`, `oops` and `bug` are the
//! boot report's fault words; a firmware banner (SPL, TF-A, OP-TEE, U-Boot) while a plan
//! runs is `reset`, as a boot report says of a banner after a later stage. The echo of
//! what the plan typed is not a fault: a line ending in the step's command line is left
//! out.

use regex::Regex;

use super::verdict::Fault;
use crate::boards::boot_reports::patterns::{FaultKind, Patterns, Prompts, Word};
use crate::config::ShellConfig;
use crate::console::Console;
use gatecmd_core::output::clean;

/// Bytes of one line looked at (as a boot report does).
const MAX_LINE_BYTES: usize = 1024;
/// Bytes read from the ring in one slice.
const READ_BYTES: usize = 64 * 1024;

/// Scans a console from a cursor on, line by line.
pub struct Monitor {
    patterns: Patterns,
    fail_on: Vec<Regex>,
    at: u64,
    line: Vec<u8>,
    words: Vec<(Word, usize)>,
}

impl Monitor {
    /// A monitor of a board's console (its `shell` settings: prompts and boot patterns)
    /// from cursor `from`.
    pub fn new(shell: &ShellConfig, fail_on: Vec<Regex>, from: u64) -> Monitor {
        let prompts = Prompts {
            login: &shell.login_prompt,
            shell: &shell.prompt,
            uboot: &shell.uboot.prompt,
        };
        Monitor {
            patterns: Patterns::new(&prompts, &shell.boot_patterns),
            fail_on,
            at: from,
            line: Vec::with_capacity(MAX_LINE_BYTES),
            words: Vec::new(),
        }
    }

    /// The faults in the lines completed since the last scan; `typed` is the command line
    /// the plan typed last (its echo is left out).
    pub fn scan(&mut self, console: &Console, typed: Option<&str>) -> Vec<Fault> {
        let mut found = Vec::new();
        loop {
            let (_, end) = console.bounds();
            if self.at >= end {
                return found;
            }
            let s = console.slice(self.at, READ_BYTES);
            if s.bytes.is_empty() {
                return found;
            }
            if s.from > self.at {
                // The ring lost bytes: the line in progress is not whole.
                self.line.clear();
            }
            for &b in &s.bytes {
                if b == b'\n' {
                    self.finish_line(typed, &mut found);
                } else if self.line.len() < MAX_LINE_BYTES {
                    self.line.push(b);
                }
            }
            self.at = s.to;
        }
    }

    fn finish_line(&mut self, typed: Option<&str>, found: &mut Vec<Fault>) {
        // The line end is `\r\n` on a tty: a lone `\r` left at its end would start the line
        // over when cleaned.
        while self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        let text = clean(&self.line);
        self.line.clear();
        let line = text.trim_end();
        if line.is_empty() || typed.is_some_and(|t| line.ends_with(t.trim_end())) {
            return;
        }
        self.patterns.classify(line, &mut self.words);
        let kind = self.words.iter().find_map(|(w, _)| match w {
            Word::Fault(f @ (FaultKind::KernelPanic | FaultKind::Oops | FaultKind::Bug)) => {
                Some(f.as_str())
            }
            Word::Stage(s) if s.is_firmware() => Some(FaultKind::Reset.as_str()),
            _ => None,
        });
        let kind = kind.or_else(|| {
            self.fail_on
                .iter()
                .any(|r| r.is_match(line))
                .then_some("fail_on")
        });
        if let Some(kind) = kind {
            found.push(Fault {
                kind: kind.to_string(),
                line: line.to_string(),
                step: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::config::{ConsoleConfig, ConsoleSettings};

    #[test]
    fn faults_and_fail_on_lines_are_found_but_not_the_echo_of_the_typed_line() {
        let config = ConsoleConfig {
            port: None,
            path: Some("/dev/null".into()),
            baud: 115200,
            buffer_bytes: 1 << 16,
        };
        let console = Console::new("b1", config, &ConsoleSettings::default());
        let mut m = Monitor::new(
            &ShellConfig::default(),
            vec![Regex::new("segfault").expect("re")],
            0,
        );
        console.append(b"# echo Kernel panic - not syncing\r\nok\r\n[  1.0] Kernel panic - not syncing: VFS\r\n");
        let f = m.scan(&console, Some("echo Kernel panic - not syncing"));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, "kernel_panic");
        assert_eq!(f[0].line, "[  1.0] Kernel panic - not syncing: VFS");
        console.append(b"app[12]: segfault at 0\r\nU-Boot SPL 2024.01 (Jan 1");
        let f = m.scan(&console, None);
        assert_eq!(
            f.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
            ["fail_on"]
        );
        console.append(b")\r\nInternal error: Oops: 96000005 [#1] SMP\r\n");
        let f = m.scan(&console, None);
        let kinds: Vec<_> = f.iter().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["reset", "oops"]);
    }
}
