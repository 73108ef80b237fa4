//! `boards[].console` keys for talking to the board rather than only capturing it: the
//! shell prompt, the login, U-Boot's prompt and autoboot interrupt, how long a boot may
//! take. Read by `board_run`, `uboot_run` and `boot_board` (src/console/session.rs,
//! gatecmd-mcp's board_talk/ and tools/boot_board.rs); validated in `validate/shell.rs`.
//! Kept apart from [`super::ConsoleConfig`] on purpose: a reload that changes a prompt
//! must not restart the capture (and empty the ring) the way a new tty or baud does.

use std::time::Duration;

use super::value_error::ValueError;

/// The shell prompt awaited when a board's console sets none: the last line of output
/// ends in `# ` or `$ ` (ANSI colours removed). Fits `root@vb1:~# `, busybox's `/ # `,
/// `user@host:~$ `; U-Boot's `=> ` does not match it.
pub const DEFAULT_PROMPT: &str = r"[#$] $";
/// The login prompt awaited when none is set (a regex on the last line).
pub const DEFAULT_LOGIN_PROMPT: &str = "login:";
/// What a password prompt looks like (a regex on the last line); not configurable.
pub const PASSWORD_PROMPT: &str = r"(?i)password: ?$";
/// U-Boot's prompt when none is set (literal text at the end of the last line).
pub const DEFAULT_UBOOT_PROMPT: &str = "=> ";
/// What stops U-Boot's autoboot when none is set: Ctrl-C is "any key" to mainline U-Boot
/// and the key Rockchip's vendor U-Boot asks for.
pub const DEFAULT_UBOOT_INTERRUPT: &str = "\u{3}";
/// Longest wait for a boot (power on → login prompt or U-Boot prompt) by default.
pub const DEFAULT_BOOT_TIMEOUT_SECS: u64 = 120;
/// The largest `boot_timeout_secs`.
pub const MAX_BOOT_TIMEOUT_SECS: u64 = 3600;
/// Longest prompt regex, and the compiled regex's size limit.
pub const MAX_PROMPT_CHARS: usize = 256;
pub const PROMPT_REGEX_SIZE_LIMIT: usize = 1 << 20;

/// How to talk to a board over its console (defaults when `console:` sets nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellConfig {
    /// Who logs in when the console shows a login prompt; `None`: board_run refuses then.
    pub login: Option<LoginConfig>,
    /// Regex on the last line of output (ANSI removed) that is the shell prompt.
    pub prompt: String,
    /// Regex on the last line of output that is the login prompt.
    pub login_prompt: String,
    pub uboot: UbootConfig,
    /// Longest wait of `boot_board` for the state it drives to.
    pub boot_timeout: Duration,
    /// `console.boot_patterns`: the board's own boot report patterns (docs/BOARDS.md).
    pub boot_patterns: Vec<crate::config::boot_patterns::BootPattern>,
}

/// `console.login`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginConfig {
    /// The user name typed at the login prompt.
    pub user: String,
    /// The server's environment variable that holds the password (read when it is asked
    /// for; never in the config, the audit log or an answer).
    pub password_env: Option<String>,
}

/// `console.uboot`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UbootConfig {
    /// Sent to stop autoboot (default Ctrl-C).
    pub interrupt: String,
    /// U-Boot's prompt, literal (default `=> `).
    pub prompt: String,
}

impl Default for ShellConfig {
    fn default() -> Self {
        ShellConfig {
            login: None,
            prompt: DEFAULT_PROMPT.into(),
            login_prompt: DEFAULT_LOGIN_PROMPT.into(),
            uboot: UbootConfig {
                interrupt: DEFAULT_UBOOT_INTERRUPT.into(),
                prompt: DEFAULT_UBOOT_PROMPT.into(),
            },
            boot_timeout: Duration::from_secs(DEFAULT_BOOT_TIMEOUT_SECS),
            boot_patterns: Vec::new(),
        }
    }
}

/// Compiles a prompt regex with the size limits every configured prompt is held to.
pub fn prompt_regex(pattern: &str) -> Result<regex::Regex, ValueError> {
    if pattern.chars().count() > MAX_PROMPT_CHARS {
        return Err(ValueError::PromptTooLong(MAX_PROMPT_CHARS));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(PROMPT_REGEX_SIZE_LIMIT)
        .dfa_size_limit(PROMPT_REGEX_SIZE_LIMIT)
        .build()
        .map_err(|error| ValueError::BadPrompt {
            pattern: pattern.to_string(),
            error,
        })
}
