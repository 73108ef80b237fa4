//! Every class of refusal, through the real server and a real MCP client: the result is
//! `isError: true` with the message as text and `{"refusal": {reason, message}}` as
//! structured content, and the reason names are the ones docs/TOOLS.md lists. For
//! `execute_command` the audit line of the refusal carries the same reason.

#[cfg(feature = "udev")]
use crate::common;
use crate::harness;

use std::os::unix::fs::symlink;
use std::path::Path;

use harness::*;
use serde_json::{Value, json};

fn config(root: &Path) -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
    write_roots: [{root}]
  - name: vm-b
    token: {TOKEN_B}
    commands: [echo]
file_roots: [{root}]
devices:
  - name: nothere
    match: {{vid: "f00d", pid: "beef"}}
commands:
  - name: echo
    binary: /bin/echo
    timeout_secs: 10
    allowed_args:
      - pattern: "{{word}}"
  - name: burn
    binary: /bin/sleep
    cancel: never
    allowed_args:
      - pattern: "{{secs}}"
  - name: image
    binary: /usr/bin/sha256sum
    allowed_args:
      - pattern: "{{file}}"
        file_args: [file]
  - name: gone
    binary: $DIR/not-installed
    allowed_args:
      - pattern: ""
  - name: board
    binary: /bin/true
    device: nothere
    allowed_args:
      - pattern: ""
  - name: relay
    binary: /bin/true
    allowed_args:
      - pattern: "off"
  - name: rk
    binary: /bin/true
    allowed_args:
      - pattern: "db {{word}}"
      - pattern: "wl {{word}}"
boards:
  - name: powered
    usb: "1-30"
    tags: {{model: bench}}
    power: {{on: {{command: relay, args: "off"}}, off: {{command: relay, args: "off"}}}}
"#,
        root = root.display()
    )
}

struct Bench {
    root: tempfile::TempDir,
    server: Server,
    a: Client,
}

async fn bench() -> Bench {
    let root = tempfile::tempdir().expect("root");
    let server = Server::start(&config(root.path()));
    let a = connect(&server.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    Bench { root, server, a }
}

/// Calls `tool` and checks the refusal's shape and reason; returns its message.
async fn refused(c: &Client, tool: &str, args: Value, reason: &str) -> String {
    let r = call(c, tool, args.clone()).await;
    assert!(is_error(&r), "{tool} {args}: not refused: {}", text(&r));
    let s = structured(&r);
    assert_eq!(s["refusal"]["reason"], json!(reason), "{tool} {args}: {s}");
    // The text is the message, unchanged: agents that read only the text lose nothing.
    assert_eq!(s["refusal"]["message"], json!(text(&r)), "{tool} {args}");
    // Its next step is a call that exists (issue 47).
    let tools = c.list_all_tools().await.expect("tools/list");
    harness::hints::assert_hint_exists(&tools, tool, &text(&r));
    text(&r)
}

/// The `execute_refused` audit line for `command`, the last one.
fn audited(s: &Server, command: &str) -> Value {
    let raw = crate::harness::settled_audit(s.path("state/audit.log")).expect("audit.log");
    raw.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .rfind(|v| v["event"] == "execute_refused" && v["command"] == command)
        .unwrap_or_else(|| panic!("no execute_refused for {command}:\n{raw}"))
}

/// An `execute_command` refusal: reason in the result and in the audit line.
async fn exec_refused(b: &Bench, args: Value, reason: &str) -> String {
    let msg = refused(&b.a, "execute_command", args.clone(), reason).await;
    let line = audited(&b.server, args["command"].as_str().expect("command"));
    assert_eq!(line["refusal"]["reason"], json!(reason), "{line}");
    // The record's `reason` keeps the message, as before.
    assert_eq!(line["reason"], json!(msg), "{line}");
    msg
}

#[tokio::test]
async fn forbidden_character() {
    let b = bench().await;
    let msg = exec_refused(
        &b,
        json!({"command": "echo", "args": ["wo;rld"]}),
        "forbidden_character",
    )
    .await;
    assert!(msg.contains("forbidden character ';'"), "{msg}");
}

#[tokio::test]
async fn no_pattern_matched() {
    let b = bench().await;
    let msg = exec_refused(
        &b,
        json!({"command": "echo", "args": ["a", "b"]}),
        "no_pattern_matched",
    )
    .await;
    assert!(msg.contains("Closest allowed pattern"), "{msg}");
    // A file argument outside the roots fails its pattern: same class, the message says why.
    let msg = exec_refused(
        &b,
        json!({"command": "image", "args": ["/etc/hostname"]}),
        "no_pattern_matched",
    )
    .await;
    assert!(msg.contains("outside the file roots"), "{msg}");
}

/// A file argument through a symbolic link that leaves its root is refused `symlink`, as
/// file staging calls it, and nothing runs.
#[tokio::test]
async fn a_symlinked_file_argument_is_symlink() {
    let b = bench().await;
    symlink("/etc/hostname", b.root.path().join("escape")).expect("symlink");
    symlink("/etc", b.root.path().join("etc")).expect("symlink");
    for arg in ["escape", "etc/hostname"] {
        let msg = exec_refused(&b, json!({"command": "image", "args": [arg]}), "symlink").await;
        assert!(msg.contains("symbolic link"), "{arg}: {msg}");
        let raw =
            crate::harness::settled_audit(b.server.path("state/audit.log")).expect("audit.log");
        assert!(
            !raw.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .any(|v| v["event"] == "execute_started" && v["command"] == "image"),
            "{arg}: image ran:\n{raw}"
        );
    }
    // A regular file inside the root still runs: the refusal is the symlink's.
    std::fs::write(b.root.path().join("plain.img"), "x").expect("write");
    let r = call(
        &b.a,
        "execute_command",
        json!({"command": "image", "args": ["plain.img"]}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
}

#[tokio::test]
async fn unknown_command() {
    let b = bench().await;
    exec_refused(&b, json!({"command": "rm"}), "unknown_command").await;
    // A command the client may not run reads the same as one that does not exist.
    let vm_b = connect(&b.server.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("connect b");
    let msg = refused(
        &vm_b,
        "execute_command",
        json!({"command": "image", "args": ["x"]}),
        "unknown_command",
    )
    .await;
    assert!(msg.contains("Commands you may run: echo."), "{msg}");
}

#[tokio::test]
async fn command_unavailable() {
    let b = bench().await;
    exec_refused(&b, json!({"command": "gone"}), "command_unavailable").await;
}

/// A board's power command runs only through `power_board` (issue 22).
#[tokio::test]
async fn power_command() {
    let b = bench().await;
    let msg = exec_refused(
        &b,
        json!({"command": "relay", "args": ["off"]}),
        "power_command",
    )
    .await;
    assert!(msg.contains("only power_board runs it"), "{msg}");
}

#[tokio::test]
async fn timeout_too_long_and_a_zero_timeout() {
    let b = bench().await;
    let msg = exec_refused(
        &b,
        json!({"command": "echo", "args": ["x"], "timeout_secs": 11}),
        "timeout_too_long",
    )
    .await;
    assert!(msg.contains("limit of 10 s"), "{msg}");
    exec_refused(
        &b,
        json!({"command": "echo", "args": ["x"], "timeout_secs": 0}),
        "invalid_request",
    )
    .await;
}

#[tokio::test]
async fn limit() {
    let b = bench().await;
    exec_refused(
        &b,
        json!({"command": "echo", "args": ["x"], "wait_secs": 999_999}),
        "limit",
    )
    .await;
    refused(
        &b.a,
        "lock_device",
        json!({"key": "usb:2207:350b", "ttl_secs": 999_999_999}),
        "limit",
    )
    .await;
}

#[tokio::test]
async fn job_refusals() {
    let b = bench().await;
    // Unknown, or another client's (not told apart): not_found, naming list_jobs.
    let msg = refused(&b.a, "wait_job", json!({"job": "job-999"}), "not_found").await;
    assert!(
        msg.contains("list_jobs") && msg.contains("jobs.keep_finished"),
        "{msg}"
    );
    refused(&b.a, "cancel_job", json!({"job": "job-999"}), "not_found").await;
    let r = call(
        &b.a,
        "execute_command",
        json!({"command": "burn", "args": ["2"], "background": true}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let job = structured(&r)["job"].as_str().expect("job").to_string();
    // A wait past the maximum: limit, naming it.
    let msg = refused(
        &b.a,
        "wait_job",
        json!({"job": job, "timeout_secs": 111}),
        "limit",
    )
    .await;
    assert!(msg.contains("110"), "{msg}");
    // `cancel: never`: cancel_job is refused and the job runs on.
    let msg = refused(&b.a, "cancel_job", json!({"job": job}), "not_permitted").await;
    assert!(msg.contains("cancel: never"), "{msg}");
    let w = call(&b.a, "wait_job", json!({"job": job, "timeout_secs": 0})).await;
    assert_eq!(structured(&w)["state"], "running", "{}", text(&w));
    let b2 = connect(&b.server.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("connect b");
    refused(
        &b2,
        "wait_job",
        json!({"job": job, "timeout_secs": 0}),
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn device_absent() {
    let b = bench().await;
    exec_refused(&b, json!({"command": "board"}), "device_absent").await;
    exec_refused(
        &b,
        json!({"command": "board", "device": "9-9"}),
        "device_absent",
    )
    .await;
    refused(
        &b.a,
        "lock_device",
        json!({"device": "9-9"}),
        "device_absent",
    )
    .await;
}

#[tokio::test]
async fn invalid_request() {
    let b = bench().await;
    exec_refused(
        &b,
        json!({"command": "echo", "args": ["x"], "device": "9-9"}),
        "invalid_request",
    )
    .await;
    refused(
        &b.a,
        "lock_device",
        json!({"key": "usb:2207:350b", "device": "1-2"}),
        "invalid_request",
    )
    .await;
    refused(
        &b.a,
        "lock_device",
        json!({"key": "nonsense"}),
        "invalid_request",
    )
    .await;
    refused(
        &b.a,
        "list_devices",
        json!({"vid": "xyz"}),
        "invalid_request",
    )
    .await;
    refused(
        &b.a,
        "write_file",
        json!({"path": "a.img", "content_base64": "***"}),
        "invalid_request",
    )
    .await;
}

#[tokio::test]
async fn device_busy_and_already_held() {
    let b = bench().await;
    let key = json!({"key": "usb:2207:350b", "note": "flashing"});
    let r = call(&b.a, "lock_device", key.clone()).await;
    assert!(!is_error(&r), "{}", text(&r));
    let msg = refused(&b.a, "lock_device", key.clone(), "already_held").await;
    assert!(msg.contains("already holds"), "{msg}");
    let vm_b = connect(&b.server.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("connect b");
    let msg = refused(&vm_b, "lock_device", key, "device_busy").await;
    assert!(msg.contains("vm-a") && msg.contains("flashing"), "{msg}");
}

#[tokio::test]
async fn lease_invalid() {
    let b = bench().await;
    refused(
        &b.a,
        "unlock_device",
        json!({"lease": "no-such-lease"}),
        "lease_invalid",
    )
    .await;
    let r = call(&b.a, "lock_device", json!({"key": "usb:2207:350b"})).await;
    let lease = structured(&r)["lease_id"].clone();
    let vm_b = connect(&b.server.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("connect b");
    let msg = refused(
        &vm_b,
        "unlock_device",
        json!({"lease": lease}),
        "lease_invalid",
    )
    .await;
    assert!(msg.contains("belongs to client \"vm-a\""), "{msg}");
}

/// Every refusal a board tool's caller meets names a next call that exists, in the caller's
/// own family (issue 47): a missing lease is `lease_missing` and names lock_board; a lease
/// that ended names lock_board, not lock_device; a board held by someone else is queued for
/// with lock_board's `wait_secs`, not a `wait_secs` the tool lacks; lock_board's queue count
/// leaves the caller out; a first word no pattern begins with names the ones that exist.
/// (`refused` checks each message's calls against tools/list.)
#[tokio::test]
async fn board_refusals_name_calls_that_exist() {
    let b = bench().await;
    let power = json!({"board": "powered", "action": "on"});
    let msg = refused(&b.a, "power_board", power.clone(), "lease_missing").await;
    assert!(msg.contains("lock_board {board: \"powered\"}"), "{msg}");
    let msg = refused(
        &b.a,
        "flash_board",
        json!({"board": "powered", "image": "a.img"}),
        "not_configured",
    )
    .await;
    assert!(!msg.contains("wait_secs"), "{msg}");

    let r = call(&b.a, "lock_board", json!({"board": "powered"})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let lease = structured(&r)["lease_id"]
        .as_str()
        .expect("lease")
        .to_string();
    // Held by the caller and not passed: still a missing lease, with the id to pass.
    let msg = refused(&b.a, "power_board", power.clone(), "lease_missing").await;
    assert!(msg.contains(&format!("pass lease: \"{lease}\"")), "{msg}");

    // Someone else's board: queue with lock_board, the tool that has wait_secs.
    let vm_b = connect(&b.server.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("connect b");
    let r = call(&vm_b, "power_board", power.clone()).await;
    assert!(is_error(&r), "{}", text(&r));
    let tools = vm_b.list_all_tools().await.expect("tools/list");
    harness::hints::assert_hint_exists(&tools, "power_board", &text(&r));
    assert_eq!(structured(&r)["refusal"]["reason"], json!("device_busy"));
    assert!(
        text(&r).contains("Queue for it with lock_board {board: \"powered\", wait_secs: …}"),
        "{}",
        text(&r)
    );
    let msg = refused(
        &vm_b,
        "lock_board",
        json!({"match": {"model": "bench"}}),
        "device_busy",
    )
    .await;
    assert!(msg.contains("; 0 other match request(s) queued"), "{msg}");

    let r = call(&b.a, "unlock_device", json!({"lease": lease})).await;
    assert!(!is_error(&r), "{}", text(&r));
    // The lease has ended: lease_invalid, naming the call that takes the board again.
    let mut stale = power.clone();
    stale["lease"] = json!(lease);
    let msg = refused(&b.a, "power_board", stale, "lease_invalid").await;
    assert!(
        msg.contains("take a new lease with lock_board {board: \"powered\"}"),
        "{msg}"
    );
    let msg = refused(
        &b.a,
        "unlock_device",
        json!({"lease": lease}),
        "lease_invalid",
    )
    .await;
    assert!(
        msg.contains("lock_board for a board, lock_device for a device"),
        "{msg}"
    );

    // An execute_command argument refused on its first word names the first words there are.
    let msg = refused(
        &b.a,
        "execute_command",
        json!({"command": "rk", "args": ["ul", "x"]}),
        "no_pattern_matched",
    )
    .await;
    assert!(
        msg.starts_with("rk may not run \"ul\" here: its allowed first words are \"db\", \"wl\""),
        "{msg}"
    );
}

/// Every variant of the refusals the lock manager and the board tools share, rendered as
/// the tools render them, names calls that exist for each tool that can meet it (issue 47).
/// What the server provokes above walks the rest through real calls.
#[tokio::test]
async fn every_shared_lock_and_lease_variant_names_calls_that_exist() {
    use chrono::Utc;
    use gatecmd_core::refusal::common::{LeaseMissing, UnknownBoard, WaitTooLong};
    use gatecmd_domain::boards::QueueFull;
    use gatecmd_domain::locks::{
        BusyInfo, ClientName, HeldBy, LeaseId, LockError, LockKey, Retake,
    };
    use gatecmd_mcp::tools::lock_board::LockBoardError;
    use std::time::Duration;

    let b = bench().await;
    let tools = b.a.list_all_tools().await.expect("tools/list");
    const BOARD_TOOLS: &[&str] = &[
        "power_board",
        "flash_board",
        "boot_board",
        "board_run",
        "uboot_run",
        "lock_board",
    ];
    const DEVICE_TOOLS: &[&str] = &["execute_command", "lock_device"];
    let id = || LeaseId("lease-1".into());
    let who = |n: &str| ClientName(n.into());
    let busy = |key: LockKey, held_by: HeldBy| {
        LockError::Busy(Box::new(BusyInfo {
            key,
            holder: who("vm-b"),
            held_by,
            note: Some("flashing".into()),
            command: None,
            since: Utc::now(),
            expires_at: None,
            expires_in_secs: Some(60),
            ttl_secs: None,
            queue_len: 1,
            waited_secs: 0,
            via: None,
        }))
    };
    let board = || LockKey::Board("vb1".into());
    let usb = || LockKey::Usb {
        vid: 0x2207,
        pid: 0x350b,
    };
    let mut cases: Vec<(Vec<&str>, String)> = Vec::new();
    for held_by in [HeldBy::Lease, HeldBy::Command] {
        let mut callers = BOARD_TOOLS.to_vec();
        callers.push("execute_command");
        cases.push((callers, busy(board(), held_by).to_string()));
        cases.push((DEVICE_TOOLS.to_vec(), busy(usb(), held_by).to_string()));
    }
    for (retake, callers) in [
        (
            Retake::Board("vb1".into()),
            [BOARD_TOOLS, &["execute_command"]].concat(),
        ),
        (Retake::Device, [DEVICE_TOOLS, &["unlock_device"]].concat()),
        (Retake::Either, vec!["unlock_device"]),
    ] {
        let unknown = LockError::UnknownLease {
            lease_id: id(),
            retake: retake.clone(),
        };
        let other = LockError::NotYourLease {
            lease_id: id(),
            owner: who("vm-b"),
            client: who("vm-a"),
            retake,
        };
        cases.push((callers.clone(), unknown.to_string()));
        cases.push((callers, other.to_string()));
    }
    let leasing = vec!["lock_device", "lock_board"];
    for e in [
        LockError::AlreadyHeld {
            key: usb(),
            client: who("vm-a"),
            lease_id: id(),
            expires_at: Utc::now(),
        },
        LockError::TtlTooLong {
            requested: Duration::from_secs(9),
            max: Duration::from_secs(8),
        },
        LockError::ZeroTtl {
            default: Duration::from_secs(600),
        },
        LockError::TooManyLeases {
            client: who("vm-a"),
            held: 2,
            max: 2,
        },
        LockError::TooManyWaiters {
            client: who("vm-a"),
            waiting: 2,
            max: 2,
        },
        LockError::NoteTooLong {
            bytes: 2000,
            max: 1024,
        },
        LockError::ShutDown,
    ] {
        cases.push((leasing.clone(), e.to_string()));
    }
    for tool in BOARD_TOOLS.iter().filter(|t| **t != "lock_board") {
        for e in [
            LeaseMissing::Missing {
                tool: tool.to_string(),
                board: "vb1".into(),
            },
            LeaseMissing::NotPassed {
                key: "board:vb1".into(),
                lease_id: "lease-1".into(),
                tool: tool.to_string(),
            },
        ] {
            cases.push((vec![tool], e.to_string()));
        }
    }
    let unknown = UnknownBoard {
        name: "vb9".into(),
        known: vec!["vb1".into()],
    };
    cases.push((BOARD_TOOLS.to_vec(), unknown.to_string()));
    let wait = WaitTooLong {
        wait: 9000,
        max: 3600,
    };
    cases.push((
        vec!["lock_board", "lock_device", "execute_command"],
        wait.to_string(),
    ));
    for e in [
        LockBoardError::BoardOrMatch,
        LockBoardError::NoneTagged {
            tags: "soc=rk9999".into(),
        },
        LockBoardError::QueueFull(QueueFull::Total {
            waiting: 256,
            max: 256,
        }),
        LockBoardError::AllBusy {
            what: "soc=rk3588".into(),
            waited_secs: 3,
            holds: vec!["vb1: vm-b".into()],
            queued: 0,
        },
        LockBoardError::Cancelled,
    ] {
        cases.push((vec!["lock_board"], e.to_string()));
    }
    for (callers, message) in &cases {
        for caller in callers {
            harness::hints::assert_hint_exists(&tools, caller, message);
        }
    }
    assert!(cases.len() > 30, "{} cases", cases.len());
}

/// The checker itself can fail: the hints issue 47 found are caught.
#[tokio::test]
async fn the_hint_check_catches_calls_that_do_not_exist() {
    let b = bench().await;
    let tools = b.a.list_all_tools().await.expect("tools/list");
    let errors = |tool: &str, msg: &str| harness::hints::hint_errors(&tools, tool, msg);
    assert!(
        !errors(
            "flash_board",
            "board vb1 is busy. Retry with wait_secs to queue for it"
        )
        .is_empty()
    );
    assert!(
        !errors(
            "power_board",
            "lease l1 has ended; take a new lease with lock_device."
        )
        .is_empty()
    );
    assert!(!errors("board_run", "call lock_boards {board: \"vb1\"} first").is_empty());
    assert!(!errors("board_run", "call lock_board {name: \"vb1\"} first").is_empty());
    assert!(
        errors(
            "execute_command",
            "Retry with wait_secs to queue for it, or try later."
        )
        .is_empty()
    );
    assert!(
        errors(
            "power_board",
            "Queue for it with lock_board {board: \"vb1\", wait_secs: …}, or try later."
        )
        .is_empty()
    );
    assert!(
        errors(
            "board_run",
            "you hold the lease on board:vb1: pass lease: \"l1\" with board_run"
        )
        .is_empty()
    );
    // Every description names calls that exist too.
    for t in &tools {
        let description = t.description.as_deref().unwrap_or_default();
        harness::hints::assert_hint_exists(&tools, &t.name, description);
    }
}

#[tokio::test]
async fn file_refusals() {
    let b = bench().await;
    let root = b.root.path();
    refused(
        &b.a,
        "stat_file",
        json!({"path": "/etc/hostname"}),
        "outside_roots",
    )
    .await;
    refused(&b.a, "list_files", json!({"root": 7}), "outside_roots").await;
    refused(&b.a, "stat_file", json!({"path": "../x"}), "invalid_path").await;
    refused(
        &b.a,
        "stat_file",
        json!({"path": "missing.img"}),
        "not_found",
    )
    .await;
    std::fs::create_dir(root.join("dir")).expect("mkdir");
    refused(
        &b.a,
        "remove_file",
        json!({"path": "dir"}),
        "wrong_file_type",
    )
    .await;
    symlink("/etc", root.join("link")).expect("symlink");
    refused(
        &b.a,
        "stat_file",
        json!({"path": "link/hostname"}),
        "symlink",
    )
    .await;
    let vm_b = connect(&b.server.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("connect b");
    refused(
        &vm_b,
        "write_file",
        json!({"path": "b.img", "content_base64": "AAAA"}),
        "not_permitted",
    )
    .await;
    refused(
        &b.a,
        "write_file",
        json!({"path": "a.img", "content_base64": "AAAA", "offset": 5}),
        "upload_state",
    )
    .await;
    refused(
        &b.a,
        "write_file",
        json!({"path": "a.img", "content_base64": "AAAA", "sha256": "0".repeat(64)}),
        "hash_mismatch",
    )
    .await;
}

/// The TypeScript SDK validates `structuredContent` against `outputSchema` even for an
/// error result: each tool that can refuse declares the refusal as an alternative.
#[tokio::test]
async fn output_schemas_admit_the_refusal() {
    let b = bench().await;
    let tools = b.a.list_all_tools().await.expect("tools/list");
    for name in [
        "execute_command",
        "lock_device",
        "unlock_device",
        "list_devices",
        "wait_for_device",
        "list_files",
        "stat_file",
        "write_file",
        "remove_file",
    ] {
        let t = tools.iter().find(|t| t.name == name).expect(name);
        let s = Value::Object((*t.output_schema.clone().expect("output schema")).clone());
        assert_eq!(s["type"], json!("object"), "{name}: {s}");
        assert_eq!(
            s["properties"]["refusal"]["required"],
            json!(["reason", "message"]),
            "{name}: {s}"
        );
        // A stable name, not the enumeration of every reason (docs/TOOLS.md lists them).
        assert_eq!(
            s["properties"]["refusal"]["properties"]["reason"],
            json!({"type": "string"}),
            "{name}: {s}"
        );
        let any_of = s["anyOf"].as_array().expect("anyOf");
        assert!(
            any_of.iter().any(|a| a["required"] == json!(["refusal"])),
            "{name}: {s}"
        );
        // The success shape keeps its required fields.
        assert!(
            any_of.iter().any(|a| a["required"]
                .as_array()
                .is_some_and(|r| r.len() > 1 || name == "list_devices" || name == "unlock_device")),
            "{name}: {s}"
        );
    }
}

/// Refusals that need boards: two identical ones (1-2, 1-3) and another device (1-4), on
/// a umockdev testbed.
#[cfg(feature = "udev")]
#[tokio::test]
async fn device_busy_mismatch_and_ambiguous() {
    use common::umockdev::{Testbed, is_inner_run, rerun_under_preload};
    use common::{FTDI_1_4, RK3588_MASKROM_1_2, RK3588_MASKROM_1_3, ROOT_HUB};
    if !is_inner_run() {
        return rerun_under_preload(module_path!(), "device_busy_mismatch_and_ambiguous");
    }
    let tb = Testbed::new();
    for d in [ROOT_HUB, RK3588_MASKROM_1_2, RK3588_MASKROM_1_3, FTDI_1_4] {
        tb.add_from_string(d);
    }
    let yaml = format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
devices:
  - name: rockusb
    match: {{vid: "2207", pid: "350b"}}
commands:
  - name: flash
    binary: /bin/true
    device: rockusb
    allowed_args:
      - pattern: ""
  - name: board
    binary: /bin/true
    device: rockusb
    isolate: true
    allowed_args:
      - pattern: ""
"#
    );
    let root = tb.root_dir();
    let s = Server::start_with(
        &yaml,
        &[],
        &[
            ("LD_PRELOAD", "libumockdev-preload.so.0"),
            ("UMOCKDEV_DIR", root.to_str().expect("utf8")),
        ],
    );
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let b = Bench {
        root: tempfile::tempdir().expect("dir"),
        server: s,
        a,
    };
    let msg = exec_refused(&b, json!({"command": "board"}), "device_ambiguous").await;
    assert!(msg.contains("pass `device` (one of 1-2, 1-3)"), "{msg}");
    exec_refused(
        &b,
        json!({"command": "flash", "device": "1-4"}),
        "device_mismatch",
    )
    .await;
    let r = call(
        &b.a,
        "lock_device",
        json!({"key": "usb:2207:350b", "note": "mine"}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let vm_b = connect(&b.server.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("connect b");
    let msg = refused(
        &vm_b,
        "execute_command",
        json!({"command": "flash"}),
        "device_busy",
    )
    .await;
    assert!(msg.contains("vm-a") && msg.contains("mine"), "{msg}");
    let line = audited(&b.server, "flash");
    assert_eq!(line["client"], json!("vm-b"), "{line}");
    assert_eq!(line["refusal"]["reason"], json!("device_busy"), "{line}");
}
