//! Boot reports (docs/BOARDS.md "Boot reports"): every power-on of a board with a console,
//! and every boot seen starting on its console, is one boot record with its trigger, its
//! start, the stages and faults its console showed (with their times from the power-on),
//! its bounded transcript and an outcome kept current as the bytes arrive.
//!
//! - `patterns`: the stage and fault words, the default patterns from real boot logs, a
//!   board's own, one compiled set per board.
//! - `record`: one boot, its outcome, and how the tools and resources show it.
//!
//! Wiring: the console capture hands every byte it captures to [`Boots::feed`] (a tap on
//! the console, `Consoles::set_tap`), in order, on the capture task; the power actions
//! (`power_board`, `boot_board`, `flash_board`'s reset, the labgrid power port) call
//! [`Boots::power_on`] right before they switch a board on, so that the bytes of the
//! boot they cause are all in it. A new boot and a changed outcome are announced on
//! [`Boots::subscribe`].

/// The patterns live with the config that names them (a board's `console.boot_patterns`),
/// so that config does not depend on this module.
pub use crate::config::boot_patterns as patterns;
pub mod record;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::config::{BootSettings, Config};
use patterns::{Patterns, Prompts, Stage, Word};
use record::{Boot, EndedBy, FaultSeen, MAX_FAULTS, SAME_FAULT_LINES, StageSeen};

pub use patterns::{BootPattern, ConfigWord, FaultKind};
pub use record::{BootReport, BootSummary, Outcome, Trigger};

/// The longest console line classified (the rest of a longer line is kept in the
/// transcript but not matched).
pub const MAX_LINE_BYTES: usize = 1024;

/// How long an unfinished line must stay as it is to count as a prompt (a board waiting
/// at `login: ` or `# `): a line that merely arrived in two pieces, cut after "## ",
/// does not.
pub const PROMPT_QUIET: Duration = Duration::from_millis(150);
/// How often the ticker confirms prompts and looks for silent boots.
pub const TICK: Duration = Duration::from_millis(100);

/// A boot that was started or whose outcome changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootChange {
    pub board: String,
    pub boot: u64,
}

/// Why a boot cannot be shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootLookup {
    #[error(
        "board {board} has had no boot since the server started: a power action (power_board \
         on or cycle, boot_board, flash_board) or a boot seen on its console starts one"
    )]
    NoBoot { board: String },
    #[error(
        "board {board} has no boot {asked}: it keeps boots {oldest} to {newest} \
         (boots.keep); gatecmd://boards/{board}/boots lists them"
    )]
    NotKept {
        board: String,
        asked: u64,
        oldest: u64,
        newest: u64,
    },
    #[error("board {board} has no console, so no boot reports")]
    NoConsole { board: String },
}

struct BoardBoots {
    patterns: Arc<Patterns>,
    /// The current line's first [`MAX_LINE_BYTES`] bytes, and its whole length so far.
    line: Vec<u8>,
    line_bytes: usize,
    /// Prompt words already taken from the unfinished current line.
    partial_seen: Vec<Word>,
    /// Prompt words the unfinished line shows, since when: taken once it stayed so for
    /// [`PROMPT_QUIET`].
    candidates: Vec<Word>,
    candidate_since: Option<Instant>,
    boots: VecDeque<Boot>,
    next_n: u64,
    scratch: Vec<(Word, usize)>,
}

struct Shared {
    settings: RwLock<BootSettings>,
    boards: RwLock<HashMap<String, Arc<Mutex<BoardBoots>>>>,
    changes: broadcast::Sender<BootChange>,
}

/// Every board's boots; a cheap-to-clone handle (a field of `AppState`).
#[derive(Clone)]
pub struct Boots {
    shared: Arc<Shared>,
}

impl Default for Boots {
    fn default() -> Self {
        Boots::new(BootSettings::default())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Boots {
    pub fn new(settings: BootSettings) -> Boots {
        Boots {
            shared: Arc::new(Shared {
                settings: RwLock::new(settings),
                boards: RwLock::new(HashMap::new()),
                changes: broadcast::channel(256).0,
            }),
        }
    }

    fn settings(&self) -> BootSettings {
        *self
            .shared
            .settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Follows the configuration: the settings, and one record list per board with a
    /// console (its patterns from its `console:`); a board that keeps its console keeps
    /// its boots, one that loses it loses them.
    pub fn configure(&self, config: &Config) {
        let settings = config.boots;
        *self
            .shared
            .settings
            .write()
            .unwrap_or_else(|e| e.into_inner()) = settings;
        let mut boards = self
            .shared
            .boards
            .write()
            .unwrap_or_else(|e| e.into_inner());
        boards.retain(|name, _| config.board(name).is_some_and(|b| b.console.is_some()));
        for b in config.boards.iter().filter(|b| b.console.is_some()) {
            let prompts = Prompts {
                login: &b.shell.login_prompt,
                shell: &b.shell.prompt,
                uboot: &b.shell.uboot.prompt,
            };
            let patterns = Arc::new(Patterns::new(&prompts, &b.shell.boot_patterns));
            match boards.get(&b.name) {
                Some(existing) => {
                    let mut bb = lock(existing);
                    bb.patterns = patterns;
                    while bb.boots.len() > settings.keep {
                        bb.boots.pop_front();
                    }
                }
                None => {
                    boards.insert(
                        b.name.clone(),
                        Arc::new(Mutex::new(BoardBoots {
                            patterns,
                            line: Vec::with_capacity(MAX_LINE_BYTES),
                            line_bytes: 0,
                            partial_seen: Vec::new(),
                            candidates: Vec::new(),
                            candidate_since: None,
                            boots: VecDeque::new(),
                            next_n: 1,
                            scratch: Vec::new(),
                        })),
                    );
                }
            }
        }
    }

    /// Boards with boot records (the boards with a console).
    pub fn boards(&self) -> Vec<String> {
        let boards = self.shared.boards.read().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<String> = boards.keys().cloned().collect();
        v.sort();
        v
    }

    fn board(&self, board: &str) -> Option<Arc<Mutex<BoardBoots>>> {
        let boards = self.shared.boards.read().unwrap_or_else(|e| e.into_inner());
        boards.get(board).cloned()
    }

    fn announce(&self, changes: Vec<BootChange>) {
        for c in changes {
            // An error only means nobody listens.
            let _ = self.shared.changes.send(c);
        }
    }

    /// New boots and changed outcomes, as they happen.
    pub fn subscribe(&self) -> broadcast::Receiver<BootChange> {
        self.shared.changes.subscribe()
    }

    /// A power action is about to switch `board` on (or reset it): the next bytes are a
    /// new boot's. Returns its number; `None` for a board without a console.
    pub fn power_on(&self, board: &str, trigger: Trigger) -> Option<u64> {
        let bb = self.board(board)?;
        let settings = self.settings();
        let mut bb = lock(&bb);
        let n = bb.start(trigger, EndedBy::Power, 0, &settings);
        // The line in progress belongs to the boot that ends.
        bb.line.clear();
        bb.line_bytes = 0;
        bb.partial_seen.clear();
        bb.candidates.clear();
        drop(bb);
        self.announce(vec![BootChange {
            board: board.to_string(),
            boot: n,
        }]);
        Some(n)
    }

    /// Console bytes of `board`, in the order captured.
    pub fn feed(&self, board: &str, bytes: &[u8]) {
        let Some(bb) = self.board(board) else { return };
        let settings = self.settings();
        let changes = {
            let mut bb = lock(&bb);
            bb.feed(bytes, Instant::now(), &settings)
        };
        if !changes.is_empty() {
            self.announce(
                changes
                    .into_iter()
                    .map(|boot| BootChange {
                        board: board.to_string(),
                        boot,
                    })
                    .collect(),
            );
        }
    }

    /// Takes the prompts that stayed [`PROMPT_QUIET`] and announces outcomes that changed
    /// with time alone (a prompt, `silent`); the ticker calls it every [`TICK`].
    pub fn tick(&self) {
        let settings = self.settings();
        let silent = Duration::from_secs(settings.silent_secs);
        let now = Instant::now();
        let boards: Vec<(String, Arc<Mutex<BoardBoots>>)> = {
            let b = self.shared.boards.read().unwrap_or_else(|e| e.into_inner());
            b.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let mut changes = Vec::new();
        for (name, bb) in boards {
            let mut bb = lock(&bb);
            bb.settle(now);
            if let Some(b) = bb.boots.back_mut() {
                let o = b.outcome(now, silent);
                if o != b.announced {
                    b.announced = o;
                    changes.push(BootChange {
                        board: name.clone(),
                        boot: b.n,
                    });
                }
            }
        }
        self.announce(changes);
    }

    /// Ticks once a second until every handle is gone (needs a tokio runtime).
    pub fn spawn_ticker(&self) {
        let weak: Weak<Shared> = Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(TICK);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(shared) = weak.upgrade() else { return };
                Boots { shared }.tick();
            }
        });
    }

    /// The number of `board`'s latest boot.
    pub fn latest(&self, board: &str) -> Option<u64> {
        let bb = self.board(board)?;
        let bb = lock(&bb);
        bb.boots.back().map(|b| b.n)
    }

    fn with_boot<T>(
        &self,
        board: &str,
        n: Option<u64>,
        f: impl FnOnce(&Boot, Instant, Duration) -> T,
    ) -> Result<T, BootLookup> {
        let bb = self.board(board).ok_or_else(|| BootLookup::NoConsole {
            board: board.to_string(),
        })?;
        let silent = Duration::from_secs(self.settings().silent_secs);
        let bb = lock(&bb);
        let (Some(oldest), Some(newest)) = (bb.boots.front(), bb.boots.back()) else {
            return Err(BootLookup::NoBoot {
                board: board.to_string(),
            });
        };
        let n = n.unwrap_or(newest.n);
        let Some(b) = bb.boots.iter().find(|b| b.n == n) else {
            return Err(BootLookup::NotKept {
                board: board.to_string(),
                asked: n,
                oldest: oldest.n,
                newest: newest.n,
            });
        };
        Ok(f(b, Instant::now(), silent))
    }

    /// Boot `n` of `board` (the latest without `n`), with its transcript.
    pub fn report(&self, board: &str, n: Option<u64>) -> Result<BootReport, BootLookup> {
        self.with_boot(board, n, |b, now, silent| b.report(board, now, silent))
    }

    /// Boot `n` of `board` (the latest without `n`), without its transcript.
    pub fn summary(&self, board: &str, n: Option<u64>) -> Result<BootSummary, BootLookup> {
        self.with_boot(board, n, |b, now, silent| b.summary(board, now, silent))
    }

    /// Every boot kept of `board`, newest first; `None` for a board without a console.
    pub fn list(&self, board: &str) -> Option<Vec<BootSummary>> {
        let bb = self.board(board)?;
        let silent = Duration::from_secs(self.settings().silent_secs);
        let now = Instant::now();
        let bb = lock(&bb);
        Some(
            bb.boots
                .iter()
                .rev()
                .map(|b| b.summary(board, now, silent))
                .collect(),
        )
    }

    /// Boot `n` of `board` once the recorder has caught up with what the console showed:
    /// when its outcome leaves `booting` (a prompt confirmed after [`PROMPT_QUIET`], a
    /// panic…), or after `within` (a pattern that is no prompt leaves it `booting`).
    /// `flash_board` answers with this, so its summary is the boot report that
    /// `boot_report` gives a moment later, not the one of a moment before.
    pub async fn settled(&self, board: &str, n: u64, within: Duration) -> Option<BootSummary> {
        let mut changes = self.subscribe();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let now = self.summary(board, Some(n)).ok()?;
            if now.outcome != Outcome::Booting {
                return Some(now);
            }
            tokio::select! {
                changed = changes.recv() => {
                    if matches!(changed, Err(broadcast::error::RecvError::Closed)) {
                        return Some(now);
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    return self.summary(board, Some(n)).ok();
                }
            }
        }
    }

    /// Resolves once boot `n` of `board` (or a boot after it) panicked, or the board is in
    /// a reset loop (its latest boot follows two or more that reset before login), with
    /// that boot; never while it goes well (race it with what waits for the boot to
    /// succeed). One reset alone is not a failure: the boot after it may well come up.
    pub async fn failed(&self, board: &str, n: u64) -> BootSummary {
        let mut changes = self.subscribe();
        loop {
            let list = self.list(board).unwrap_or_default();
            let panicked = list
                .iter()
                .rev()
                .filter(|s| s.boot >= n)
                .find(|s| s.outcome == Outcome::Panic);
            let looping = list
                .first()
                .filter(|s| s.boot >= n && s.outcome == Outcome::ResetLoop && s.ended_by.is_none());
            if let Some(s) = panicked.or(looping).cloned() {
                return s;
            }
            loop {
                match changes.recv().await {
                    Ok(c) if c.board == board => break,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }

    /// Transcript bytes held for `board` now, over all its boots (for the bound's tests).
    pub fn held_bytes(&self, board: &str) -> usize {
        self.board(board).map_or(0, |bb| {
            lock(&bb).boots.iter().map(|b| b.transcript.len()).sum()
        })
    }
}

/// The console line as text for matching: invalid UTF-8 replaced, ANSI escapes removed,
/// what a carriage return overwrote dropped, the line end trimmed.
fn line_text(raw: &[u8]) -> String {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    let mut raw = raw;
    while let Some(r) = raw.strip_suffix(b"\r") {
        raw = r;
    }
    // What a carriage return in the middle overwrote is not on the screen.
    if let Some(i) = memchr::memrchr(b'\r', raw) {
        raw = &raw[i + 1..];
    }
    if memchr::memchr(0x1b, raw).is_none() {
        return String::from_utf8_lossy(raw).into_owned();
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != 0x1b {
            out.push(raw[i]);
            i += 1;
            continue;
        }
        i += 1;
        if raw.get(i) == Some(&b'[') {
            i += 1;
            while i < raw.len() && !(0x40..=0x7e).contains(&raw[i]) {
                i += 1;
            }
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A line as a stage or fault shows it: control characters removed, invisible format
/// characters (bidi controls and the like) written out visibly (`<U+202E>`, issue 46), at
/// most 1 KiB.
fn shown(line: &str) -> String {
    let plain: String = line.chars().filter(|c| !c.is_control()).collect();
    gatecmd_core::output::visible(&plain)
}

impl BoardBoots {
    /// Starts boot `next_n` (the current one ends `ended`), drops the oldest past the
    /// bound; returns its number.
    fn start(
        &mut self,
        trigger: Trigger,
        ended: EndedBy,
        resets_in_a_row: u32,
        settings: &BootSettings,
    ) -> u64 {
        if let Some(b) = self.boots.back_mut() {
            b.ended_by = Some(ended);
        }
        let n = self.next_n;
        self.next_n += 1;
        let mut boot = Boot::new(n, trigger, settings.transcript_bytes);
        boot.resets_in_a_row = resets_in_a_row;
        self.boots.push_back(boot);
        while self.boots.len() > settings.keep.max(1) {
            self.boots.pop_front();
        }
        n
    }

    /// Takes `bytes`; returns the boots that started or whose outcome changed.
    fn feed(&mut self, bytes: &[u8], now: Instant, settings: &BootSettings) -> Vec<u64> {
        let silent = Duration::from_secs(settings.silent_secs);
        let before = self.boots.back().map(|b| b.n);
        let mut changed = Vec::new();
        // More output: what looked like a prompt was not one.
        self.candidates.clear();
        self.candidate_since = None;
        let mut rest = bytes;
        while !rest.is_empty() {
            let (piece, ends) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..=i], true),
                None => (rest, false),
            };
            rest = &rest[piece.len()..];
            if let Some(b) = self.boots.back_mut() {
                b.bytes += piece.len() as u64;
                b.last_byte = Some(now);
                b.transcript.push(piece);
            }
            let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
            self.line.extend_from_slice(&piece[..room.min(piece.len())]);
            self.line_bytes += piece.len();
            if ends {
                self.complete_line(now, settings, &mut changed);
                self.line.clear();
                self.line_bytes = 0;
                self.partial_seen.clear();
            }
        }
        if !self.line.is_empty() {
            self.partial_line(now);
        }
        if let Some(b) = self.boots.back_mut() {
            let o = b.outcome(now, silent);
            let new = Some(b.n) != before;
            if new || o != b.announced {
                b.announced = o;
                changed.push(b.n);
            }
        }
        changed.sort_unstable();
        changed.dedup();
        changed
    }

    fn complete_line(&mut self, now: Instant, settings: &BootSettings, changed: &mut Vec<u64>) {
        let text = line_text(&self.line);
        let mut words = std::mem::take(&mut self.scratch);
        self.patterns.classify(&text, &mut words);
        if let Some(b) = self.boots.back_mut() {
            b.lines += 1;
        }
        for &(word, idx) in &words {
            if self.partial_seen.contains(&word) {
                continue;
            }
            match word {
                Word::Stage(s) if s.is_firmware() => {
                    self.firmware(s, idx, &text, now, settings, changed)
                }
                other => self.apply(other, &text, now),
            }
        }
        self.scratch = words;
    }

    /// Notes the prompts the unfinished line shows; [`BoardBoots::settle`] takes them if
    /// nothing follows.
    fn partial_line(&mut self, now: Instant) {
        let text = line_text(&self.line);
        let mut words = std::mem::take(&mut self.scratch);
        self.patterns.classify_prompt(&text, &mut words);
        for &(word, _) in &words {
            if !self.partial_seen.contains(&word) {
                self.candidates.push(word);
            }
        }
        if !self.candidates.is_empty() {
            self.candidate_since = Some(now);
        }
        self.scratch = words;
    }

    /// Takes the prompts the unfinished line has shown for [`PROMPT_QUIET`], timed when
    /// they appeared.
    fn settle(&mut self, now: Instant) {
        let Some(since) = self.candidate_since else {
            return;
        };
        if now.saturating_duration_since(since) < PROMPT_QUIET {
            return;
        }
        let text = line_text(&self.line);
        for word in std::mem::take(&mut self.candidates) {
            self.partial_seen.push(word);
            self.apply(word, &text, since);
        }
        self.candidate_since = None;
    }

    /// A stage (not a firmware one), a fault or the U-Boot prompt, in the current boot.
    fn apply(&mut self, word: Word, text: &str, now: Instant) {
        let Some(b) = self.boots.back_mut() else {
            return;
        };
        let at_ms = b.at_ms(now);
        match word {
            Word::Stage(s) => {
                if s == Stage::Kernel {
                    b.at_uboot_prompt = false;
                }
                if !b.has(s) {
                    b.stages.push(StageSeen {
                        stage: s,
                        at_ms,
                        line: shown(text),
                    });
                }
            }
            Word::UbootPrompt => {
                if !b.has(Stage::Login) && !b.has(Stage::Shell) {
                    b.at_uboot_prompt = true;
                }
            }
            Word::Fault(k) => {
                if k == FaultKind::KernelPanic {
                    b.panicked = true;
                }
                fault(b, k, at_ms, text);
            }
        }
    }

    /// A firmware banner: the current boot's stage, or a boot starting over.
    fn firmware(
        &mut self,
        s: Stage,
        idx: usize,
        text: &str,
        now: Instant,
        settings: &BootSettings,
        changed: &mut Vec<u64>,
    ) {
        let restarted = match self.boots.back() {
            None => None,
            Some(b) => {
                let again = b.banners.contains(&idx) || b.furthest().is_some_and(|f| f > s);
                again.then(|| (b.reached_login(), b.resets_in_a_row, b.n))
            }
        };
        let line_bytes = self.line_bytes;
        match (self.boots.is_empty(), restarted) {
            (true, _) => {
                // A boot gatecmd did not start (the server started after the power-on, or
                // someone pressed reset): from its first banner on.
                self.start(
                    Trigger::console("a boot seen starting on the console"),
                    EndedBy::Power,
                    0,
                    settings,
                );
                let b = self.boots.back_mut().expect("just started");
                let line = &self.line;
                b.bytes += line.len() as u64;
                b.transcript.push(line);
            }
            (false, Some((reached_login, resets, old))) => {
                let moved = {
                    let b = self.boots.back_mut().expect("not empty");
                    let moved = b.transcript.pop_last(line_bytes);
                    b.bytes = b.bytes.saturating_sub(line_bytes as u64);
                    if !reached_login {
                        let at_ms = b.at_ms(now);
                        fault(b, FaultKind::Reset, at_ms, text);
                    }
                    moved
                };
                let (trigger, ended, resets) = if reached_login {
                    (
                        Trigger::console("the board rebooted after login"),
                        EndedBy::Reboot,
                        0,
                    )
                } else {
                    (
                        Trigger::console("the board reset before login"),
                        EndedBy::Reset,
                        resets + 1,
                    )
                };
                self.start(trigger, ended, resets, settings);
                changed.push(old);
                let b = self.boots.back_mut().expect("just started");
                b.bytes += line_bytes as u64;
                b.last_byte = Some(now);
                b.transcript.push(&moved);
            }
            (false, None) => {}
        }
        let Some(b) = self.boots.back_mut() else {
            return;
        };
        b.banners.push(idx);
        if !b.has(s) {
            let at_ms = b.at_ms(now);
            b.stages.push(StageSeen {
                stage: s,
                at_ms,
                line: shown(text),
            });
        }
    }
}

/// Records fault `k` unless the same kind was recorded within the last
/// [`SAME_FAULT_LINES`] lines (one Oops prints several matching lines).
fn fault(b: &mut Boot, k: FaultKind, at_ms: u64, text: &str) {
    let line = b.lines;
    if let Some((_, last)) = b.last_fault_line.iter_mut().find(|(x, _)| *x == k) {
        let near = line.saturating_sub(*last) <= SAME_FAULT_LINES && k != FaultKind::Reset;
        *last = line;
        if near {
            return;
        }
    } else {
        b.last_fault_line.push((k, line));
    }
    if b.faults.len() >= MAX_FAULTS {
        b.faults_dropped += 1;
        return;
    }
    b.faults.push(FaultSeen {
        kind: k,
        at_ms,
        line: shown(text),
    });
}

#[cfg(test)]
mod tests;
