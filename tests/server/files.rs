//! File staging over MCP: a real rmcp client against the real binary uploads, verifies,
//! uses and removes files; hostile requests are refused and audited.

use crate::harness;

use std::os::unix::fs::symlink;
use std::path::Path;

use base64::Engine;
use harness::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const MIB: usize = 1024 * 1024;

fn config(root: &Path) -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
    write_roots: [{root}]
  - name: vm-b
    token: {TOKEN_B}
file_roots: [{root}]
limits:
  max_request_body_bytes: 16777216
staging:
  max_chunk_bytes: 8388608
commands:
  - name: sha256sum
    binary: /usr/bin/sha256sum
    read_only: true
    allowed_args:
      - pattern: "{{image}}"
        file_args: [image]
"#,
        root = root.display()
    )
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Deterministic bytes that do not compress or repeat in a chunk-sized pattern.
fn image(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Uploads `data` in `chunk`-sized pieces; the last carries the SHA-256.
async fn upload(c: &Client, path: &str, data: &[u8], chunk: usize) -> Value {
    let mut offset = 0usize;
    let mut last = Value::Null;
    for piece in data.chunks(chunk) {
        let end = offset + piece.len();
        let mut args = json!({"path": path, "offset": offset, "content_base64": b64(piece)});
        if end == data.len() {
            args["sha256"] = json!(sha(data));
        }
        let r = call(c, "write_file", args).await;
        assert!(!is_error(&r), "chunk at {offset}: {}", text(&r));
        last = structured(&r);
        assert_eq!(last["next_offset"], json!(end));
        offset = end;
    }
    last
}

#[tokio::test]
async fn a_64_mib_image_is_uploaded_in_chunks_verified_and_used_by_a_command() {
    let root = tempfile::tempdir().expect("root");
    let s = Server::start(&config(root.path()));
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");

    let tools = c.list_all_tools().await.expect("tools/list");
    for (name, read_only) in [
        ("list_files", true),
        ("stat_file", true),
        ("write_file", false),
        ("remove_file", false),
    ] {
        let t = tools.iter().find(|t| t.name == name).expect(name);
        assert!(t.output_schema.is_some(), "{name} declares its output");
        let a = t.annotations.as_ref().expect("annotations");
        assert_eq!(a.read_only_hint, Some(read_only), "{name}");
        assert_eq!(a.destructive_hint, Some(!read_only), "{name}");
    }

    let r = call(&c, "list_files", json!({})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let v = structured(&r);
    assert_eq!(v["limits"]["max_chunk_bytes"], json!(8 * MIB));
    assert_eq!(v["roots"][0]["writable"], json!(true));

    let data = image(64 * MIB);
    let want = sha(&data);
    let last = upload(&c, "boards/rk3588/image.img", &data, 8 * MIB).await;
    assert_eq!(last["complete"], json!(true));
    assert_eq!(last["sha256"], json!(want));
    let final_path = root.path().join("boards/rk3588/image.img");
    assert_eq!(last["path"], json!(final_path.display().to_string()));
    assert_eq!(
        std::fs::metadata(&final_path).expect("meta").len(),
        64 * MIB as u64
    );

    let r = call(&c, "stat_file", json!({"path": "boards/rk3588/image.img"})).await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["sha256"], json!(want));
    assert_eq!(structured(&r)["size"], json!(64 * MIB));

    // The uploaded file is a file argument of an allowlisted command.
    let r = call(
        &c,
        "execute_command",
        json!({"command": "sha256sum", "args": ["boards/rk3588/image.img"]}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let out = structured(&r)["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(out.starts_with(&format!("{want}  ")), "{out}");

    let r = call(&c, "list_files", json!({"path": "boards/rk3588"})).await;
    let entries = structured(&r)["entries"].clone();
    assert_eq!(
        entries.as_array().map(Vec::len),
        Some(1),
        "no temporary file left: {entries}"
    );
    assert_eq!(entries[0]["name"], json!("image.img"));
    assert_eq!(entries[0]["type"], json!("file"));

    let r = call(
        &c,
        "remove_file",
        json!({"path": "boards/rk3588/image.img"}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["removed_bytes"], json!(64 * MIB));
    assert!(!final_path.exists());

    // The server's stderr is read by another thread: give the last lines a moment.
    assert!(eventually(std::time::Duration::from_secs(3), || s
        .log_text()
        .contains("action=\"remove\"")));
    let log = s.log_text();
    assert!(
        log.contains("gatecmd::audit")
            && log.contains("action=\"finalize\"")
            && log.contains(&want),
        "finalize is audited with its hash:\n{log}"
    );
    assert!(log.contains("action=\"remove\""), "{log}");
    // The same decisions are in the audit log, one JSON line each.
    let audit = crate::harness::settled_audit(s.path("state/audit.log")).expect("audit log");
    let finalize = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == json!("file") && v["action"] == json!("finalize"))
        .expect("a finalize record");
    assert_eq!(finalize["sha256"], json!(want));
    assert!(audit.contains("\"action\":\"remove\""), "{audit}");
    c.cancel().await.expect("close");
}

#[tokio::test]
async fn hostile_requests_are_refused_in_both_eras() {
    let root = tempfile::tempdir().expect("root");
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("secret"), b"secret").expect("write");
    symlink(outside.path(), root.path().join("escape")).expect("symlink");
    symlink(
        outside.path().join("secret"),
        root.path().join("secret-link"),
    )
    .expect("symlink");
    nix::unistd::mkfifo(
        &root.path().join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("mkfifo");
    std::fs::write(root.path().join("plain"), b"p").expect("write");
    let s = Server::start(&config(root.path()));
    let secret = outside.path().join("secret").display().to_string();
    for era in ERAS {
        let c = connect(&s.url, Some(TOKEN_A), era).await.expect("connect");
        let cases = [
            (
                "stat_file",
                json!({"path": "../secret"}),
                "'..' is not allowed",
            ),
            (
                "stat_file",
                json!({"path": secret}),
                "is not inside a file root",
            ),
            ("stat_file", json!({"path": "secret-link"}), "symbolic link"),
            (
                "stat_file",
                json!({"path": "escape/secret"}),
                "symbolic link",
            ),
            (
                "stat_file",
                json!({"path": "fifo"}),
                "is a fifo, not a regular file",
            ),
            (
                "stat_file",
                json!({"path": "plain/x"}),
                "is not a directory",
            ),
            ("list_files", json!({"path": "escape"}), "symbolic link"),
            ("list_files", json!({"root": 3}), "there is no file root"),
            (
                "write_file",
                json!({"path": "escape/new", "content_base64": "eA==", "sha256": sha(b"x")}),
                "symbolic link",
            ),
            (
                "write_file",
                json!({"path": "/etc/cron.d/x", "content_base64": "eA=="}),
                "is not inside a file root",
            ),
            (
                "write_file",
                json!({"path": "a", "content_base64": "eA==", "offset": 7}),
                "start it with a chunk at offset 0",
            ),
            (
                "write_file",
                json!({"path": "a", "content_base64": "not base64!"}),
                "not valid base64",
            ),
            (
                "write_file",
                json!({"path": "a", "content_base64": "eA==", "sha256": "abc"}),
                "64 hex digits",
            ),
            (
                "remove_file",
                json!({"path": "escape/secret"}),
                "symbolic link",
            ),
            ("remove_file", json!({"path": "fifo"}), "not a regular file"),
        ];
        for (tool, args, want) in cases {
            let r = call(&c, tool, args.clone()).await;
            assert!(is_error(&r), "{era:?} {tool} {args}: {}", text(&r));
            assert!(
                text(&r).contains(want),
                "{era:?} {tool} {args}: {}",
                text(&r)
            );
        }
        // A wrong hash: the upload is discarded and says so.
        let r = call(
            &c,
            "write_file",
            json!({"path": "h", "content_base64": b64(b"data"), "sha256": sha(b"other")}),
        )
        .await;
        assert!(text(&r).contains("SHA-256 mismatch"), "{}", text(&r));
        assert!(!root.path().join("h").exists());
        c.cancel().await.expect("close");
    }
    assert_eq!(
        std::fs::read(outside.path().join("secret")).expect("read"),
        b"secret"
    );
    assert_eq!(std::fs::read_dir(outside.path()).expect("ls").count(), 1);

    // vm-b has no write_roots: it may read but not write or remove.
    let c = connect(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("connect");
    let r = call(&c, "list_files", json!({})).await;
    assert_eq!(structured(&r)["roots"][0]["writable"], json!(false));
    let r = call(
        &c,
        "write_file",
        json!({"path": "b", "content_base64": "eA=="}),
    )
    .await;
    assert!(
        text(&r).contains("client \"vm-b\" may not write") && text(&r).contains("ask the operator"),
        "{}",
        text(&r)
    );
    let r = call(&c, "remove_file", json!({"path": "plain"})).await;
    assert!(text(&r).contains("may not write"), "{}", text(&r));
    assert!(root.path().join("plain").exists());
    c.cancel().await.expect("close");
    let log = s.log_text();
    assert!(
        log.contains("verdict=\"refused\"") && log.contains("client=vm-b"),
        "refusals are audited:\n{log}"
    );
}

#[tokio::test]
async fn an_interrupted_upload_leaves_no_file_and_resumes_after_a_restart() {
    let root = tempfile::tempdir().expect("root");
    let data = image(3 * MIB + 17);
    let (first, rest) = data.split_at(2 * MIB);
    {
        let s = Server::start(&config(root.path()));
        let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
            .await
            .expect("connect");
        for (i, piece) in first.chunks(MIB).enumerate() {
            let r = call(
                &c,
                "write_file",
                json!({"path": "img/boot.img", "offset": i * MIB, "content_base64": b64(piece)}),
            )
            .await;
            assert!(!is_error(&r), "{}", text(&r));
            assert_eq!(structured(&r)["complete"], json!(false));
        }
        // The server goes away mid-upload (dropped: killed).
    }
    assert!(
        !root.path().join("img/boot.img").exists(),
        "no half-file under the final name"
    );
    assert_eq!(
        std::fs::metadata(root.path().join("img/.boot.img.gatecmd-upload"))
            .expect("temp kept")
            .len(),
        2 * MIB as u64
    );

    let s = Server::start(&config(root.path()));
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let r = call(&c, "stat_file", json!({"path": "img/boot.img"})).await;
    assert!(
        text(&r).contains("unfinished upload of it holds 2097152 bytes"),
        "{}",
        text(&r)
    );
    let r = call(
        &c,
        "list_files",
        json!({"root": root.path().display().to_string(), "path": "img"}),
    )
    .await;
    assert_eq!(structured(&r)["entries"][0]["partial_upload"], json!(true));
    // Starting over by accident is refused, with the offset to continue at.
    let r = call(
        &c,
        "write_file",
        json!({"path": "img/boot.img", "content_base64": b64(b"x")}),
    )
    .await;
    assert!(
        text(&r).contains("continue at offset 2097152"),
        "{}",
        text(&r)
    );
    let r = call(
        &c,
        "write_file",
        json!({"path": "img/boot.img", "offset": 5, "content_base64": b64(b"x")}),
    )
    .await;
    assert!(
        text(&r).contains("send the chunk at offset 2097152"),
        "{}",
        text(&r)
    );
    // Resume where it stopped; the last chunk carries the hash.
    let r = call(
        &c,
        "write_file",
        json!({
            "path": "img/boot.img",
            "offset": 2 * MIB,
            "content_base64": b64(rest),
            "sha256": sha(&data),
        }),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["complete"], json!(true));
    assert_eq!(
        std::fs::read(root.path().join("img/boot.img")).expect("read"),
        data
    );
    assert!(!root.path().join("img/.boot.img.gatecmd-upload").exists());
    c.cancel().await.expect("close");
}
