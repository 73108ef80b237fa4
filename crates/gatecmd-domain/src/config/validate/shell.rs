//! `boards[].console`'s keys for talking to the board (`login`, `prompt`, `login_prompt`,
//! `uboot`, `boot_timeout_secs`): each checked on its own, defaults filled in.

use std::time::Duration;

use super::super::positions::At;
use super::super::raw::RawConsole;
use super::super::shell::{
    LoginConfig, MAX_BOOT_TIMEOUT_SECS, ShellConfig, UbootConfig, prompt_regex,
};
use super::validator::Validator;

/// Longest login user name and U-Boot interrupt/prompt text.
const MAX_SHORT_TEXT: usize = 64;

fn env_name_ok(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
        && s.len() <= 128
}

impl Validator {
    /// Where `key` of board `i`'s console is written: its own line when it has one, else
    /// the `console:` line. (The one place this file locates text.)
    fn shell_at(&self, i: usize, key: &str) -> Option<At> {
        self.at(&format!("boards[{i}].console.{key}"))
            .or_else(|| self.at(&format!("boards[{i}].console")))
    }

    /// The console's shell settings, or `None` after recording every error.
    pub(super) fn shell(&mut self, i: usize, c: &RawConsole) -> Option<ShellConfig> {
        let field = |f: &str| format!("boards[{i}].console.{f}");
        let mut out = ShellConfig::default();
        let mut ok = true;
        for (key, given, slot) in [
            ("prompt", &c.prompt, &mut out.prompt),
            ("login_prompt", &c.login_prompt, &mut out.login_prompt),
        ] {
            let Some(p) = given else { continue };
            match prompt_regex(p) {
                Ok(_) if p.is_empty() => {
                    let at = self.shell_at(i, key);
                    self.err(at, field(key), format!("{key} is empty: leave it out for the default, or write a regex that matches the prompt's line"));
                    ok = false;
                }
                Ok(_) => *slot = p.clone(),
                Err(e) => {
                    let at = self.shell_at(i, key);
                    self.err(at, field(key), format!("{key}: {e}; it is a regex matched against the last line of output (ANSI colours removed)"));
                    ok = false;
                }
            }
        }
        if let Some(l) = &c.login {
            let user_ok = !l.user.is_empty()
                && l.user.len() <= MAX_SHORT_TEXT
                && l.user.chars().all(|ch| ch.is_ascii_graphic());
            if !user_ok {
                let at = self.shell_at(i, "login");
                self.err(
                    at,
                    field("login.user"),
                    format!("login user {:?} must be 1 to {MAX_SHORT_TEXT} printable characters without spaces", l.user),
                );
                ok = false;
            }
            if let Some(env) = &l.password_env
                && !env_name_ok(env)
            {
                let at = self.shell_at(i, "login");
                self.err(
                    at,
                    field("login.password_env"),
                    format!("password_env {env:?} is not an environment variable name (letters, digits, '_'; not starting with a digit); the password itself never goes in the config"),
                );
                ok = false;
            }
            out.login = Some(LoginConfig {
                user: l.user.clone(),
                password_env: l.password_env.clone(),
            });
        }
        if let Some(u) = &c.uboot {
            for (key, given, slot) in [
                ("interrupt", &u.interrupt, &mut out.uboot.interrupt),
                ("prompt", &u.prompt, &mut out.uboot.prompt),
            ] {
                let Some(t) = given else { continue };
                if t.is_empty() || t.len() > MAX_SHORT_TEXT {
                    let at = self.shell_at(i, "uboot");
                    self.err(at, field(&format!("uboot.{key}")), format!("uboot.{key} must be 1 to {MAX_SHORT_TEXT} bytes (e.g. interrupt: \"\\u0003\", prompt: \"=> \")"));
                    ok = false;
                } else {
                    *slot = t.clone();
                }
            }
            out.uboot = UbootConfig { ..out.uboot };
        }
        if let Some(secs) = c.boot_timeout_secs {
            if secs == 0 || secs > MAX_BOOT_TIMEOUT_SECS {
                let at = self.shell_at(i, "boot_timeout_secs");
                self.err(
                    at,
                    field("boot_timeout_secs"),
                    format!("boot_timeout_secs {secs} is outside 1..={MAX_BOOT_TIMEOUT_SECS}; leave it out for the default of 120"),
                );
                ok = false;
            } else {
                out.boot_timeout = Duration::from_secs(secs);
            }
        }
        match self.boot_patterns(i, c.boot_patterns.as_deref().unwrap_or(&[])) {
            Some(p) => out.boot_patterns = p,
            None => ok = false,
        }
        ok.then_some(out)
    }
}
