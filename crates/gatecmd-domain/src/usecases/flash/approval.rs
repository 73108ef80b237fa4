//! A flash held for a person's yes. The approver sees each file's SHA-256, taken once,
//! through the very open file the engine will read; the yes covers those bytes. After it,
//! the files are not read again: each one's stamp (device, inode, size, modification and
//! change times, from `fstat`) is compared with the stamp taken around the hash. Every
//! write to a file (`write`, `truncate`, a first write through a mapping) sets its change
//! time, which no caller can set back; so that a write in the same clock tick as the last
//! change cannot hide, a file changed within [`SETTLE`] is hashed only once it has been
//! still that long. The flash then names the files by these hashes instead of taking its
//! own (docs/DECISIONS.md: one hash per call).

use std::future::Future;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gatecmd_core::refusal::Refusal;

use super::request::{Ask, Files, Refused};
use crate::approvals::{FileDigest, NewRequest};
use crate::config::ApprovalRule;
use crate::flash::{Known, OpenFile};
use crate::locks::{LeaseId, LockKey};
use crate::state::AppState;

/// How long a file must have been still (no change to its content or metadata) before it
/// is hashed for an approval: more than the coarsest timestamp of the file systems a
/// file root may be on (1 s on ext4 with small inodes, 2 s on FAT).
pub const SETTLE: Duration = Duration::from_millis(2100);
/// How many times a file still changing is waited for before the flash is refused.
const SETTLE_TRIES: u32 = 5;

/// The surface's round trip for an approval (an MCP call waits in the call, with progress).
pub trait Approve {
    /// Holds the call until a person decides `request`, made under the caller's `lease`
    /// on `key` (the request ends if the lease does): `Ok` with the request's id (`apr-N`,
    /// which the flash's audit line names) for a yes, else the refusal the decision is.
    fn approve(
        &self,
        request: NewRequest,
        key: LockKey,
        lease: Option<LeaseId>,
    ) -> impl Future<Output = Result<String, Refusal>> + Send;
}

/// What identifies a file's content without reading it: any write changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// The stamp of the open file `f` (`fstat`).
    pub fn of(f: &std::fs::File) -> std::io::Result<Stamp> {
        let m = f.metadata()?;
        Ok(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    /// How long ago the file last changed (zero when its change time is ahead of the
    /// clock).
    fn still_for(&self) -> Duration {
        let changed = UNIX_EPOCH
            + Duration::new(
                self.ctime.0.max(0) as u64,
                self.ctime.1.clamp(0, 999_999_999) as u32,
            );
        SystemTime::now()
            .duration_since(changed)
            .unwrap_or(Duration::ZERO)
    }
}

/// The files as the approver sees them: digests, and the stamps that stand for them.
pub(super) struct Hashed {
    digests: Vec<FileDigest>,
    stamps: Vec<Stamp>,
}

/// Hashes each file once, after it has been still for [`SETTLE`]; refused when one
/// cannot be read or changed while it was hashed.
pub(super) async fn hash(files: &Files) -> Result<Hashed, Refused> {
    let mut out = Hashed {
        digests: Vec::new(),
        stamps: Vec::new(),
    };
    for f in files.iter() {
        let path = f.path.display().to_string();
        let before = settled(f, &path).await?;
        let dup = f.file.try_clone().map_err(|e| Refused::Unhashed {
            path: path.clone(),
            error: e.to_string(),
            reopen: true,
        })?;
        let digest = tokio::task::spawn_blocking(move || {
            crate::flash::hash::counted(&dup);
            crate::approvals::files::digest_fd(dup.as_fd())
        })
        .await;
        let unhashed = |error: String| Refused::Unhashed {
            path: path.clone(),
            error,
            reopen: false,
        };
        let (sha256, size) = match digest {
            Ok(Ok(Some(d))) => d,
            Ok(Ok(None)) => return Err(unhashed("it is not a regular file".into())),
            Ok(Err(e)) => return Err(unhashed(e.to_string())),
            Err(e) => return Err(unhashed(e.to_string())),
        };
        let after = Stamp::of(&f.file).map_err(|e| unhashed(e.to_string()))?;
        if after != before || size != after.size {
            return Err(Refused::ChangedSinceApproval {
                why: format!("{path} changed while it was hashed for the approval"),
            });
        }
        out.digests.push(FileDigest { path, sha256, size });
        out.stamps.push(after);
    }
    Ok(out)
}

/// The file's stamp once it has been still for [`SETTLE`].
async fn settled(f: &OpenFile, path: &str) -> Result<Stamp, Refused> {
    for _ in 0..SETTLE_TRIES {
        let s = Stamp::of(&f.file).map_err(|e| Refused::Unhashed {
            path: path.to_string(),
            error: e.to_string(),
            reopen: false,
        })?;
        let still = s.still_for();
        if still >= SETTLE {
            return Ok(s);
        }
        tokio::time::sleep(SETTLE - still).await;
    }
    Err(Refused::ChangedSinceApproval {
        why: format!(
            "{path} is being written (it changed again within {} ms, {SETTLE_TRIES} times)",
            SETTLE.as_millis()
        ),
    })
}

/// The request the approver sees.
pub(super) fn request(
    state: &AppState,
    ask: &Ask,
    rule: &ApprovalRule,
    files: &Files,
    hashed: &Hashed,
    key: &LockKey,
) -> NewRequest {
    let mut what = format!("{} {} {}", ask.tool, ask.board, files.image.path.display());
    for (name, f) in [("bmap", &files.bmap), ("loader", &files.loader)] {
        if let Some(f) = f {
            what.push_str(&format!(" {name} {}", f.path.display()));
        }
    }
    if let Some(p) = &files.usbplug {
        what.push_str(&format!(
            " ddr {} usbplug {}",
            p.ddr.path.display(),
            p.usbplug.path.display()
        ));
    }
    NewRequest {
        client: ask.client.clone(),
        note: ask.note.clone(),
        tool: ask.tool.into(),
        what,
        argv: None,
        board: Some(ask.board.clone()),
        holder: holder(state, key),
        files: hashed.digests.clone(),
        rule: rule.describe(),
        approvers: rule.by.clone(),
        timeout: rule.timeout,
        job: None,
    }
}

/// Who holds the board's lease now (or runs on it), for the approver's eyes.
fn holder(state: &AppState, key: &LockKey) -> Option<String> {
    let s = state.locks.key_state(key)?;
    s.lease
        .map(|l| l.holder.0)
        .or_else(|| s.running.map(|r| r.client.0))
}

/// The surface's round trip, under the caller's lease on the board.
pub(super) async fn ask(
    ask: &Ask,
    approve: &impl Approve,
    request: NewRequest,
    key: LockKey,
) -> Result<String, Refused> {
    let lease = ask.lease.clone().map(LeaseId);
    approve
        .approve(request, key, lease)
        .await
        .map_err(Refused::Approval)
}

/// After the yes: each file's stamp as it was when hashed, or the refusal naming the first
/// that changed. The hashes, for the flash to name the files by.
pub(super) fn unchanged(files: &Files, hashed: Hashed) -> Result<Known, Refused> {
    for ((f, d), was) in files.iter().zip(&hashed.digests).zip(&hashed.stamps) {
        let changed = |now: String| Refused::ChangedSinceApproval {
            why: format!(
                "{} changed since it was approved: SHA-256 {} ({} bytes) approved; {now}",
                d.path, d.sha256, d.size
            ),
        };
        match Stamp::of(&f.file) {
            Ok(now) if now == *was => {}
            Ok(now) => {
                return Err(changed(format!(
                    "it has been written to since ({} bytes now)",
                    now.size
                )));
            }
            Err(e) => return Err(changed(format!("it cannot be read again: {e}"))),
        }
    }
    let mut digests = hashed.digests.into_iter().map(|d| d.sha256);
    let image = digests.next();
    let bmap = files.bmap.as_ref().and_then(|_| digests.next());
    let loader = files.loader.as_ref().and_then(|_| digests.next());
    let usbplug = files
        .usbplug
        .as_ref()
        .and_then(|_| Some((digests.next()?, digests.next()?)));
    Ok(Known {
        image,
        bmap,
        loader,
        usbplug,
    })
}
