//! What earlier flashes found of a loader this server sent from MaskROM — from which LBA
//! its reads stop showing what the flash holds, and the largest transfer it took — kept in
//! `loaders.json` in the journal directory, **per board and loader SHA-256**.
//!
//! Per board, not per loader alone (issue 46): a loader's reads are found unsound by one
//! board's probe, and a board whose own image write-protects its eMMC, or whose flash
//! answers oddly, would otherwise strip verification from every later flash of every
//! board with that loader. A fact learnt on board A lowers only board A's verification,
//! and the flash that uses it says so (its `verify` step: "known from an earlier flash of
//! this board with this loader"). A file in the earlier layout (keyed by SHA-256 alone) is
//! not read: the next flash of each board probes again, which costs it a probe or a stall,
//! never a verification.

use std::path::Path;

/// The file in the journal directory.
pub const LOADER_READS: &str = "loaders.json";

/// What earlier flashes of one board found of one loader.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LoaderMemory {
    /// The LBA from which its reads do not show what the flash holds.
    pub reads_unsound_from_lba: Option<u64>,
    /// The largest transfer it took (after a larger one stalled).
    pub max_transfer_blocks: Option<u32>,
}

/// A fact to remember.
#[derive(Debug, Clone, Copy)]
pub enum Fact {
    ReadsUnsoundFromLba(u64),
    MaxTransferBlocks(u64),
}

impl Fact {
    fn key_value(self) -> (&'static str, u64) {
        match self {
            Fact::ReadsUnsoundFromLba(v) => ("reads_unsound_from_lba", v),
            Fact::MaxTransferBlocks(v) => ("max_transfer_blocks", v),
        }
    }
}

/// The key of a board's facts: `boards` → board name → loader SHA-256.
const BOARDS: &str = "boards";

impl LoaderMemory {
    /// What is remembered of `sha` on `board` (nothing when the file is absent or bad).
    pub fn load(dir: &Path, board: &str, sha: &str) -> LoaderMemory {
        let v: Option<serde_json::Value> = std::fs::read_to_string(dir.join(LOADER_READS))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let field = |k: &str| {
            v.as_ref()
                .and_then(|v| v.get(BOARDS)?.get(board)?.get(sha)?.get(k)?.as_u64())
        };
        LoaderMemory {
            reads_unsound_from_lba: field("reads_unsound_from_lba"),
            max_transfer_blocks: field("max_transfer_blocks").and_then(|b| u32::try_from(b).ok()),
        }
    }

    /// Remembers `fact` of `sha` on `board` (owner-only file, replaced whole; a failure
    /// only costs the next flash a probe or a stall, so it is not an error of this one).
    pub fn remember(dir: &Path, board: &str, sha: &str, fact: Fact) {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let (key, value) = fact.key_value();
        let path = dir.join(LOADER_READS);
        let mut v: serde_json::Value = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .filter(serde_json::Value::is_object)
            .unwrap_or_else(|| serde_json::json!({}));
        for (parent, child) in [
            (vec![], BOARDS),
            (vec![BOARDS], board),
            (vec![BOARDS, board], sha),
        ] {
            let mut at = &mut v;
            for p in parent {
                at = &mut at[p];
            }
            if !at[child].is_object() {
                at[child] = serde_json::json!({});
            }
        }
        v[BOARDS][board][sha][key] = serde_json::json!(value);
        let tmp = dir.join(format!("{LOADER_READS}.tmp.{}", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(v.to_string().as_bytes())
                    .and_then(|()| f.sync_all())
            })
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(path = %path.display(), error = %e, "a loader's fact was not remembered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_boards_quirk_lowers_no_other_boards_verification() {
        let d = tempfile::tempdir().expect("tempdir");
        let sha = "ab".repeat(32);
        LoaderMemory::remember(d.path(), "vb1", &sha, Fact::ReadsUnsoundFromLba(65536));
        LoaderMemory::remember(d.path(), "vb1", &sha, Fact::MaxTransferBlocks(128));
        let vb1 = LoaderMemory::load(d.path(), "vb1", &sha);
        assert_eq!(vb1.reads_unsound_from_lba, Some(65536));
        assert_eq!(vb1.max_transfer_blocks, Some(128));
        // The same loader on another board: nothing known, so it is verified in full.
        assert_eq!(
            LoaderMemory::load(d.path(), "vb2", &sha),
            LoaderMemory::default()
        );
        // Another loader on the same board: nothing either.
        assert_eq!(
            LoaderMemory::load(d.path(), "vb1", &"cd".repeat(32)),
            LoaderMemory::default()
        );
        // A file of the earlier layout (keyed by SHA-256 alone) lowers nothing.
        std::fs::write(
            d.path().join(LOADER_READS),
            format!("{{\"{sha}\": {{\"reads_unsound_from_lba\": 1}}}}"),
        )
        .expect("write");
        assert_eq!(
            LoaderMemory::load(d.path(), "vb1", &sha),
            LoaderMemory::default()
        );
    }
}
