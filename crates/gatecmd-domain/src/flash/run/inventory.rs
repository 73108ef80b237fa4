//! The input files as the result and the audit name them: path, size, SHA-256. The
//! SHA-256s are taken beside the flash (the loader and the bmap at once, the image once
//! its check says whether it needs one) and joined at the end, off the runtime's threads.

use std::fs::File;

use super::context::Run;
use crate::flash::hash::FileHash;
use crate::flash::input::OpenFile;
use crate::flash::outcome::FileFacts;
use crate::flash::step::Step;

/// The files' facts and the hashes running beside the flash.
pub(super) struct Inventory {
    image_dup: Option<File>,
    known_image: Option<String>,
    pub image_path: String,
    pub image_bytes: u64,
    image_hash: Option<FileHash>,
    /// Taken by the loader phase, which names the loader it sends.
    pub loader_hash: Option<FileHash>,
    bmap_hash: Option<FileHash>,
    bmap_facts: Option<FileFacts>,
}

/// The SHA-256s joined at the end.
pub(super) struct Hashed {
    pub image: Option<String>,
    pub bmap: Option<FileFacts>,
}

impl Inventory {
    /// Starts hashing the loader and the bmap (unless `known` already names them).
    pub fn start(
        image: &OpenFile,
        bmap: Option<&OpenFile>,
        loader: Option<&OpenFile>,
        known: &super::inputs::Known,
    ) -> Inventory {
        Inventory {
            image_dup: image.file.try_clone().ok(),
            known_image: known.image.clone(),
            image_path: image.path.display().to_string(),
            image_bytes: image.file.metadata().map(|m| m.len()).unwrap_or(0),
            image_hash: None,
            loader_hash: loader.map(|l| FileHash::known_or_spawn(known.loader.clone(), &l.file)),
            bmap_hash: bmap.map(|b| FileHash::known_or_spawn(known.bmap.clone(), &b.file)),
            bmap_facts: bmap.map(|b| file_facts(b, None)),
        }
    }

    /// Starts hashing the image, unless the bmap's checked checksums name its bytes.
    pub fn hash_image(&mut self, named_by_bmap: bool) {
        let dup = self.image_dup.take();
        self.image_hash = match (&dup, named_by_bmap) {
            (Some(f), false) => Some(FileHash::known_or_spawn(self.known_image.take(), f)),
            _ => None,
        };
    }

    /// The `hash_files` step: joined off the runtime's threads (on a slow host the hashes
    /// may still be running; what the flash did not hide of them is a step of its own).
    pub async fn join(self, run: &mut Run<'_>) -> Hashed {
        let t = run.started(Step::HashFiles);
        let (image_hash, bmap_hash) = (self.image_hash, self.bmap_hash);
        let pending = image_hash.as_ref().map(FileHash::taken_before);
        let (image_sha, bmap_sha) = tokio::task::spawn_blocking(move || {
            (
                image_hash.and_then(FileHash::finish),
                bmap_hash.and_then(FileHash::finish),
            )
        })
        .await
        .unwrap_or((None, None));
        run.done(
            Step::HashFiles,
            t,
            if pending == Some(true) {
                "the image's SHA-256 was taken for the approval, before the flash".into()
            } else if pending.is_some() {
                "the image's SHA-256, taken beside the flash, finished".into()
            } else {
                "no image hash to wait for: the bmap's checked checksums name the bytes written"
                    .into()
            },
        );
        Hashed {
            image: image_sha,
            bmap: self.bmap_facts.map(|b| FileFacts {
                sha256: bmap_sha,
                ..b
            }),
        }
    }
}

/// A plain file's facts (no image layout).
pub(super) fn file_facts(f: &OpenFile, sha256: Option<String>) -> FileFacts {
    FileFacts {
        path: f.path.display().to_string(),
        bytes: f.file.metadata().map(|m| m.len()).unwrap_or(0),
        sha256,
        compression: None,
        layout: None,
        logical_bytes: None,
        mapped_bytes: None,
    }
}
