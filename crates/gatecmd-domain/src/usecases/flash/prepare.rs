//! A flash request checked and what it runs with taken, in the order a refusal is met:
//! the policy (flashing on, this client, this board), the time limit, `wait_for`, the
//! client's command slot and the leased board (and its console when `wait_for` needs one),
//! the files beneath the roots and the loader against `flash.loaders`, then the approval
//! when a rule holds. The configuration is read once (once more after an approval: a reload
//! while a person decided may have changed it).

use std::sync::Arc;
use std::time::Duration;

use gatecmd_core::sanitizer::{FileArgError, FileKind, FileRules, open_file_arg};
use regex::{Regex, RegexBuilder};

use super::approval::{self, Approve};
use super::request::{Ask, Files, PairNames, Refused};
use crate::audit::{FlashOutcome, FlashRecord};
use crate::config::{BoardConfig, Config, Gated, GatedTool, approval_rule};
use crate::flash::{Known, OpenFile, Pair, Step};
use crate::limits::permits::Permit;
use crate::state::AppState;
use crate::usecases::take::{Caller, Taken, take_with_slot};

/// Default limit of one flash, everything included.
pub const DEFAULT_TIMEOUT_SECS: u64 = 1800;
/// Longest `wait_for` pattern, and the compiled regex's size limit (as `console_read`).
const MAX_PATTERN_LEN: usize = 256;
const REGEX_SIZE_LIMIT: usize = 1 << 16;

/// A request checked, with what its job runs with.
pub struct Prepared {
    pub(super) config: Arc<Config>,
    pub(super) secs: u64,
    pub(super) wait_for: Option<Regex>,
    /// One of the client's command slots, held until the flash ends.
    pub(super) slot: Permit,
    pub(super) taken: Taken,
    pub(super) files: Files,
    /// What an approval hashed (nothing without one).
    pub(super) known: Known,
    /// The approval request that said yes (`apr-N`), named by the flash's audit line.
    pub(super) approval: Option<String>,
}

/// Checks `ask` and takes what it runs with; when an `approvals:` rule holds, holds it
/// through `approve` (nothing held meanwhile) and checks and takes again after the yes.
pub async fn prepare(
    state: &AppState,
    ask: &Ask,
    approve: &impl Approve,
) -> Result<Prepared, Refused> {
    let config = state.config();
    policy(&config, ask, std::iter::empty())?;
    let max = config.limits.max_timeout_secs;
    let secs = ask.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS.min(max));
    if secs == 0 || secs > max {
        return Err(Refused::TimeoutOutOfRange { given: secs, max });
    }
    let wait_for = ask.wait_for.as_deref().map(pattern).transpose()?;
    let (slot, taken) = take(state, &config, ask, wait_for.is_some()).await?;
    let open = |what, value: &str| open_input(&config, what, value);
    let files = Files {
        image: open("image", &ask.image)?,
        bmap: ask.bmap.as_deref().map(|b| open("bmap", b)).transpose()?,
        loader: ask
            .loader
            .as_deref()
            .map(|l| open("loader", l))
            .transpose()?,
        usbplug: pair_names(ask, &taken.board)
            .map(|p| {
                Ok::<_, Refused>(Pair {
                    ddr: open("loader.ddr", &p.ddr)?,
                    usbplug: open("loader.usbplug", &p.usbplug)?,
                })
            })
            .transpose()?,
    };
    policy(&config, ask, files.loaders())?;
    let gated = Gated::Tool {
        tool: GatedTool::FlashBoard,
        action: "flash",
    };
    let Some(rule) = approval_rule(&config.approvals, gated, &[&taken.board]).cloned() else {
        return Ok(Prepared {
            config,
            secs,
            wait_for,
            slot,
            taken,
            files,
            known: Known::default(),
            approval: None,
        });
    };
    // Every check that can refuse has passed and nothing was done to the board. As for
    // every approval, nothing is held while a person decides (the board's key and the
    // command slot go back; the lease stays the caller's); after the yes both are taken
    // again and only the bytes approved are flashed.
    let hashed = approval::hash(&files).await?;
    let key = taken.key.clone();
    let request = approval::request(state, ask, &rule, &files, &hashed, &key);
    drop((slot, taken));
    let approved = approval::ask(ask, approve, request, key).await?;
    // A reload while it waited may have taken the permission away.
    let config = state.config();
    policy(&config, ask, files.loaders())?;
    let (slot, taken) = take(state, &config, ask, wait_for.is_some()).await?;
    let known = approval::unchanged(&files, hashed)?;
    Ok(Prepared {
        config,
        secs,
        wait_for,
        slot,
        taken,
        files,
        known,
        approval: Some(approved),
    })
}

/// The audit line of a refused flash, with the surface's wording of the refusal.
pub fn audit_refused(state: &AppState, ask: &Ask, reason: &str, message: &str) {
    state.audit.record(&FlashRecord::<Step> {
        client: &ask.client,
        board: &ask.board,
        image: &ask.image,
        outcome: FlashOutcome::Refused { reason, message },
    });
}

/// The DDR + usbplug pair of this flash: the call's, or else the board's default
/// (`boards[].usbplug`), which then also serves to verify whole what a packed loader's
/// reads could not.
fn pair_names(ask: &Ask, board: &BoardConfig) -> Option<PairNames> {
    ask.usbplug.clone().or_else(|| {
        board.usbplug.as_ref().map(|p| PairNames {
            ddr: p.ddr.display().to_string(),
            usbplug: p.usbplug.display().to_string(),
        })
    })
}

/// What `flash.` allows: flashing at all, this client, this board, these loader files
/// (a packed loader, a DDR blob and a usbplug alike).
fn policy<'a>(
    config: &Config,
    ask: &Ask,
    loaders: impl Iterator<Item = &'a OpenFile>,
) -> Result<(), Refused> {
    let policy = &config.flash;
    if !policy.enabled {
        return Err(Refused::Disabled);
    }
    if !policy.allows_client(&ask.client) {
        return Err(Refused::ClientNotAllowed);
    }
    // The board's config is looked up only to word a refusal (flash.boards names only
    // configured boards): a call that passes scans it once, when the board is taken.
    if !policy.allows_board(&ask.board) && config.board(&ask.board).is_some() {
        let allowed = policy.boards.iter().flatten().cloned().collect();
        return Err(Refused::BoardNotAllowed { allowed });
    }
    // The board's own `loaders`, else `flash.loaders`; the refusal names the files. A
    // DDR + usbplug pair is two files, each held to it.
    let allowed_list = match config.board(&ask.board) {
        Some(b) => b.loaders(policy),
        None => policy.loaders.as_deref(),
    };
    let mut refused = loaders.filter(|l| !crate::config::loader_in(allowed_list, &l.path));
    if let Some(l) = refused.next() {
        let allowed = crate::flash::allowed_loader_files(allowed_list).unwrap_or_default();
        return Err(Refused::LoaderNotAllowed {
            path: l.path.display().to_string(),
            allowed,
        });
    }
    Ok(())
}

fn pattern(p: &str) -> Result<Regex, Refused> {
    if p.is_empty() || p.len() > MAX_PATTERN_LEN {
        return Err(Refused::BadPattern {
            why: format!("it must be 1 to {MAX_PATTERN_LEN} bytes"),
        });
    }
    RegexBuilder::new(p)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| Refused::BadPattern { why: e.to_string() })
}

/// One of the client's command slots (a flash counts as a command), then the board's key
/// under the caller's lease, with its console when `wait_for` needs one.
async fn take(
    state: &AppState,
    config: &Config,
    ask: &Ask,
    needs_console: bool,
) -> Result<(Permit, Taken), Refused> {
    let caller = Caller {
        client: &ask.client,
        session: ask.session.clone(),
        lease: ask.lease.as_deref(),
        tool: ask.tool,
    };
    let (slot, taken) = take_with_slot(state, config, caller, &ask.board).await?;
    if needs_console && taken.console.is_none() {
        return Err(Refused::NoConsole);
    }
    Ok((slot, taken))
}

/// An input opened beneath the file roots, as the open file the engine reads.
fn open_input(config: &Config, what: &'static str, value: &str) -> Result<OpenFile, Refused> {
    let refused = |error| Refused::File {
        what,
        value: value.to_string(),
        error,
    };
    let rules = FileRules {
        roots: &config.file_roots,
        allow_hardlinked_inputs: config.allow_hardlinked_inputs,
    };
    let opened = open_file_arg(value, FileKind::Input, rules).map_err(refused)?;
    let fd = (opened.fd.try_clone())
        .map_err(|e| refused(FileArgError::Descriptor { why: e.to_string() }))?;
    Ok(OpenFile {
        file: std::fs::File::from(fd),
        path: opened.real,
    })
}

impl Prepared {
    /// The flash's time limit.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.secs)
    }
}
