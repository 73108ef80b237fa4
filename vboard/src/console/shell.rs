//! The board's login prompt and its minimal shell, as pure logic: bytes in, bytes out.
//! Enough for a later board shell over the console: an echoing line editor, `root`
//! without password, `uname`, `cat`, `echo` with `$?`, exit statuses, 127 for the rest.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `reboot`: the board boots again from flash.
    Reboot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Login,
    Prompt,
}

pub struct Shell {
    host: String,
    state: State,
    line: Vec<u8>,
    status: i32,
    after_cr: bool,
}

const UNAME_A: &str = "6.1.0-vboard #1 SMP PREEMPT Tue Dec  1 00:00:00 UTC 2026 aarch64 GNU/Linux";
const MAX_LINE: usize = 4096;

impl Shell {
    pub fn new(host: &str) -> Shell {
        Shell {
            host: host.to_string(),
            state: State::Login,
            line: Vec::new(),
            status: 0,
            after_cr: false,
        }
    }

    pub fn login_prompt(&mut self) -> Vec<u8> {
        self.state = State::Login;
        self.line.clear();
        format!("{} login: ", self.host).into_bytes()
    }

    fn prompt(&self) -> Vec<u8> {
        format!("root@{}:~# ", self.host).into_bytes()
    }

    /// Feeds received bytes; returns what the board prints (echo included) and an action.
    pub fn feed(&mut self, input: &[u8]) -> (Vec<u8>, Option<Action>) {
        let mut out = Vec::new();
        let mut action = None;
        for &b in input {
            let was_cr = std::mem::replace(&mut self.after_cr, b == b'\r');
            match b {
                b'\n' if was_cr => {}
                b'\r' | b'\n' => {
                    out.extend(b"\r\n");
                    let line =
                        String::from_utf8_lossy(&std::mem::take(&mut self.line)).into_owned();
                    if let Some(a) = self.enter(line.trim(), &mut out) {
                        action = Some(a);
                    }
                }
                0x03 => {
                    out.extend(b"^C\r\n");
                    self.line.clear();
                    out.extend(self.current_prompt());
                }
                0x7f | 0x08 if self.line.pop().is_some() => out.extend(b"\x08 \x08"),
                0x20..=0x7e if self.line.len() < MAX_LINE => {
                    self.line.push(b);
                    out.push(b);
                }
                _ => {}
            }
        }
        (out, action)
    }

    fn current_prompt(&self) -> Vec<u8> {
        match self.state {
            State::Login => format!("{} login: ", self.host).into_bytes(),
            State::Prompt => self.prompt(),
        }
    }

    fn enter(&mut self, line: &str, out: &mut Vec<u8>) -> Option<Action> {
        match self.state {
            State::Login => {
                if line == "root" {
                    self.state = State::Prompt;
                    out.extend(b"Linux ");
                    out.extend(self.host.as_bytes());
                    out.extend(b" 6.1.0-vboard aarch64\r\n\r\n");
                    out.extend(self.prompt());
                } else {
                    if !line.is_empty() {
                        out.extend(b"\r\nLogin incorrect\r\n");
                    }
                    out.extend(self.current_prompt());
                }
                None
            }
            State::Prompt => {
                let (text, status, action) = self.run(line);
                if let Some(s) = status {
                    self.status = s;
                }
                out.extend(text.replace('\n', "\r\n").as_bytes());
                match self.state {
                    State::Prompt => out.extend(self.prompt()),
                    State::Login if action.is_none() => out.extend(self.login_prompt()),
                    State::Login => {}
                }
                action
            }
        }
    }

    /// Runs one command line: its output (`\n` line ends), its status (None: unchanged,
    /// for an empty line) and an action.
    fn run(&mut self, line: &str) -> (String, Option<i32>, Option<Action>) {
        let words = split_words(line, self.status);
        let Some((cmd, args)) = words.split_first() else {
            return (String::new(), None, None);
        };
        match cmd.as_str() {
            "echo" => (format!("{}\n", args.join(" ")), Some(0), None),
            "true" => (String::new(), Some(0), None),
            "false" => (String::new(), Some(1), None),
            "uname" => self.uname(args),
            "cat" => self.cat(args),
            "exit" | "logout" => {
                self.state = State::Login;
                ("\n".to_string(), Some(0), None)
            }
            "reboot" => {
                self.state = State::Login;
                (
                    "reboot: Restarting system\n".to_string(),
                    Some(0),
                    Some(Action::Reboot),
                )
            }
            _ => (format!("-sh: {cmd}: command not found\n"), Some(127), None),
        }
    }

    fn uname(&self, args: &[String]) -> (String, Option<i32>, Option<Action>) {
        let text = match args.first().map(String::as_str) {
            None | Some("-s") => "Linux".to_string(),
            Some("-a") => format!("Linux {} {UNAME_A}", self.host),
            Some("-r") => "6.1.0-vboard".to_string(),
            Some("-n") => self.host.clone(),
            Some("-m") => "aarch64".to_string(),
            Some(other) => {
                return (
                    format!(
                        "uname: invalid option -- '{}'\n",
                        other.trim_start_matches('-')
                    ),
                    Some(1),
                    None,
                );
            }
        };
        (format!("{text}\n"), Some(0), None)
    }

    fn cat(&self, args: &[String]) -> (String, Option<i32>, Option<Action>) {
        let mut out = String::new();
        let mut status = 0;
        for f in args {
            match self.file(f) {
                Some(text) => out.push_str(&text),
                None => {
                    out.push_str(&format!("cat: {f}: No such file or directory\n"));
                    status = 1;
                }
            }
        }
        (out, Some(status), None)
    }

    fn file(&self, path: &str) -> Option<String> {
        Some(match path {
            "/etc/hostname" => format!("{}\n", self.host),
            "/etc/os-release" => "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n".to_string(),
            "/proc/version" => "Linux version 6.1.0-vboard (gatecmd-vboard) #1 SMP PREEMPT\n".to_string(),
            "/proc/cmdline" => "console=ttyFIQ0,1500000n8 root=/dev/mmcblk0p2 rw rootwait\n".to_string(),
            _ => return None,
        })
    }
}

/// Splits on blanks with '…' and "…" quoting; `$?` (outside single quotes) becomes the
/// last status.
fn split_words(line: &str, status: i32) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut has = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, ' ' | '\t') => {
                if has {
                    words.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            (None, '\'' | '"') => {
                quote = Some(c);
                has = true;
            }
            (Some(q), c) if c == q => quote = None,
            (q, '$') if q != Some('\'') && chars.peek() == Some(&'?') => {
                chars.next();
                cur.push_str(&status.to_string());
                has = true;
            }
            (_, c) => {
                cur.push(c);
                has = true;
            }
        }
    }
    if has {
        words.push(cur);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn say(sh: &mut Shell, line: &str) -> String {
        let (out, _) = sh.feed(format!("{line}\r").as_bytes());
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn login_then_commands_with_statuses() {
        let mut sh = Shell::new("vb1");
        assert_eq!(sh.login_prompt(), b"vb1 login: ");
        let out = say(&mut sh, "root");
        assert!(out.starts_with("root\r\n"), "echoed: {out:?}");
        assert!(out.ends_with("root@vb1:~# "), "{out:?}");
        let out = say(&mut sh, "uname -a");
        assert!(out.contains("Linux vb1 6.1.0-vboard #1 SMP"), "{out:?}");
        let out = say(&mut sh, "nosuch");
        assert!(
            out.contains("-sh: nosuch: command not found\r\n"),
            "{out:?}"
        );
        assert!(say(&mut sh, "echo $?").contains("127\r\n"));
        assert!(say(&mut sh, "cat /etc/hostname").contains("vb1\r\n"));
        assert!(say(&mut sh, "echo $?").contains("\r\n0\r\n"));
        assert!(say(&mut sh, "cat /nope").contains("No such file"));
        assert!(say(&mut sh, "echo 'a  b' \"$?\" '$?'").contains("a  b 1 $?\r\n"));
        let out = say(&mut sh, "exit");
        assert!(out.ends_with("vb1 login: "), "{out:?}");
    }

    #[test]
    fn a_wrong_login_is_refused_and_crlf_is_one_line() {
        let mut sh = Shell::new("vb2");
        sh.login_prompt();
        assert!(say(&mut sh, "admin").contains("Login incorrect"));
        let (out, _) = sh.feed(b"root\r\n");
        let text = String::from_utf8(out).expect("utf8");
        assert_eq!(text.matches("root@vb2:~# ").count(), 1, "{text:?}");
    }

    #[test]
    fn editing_and_interrupt() {
        let mut sh = Shell::new("vb1");
        sh.login_prompt();
        say(&mut sh, "root");
        let (out, _) = sh.feed(b"echx\x7fo hi\r");
        assert!(String::from_utf8_lossy(&out).contains("\r\nhi\r\n"));
        let (out, _) = sh.feed(b"sleep 100\x03");
        assert!(String::from_utf8_lossy(&out).ends_with("^C\r\nroot@vb1:~# "));
        let (_, action) = sh.feed(b"reboot\r");
        assert_eq!(action, Some(Action::Reboot));
    }
}
