//! A shell (or U-Boot) conversation over a console as pure logic, bytes in, answers out:
//! what the last line of output is (a shell prompt, a login or password prompt, U-Boot's
//! prompt), the per-call marker that frames a command's exit status, and a command's
//! exact output cut from what the console captured. No I/O here: src/console/session.rs
//! drives it against a live console, and the unit tests below against byte strings.
//!
//! Framing (docs/DECISIONS.md, "board_run framing"): the command goes out as its own line
//! and a second line, `echo 'gcXXXXXXXX''YYYYYYYYYYYY':$?`, follows it. The shell prints
//! the marker `gcXXXXXXXXYYYYYYYYYYYY:STATUS` only when the command has ended; the typed
//! line's echo never contains the marker (the quotes split it), and the marker is 80
//! random bits, so it cannot occur in the command's output. Two lines rather than
//! `CMD; echo …` because minimal board shells (the vboard's, rescue shells) have no `;`.

use memchr::memmem;
use regex::Regex;

use crate::config::{PASSWORD_PROMPT, ShellConfig, ValueError, prompt_regex};
use gatecmd_core::output::{clean, is_invisible};

/// Bytes of output looked at to tell what the last line is.
pub const LAST_LINE_BYTES: usize = 4096;

/// What the last line of a console's output is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The shell prompt (its text as seen).
    Shell(String),
    Login,
    Password,
    Uboot,
}

impl Seen {
    /// For messages: what the board showed.
    pub fn describe(&self) -> &'static str {
        match self {
            Seen::Shell(_) => "a shell prompt",
            Seen::Login => "a login prompt",
            Seen::Password => "a password prompt",
            Seen::Uboot => "the U-Boot prompt",
        }
    }
}

/// A board's prompts, compiled.
#[derive(Debug, Clone)]
pub struct Prompts {
    pub shell: Regex,
    pub login: Regex,
    password: Regex,
    /// U-Boot's prompt, literal.
    pub uboot: String,
}

impl Prompts {
    /// From a board's settings (validated at load, so this fails only on a config that
    /// bypassed validation).
    pub fn new(c: &ShellConfig) -> Result<Prompts, ValueError> {
        Ok(Prompts {
            shell: prompt_regex(&c.prompt)?,
            login: prompt_regex(&c.login_prompt)?,
            password: prompt_regex(PASSWORD_PROMPT)?,
            uboot: c.uboot.prompt.clone(),
        })
    }

    /// What `line` (the last line of output, cleaned) is, if a prompt. A password or
    /// login prompt wins over the shell's (a login line ends in neither `#` nor `$` by
    /// default, but a configured shell regex might be loose); U-Boot's literal prompt is
    /// tried before the shell regex for the same reason.
    pub fn classify(&self, line: &str) -> Option<Seen> {
        if line.is_empty() {
            return None;
        }
        if self.password.is_match(line) {
            Some(Seen::Password)
        } else if self.login.is_match(line) {
            Some(Seen::Login)
        } else if !self.uboot.is_empty() && line.ends_with(self.uboot.as_str()) {
            Some(Seen::Uboot)
        } else if self.shell.is_match(line) {
            Some(Seen::Shell(line.to_string()))
        } else {
            None
        }
    }
}

/// The last line of `raw` as a person sees it: ANSI removed, `\r` overwrites applied.
pub fn last_line(raw: &[u8]) -> String {
    let text = clean(raw);
    text.rsplit('\n').next().unwrap_or_default().to_string()
}

/// Index just after the first line end in `raw`: where a command's output begins once
/// the echo of the typed line has been printed.
pub fn after_first_line(raw: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', raw).map(|i| i + 1)
}

/// The marker of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    token: String,
}

/// Where a marker's line was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Offset of the marker's first byte.
    pub at: usize,
    /// Offset after its line end.
    pub end: usize,
    /// The status printed after it (`None`: not a number, e.g. a shell without `$?`).
    pub status: Option<i32>,
}

impl Marker {
    /// A fresh marker: `gc` and 20 random hex digits.
    pub fn random() -> Marker {
        let mut b = [0u8; 10];
        // Without randomness the token is still unique per call (time), only guessable;
        // a command that prints the guess could fake its own status, nothing more.
        if getrandom::fill(&mut b).is_err() {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            b.copy_from_slice(&t.to_le_bytes()[..10]);
        }
        Marker::from_token(&format!("gc{}", hex::encode(b)))
    }

    /// A marker with a given token (tests; at least 4 ASCII characters).
    pub fn from_token(token: &str) -> Marker {
        Marker {
            token: token.to_string(),
        }
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// The line that prints the marker and the last command's status; its own echo does
    /// not contain the marker.
    pub fn status_line(&self) -> String {
        let (a, b) = self.token.split_at(self.token.len() / 2);
        format!("echo '{a}''{b}':$?")
    }

    /// The marker's output line in `raw`, once it is complete (its line end arrived).
    pub fn find(&self, raw: &[u8]) -> Option<Found> {
        let needle = format!("{}:", self.token);
        let at = memmem::find(raw, needle.as_bytes())?;
        let rest = &raw[at + needle.len()..];
        let nl = memchr::memchr(b'\n', rest)?;
        let status = std::str::from_utf8(&rest[..nl])
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        Some(Found {
            at,
            end: at + needle.len() + nl + 1,
            status,
        })
    }

    /// The command's output from `region` (what the console printed from after the
    /// command's echo up to the marker): cleaned like `console_read`'s text, every echo of
    /// the status line taken out (a tty echoes type-ahead while the command runs, and a
    /// line editor echoes it again at the next prompt), and the prompt that preceded the
    /// status line cut off: `seen_prompt` (the prompt as seen before the call) when the
    /// text ends in it, else the last line when `prompt` matches it.
    pub fn output(&self, region: &[u8], prompt: &Regex, seen_prompt: Option<&str>) -> String {
        let mut text = self.without_echo(region);
        if let Some(p) = seen_prompt.filter(|p| !p.is_empty() && text.ends_with(*p)) {
            text.truncate(text.len() - p.len());
            return text;
        }
        let last_start = text.rfind('\n').map_or(0, |i| i + 1);
        if prompt.is_match(&text[last_start..]) {
            text.truncate(last_start);
        }
        text
    }

    /// `region` cleaned, with every echo of the status line (and its line end) removed.
    pub fn without_echo(&self, region: &[u8]) -> String {
        let mut text = clean(region);
        let echo = self.status_line();
        while let Some(i) = text.find(&echo) {
            let mut end = i + echo.len();
            if text[end..].starts_with('\n') {
                end += 1;
            }
            text.replace_range(i..end, "");
        }
        text
    }
}

/// Why a command line cannot be typed: `None` when it is plain printable text.
pub fn command_problem(command: &str, max_bytes: usize) -> Option<String> {
    if command.trim().is_empty() {
        return Some("command is empty; give one command line, e.g. \"uname -a\"".into());
    }
    if command.len() > max_bytes {
        return Some(format!(
            "command is {} bytes; one command line is at most {max_bytes} (a tty's line limit is 4095)",
            command.len()
        ));
    }
    if let Some((i, c)) = command.char_indices().find(|(_, c)| c.is_control()) {
        let name = match c {
            '\n' | '\r' => "a line end (one call runs one line; make further calls for more)",
            '\t' => "a tab (a shell would complete on it; use spaces)",
            '\u{3}' => "Ctrl-C (board_run sends it itself when a call is cancelled or times out)",
            _ => "a control character",
        };
        return Some(format!(
            "command has {name} at byte {i} (U+{:04X}); only printable text is typed, console_write sends raw bytes",
            c as u32
        ));
    }
    // Issue 46: a bidi control or another invisible character makes the line read as
    // something else to the person who approves it or reads the transcript.
    if let Some((i, c)) = command.char_indices().find(|(_, c)| is_invisible(*c)) {
        return Some(format!(
            "command has an invisible format character at byte {i} (U+{:04X}), which reorders or hides what a person reads of the line; type only visible text (console_write sends raw bytes, shown escaped to an approver)",
            c as u32
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompts() -> Prompts {
        Prompts::new(&ShellConfig::default()).expect("defaults compile")
    }

    #[test]
    fn last_lines_are_classified_with_colours_removed() {
        let p = prompts();
        let line = last_line(b"boot\r\n\x1b[1;32mroot@vb1\x1b[0m:\x1b[1;34m~\x1b[0m# ");
        assert_eq!(line, "root@vb1:~# ");
        assert_eq!(p.classify(&line), Some(Seen::Shell("root@vb1:~# ".into())));
        assert_eq!(p.classify("vb1 login: "), Some(Seen::Login));
        assert_eq!(p.classify("Password: "), Some(Seen::Password));
        assert_eq!(p.classify("=> "), Some(Seen::Uboot));
        assert_eq!(p.classify("/ # "), Some(Seen::Shell("/ # ".into())));
        assert_eq!(p.classify("Starting kernel ..."), None);
        assert_eq!(p.classify(""), None);
    }

    #[test]
    fn the_marker_is_found_only_in_the_status_output_and_only_when_complete() {
        let m = Marker::from_token("gcaaaabbbbcc");
        assert_eq!(m.status_line(), "echo 'gcaaaa''bbbbcc':$?");
        // The echo of the typed line does not contain the marker.
        assert_eq!(m.find(m.status_line().as_bytes()), None);
        assert_eq!(m.find(b"x\r\ngcaaaabbbbcc:12"), None, "line not complete");
        let raw = b"x\r\ngcaaaabbbbcc:127\r\n# ";
        let f = m.find(raw).expect("found");
        assert_eq!((f.at, f.status), (3, Some(127)));
        assert_eq!(&raw[f.end..], b"# ");
        let f = m.find(b"gcaaaabbbbcc:$?\n").expect("found");
        assert_eq!(f.status, None, "a shell without $?");
        let a = Marker::random();
        let b = Marker::random();
        assert_ne!(a, b);
        assert_eq!(a.token().len(), 22);
    }

    #[test]
    fn output_is_exact_for_an_echoing_shell_whatever_order_the_echo_comes_in() {
        let m = Marker::from_token("gcaaaabbbbcc");
        let p = prompts();
        let echo = m.status_line();
        // vboard / readline: the status line is echoed after the next prompt.
        let raw =
            format!("hello\r\nroot@vb1:~# \r\nworld\r\n\x1b[32mroot@vb1\x1b[0m:~# {echo}\r\n");
        assert_eq!(
            m.output(raw.as_bytes(), &p.shell, Some("root@vb1:~# ")),
            "hello\nroot@vb1:~# \nworld\n",
            "prompt text inside the output stays"
        );
        // A cooked tty echoes the type-ahead at once, in the middle of the output; the
        // shell then prints the marker right after its prompt.
        let raw = format!("line one\r\n{echo}\r\nline two\r\n$ ");
        assert_eq!(
            m.output(raw.as_bytes(), &p.shell, None),
            "line one\nline two\n"
        );
        // Output without a final newline keeps its last characters.
        let raw = format!("no newline# {echo}\r\n");
        assert_eq!(m.output(raw.as_bytes(), &p.shell, Some("# ")), "no newline");
        assert_eq!(
            m.output(format!("# {echo}\r\n").as_bytes(), &p.shell, Some("# ")),
            ""
        );
    }

    #[test]
    fn command_lines_must_be_printable() {
        assert_eq!(command_problem("uname -a", 4095), None);
        assert_eq!(command_problem("echo 'ü ✓'", 4095), None);
        for (bad, word) in [
            ("ls\nrm -rf /", "line end"),
            ("a\tb", "tab"),
            ("x\u{3}", "Ctrl-C"),
            ("\u{1b}[A", "control character"),
            (
                "echo ok # \u{202e}\u{2066}dd if=/dev/zero\u{2069}",
                "U+202E",
            ),
            ("ls\u{200b}", "invisible format character"),
            ("   ", "empty"),
        ] {
            let why = command_problem(bad, 4095).expect(bad);
            assert!(why.contains(word), "{bad:?}: {why}");
        }
        assert!(command_problem(&"a".repeat(5000), 4095).is_some());
        assert_eq!(after_first_line(b"uname\r\nLinux\r\n"), Some(7));
    }
}
