//! Abuse of file staging's limits over MCP, against the real binary on loopback: each way
//! around the per-root quota that the review found (finding 5) is tried with a bounded loop
//! and must be refused at the limit, with a message naming the limit. Figures are printed
//! (`cargo test --test server abuse_staging:: -- --nocapture`).
//!
//! On the code before this test, the deep file was stored uncounted, one call created
//! 20,000 directories, and zero-length files were never refused.

use crate::harness;

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use harness::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const MIB: u64 = 1024 * 1024;

/// No loop here runs longer than this, whatever the server does.
const LOOP_BUDGET: Duration = Duration::from_secs(60);

fn config(root: &Path, staging: &str) -> String {
    format!(
        "clients:\n  - name: vm-a\n    token: {TOKEN_A}\n    write_roots: [{root}]\nfile_roots: [{root}]\nstaging: {{{staging}}}\n",
        root = root.display()
    )
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// A whole file in one call.
async fn put(c: &Client, path: &str, data: &[u8]) -> rmcp::model::CallToolResult {
    call(
        c,
        "write_file",
        json!({"path": path, "content_base64": b64(data), "sha256": sha(data)}),
    )
    .await
}

/// Entries and bytes on disk under `dir`, counted by the test itself.
fn on_disk(dir: &Path) -> (u64, u64) {
    let mut entries = 0;
    let mut bytes = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let e = e.expect("entry");
            let meta = e.metadata().expect("metadata");
            entries += 1;
            if meta.is_dir() {
                todo.push(e.path());
            } else {
                bytes += meta.len();
            }
        }
    }
    (entries, bytes)
}

fn used(v: &Value) -> (u64, u64) {
    (
        v["used_bytes"].as_u64().unwrap_or_default(),
        v["limits"]["quota_bytes_per_root"]
            .as_u64()
            .unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_deep_file_is_refused_and_deep_bytes_count_against_the_quota() {
    let root = tempfile::tempdir().expect("root");
    // Only keys that existed before: the same server configuration as the finding's.
    let s = Server::start(&config(root.path(), "quota_bytes_per_root: 1048576"));
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");

    // 40 components deep (the count used to stop at 32 levels).
    let deep: String = (0..39).map(|i| format!("d{i}/")).collect::<String>() + "image.img";
    let r = put(&c, &deep, &[1u8; 1024]).await;
    println!("write at depth 40: {}", text(&r));
    assert!(is_error(&r), "{}", text(&r));
    assert!(
        text(&r).contains("40 path components") && text(&r).contains("staging.max_depth"),
        "{}",
        text(&r)
    );
    assert_eq!(on_disk(root.path()), (0, 0), "nothing was created");

    // Bytes already deeper than 32 levels (put there by anyone) are counted, so the
    // finding's 3 MB under a 1 MiB quota cannot grow further.
    let dir = (0..40).fold(root.path().to_path_buf(), |p, i| p.join(format!("d{i}")));
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("planted"), vec![0u8; 3 * MIB as usize]).expect("write");
    let r = call(&c, "list_files", json!({})).await;
    let (used_bytes, quota) = used(&structured(&r));
    println!("planted 3 MiB at depth 41: list_files says {used_bytes} of {quota} bytes in use");
    assert_eq!((used_bytes, quota), (3 * MIB, MIB));
    let r = put(&c, "small.bin", b"x").await;
    println!("1 more byte: {}", text(&r));
    assert!(is_error(&r), "{}", text(&r));
    assert!(
        text(&r).contains("staging.quota_bytes_per_root") && text(&r).contains("remove_file"),
        "{}",
        text(&r)
    );
    assert!(!root.path().join("small.bin").exists());

    // Within the depth limit, files at the bottom are counted like any other: a bounded
    // loop of 300 KiB files stops before the quota is passed.
    std::fs::remove_dir_all(root.path().join("d0")).expect("clean");
    let (mut stored, started) = (0u32, Instant::now());
    let refusal = loop {
        assert!(
            stored < 10 && started.elapsed() < LOOP_BUDGET,
            "never refused"
        );
        let path = format!("a/b/c/d/e/f/g/{stored}.bin");
        let r = put(&c, &path, &vec![2u8; 300 * 1024]).await;
        if is_error(&r) {
            break text(&r);
        }
        stored += 1;
    };
    let (entries, bytes) = on_disk(root.path());
    println!(
        "300 KiB files at depth 8: {stored} stored, {bytes} bytes in {entries} entries on disk; then: {refusal}"
    );
    assert_eq!(stored, 3);
    assert!(bytes <= MIB, "{bytes} bytes under a {MIB}-byte quota");
    assert!(
        refusal.contains("staging.quota_bytes_per_root"),
        "{refusal}"
    );
    c.cancel().await.expect("close");
}

#[tokio::test]
async fn one_call_creates_few_directories_and_directories_count() {
    let root = tempfile::tempdir().expect("root");
    let s = Server::start(&config(root.path(), "quota_entries_per_root: 64"));
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");

    // The finding: one write_file created 20,000 nested directories.
    let nested = "d/".repeat(20_000) + "f";
    let r = put(&c, &nested, b"x").await;
    let shown: String = text(&r)
        .chars()
        .rev()
        .take(240)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    println!("20,000 nested directories in one call: ...{shown}");
    assert!(is_error(&r), "{}", text(&r));
    assert!(text(&r).contains("staging.max_depth"), "{}", text(&r));
    assert_eq!(on_disk(root.path()), (0, 0), "nothing was created");

    // Within max_depth, one call still makes at most max_new_dirs_per_call (8).
    let r = put(&c, &("e/".repeat(15) + "f"), b"x").await;
    println!("15 new directories in one call: {}", text(&r));
    assert!(is_error(&r), "{}", text(&r));
    assert!(
        text(&r).contains("would create 15 directories")
            && text(&r).contains("staging.max_new_dirs_per_call"),
        "{}",
        text(&r)
    );
    assert_eq!(on_disk(root.path()), (0, 0), "nothing was created");

    // Many calls of 8 new directories each: the directories fill the entry quota and the
    // call that would pass it is refused before it creates anything.
    let (mut calls, started) = (0u32, Instant::now());
    let refusal = loop {
        assert!(
            calls < 100 && started.elapsed() < LOOP_BUDGET,
            "never refused"
        );
        let path = format!("n{calls}/a/b/c/d/e/f/g/x");
        let r = put(&c, &path, b"").await;
        if is_error(&r) {
            break text(&r);
        }
        calls += 1;
    };
    let (entries, _) = on_disk(root.path());
    println!(
        "calls of 8 new directories and an empty file: {calls} accepted, {entries} entries on disk; then: {refusal}"
    );
    assert_eq!(calls, 7, "7 calls of 9 entries fit in 64");
    assert_eq!(entries, 63);
    assert!(
        refusal.contains("would hold 72 files and directories")
            && refusal.contains("staging.quota_entries_per_root"),
        "{refusal}"
    );
    c.cancel().await.expect("close");
}

#[tokio::test]
async fn zero_length_files_cannot_fill_the_entry_quota() {
    let root = tempfile::tempdir().expect("root");
    let s = Server::start(&config(root.path(), "quota_entries_per_root: 50"));
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let (mut stored, started) = (0u32, Instant::now());
    let refusal = loop {
        assert!(
            stored < 200 && started.elapsed() < LOOP_BUDGET,
            "never refused"
        );
        let r = put(&c, &format!("empty-{stored}"), b"").await;
        if is_error(&r) {
            break text(&r);
        }
        stored += 1;
    };
    let (entries, bytes) = on_disk(root.path());
    println!(
        "zero-length files: {stored} stored ({entries} entries, {bytes} bytes on disk); then: {refusal}"
    );
    assert_eq!((stored, entries), (50, 50));
    assert!(
        refusal.contains("more than its quota of 50")
            && refusal.contains("staging.quota_entries_per_root")
            && refusal.contains("remove_file"),
        "{refusal}"
    );
    // What the refusal says to do works.
    let r = call(&c, "remove_file", json!({"path": "empty-0"})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let r = put(&c, "empty-again", b"").await;
    assert!(!is_error(&r), "{}", text(&r));
    c.cancel().await.expect("close");
}
