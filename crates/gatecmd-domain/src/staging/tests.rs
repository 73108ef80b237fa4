//! Hostile paths and layouts against the staging operations: nothing may be read or
//! written outside the root.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::upload::{self, Chunk};
use super::*;
use crate::config::StagingLimits;
use gatecmd_core::beneath::RelPath;

struct Bench {
    _t: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    roots: Vec<PathBuf>,
    staging: Staging,
}

fn bench() -> Bench {
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().join("root");
    let outside = t.path().join("outside");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(outside.join("secret"), b"top secret").expect("write");
    Bench {
        roots: vec![root.clone()],
        _t: t,
        root,
        outside,
        staging: Staging::default(),
    }
}

fn limits() -> StagingLimits {
    StagingLimits {
        max_file_bytes: 1 << 20,
        max_chunk_bytes: 1 << 16,
        quota_bytes_per_root: 1 << 21,
        ..StagingLimits::default()
    }
}

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

impl Bench {
    fn target(&self, p: &str) -> Result<Target, StagingError> {
        resolve(&self.roots, None, p)
    }

    fn put(
        &self,
        p: &str,
        offset: u64,
        data: &[u8],
        sha256: Option<&str>,
    ) -> Result<upload::Written, StagingError> {
        self.put_with(p, offset, data, false, sha256, limits())
    }

    fn put_with(
        &self,
        p: &str,
        offset: u64,
        data: &[u8],
        truncate: bool,
        sha256: Option<&str>,
        l: StagingLimits,
    ) -> Result<upload::Written, StagingError> {
        let t = self.target(p)?;
        upload::write(
            &self.staging,
            &l,
            Duration::from_secs(3600),
            &t,
            Chunk {
                offset,
                data: data.to_vec(),
                truncate,
                finish: sha256.map(|s| upload::Finish::Expect(s.to_string())),
            },
        )
    }

    /// Every file outside the root is as it was.
    fn outside_untouched(&self) {
        let names: Vec<_> = std::fs::read_dir(&self.outside)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["secret"], "nothing new outside the root");
        assert_eq!(
            std::fs::read(self.outside.join("secret")).expect("read"),
            b"top secret"
        );
    }
}

#[test]
fn parent_dir_and_outside_absolute_paths_are_refused() {
    let b = bench();
    for p in ["../outside/secret", "sub/../../outside/secret", "sub/.."] {
        assert!(
            matches!(b.target(p), Err(StagingError::BadPath { .. })),
            "{p}"
        );
    }
    let abs = b.outside.join("secret");
    assert!(matches!(
        b.target(abs.to_str().expect("utf8")),
        Err(StagingError::OutsideRoots { .. })
    ));
    assert!(matches!(
        b.target("/etc/passwd"),
        Err(StagingError::OutsideRoots { .. })
    ));
    // An absolute path inside the root is fine.
    let inside = b.root.join("sub/x");
    let t = b.target(inside.to_str().expect("utf8")).expect("inside");
    assert_eq!(t.relative(), "sub/x");
    b.outside_untouched();
}

#[test]
fn root_selection_by_index_or_path() {
    let b = bench();
    let roots = vec![b.root.clone(), b.outside.clone()];
    let t = resolve(&roots, Some(&RootSel::Index(1)), "secret").expect("by index");
    assert_eq!(t.root, b.outside);
    let t = resolve(
        &roots,
        Some(&RootSel::Path(b.outside.display().to_string())),
        "",
    )
    .expect("by path");
    assert_eq!((t.index, t.relative().as_str()), (1, "."));
    assert!(matches!(
        resolve(&roots, Some(&RootSel::Index(2)), ""),
        Err(StagingError::UnknownRoot { .. })
    ));
    // An absolute path must lie in the chosen root.
    let p = b.root.join("sub");
    assert!(matches!(
        resolve(&roots, Some(&RootSel::Index(1)), p.to_str().expect("utf8")),
        Err(StagingError::OutsideRoots { .. })
    ));
}

#[test]
fn symlinked_file_and_directory_pointing_out_are_refused() {
    let b = bench();
    symlink(b.outside.join("secret"), b.root.join("link")).expect("symlink");
    symlink(&b.outside, b.root.join("dirlink")).expect("symlink");
    // Reading.
    let e = stat(&b.target("link").expect("t")).expect_err("file symlink");
    assert!(matches!(e, StagingError::Symlink { .. }), "{e}");
    let e = stat(&b.target("dirlink/secret").expect("t")).expect_err("dir symlink");
    assert!(matches!(e, StagingError::Symlink { .. }), "{e}");
    let e = list(&b.target("dirlink").expect("t")).expect_err("list through symlink");
    assert!(matches!(e, StagingError::Symlink { .. }), "{e}");
    // Writing.
    let e = b
        .put("dirlink/new", 0, b"x", Some(&sha(b"x")))
        .expect_err("write through dir symlink");
    assert!(matches!(e, StagingError::Symlink { .. }), "{e}");
    let e = b
        .put("dirlink/deeper/new", 0, b"x", None)
        .expect_err("mkdir through dir symlink");
    assert!(matches!(e, StagingError::Symlink { .. }), "{e}");
    // Writing over a symlink replaces the link (in the root), never the target.
    b.put("link", 0, b"mine", Some(&sha(b"mine")))
        .expect("replace the link");
    assert_eq!(std::fs::read(b.root.join("link")).expect("read"), b"mine");
    assert!(
        !b.root
            .join("link")
            .symlink_metadata()
            .expect("meta")
            .file_type()
            .is_symlink()
    );
    // Removing.
    symlink(b.outside.join("secret"), b.root.join("link2")).expect("symlink");
    let e = remove(&b.staging, &b.target("link2").expect("t")).expect_err("remove symlink");
    assert!(
        matches!(
            e,
            StagingError::NotRegular {
                kind: "symlink",
                ..
            }
        ),
        "{e}"
    );
    let e =
        remove(&b.staging, &b.target("dirlink/secret").expect("t")).expect_err("remove through");
    assert!(matches!(e, StagingError::Symlink { .. }), "{e}");
    // The listing shows the links as links.
    let l = list(&b.target("").expect("t")).expect("list");
    let kinds: Vec<_> = l
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.kind.name()))
        .collect();
    assert!(kinds.contains(&("dirlink", "symlink")), "{kinds:?}");
    b.outside_untouched();
}

#[test]
fn symlink_swapped_in_between_chunks_is_refused() {
    let b = bench();
    b.put("sub/img", 0, b"first ", None).expect("chunk 1");
    // Swap the directory for a symlink to the outside, with a same-named temp file there.
    std::fs::rename(b.root.join("sub"), b.root.join("sub.orig")).expect("rename");
    symlink(&b.outside, b.root.join("sub")).expect("symlink");
    let e = b
        .put("sub/img", 6, b"second", None)
        .expect_err("chunk 2 through symlink");
    assert!(matches!(e, StagingError::Symlink { .. }), "{e}");
    b.outside_untouched();
    // Swap the temporary file itself for a symlink to a file outside.
    std::fs::remove_file(b.root.join("sub")).expect("rm link");
    std::fs::rename(b.root.join("sub.orig"), b.root.join("sub")).expect("restore");
    let temp = b.root.join("sub/.img.gatecmd-upload");
    std::fs::remove_file(&temp).expect("rm temp");
    symlink(b.outside.join("secret"), &temp).expect("symlink temp");
    let e = b
        .put("sub/img", 6, b"second", None)
        .expect_err("temp is a symlink");
    assert!(
        matches!(
            e,
            StagingError::NotRegular {
                kind: "symlink",
                ..
            }
        ),
        "{e}"
    );
    // A new start removes the symlink (the name only: its target is not touched, issue 37
    // finding 8) and writes a fresh private file.
    let w = b
        .put("sub/img", 0, b"again", None)
        .expect("restart over a symlink");
    assert_eq!(w.expired, [temp.display().to_string()]);
    let meta = std::fs::symlink_metadata(&temp).expect("temp");
    assert!(meta.file_type().is_file(), "{meta:?}");
    assert_eq!(std::fs::read(&temp).expect("temp"), b"again");
    b.outside_untouched();
}

#[test]
fn hard_link_under_the_temporary_name_is_not_written_through() {
    let b = bench();
    std::fs::hard_link(b.outside.join("secret"), b.root.join(".img.gatecmd-upload")).expect("link");
    let e = b
        .put_with("img", 0, b"evil", true, None, limits())
        .expect_err("hard link");
    assert!(matches!(e, StagingError::HardLinked { .. }), "{e}");
    b.outside_untouched();
}

#[test]
fn fifo_and_path_through_a_file_are_refused() {
    let b = bench();
    nix::unistd::mkfifo(
        &b.root.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("mkfifo");
    // stat_file must not block on the FIFO nor read it.
    let e = stat(&b.target("fifo").expect("t")).expect_err("fifo");
    assert!(
        matches!(e, StagingError::NotRegular { kind: "fifo", .. }),
        "{e}"
    );
    let e = remove(&b.staging, &b.target("fifo").expect("t")).expect_err("fifo");
    assert!(
        matches!(e, StagingError::NotRegular { kind: "fifo", .. }),
        "{e}"
    );
    // A FIFO under the temporary name is not written.
    nix::unistd::mkfifo(
        &b.root.join(".up.gatecmd-upload"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("mkfifo");
    // A FIFO under the temporary name is not written: continuing is refused, a new start
    // removes it (never opening it) and writes a regular file.
    let e = b.put("up", 1, b"x", None).expect_err("fifo temp");
    assert!(
        matches!(e, StagingError::NotRegular { kind: "fifo", .. }),
        "{e}"
    );
    b.put("up", 0, b"x", None).expect("fifo cleared");
    assert!(
        std::fs::symlink_metadata(b.root.join(".up.gatecmd-upload"))
            .expect("temp")
            .file_type()
            .is_file()
    );
    // /dev/null through an absolute path is outside; a device node is refused by kind.
    std::fs::write(b.root.join("plain"), b"p").expect("write");
    let e = stat(&b.target("plain/x").expect("t")).expect_err("through a file");
    assert!(matches!(e, StagingError::NotADirectory { .. }), "{e}");
    let e = b
        .put("plain/x", 0, b"x", None)
        .expect_err("write through a file");
    assert!(matches!(e, StagingError::NotADirectory { .. }), "{e}");
    let l = list(&b.target("").expect("t")).expect("list");
    assert!(
        l.entries
            .iter()
            .any(|e| e.name == "fifo" && e.kind.name() == "fifo")
    );
}

#[test]
fn chunked_upload_is_invisible_until_verified() {
    let b = bench();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut off = 0u64;
    for c in data.chunks(1 << 16) {
        let last = off + c.len() as u64 == data.len() as u64;
        assert!(
            !b.root.join("sub/img").exists(),
            "not visible before the last chunk"
        );
        let w = b
            .put("sub/img", off, c, last.then(|| sha(&data)).as_deref())
            .expect("chunk");
        off = w.size;
        assert_eq!(w.complete, last);
    }
    assert_eq!(std::fs::read(b.root.join("sub/img")).expect("read"), data);
    assert!(!b.root.join("sub/.img.gatecmd-upload").exists());
    let facts = stat(&b.target("sub/img").expect("t")).expect("stat");
    assert_eq!(
        (facts.entry.size, facts.sha256.as_str()),
        (data.len() as u64, sha(&data).as_str())
    );
}

#[test]
fn offsets_restart_and_mismatch() {
    let b = bench();
    let e = b.put("f", 5, b"x", None).expect_err("no upload");
    assert!(matches!(e, StagingError::NoUpload { .. }), "{e}");
    b.put("f", 0, b"hello ", None).expect("start");
    let e = b.put("f", 3, b"x", None).expect_err("wrong offset");
    assert!(
        matches!(e, StagingError::WrongOffset { have: 6, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("offset 6"), "{e}");
    let e = b.put("f", 0, b"again", None).expect_err("in progress");
    assert!(
        matches!(e, StagingError::UploadInProgress { have: 6, .. }),
        "{e}"
    );
    let e = b
        .put_with("f", 6, b"x", true, None, limits())
        .expect_err("truncate needs 0");
    assert!(matches!(e, StagingError::TruncateNeedsZeroOffset(6)), "{e}");
    b.put_with("f", 0, b"new ", true, None, limits())
        .expect("restart");
    // A wrong hash discards the upload and leaves an existing file alone.
    std::fs::write(b.root.join("f"), b"old").expect("write");
    let e = b
        .put("f", 4, b"data", Some(&sha(b"other")))
        .expect_err("mismatch");
    assert!(
        matches!(e, StagingError::HashMismatch { size: 8, .. }),
        "{e}"
    );
    assert_eq!(std::fs::read(b.root.join("f")).expect("read"), b"old");
    assert!(!b.root.join(".f.gatecmd-upload").exists(), "discarded");
    // The reserved name is not writable directly.
    let e = b
        .put(".f.gatecmd-upload", 0, b"x", None)
        .expect_err("reserved");
    assert!(matches!(e, StagingError::ReservedName { .. }), "{e}");
}

#[test]
fn limits_are_enforced() {
    let b = bench();
    let l = StagingLimits {
        max_file_bytes: 10,
        max_chunk_bytes: 8,
        quota_bytes_per_root: 20,
        ..StagingLimits::default()
    };
    let e = b
        .put_with("f", 0, &[0; 9], false, None, l)
        .expect_err("chunk");
    assert!(
        matches!(e, StagingError::ChunkTooLarge { max: 8, .. }),
        "{e}"
    );
    b.put_with("f", 0, &[0; 8], false, None, l)
        .expect("chunk 1");
    let e = b
        .put_with("f", 8, &[0; 3], false, None, l)
        .expect_err("file size");
    assert!(
        matches!(e, StagingError::FileTooLarge { size: 11, max: 10 }),
        "{e}"
    );
    std::fs::write(b.root.join("sub/big"), [0u8; 10]).expect("write");
    let e = b
        .put_with("g", 0, &[0; 3], false, None, l)
        .expect_err("quota");
    assert!(
        matches!(
            e,
            StagingError::QuotaExceeded {
                used: 18,
                would: 21,
                ..
            }
        ),
        "{e}"
    );
    // Restarting an upload frees what it held.
    b.put_with("f", 0, &[0; 2], true, None, l)
        .expect("restart fits");
    assert!(matches!(
        upload::decode_chunk("AAAAAAAAAAAA", 8),
        Err(StagingError::ChunkTooLarge { .. })
    ));
    assert!(matches!(
        upload::decode_chunk("!!", 8),
        Err(StagingError::BadBase64(_))
    ));
    assert_eq!(upload::decode_chunk("aGk=\n", 8), Ok(b"hi".to_vec()));
}

#[test]
fn stale_temporary_files_expire_when_another_upload_starts() {
    let b = bench();
    let old = b.root.join("sub/.old.gatecmd-upload");
    std::fs::write(&old, b"partial").expect("write");
    let t = std::time::SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .expect("open")
        .set_modified(t)
        .expect("mtime");
    let w = b.put("sub/new", 0, b"x", None).expect("start");
    assert_eq!(w.expired, [old.display().to_string()]);
    assert!(!old.exists());
}

#[test]
fn remove_takes_files_only() {
    let b = bench();
    std::fs::write(b.root.join("sub/f"), b"12345").expect("write");
    assert_eq!(remove(&b.staging, &b.target("sub/f").expect("t")), Ok(5));
    let e = remove(&b.staging, &b.target("sub").expect("t")).expect_err("dir");
    assert!(matches!(e, StagingError::IsDirectory { .. }), "{e}");
    let e = remove(&b.staging, &b.target("sub/f").expect("t")).expect_err("gone");
    assert!(matches!(e, StagingError::NotFound { .. }), "{e}");
    b.put("sub/up", 0, b"abc", None).expect("start");
    let e = remove(&b.staging, &b.target("sub/up").expect("t")).expect_err("unfinished");
    assert!(
        e.to_string()
            .contains("unfinished upload of it holds 3 bytes"),
        "{e}"
    );
    assert!(Path::new(&b.root.join("sub")).is_dir());
}

#[test]
fn usage_counts_bytes_and_entries_at_every_depth() {
    let b = bench();
    let r = gatecmd_core::beneath::Dir::open_root(&b.root).expect("root");
    // 600 levels: far past the 32 the count used to stop at, one descriptor at a time.
    let mut d = r.open_dir(&RelPath::default()).expect("dir");
    for _ in 0..600 {
        let one = RelPath::parse(Path::new("d")).expect("rel");
        d = d.create_dirs(&one, 1).expect("mkdir");
    }
    let f = d
        .open_file(
            std::ffi::OsStr::new("deep"),
            nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CREAT,
            0o644,
        )
        .expect("create");
    std::io::Write::write_all(&mut &f, &[7u8; 3000]).expect("write");
    std::fs::write(b.root.join("sub/empty"), b"").expect("write");
    let u = quota::usage(&r).expect("usage");
    // sub, sub/empty, 600 directories, the deep file.
    assert_eq!(
        u,
        quota::Usage {
            bytes: 3000,
            entries: 603
        }
    );
    let l = list(&b.target("").expect("t")).expect("list");
    assert_eq!((l.used_bytes, l.used_entries), (3000, 603));
}

#[test]
fn depth_new_directories_and_entries_are_limited() {
    let b = bench();
    let l = StagingLimits {
        quota_entries_per_root: 12,
        max_depth: 6,
        max_new_dirs_per_call: 3,
        ..limits()
    };
    let put = |p: &str| b.put_with(p, 0, b"", false, Some(&sha(b"")), l);
    // Too deep: refused before anything is created.
    let e = put("a/b/c/d/e/f/g").expect_err("depth");
    assert!(
        matches!(
            e,
            StagingError::TooDeep {
                depth: 7,
                max: 6,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("staging.max_depth"), "{e}");
    assert!(!b.root.join("a").exists());
    // Four new directories in one call: refused, none created.
    let e = put("a/b/c/d/f").expect_err("dirs");
    assert!(
        matches!(
            e,
            StagingError::TooManyNewDirs {
                count: 4,
                max: 3,
                ..
            }
        ),
        "{e}"
    );
    assert!(!b.root.join("a").exists());
    // Three is the limit; the fourth level goes in a second call.
    put("a/b/c/f").expect("three new directories");
    put("a/b/c/d/f").expect("one more");
    // Entries now: sub, a, b, c, d, two files = 7. Zero-length files count.
    for i in 0..5 {
        put(&format!("e{i}")).expect("fits");
    }
    let e = put("e5").expect_err("entry quota");
    assert!(
        matches!(
            e,
            StagingError::EntryQuotaExceeded {
                used: 12,
                would: 13,
                quota: 12,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("staging.quota_entries_per_root"),
        "{e}"
    );
    // Directories count before they are made: a refused call leaves nothing behind.
    std::fs::remove_file(b.root.join("e4")).expect("rm");
    let e = put("x/y").expect_err("two entries, one free");
    assert!(
        matches!(e, StagingError::EntryQuotaExceeded { would: 13, .. }),
        "{e}"
    );
    assert!(!b.root.join("x").exists());
    // Replacing a file and continuing an upload add no entry.
    put("e0").expect("replace");
    b.put_with("e4", 0, b"ab", false, None, l).expect("start");
    b.put_with("e4", 2, b"cd", false, Some(&sha(b"abcd")), l)
        .expect("continue");
}

#[test]
fn an_empty_file_is_refused_when_the_byte_quota_is_spent() {
    let b = bench();
    let l = StagingLimits {
        quota_bytes_per_root: 4,
        ..limits()
    };
    std::fs::write(b.root.join("sub/full"), b"12345").expect("write");
    let e = b
        .put_with("empty", 0, b"", false, Some(&sha(b"")), l)
        .expect_err("over quota");
    assert!(
        matches!(e, StagingError::QuotaExceeded { used: 5, .. }),
        "{e}"
    );
}

/// Issue 37 finding 8: a directory under the reserved temporary name of `disk.img` made
/// every later upload of `disk.img` fail `wrong_file_type`, and nobody could remove it.
/// Now no staging call can make or enter such a directory, and an upload that finds one
/// empty removes it; one with content is refused with what to do.
#[test]
fn a_reserved_name_is_no_directory_and_does_not_block_an_upload() {
    let b = bench();
    let data = b"image".to_vec();
    // Made by a write (the missing directory of the file): refused before anything exists.
    let e = b
        .put(".disk.img.gatecmd-upload/x", 0, &data, Some(&sha(&data)))
        .expect_err("directory under a reserved name");
    assert!(matches!(e, StagingError::ReservedName { .. }), "{e}");
    assert!(!b.root.join(".disk.img.gatecmd-upload").exists());
    for p in [
        "sub/.disk.img.gatecmd-upload/x",
        ".disk.img.gatecmd-upload/deeper/x",
    ] {
        assert!(
            matches!(b.target(p), Err(StagingError::ReservedName { .. })),
            "{p}"
        );
    }
    // Listing it, as a directory, is refused too.
    let t = b
        .target(".disk.img.gatecmd-upload")
        .expect("last component");
    assert!(matches!(list(&t), Err(StagingError::ReservedName { .. })));

    // One that exists anyway (made on the host, or before this fix), empty: the upload
    // removes it and goes on.
    let dir = b.root.join(".disk.img.gatecmd-upload");
    std::fs::create_dir(&dir).expect("mkdir");
    let w = b
        .put("disk.img", 0, &data, Some(&sha(&data)))
        .expect("the empty directory is removed");
    assert!(w.complete);
    assert_eq!(w.expired, [dir.display().to_string()]);
    assert_eq!(std::fs::read(b.root.join("disk.img")).expect("file"), data);

    // With content: refused, naming it and what to do; the content stays.
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("keep"), b"someone's").expect("write");
    let e = b
        .put("disk.img", 0, &data, Some(&sha(&data)))
        .expect_err("a directory with content");
    assert!(
        matches!(&e, StagingError::TempNameTaken { kind: "directory", temp, .. } if *temp == dir.display().to_string()),
        "{e}"
    );
    assert!(e.to_string().contains("ask the operator"), "{e}");
    assert_eq!(std::fs::read(dir.join("keep")).expect("kept"), b"someone's");
}

fn rules(max_per_client: u64, promise_bytes: u64) -> StreamRules {
    StreamRules {
        max_per_client,
        promise_bytes,
    }
}

/// Streamed uploads: one request per file, a bounded number per client, the declared
/// length checked at admission, and what each was promised counted by every other write
/// in the root (at most half the root's quota in all).
#[test]
fn streams_are_admitted_on_their_declared_length() {
    let b = bench();
    let l = StagingLimits {
        quota_bytes_per_root: 1000,
        ..limits()
    };
    let t = b.target("a.img").expect("t");
    let key = b.root.join("a.img");
    let claim = b
        .staging
        .streams
        .claim(&key, &b.root, "vm-a", rules(2, 1000))
        .expect("first");
    // The same file again, by anyone: busy.
    assert_eq!(
        b.staging
            .streams
            .claim(&key, &b.root, "vm-b", rules(2, 1000))
            .expect_err("busy"),
        ClaimRefused::Busy {
            client: "vm-a".into()
        }
    );
    // More than declared fits: refused before a byte is stored.
    let plan = |length| upload::Plan {
        offset: 0,
        restart: false,
        length: Some(length),
    };
    let e = upload::admit(&b.staging, &l, &t, plan(1001), &claim).expect_err("quota");
    assert!(
        matches!(e, StagingError::QuotaExceeded { would: 1001, .. }),
        "{e}"
    );
    let e = upload::admit(
        &b.staging,
        &StagingLimits {
            max_file_bytes: 10,
            ..l
        },
        &t,
        plan(11),
        &claim,
    )
    .expect_err("file size");
    assert!(matches!(e, StagingError::FileTooLarge { .. }), "{e}");
    upload::admit(&b.staging, &l, &t, plan(600), &claim).expect("fits");
    assert!(
        !b.root.join(".a.img.gatecmd-upload").exists(),
        "nothing written yet"
    );
    // Promised: its declared 600 bytes, but never more than half the root's quota.
    assert_eq!(b.staging.streams.reserved_in(&b.root, None), 500);
    // A second stream into the root: the first one's promise counts as used.
    let key2 = b.root.join("b.img");
    let claim2 = b
        .staging
        .streams
        .claim(&key2, &b.root, "vm-a", rules(2, 1000))
        .expect("second");
    let t2 = b.target("b.img").expect("t");
    let e = upload::admit(&b.staging, &l, &t2, plan(600), &claim2).expect_err("promised");
    assert!(
        matches!(e, StagingError::QuotaExceeded { reserved: 500, .. }),
        "{e}"
    );
    // The refusal does not tell what others were promised.
    assert!(!e.to_string().contains("500"), "{e}");
    // The client's third stream: refused whatever the file.
    assert_eq!(
        b.staging
            .streams
            .claim(&b.root.join("c.img"), &b.root, "vm-a", rules(2, 1000))
            .expect_err("too many"),
        ClaimRefused::TooMany { max: 2 }
    );
    // write_file may not cut into a file being received.
    let e = b.put("a.img", 0, b"x", None).expect_err("receiving");
    assert!(matches!(e, StagingError::UploadReceiving { .. }), "{e}");
    // Written pieces are taken off the promise.
    let piece = Chunk {
        offset: 0,
        data: vec![0; 400],
        truncate: false,
        finish: None,
    };
    upload::write_piece(&b.staging, &l, Duration::from_secs(3600), &t, piece, &claim)
        .expect("piece");
    // The first piece was counted and the window renewed: the 200 bytes still declared.
    assert_eq!(b.staging.streams.reserved_in(&b.root, None), 200);
    // A piece beyond the promise is counted again: 400 stored + 700 > 1000.
    let piece = |offset, len| Chunk {
        offset,
        data: vec![0; len],
        truncate: false,
        finish: None,
    };
    let stale = Duration::from_secs(3600);
    let e = upload::write_piece(&b.staging, &l, stale, &t, piece(400, 700), &claim)
        .expect_err("beyond the promise");
    assert!(
        matches!(e, StagingError::QuotaExceeded { would: 1100, .. }),
        "{e}"
    );
    upload::write_piece(&b.staging, &l, stale, &t, piece(400, 200), &claim).expect("promised");
    assert_eq!(b.staging.streams.reserved_in(&b.root, None), 0);
    drop(claim);
    drop(claim2);
    assert!(b.staging.streams.is_empty());
    assert_eq!(b.staging.streams.reserved_in(&b.root, None), 0);
}

/// Issue 46: a promise costs nothing until its bytes arrive, so it is a window. Four
/// header-only streams of one client, each declaring nearly the whole quota, leave the
/// root's other writers their room; the window is renewed as pieces arrive, each renewal
/// counted against the quota.
#[test]
fn declared_lengths_hold_nobody_out() {
    let b = bench();
    let l = StagingLimits {
        quota_bytes_per_root: 10_000,
        max_file_bytes: 10_000,
        ..limits()
    };
    let plan = |length| upload::Plan {
        offset: 0,
        restart: false,
        length: Some(length),
    };
    let mut claims = vec![];
    for i in 0..4 {
        let name = format!("flood{i}.img");
        let claim = b
            .staging
            .streams
            .claim(&b.root.join(&name), &b.root, "vm-a", rules(4, 100))
            .expect("claim");
        let t = b.target(&name).expect("t");
        upload::admit(&b.staging, &l, &t, plan(9000), &claim).expect("admitted");
        claims.push((claim, t));
    }
    // Four windows of 100 bytes promised, not 36,000.
    assert_eq!(b.staging.streams.reserved_in(&b.root, None), 400);
    // Another client's write goes in: 400 promised + 9,000 fits 10,000.
    b.put_with("other.bin", 0, &vec![7; 9000], false, None, l)
        .expect("another client's write is not held out");
    // The flood's own pieces now meet the real quota: the window was not a reservation of
    // the declared length.
    let (claim, t) = &claims[0];
    let piece = |offset, len| Chunk {
        offset,
        data: vec![1; len],
        truncate: false,
        finish: None,
    };
    let stale = Duration::from_secs(3600);
    upload::write_piece(&b.staging, &l, stale, t, piece(0, 100), claim).expect("in its window");
    let e = upload::write_piece(&b.staging, &l, stale, t, piece(100, 1000), claim)
        .expect_err("past its window and the quota");
    assert!(matches!(e, StagingError::QuotaExceeded { .. }), "{e}");
}

/// The promises into one root never add up to more than half its quota, and a stream's
/// window is renewed piece by piece (each renewal within the quota and that bound).
#[test]
fn promises_into_a_root_stay_within_half_its_quota() {
    let b = bench();
    let l = StagingLimits {
        quota_bytes_per_root: 1000,
        ..limits()
    };
    let plan = |length| upload::Plan {
        offset: 0,
        restart: false,
        length: Some(length),
    };
    let open = |name: &str, client: &str| {
        let claim = b
            .staging
            .streams
            .claim(&b.root.join(name), &b.root, client, rules(4, 400))
            .expect("claim");
        let t = b.target(name).expect("t");
        upload::admit(&b.staging, &l, &t, plan(450), &claim).expect("admitted");
        (claim, t)
    };
    let (c1, t1) = open("a.img", "vm-a");
    assert_eq!(b.staging.streams.reserved_in(&b.root, None), 400);
    let (c2, _t2) = open("b.img", "vm-b");
    // 400 + 100: the second window is cut to keep the total within 500.
    assert_eq!(b.staging.streams.reserved_in(&b.root, None), 500);
    drop(c2);
    // The first piece is always counted (it may create the file), and the window renewed
    // to what is left of the declared length (50 of 450).
    let piece = Chunk {
        offset: 0,
        data: vec![1; 400],
        truncate: false,
        finish: None,
    };
    upload::write_piece(&b.staging, &l, Duration::from_secs(3600), &t1, piece, &c1).expect("piece");
    assert_eq!(b.staging.streams.reserved_in(&b.root, None), 50);
    let piece = Chunk {
        offset: 400,
        data: vec![1; 10],
        truncate: false,
        finish: None,
    };
    upload::write_piece(&b.staging, &l, Duration::from_secs(3600), &t1, piece, &c1).expect("piece");
    assert_eq!(b.staging.streams.reserved_in(&b.root, None), 40);
}
