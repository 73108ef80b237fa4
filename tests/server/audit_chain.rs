//! The chained, signed audit log of the real server (docs/AUDIT.md "Chain and
//! signatures"): the log it writes and its rotated files verify with `gatecmd audit
//! verify`; each tampering (a byte changed, a line removed, two swapped, one inserted, one
//! re-signed with another key) is named by its file and line; and `gatecmd evidence` of an
//! approved flash verifies on a copy with only the public key, and is refused after one
//! byte changes.

use crate::harness;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use gatecmd_domain::audit::{Signer, chain};
use harness::*;
use nix::sys::signal::Signal;
use serde_json::json;

fn bin() -> PathBuf {
    std::env::var_os("GATECMD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gatecmd")))
}

fn gatecmd(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("run gatecmd")
}

fn out(o: &Output) -> String {
    format!(
        "rc {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn stop(s: &mut Server) {
    s.signal(Signal::SIGTERM);
    assert!(
        s.wait(Duration::from_secs(15)).is_some(),
        "server did not stop"
    );
}

/// `gatecmd audit key` into `<dir>/host.pub`.
fn public_key_file(state: &Path, dir: &Path) -> PathBuf {
    let o = gatecmd(&["audit", "key", "--state-dir", state.to_str().expect("utf8")]);
    assert!(o.status.success(), "{}", out(&o));
    let key = String::from_utf8(o.stdout).expect("utf8");
    assert_eq!(key.trim().len(), 64, "{key}");
    let path = dir.join("host.pub");
    std::fs::write(&path, key).expect("write key");
    path
}

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .expect("read")
        .lines()
        .map(str::to_string)
        .collect()
}

fn put(p: &Path, lines: &[String]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(p, text).expect("write");
}

/// A copy of the state directory's log files in a fresh directory.
fn copy_logs(state: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    for e in std::fs::read_dir(state).expect("state").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("audit.log") {
            std::fs::copy(e.path(), dir.path().join(&name)).expect("copy");
        }
    }
    dir
}

/// `gatecmd audit verify` of the copy with the trusted key: the failure's `file:line`.
fn verify_copy(copy: &Path, key: &Path) -> Result<String, String> {
    let log = copy.join("audit.log");
    let o = gatecmd(&[
        "audit",
        "verify",
        "--log",
        log.to_str().expect("utf8"),
        "--key",
        key.to_str().expect("utf8"),
    ]);
    match o.status.code() {
        Some(0) => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Some(1) => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
        _ => panic!("neither verified nor named a line: {}", out(&o)),
    }
}

/// Applies `tamper` to a copy of the log files and returns what verify names.
fn tampered(state: &Path, key: &Path, tamper: impl FnOnce(&Path)) -> String {
    let copy = copy_logs(state);
    tamper(copy.path());
    verify_copy(copy.path(), key).expect_err("a tampered log verified")
}

fn config() -> String {
    format!(
        "clients:\n  - name: vm-a\n    token: {TOKEN_A}\n\
         audit:\n  max_bytes: 4096\n  keep: 30\n\
         commands:\n  - name: say\n    binary: /bin/echo\n    allowed_args:\n      - pattern: \"{{w}}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_log_verifies_and_each_tampering_is_named_by_its_line() {
    let mut s = Server::start(&config());
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    for i in 0..16 {
        let r = call(
            &c,
            "execute_command",
            json!({"command": "say", "args": [format!("w{i}")]}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
    }
    drop(c);
    stop(&mut s);
    let state = s.path("state");
    assert!(state.join("audit.log.3").exists(), "the log rotated");
    let key = public_key_file(&state, s.dir.path());

    // Untouched: the live log with its rotated files, with the state directory's key and
    // with the trusted key file.
    let o = gatecmd(&[
        "audit",
        "verify",
        "--state-dir",
        state.to_str().expect("utf8"),
    ]);
    assert!(o.status.success(), "{}", out(&o));
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    let n: u64 = said
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(n >= 33, "{said}");
    assert!(
        said.contains("from the first record ever written"),
        "{said}"
    );
    let copy = copy_logs(&state);
    assert!(
        verify_copy(copy.path(), &key)
            .expect("verifies")
            .starts_with(&format!("{n} records"))
    );

    let line_of = |why: &str, file: &str| -> u64 {
        let at = why.find(&format!("{file}:")).expect("file named") + file.len() + 1;
        why[at..]
            .split(':')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a line number")
    };

    // One byte changed in a field: a client's name in a rotated file's line.
    let mut changed = 0;
    let why = tampered(&state, &key, |d| {
        let p = d.join("audit.log.2");
        let mut ls = lines(&p);
        let i = ls
            .iter()
            .position(|l| l.contains("\"client\":\"vm-a\""))
            .expect("a client line");
        ls[i] = ls[i].replacen("\"client\":\"vm-a\"", "\"client\":\"vm-b\"", 1);
        put(&p, &ls);
        changed = i as u64 + 1;
    });
    assert_eq!(line_of(&why, "audit.log.2"), changed, "{why}");
    assert!(why.contains("signature does not verify"), "{why}");

    // A line removed: the next one is named.
    let why = tampered(&state, &key, |d| {
        let p = d.join("audit.log.1");
        let mut ls = lines(&p);
        ls.remove(1);
        put(&p, &ls);
    });
    assert_eq!(line_of(&why, "audit.log.1"), 2, "{why}");
    assert!(why.contains("removed, inserted or reordered"), "{why}");
    // The last line of a rotated file removed: the next file's first line is named (the
    // chain continues across rotation).
    let why = tampered(&state, &key, |d| {
        let p = d.join("audit.log.1");
        let mut ls = lines(&p);
        ls.pop();
        put(&p, &ls);
    });
    assert!(why.contains("/audit.log:1:"), "{why}");

    // Two lines swapped.
    let why = tampered(&state, &key, |d| {
        let p = d.join("audit.log.1");
        let mut ls = lines(&p);
        ls.swap(1, 2);
        put(&p, &ls);
    });
    assert_eq!(line_of(&why, "audit.log.1"), 2, "{why}");

    // A line inserted (a genuine line copied from elsewhere in the log).
    let why = tampered(&state, &key, |d| {
        let from = lines(&d.join("audit.log.3"))[0].clone();
        let p = d.join("audit.log.1");
        let mut ls = lines(&p);
        ls.insert(1, from);
        put(&p, &ls);
    });
    assert_eq!(line_of(&why, "audit.log.1"), 2, "{why}");

    // A line re-signed with another key, its content and prev unchanged.
    let why = tampered(&state, &key, |d| {
        let p = d.join("audit.log");
        let mut ls = lines(&p);
        let sealed = chain::unseal(ls[0].as_bytes()).expect("a sealed line");
        let prev = sealed.prev.to_string();
        let body = String::from_utf8(sealed.signed).expect("utf8");
        let bare = body.replacen(&format!(",\"prev\":\"{prev}\""), "", 1);
        let resigned = Signer::from_seed([42; 32]).seal(bare.as_bytes(), &prev);
        ls[0] = String::from_utf8(resigned)
            .expect("utf8")
            .trim_end()
            .to_string();
        put(&p, &ls);
    });
    assert_eq!(line_of(&why, "audit.log"), 1, "{why}");
    assert!(why.contains("signed by another key"), "{why}");

    // The whole log checked against another trusted key fails at its first line.
    let other = s.path("other.pub");
    std::fs::write(&other, Signer::from_seed([42; 32]).public_hex()).expect("write");
    let why = verify_copy(copy.path(), &other).expect_err("another key");
    assert!(why.contains(":1:"), "{why}");
}

/// Records from many threads, handed to the writer thread (docs/AUDIT.md "Writing"), and
/// then the log's stop (its last handle dropped): every record is in the files, once, each
/// thread's in its own order, and the chain verifies across the rotations the burst caused.
#[test]
fn a_burst_of_records_then_a_stop_leaves_every_record_in_a_verifying_chain() {
    use gatecmd_domain::audit::{Audit, FILE_NAME, verify};
    use gatecmd_domain::config::AuditSettings;
    let dir = tempfile::tempdir().expect("tmp");
    let settings = AuditSettings {
        max_bytes: 64 * 1024,
        keep: 100,
        ..AuditSettings::default()
    };
    let audit = Audit::open(dir.path(), &settings).expect("open");
    let (threads, each) = (4, 500);
    let writers: Vec<_> = (0..threads)
        .map(|t| {
            let audit = audit.clone();
            std::thread::spawn(move || {
                for n in 0..each {
                    audit.record(&json!({"event": "burst", "t": t, "n": n}));
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    drop(audit);
    let key = Signer::load_or_create(dir.path()).expect("key").public();
    let files = verify::with_rotated(&dir.path().join(FILE_NAME));
    assert!(files.len() > 2, "the burst rotated: {files:?}");
    let checked = verify::verify(&files, &key)
        .unwrap_or_else(|b| panic!("{}:{}: {}", b.file.display(), b.line, b.why));
    assert_eq!(checked.records, threads * each);
    let mut next = vec![0; threads as usize];
    for f in &files {
        for l in lines(f) {
            let v: serde_json::Value = serde_json::from_str(&l).expect("json");
            let t = v["t"].as_u64().expect("t") as usize;
            assert_eq!(v["n"].as_u64(), Some(next[t]), "thread {t}'s order");
            next[t] += 1;
        }
    }
    assert_eq!(next, vec![each; threads as usize], "every record once");
}

/// The same through the real server: concurrent `execute_command` calls, SIGTERM right
/// after the last answer, and the log holds every call's two records and verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_then_sigterm_leave_every_record_in_a_verifying_log() {
    let mut s = Server::start(&config());
    let (sessions, calls) = (4, 25);
    let mut tasks = Vec::new();
    for k in 0..sessions {
        let url = s.url.clone();
        tasks.push(tokio::spawn(async move {
            let c = connect(&url, Some(TOKEN_A), Era::Modern)
                .await
                .expect("connect");
            for i in 0..calls {
                let r = call(
                    &c,
                    "execute_command",
                    json!({"command": "say", "args": [format!("s{k}c{i}")]}),
                )
                .await;
                assert!(!is_error(&r), "{}", text(&r));
            }
        }));
    }
    for t in tasks {
        t.await.expect("session");
    }
    stop(&mut s);
    let state = s.path("state");
    let o = gatecmd(&[
        "audit",
        "verify",
        "--state-dir",
        state.to_str().expect("utf8"),
    ]);
    assert!(o.status.success(), "{}", out(&o));
    let mut finished = std::collections::BTreeSet::new();
    for f in gatecmd_domain::audit::verify::with_rotated(&state.join("audit.log")) {
        for l in lines(&f) {
            let v: serde_json::Value = serde_json::from_str(&l).expect("json");
            if v["event"] == "execute_finished" {
                finished.insert(v["argv"][1].as_str().unwrap_or_default().to_string());
            }
        }
    }
    assert_eq!(finished.len(), sessions * calls, "{finished:?}");
}

/// A flash-enabled board whose power actions are `nap`s, an `ops` approver, and a rule
/// that holds every flash for ops's yes.
fn flash_config() -> String {
    format!(
        "clients:\n  - name: vm-a\n    token: {TOKEN_A}\n  - name: ops\n    token: {TOKEN_B}\n\
         file_roots: [$DIR]\n\
         commands:\n  - name: nap\n    binary: /usr/bin/sleep\n    description: Sleep.\n\
         \x20   params: {{secs: \"[0-9]\"}}\n    allowed_args:\n      - pattern: \"{{secs}}\"\n\
         boards:\n  - name: vb1\n    usb: \"1-1\"\n    power:\n\
         \x20     on: {{command: nap, args: [\"0\"]}}\n      off: {{command: nap, args: [\"0\"]}}\n\
         \x20     maskrom: {{command: nap, args: [\"0\"]}}\n\
         flash:\n  enabled: true\n  boards: [vb1]\n  device_wait_secs: 1\n\
         approvals:\n  - {{tool: flash_board, approve: {{by: [ops], timeout_secs: 60}}}}\n"
    )
}

/// The pending approval requests, once there are some (read from `gatecmd://approvals`).
async fn pending(c: &Client) -> Vec<serde_json::Value> {
    let end = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let read = c
            .read_resource(rmcp::model::ReadResourceRequestParams::new(
                "gatecmd://approvals",
            ))
            .await
            .expect("read gatecmd://approvals");
        let listed = match read.contents.first() {
            Some(rmcp::model::ResourceContents::TextResourceContents { text, .. }) => {
                serde_json::from_str::<serde_json::Value>(text).expect("json")["pending"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            }
            other => panic!("not text: {other:?}"),
        };
        if !listed.is_empty() {
            return listed;
        }
        assert!(
            std::time::Instant::now() < end,
            "no approval request appeared"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An approved flash (it stops where nothing enumerates, no USB bus here) as evidence: the
/// bundle names the request, the approval with who and when, the image's SHA-256 and the
/// end; a copy with only the public key verifies it elsewhere; one byte changed and it is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_of_an_approved_flash_verifies_offline_and_one_byte_refuses_it() {
    use sha2::{Digest, Sha256};
    let mut s = Server::start(&flash_config());
    let image = vec![7u8; 1 << 16];
    std::fs::write(s.path("disk.img"), &image).expect("image");
    let a = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");
    let ops = connect(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("connect");
    let r = call(&a, "lock_board", json!({"board": "vb1"})).await;
    let lease = structured(&r)["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    let args = json!({"board": "vb1", "image": "disk.img", "lease": lease});
    let (r, ()) = tokio::join!(call(&a, "flash_board", args), async {
        let req = pending(&ops).await.remove(0);
        let ok = call(
            &ops,
            "approve",
            json!({"approval": req["id"], "note": "image 7"}),
        )
        .await;
        assert!(!is_error(&ok), "{}", text(&ok));
    });
    let answer = structured(&r);
    let job = answer["job"]
        .as_str()
        .expect("flash_board's answer names its job")
        .to_string();
    drop((a, ops));
    stop(&mut s);

    let state = s.path("state");
    let bundle = s.path("evidence.json");
    let o = gatecmd(&[
        "evidence",
        &job,
        "--out",
        bundle.to_str().expect("utf8"),
        "--state-dir",
        state.to_str().expect("utf8"),
    ]);
    assert!(o.status.success(), "{}", out(&o));
    let o = gatecmd(&[
        "evidence",
        "no-such-job",
        "--state-dir",
        state.to_str().expect("utf8"),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));

    // Elsewhere: the bundle and the public key, nothing else.
    let elsewhere = tempfile::tempdir().expect("tmp");
    let key = public_key_file(&state, elsewhere.path());
    let copy = elsewhere.path().join("evidence.json");
    std::fs::copy(&bundle, &copy).expect("copy");
    let check = |key: Option<&Path>| {
        let mut args = vec!["evidence", "verify", copy.to_str().expect("utf8")];
        if let Some(k) = key {
            args.extend(["--key", k.to_str().expect("utf8")]);
        }
        gatecmd(&args)
    };
    let o = check(Some(&key));
    assert!(o.status.success(), "{}", out(&o));
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        said.contains(&format!("evidence of job {job}")) && said.contains("the trusted key"),
        "{said}"
    );
    let facts: serde_json::Value =
        serde_json::from_str(&said[said.find('{').expect("facts")..]).expect("facts json");
    assert_eq!(facts["approval"]["decided"]["by"], "ops", "{facts}");
    assert_eq!(
        facts["approval"]["decided"]["outcome"], "approved",
        "{facts}"
    );
    assert!(facts["approval"]["decided"]["ts"].is_string(), "{facts}");
    assert_eq!(
        facts["approval"]["requested"]["files"][0]["sha256"],
        hex::encode(Sha256::digest(&image)),
        "{facts}"
    );
    assert_eq!(facts["request"]["client"], "vm-a", "{facts}");
    assert_eq!(facts["flash"]["outcome"], "failed", "{facts}");
    assert_eq!(facts["ended"]["state"], "failed", "{facts}");
    // The bundle's records are the audit lines as written, each with prev and sig.
    let text = std::fs::read_to_string(&copy).expect("read");
    let body: serde_json::Value = serde_json::from_str(&text).expect("one JSON line");
    let events: Vec<String> = (body["records"].as_array().expect("records").iter())
        .map(|r| {
            let line: serde_json::Value =
                serde_json::from_str(r["text"].as_str().expect("text")).expect("line");
            assert!(
                line["sig"].is_string() && line["prev"].is_string(),
                "{line}"
            );
            line["event"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    for e in [
        "approval_requested",
        "approval_decided",
        "job_started",
        "flash_board",
        "job_ended",
    ] {
        assert!(events.iter().any(|x| x == e), "{e} missing from {events:?}");
    }

    // Without --key it verifies with the bundle's own key, and says so.
    let o = check(None);
    assert!(o.status.success(), "{}", out(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("pass --key"),
        "{}",
        out(&o)
    );

    // One byte changed: in a record's text (escaped inside the bundle), in the facts, in
    // the key the bundle names.
    let original = std::fs::read(&bundle).expect("read");
    // (Each time the first byte after the needle: `o` of ops, `a` of approved, a hex digit.)
    let in_record = r#"\"by\":\""#;
    for needle in [in_record, "\"outcome\":\"", "\"public_key\":\""] {
        let at = memchr_find(&original, needle.as_bytes()).expect(needle) + needle.len();
        let mut bad = original.clone();
        bad[at] ^= 0x01;
        std::fs::write(&copy, &bad).expect("write");
        let o = check(Some(&key));
        assert_eq!(o.status.code(), Some(1), "{needle}: {}", out(&o));
    }
    // And a bundle whose every byte is intact but checked against another key.
    std::fs::write(&copy, &original).expect("write");
    let other = elsewhere.path().join("other.pub");
    std::fs::write(&other, Signer::from_seed([42; 32]).public_hex()).expect("write");
    let o = check(Some(&other));
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
