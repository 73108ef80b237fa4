//! What a console line means for a boot: the stage and fault words (fixed: agents rely on
//! them), the default patterns taken from real boot logs (Rockchip DDR/SPL blobs, U-Boot,
//! TF-A, OP-TEE, Linux, systemd, busybox, Android), a board's own patterns added or
//! replacing a word's defaults (`boards[].console.boot_patterns`), and one compiled set
//! that classifies a line.

use regex::{Regex, RegexSet, RegexSetBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

gatecmd_core::named_enum! {
    /// A boot stage, in the order a boot goes through them.
    #[derive(
        Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
    )]
    #[serde(rename_all = "snake_case")]
    pub enum Stage {
        /// The first loader: a Rockchip DDR blob's banner or U-Boot SPL's.
        Spl => "spl",
        /// TF-A's BL31.
        Atf => "atf",
        /// OP-TEE OS.
        Optee => "optee",
        /// U-Boot proper.
        Uboot => "uboot",
        /// The Linux kernel.
        Kernel => "kernel",
        /// Android's first-stage init.
        AndroidInit => "android_init",
        /// The first user-space process (systemd, busybox init, /sbin/init).
        Init => "init",
        /// Android's zygote started.
        AndroidZygote => "android_zygote",
        /// Android said it finished booting.
        AndroidBootCompleted => "android_boot_completed",
        /// A login prompt.
        Login => "login",
        /// A shell prompt.
        Shell => "shell",
    }
}

impl Stage {
    /// A firmware stage: seeing it again after it or a later stage means the board
    /// started over.
    pub fn is_firmware(self) -> bool {
        matches!(self, Stage::Spl | Stage::Atf | Stage::Optee | Stage::Uboot)
    }
}

/// What went wrong during a boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    KernelPanic,
    Oops,
    Bug,
    Warning,
    /// The boot started again before login (a second SPL/DDR banner, or a firmware stage
    /// after a later one).
    Reset,
    /// U-Boot could not load or start a kernel.
    NoKernel,
}

impl FaultKind {
    /// The kinds a pattern may name (`reset` is seen, not matched).
    pub const MATCHED: [FaultKind; 5] = [
        FaultKind::KernelPanic,
        FaultKind::Oops,
        FaultKind::Bug,
        FaultKind::Warning,
        FaultKind::NoKernel,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::KernelPanic => "kernel_panic",
            FaultKind::Oops => "oops",
            FaultKind::Bug => "bug",
            FaultKind::Warning => "warning",
            FaultKind::Reset => "reset",
            FaultKind::NoKernel => "no_kernel",
        }
    }

    pub fn named(s: &str) -> Option<FaultKind> {
        FaultKind::MATCHED.into_iter().find(|w| w.as_str() == s)
    }
}

/// What a pattern says a line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Word {
    Stage(Stage),
    Fault(FaultKind),
    /// U-Boot's command prompt: the boot stopped in U-Boot (outcome `uboot`).
    UbootPrompt,
}

impl Word {
    pub fn describe(self) -> String {
        match self {
            Word::Stage(s) => format!("stage {}", s.as_str()),
            Word::Fault(f) => format!("fault {}", f.as_str()),
            Word::UbootPrompt => "the U-Boot prompt".into(),
        }
    }

    /// A prompt is printed without a newline: it is looked for in the unfinished last line
    /// too.
    fn is_prompt(self) -> bool {
        matches!(
            self,
            Word::Stage(Stage::Login) | Word::Stage(Stage::Shell) | Word::UbootPrompt
        )
    }
}

/// The default patterns, each with the log it was taken from. Anchored where the text
/// starts its line, so that a kernel or shell line quoting it does not count; except the
/// first loader's banners: after a reset they often follow the unfinished line the board
/// was printing.
pub const DEFAULTS: &[(Word, &str)] = &[
    // Rockchip DDR init blob: "DDR Version V1.08 20220617" (older), "DDR V1.08 0ad38ef9d9 typ
    // 22/06/09-14:24:48" (RK3588 rkbin up to v1.0x), "DDR 9fffbe1e78 cym
    // 24/02/04-10:09:20,fwver: v1.16" (RK3588 rkbin v1.1x).
    (
        Word::Stage(Stage::Spl),
        r"DDR (?:Version [Vv]?\d|[Vv]\d+\.\d+ [0-9a-f]{6,} |[0-9a-f]{6,} \S+ \d\d/\d\d/\d\d-)",
    ),
    // "U-Boot SPL 2017.09-armbian-…", "U-Boot SPL rknext-2017.09-29-…", mainline
    // "U-Boot SPL 2024.01-rc4 (Jan 08 2024 - 10:00:00 +0000)"; not "U-Boot SPL board init".
    (Word::Stage(Stage::Spl), r"U-Boot SPL \S*20\d\d\.\d\d"),
    // Mainline's TPL before its SPL: a pattern of its own, so that TPL then SPL is one boot.
    (Word::Stage(Stage::Spl), r"U-Boot TPL \S*20\d\d\.\d\d"),
    // TF-A: "NOTICE:  BL31: v2.3():v2.3-682-g4ca8a8422:…" (its second line, "BL31: Built",
    // is not a second banner).
    (Word::Stage(Stage::Atf), r"^NOTICE:\s+BL31: v\d"),
    // OP-TEE: "I/TC: OP-TEE version: 3.20.0 (gcc version …)"; not "I/TC: Secondary CPU 1
    // initializing", which it prints while Linux starts its CPUs.
    (
        Word::Stage(Stage::Optee),
        r"^(?:[DIEW]/TC:\s*(?:\d+\s+)?)?OP-TEE version",
    ),
    // "U-Boot 2017.09-armbian-…", "U-Boot rknext-2017.09-29-…", "U-Boot 2024.01 (…)".
    (Word::Stage(Stage::Uboot), r"^U-Boot \S*20\d\d\.\d\d"),
    (Word::Stage(Stage::Kernel), r"^Starting kernel \.\.\."),
    (
        Word::Stage(Stage::Kernel),
        r"Booting Linux on physical CPU|^(?:\[\s*\d+\.\d+\]\s*)?Linux version \d",
    ),
    // Any printk line with its timestamp: a quiet kernel prints few of the lines above.
    (Word::Stage(Stage::Kernel), r"^\[\s*\d+\.\d{6}\] "),
    (
        Word::Stage(Stage::AndroidInit),
        r"init: init first stage started",
    ),
    (
        Word::Stage(Stage::Init),
        r"Run \S+ as init process|systemd\[1\]: |^Welcome to .*!|^init started: BusyBox|^Starting init:",
    ),
    (
        Word::Stage(Stage::AndroidZygote),
        r"init: starting service 'zygote",
    ),
    (
        Word::Stage(Stage::AndroidBootCompleted),
        r"sys\.boot_completed=1|Boot is finished",
    ),
    // The login and shell prompts are the board's `console.login_prompt` and
    // `console.prompt` (their defaults: `login:`, `[#$] $`), U-Boot's its `console.uboot.prompt`.
    (
        Word::Fault(FaultKind::KernelPanic),
        r"Kernel panic - not syncing",
    ),
    // arm64 "Internal error: Oops: 96000005 [#1] PREEMPT SMP", x86 "Oops: 0002 [#1] SMP",
    // "Unable to handle kernel NULL pointer dereference at virtual address …".
    (
        Word::Fault(FaultKind::Oops),
        r"Internal error: Oops|\bOops(?: - \w+)?: [0-9a-fx]+ \[#\d+\]|Unable to handle kernel ",
    ),
    (Word::Fault(FaultKind::Bug), r"kernel BUG at |\bBUG: \w"),
    (
        Word::Fault(FaultKind::Warning),
        r"WARNING: CPU: \d+ PID: \d+|^(?:\[\s*\d+\.\d+\]\s*)?-+\[ cut here \]-+$",
    ),
    // U-Boot failing to load or start a kernel.
    (
        Word::Fault(FaultKind::NoKernel),
        r"Wrong Image Format for boot|Bad Linux ARM64 Image magic|Bad Linux ARM zImage magic|Bad Linux RISCV Image magic|Unknown command '(?:booti|bootz|bootm|bootefi)'|ERROR: can't get kernel image|Failed to load '[^']*(?:Image|vmlinu[xz]|zImage|uImage)[^']*'",
    ),
];

/// One pattern of a board's config, checked: a word and its regex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootPattern {
    pub word: ConfigWord,
    pub regex: String,
    /// Drop the defaults of this word (every pattern the board gives for it is kept).
    pub replace: bool,
}

/// The words a board's pattern may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigWord {
    Stage(Stage),
    Fault(FaultKind),
}

impl ConfigWord {
    fn word(self) -> Word {
        match self {
            ConfigWord::Stage(s) => Word::Stage(s),
            ConfigWord::Fault(f) => Word::Fault(f),
        }
    }
}

/// Longest pattern and its compiled size: a board's pattern costs the server a small,
/// fixed amount.
pub const MAX_PATTERN_CHARS: usize = 512;
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Compiles one pattern as every pattern here is compiled (`regex` crate syntax).
pub fn compile(pattern: &str) -> Result<Regex, String> {
    if pattern.chars().count() > MAX_PATTERN_CHARS {
        return Err(format!(
            "longer than {MAX_PATTERN_CHARS} characters; match the line's distinctive start"
        ));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| e.to_string())
}

/// Every pattern of one board, compiled: complete lines are matched against the whole set
/// (one pass: does anything match?, then which), the unfinished last line against the
/// prompts only.
#[derive(Debug, Clone)]
pub struct Patterns {
    lines: RegexSet,
    line_words: Vec<Word>,
    prompts: Vec<(usize, Word, Regex)>,
}

/// A board's prompts (its `console:` settings) for the login, shell and U-Boot words.
#[derive(Debug, Clone)]
pub struct Prompts<'a> {
    pub login: &'a str,
    pub shell: &'a str,
    /// Literal text, e.g. "=> ".
    pub uboot: &'a str,
}

impl Default for Prompts<'static> {
    fn default() -> Self {
        Prompts {
            login: "login:",
            shell: r"[#$] $",
            uboot: "=> ",
        }
    }
}

impl Patterns {
    /// The defaults, with `board`'s own patterns added (or replacing a word's defaults).
    /// A pattern that does not compile is left out (the config's validation refuses it
    /// first, with its file and line).
    pub fn new(prompts: &Prompts<'_>, board: &[BootPattern]) -> Patterns {
        let replaced = |w: Word| board.iter().any(|p| p.replace && p.word.word() == w);
        let uboot_prompt = format!(r"^{}\s*$", regex::escape(prompts.uboot.trim_end()));
        let mut all: Vec<(Word, String)> = Vec::new();
        let defaults = DEFAULTS.iter().map(|(w, r)| (*w, r.to_string())).chain([
            (Word::Stage(Stage::Login), prompts.login.to_string()),
            (Word::Stage(Stage::Shell), prompts.shell.to_string()),
            (Word::UbootPrompt, uboot_prompt),
        ]);
        all.extend(defaults.filter(|(w, _)| !replaced(*w)));
        all.extend(board.iter().map(|p| (p.word.word(), p.regex.clone())));
        let all: Vec<(Word, String)> = all
            .into_iter()
            .filter(|(_, r)| compile(r).is_ok())
            .collect();
        let (line_words, line_res): (Vec<Word>, Vec<String>) = all.iter().cloned().unzip();
        let lines = RegexSetBuilder::new(&line_res)
            .size_limit(REGEX_SIZE_LIMIT * 8)
            .dfa_size_limit(REGEX_SIZE_LIMIT * 8)
            .build()
            .unwrap_or_else(|_| RegexSet::empty());
        let prompts = all
            .iter()
            .enumerate()
            .filter(|(_, (w, _))| w.is_prompt())
            .filter_map(|(i, (w, r))| compile(r).ok().map(|re| (i, *w, re)))
            .collect();
        Patterns {
            lines,
            line_words,
            prompts,
        }
    }

    /// The words of a complete line, in pattern order, each once with the first of its
    /// patterns that matched (its index: a firmware banner matched twice by the same
    /// pattern is a reset).
    pub fn classify(&self, line: &str, out: &mut Vec<(Word, usize)>) {
        out.clear();
        if !self.lines.is_match(line) {
            return;
        }
        for i in self.lines.matches(line).iter() {
            let w = self.line_words[i];
            if !out.iter().any(|(x, _)| *x == w) {
                out.push((w, i));
            }
        }
    }

    /// The prompt words the unfinished last line shows.
    pub fn classify_prompt(&self, partial: &str, out: &mut Vec<(Word, usize)>) {
        out.clear();
        for (i, w, re) in &self.prompts {
            if !out.iter().any(|(x, _)| x == w) && re.is_match(partial) {
                out.push((*w, *i));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_is_serialised_by_its_name_in_boot_order() {
        let names: Vec<&str> = Stage::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(names.len(), 11);
        assert!(Stage::ALL.windows(2).all(|w| w[0] < w[1]), "{names:?}");
        for &s in Stage::ALL {
            assert_eq!(serde_json::to_value(s).ok(), Some(s.as_str().into()));
        }
    }

    fn words(p: &Patterns, line: &str) -> Vec<Word> {
        let mut v = Vec::new();
        p.classify(line, &mut v);
        v.into_iter().map(|(w, _)| w).collect()
    }

    fn prompt(p: &Patterns, partial: &str) -> Vec<Word> {
        let mut v = Vec::new();
        p.classify_prompt(partial, &mut v);
        v.into_iter().map(|(w, _)| w).collect()
    }

    #[test]
    fn every_default_compiles() {
        for (w, r) in DEFAULTS {
            compile(r).unwrap_or_else(|e| panic!("{w:?} {r}: {e}"));
        }
    }

    #[test]
    fn real_rk3588_lines_are_classified() {
        let p = Patterns::new(&Prompts::default(), &[]);
        let spl = vec![Word::Stage(Stage::Spl)];
        assert_eq!(
            words(&p, "DDR 9fffbe1e78 cym 24/02/04-10:09:20,fwver: v1.16"),
            spl
        );
        assert_eq!(words(&p, "DDR Version V1.08 20220617"), spl);
        assert_eq!(words(&p, "DDR V1.08 0ad38ef9d9 typ 22/06/09-14:24:48"), spl);
        assert!(words(&p, "DDR: 8 GiB").is_empty());
        assert_eq!(
            words(
                &p,
                "U-Boot SPL rknext-2017.09-29-be2c5d5-ge5342b0 #runner (Jun 06 2024 - 03:20:16)"
            ),
            spl
        );
        assert!(words(&p, "U-Boot SPL board init").is_empty());
        assert!(words(&p, "LPDDR5, 2400MHz").is_empty());
        assert_eq!(
            words(
                &p,
                "NOTICE:  BL31: v2.3():v2.3-682-g4ca8a8422:derrick.huang, fwver: v1.45"
            ),
            vec![Word::Stage(Stage::Atf)]
        );
        assert!(words(&p, "NOTICE:  BL31: Built : 10:11:21, Dec 27 2023").is_empty());
        assert_eq!(
            words(
                &p,
                "I/TC: OP-TEE version: 3.13.0-651-gd84087907 #1 Fri Jun 10"
            ),
            vec![Word::Stage(Stage::Optee)]
        );
        assert!(words(&p, "I/TC: Secondary CPU 1 initializing").is_empty());
        assert_eq!(
            words(
                &p,
                "U-Boot 2017.09-armbian-2017.09-S0674-Pc965 (Sep 11 2024 - 17:20:06 +0000)"
            ),
            vec![Word::Stage(Stage::Uboot)]
        );
        assert!(
            words(&p, "Unknown command 'kaslrseed' - try 'help'").is_empty(),
            "a normal Armbian boot prints it"
        );
        assert!(words(&p, "## Unknown partition table type 0").is_empty());
        assert_eq!(
            words(&p, "Starting kernel ..."),
            vec![Word::Stage(Stage::Kernel)]
        );
        assert_eq!(
            words(
                &p,
                "[    0.000000] Booting Linux on physical CPU 0x0000000000 [0x412fd050]"
            ),
            vec![Word::Stage(Stage::Kernel)]
        );
        assert_eq!(
            words(&p, "[    2.345678] Run /sbin/init as init process"),
            vec![Word::Stage(Stage::Kernel), Word::Stage(Stage::Init)]
        );
        assert_eq!(
            words(
                &p,
                "[    5.000001] Kernel panic - not syncing: VFS: Unable to mount root fs"
            ),
            vec![
                Word::Stage(Stage::Kernel),
                Word::Fault(FaultKind::KernelPanic)
            ]
        );
        assert!(
            words(
                &p,
                "[    3.1] Internal error: Oops: 96000005 [#1] PREEMPT SMP"
            )
            .contains(&Word::Fault(FaultKind::Oops))
        );
        assert!(
            words(
                &p,
                "[    3.1] WARNING: CPU: 2 PID: 1 at drivers/base/dd.c:100 foo+0x10/0x20"
            )
            .contains(&Word::Fault(FaultKind::Warning))
        );
        assert_eq!(
            words(&p, "Bad Linux ARM64 Image magic!"),
            vec![Word::Fault(FaultKind::NoKernel)]
        );
        assert_eq!(
            words(&p, "Unknown command 'booti' - try 'help'"),
            vec![Word::Fault(FaultKind::NoKernel)]
        );
        assert_eq!(
            prompt(&p, "rock5b login: "),
            vec![Word::Stage(Stage::Login)]
        );
        assert_eq!(
            prompt(&p, "root@rock5b:~# "),
            vec![Word::Stage(Stage::Shell)]
        );
        assert_eq!(prompt(&p, "=> "), vec![Word::UbootPrompt]);
    }

    #[test]
    fn a_board_pattern_adds_or_replaces_a_words_defaults() {
        let add = BootPattern {
            word: ConfigWord::Stage(Stage::Uboot),
            regex: "^Vendor Loader v".into(),
            replace: false,
        };
        let p = Patterns::new(&Prompts::default(), std::slice::from_ref(&add));
        assert_eq!(
            words(&p, "Vendor Loader v3"),
            vec![Word::Stage(Stage::Uboot)]
        );
        assert_eq!(
            words(&p, "U-Boot 2024.01 (x)"),
            vec![Word::Stage(Stage::Uboot)]
        );
        let p = Patterns::new(
            &Prompts::default(),
            &[BootPattern {
                replace: true,
                ..add
            }],
        );
        assert!(words(&p, "U-Boot 2024.01 (x)").is_empty());
        assert_eq!(
            words(&p, "Vendor Loader v3"),
            vec![Word::Stage(Stage::Uboot)]
        );
    }
}
