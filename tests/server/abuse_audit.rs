//! Finding 4 of the abuse review: one client flooding refused calls with huge arguments must
//! not push another client's records out of the audit log (docs/AUDIT.md). Before bounded
//! records and refusal aggregation, 20 refused calls with 3.5 MB arguments rotated an earlier
//! command's record out of every `audit.log*` file.

use crate::harness;

use std::time::{Duration, Instant};

use harness::*;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Refused calls in the flood, and the size of each one's argument.
const FLOOD_CALLS: usize = 1000;
const ARG_BYTES: usize = 1024 * 1024;
/// Calls in flight at once.
const IN_FLIGHT: usize = 4;
/// Calls refused with a message that quotes the argument (the rest: unknown command).
const QUOTED_CALLS: usize = 8;

fn config(audit: &str) -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
commands:
  - name: echo
    binary: /bin/echo
    allowed_args:
      - pattern: "{{word}}"
    params:
      word: "[a-z]{{1,16}}"
{audit}
"#
    )
}

/// Every record in `state/audit.log*`, oldest file first, and the bytes on disk.
fn all_records(s: &Server) -> (Vec<Value>, u64) {
    let mut files: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(s.path("state"))
        .expect("state dir")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let n = match name.strip_prefix("audit.log") {
                Some("") => 0,
                Some(rest) => rest.strip_prefix('.')?.parse().ok()?,
                None => return None,
            };
            Some((n, e.path()))
        })
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    let mut records = Vec::new();
    let mut bytes = 0;
    for (_, path) in files {
        let raw = std::fs::read_to_string(&path).expect("read");
        bytes += raw.len() as u64;
        for l in raw.lines() {
            records.push(serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e})")));
        }
    }
    (records, bytes)
}

fn events<'a>(all: &'a [Value], event: &str, client: &str) -> Vec<&'a Value> {
    all.iter()
        .filter(|r| r["event"] == event && r["client"] == client)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_huge_refusals_keeps_earlier_records() {
    // Default audit settings: 10 MiB files, 5 kept, 8 KiB records, 5 refusals of a kind
    // per client per 60 s window.
    let mut s = Server::start(&config(""));
    let a = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect vm-a");
    let ok = call(
        &a,
        "execute_command",
        json!({"command": "echo", "args": ["hi"]}),
    )
    .await;
    assert!(!is_error(&ok), "{}", text(&ok));

    // Letters only: the argument passes the forbidden-character check. The first calls are
    // refused by the slot's regex, whose message quotes the argument whole; the rest name an
    // unknown command (the cheapest refusal, so the loop is mostly the server's own work).
    // Either way the arguments reach the audit log as sent.
    let huge: String = (0..ARG_BYTES)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let body = |command: &str| -> Vec<u8> {
        let call = json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {
                "name": "execute_command",
                "arguments": {"command": command, "args": [huge]},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        });
        serde_json::to_vec(&call).expect("body")
    };
    let (quoted, unknown) = (body("echo"), body("nope"));
    let http = reqwest::Client::new();
    let send = |body: Vec<u8>| {
        http.post(&s.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", format!("Bearer {TOKEN_B}"))
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "execute_command")
            .body(body)
            .send()
    };
    let started = Instant::now();
    for batch in 0..FLOOD_CALLS / IN_FLIGHT {
        let calls = (0..IN_FLIGHT).map(|i| {
            let first = batch * IN_FLIGHT + i < QUOTED_CALLS;
            send(if first {
                quoted.clone()
            } else {
                unknown.clone()
            })
        });
        for r in futures::future::join_all(calls).await {
            let r = r.expect("http");
            assert!(r.status().is_success(), "batch {batch}: {}", r.status());
            let answer = r.bytes().await.expect("answer");
            let refused = br#""isError":true"#;
            assert!(
                answer.windows(refused.len()).any(|w| w == refused),
                "batch {batch}: a 1 MiB argument must be refused"
            );
        }
    }
    let flood = started.elapsed();

    // SIGTERM: the server writes the summary of the window still open, then exits.
    s.signal(Signal::SIGTERM);
    assert!(
        s.wait(Duration::from_secs(20)).is_some(),
        "no exit on SIGTERM"
    );
    let (all, bytes) = all_records(&s);
    println!(
        "{FLOOD_CALLS} refused calls of {ARG_BYTES} bytes in {:.1} s: audit log {bytes} bytes, {} records",
        flood.as_secs_f64(),
        all.len()
    );

    // The earlier run of another client is still there.
    let earlier = events(&all, "execute_finished", "vm-a");
    assert_eq!(earlier.len(), 1, "vm-a's run was pushed out of the log");
    assert_eq!(earlier[0]["argv"], json!(["/bin/echo", "hi"]));

    // Every line is bounded; written refusals carry the cut argument's length and hash.
    let refused = events(&all, "execute_refused", "vm-b");
    assert!(
        refused.iter().any(|r| r["command"] == "echo"),
        "the first refusals (quoting the argument) are written in full"
    );
    for r in &refused {
        assert!(r.to_string().len() < 8192, "an unbounded record");
        let cuts = r["truncated_fields"].as_array().expect("truncated_fields");
        let arg = cuts
            .iter()
            .find(|c| c["field"] == "/args/0")
            .expect("the argument is described");
        assert_eq!(arg["bytes"], ARG_BYTES);
        assert_eq!(arg["sha256"], hex::encode(Sha256::digest(huge.as_bytes())));
        if r["command"] == "echo" {
            assert!(cuts.iter().any(|c| c["field"] == "/reason"), "{r}");
        }
        let kept = r["args"][0].as_str().expect("args[0] stays a string");
        assert!(kept.ends_with('…') && huge.starts_with(kept.trim_end_matches('…')));
    }

    // The rest were counted: written + suppressed is every call, at most 5 written per window.
    let summaries = events(&all, "refusals_summarized", "vm-b");
    assert!(!summaries.is_empty(), "no summary of the flood");
    let suppressed: u64 = summaries
        .iter()
        .map(|s| {
            s["suppressed_by_reason"]
                .as_object()
                .map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum())
        })
        .sum();
    assert_eq!(refused.len() as u64 + suppressed, FLOOD_CALLS as u64);
    // Two refusal reasons in this flood (no_pattern_matched, unknown_command): at most five
    // of each written per window.
    assert!(
        refused.len() <= 2 * 5 * summaries.len(),
        "{} written",
        refused.len()
    );
    assert!(
        summaries[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("similar refusals from vm-b"))
    );
    assert!(
        bytes < 1024 * 1024,
        "{bytes} bytes of audit log for one flood"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_is_written_when_the_window_closes() {
    let s = Server::start(&config(
        "audit:\n  refusal_burst: 2\n  refusal_window_secs: 1\n",
    ));
    let b = connect(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("connect vm-b");
    for _ in 0..10 {
        let r = call(
            &b,
            "execute_command",
            json!({"command": "echo", "args": ["a;b"]}),
        )
        .await;
        assert!(is_error(&r));
    }
    // No further call: the window's own timer writes the summary.
    let mut summary = None;
    assert!(
        eventually(Duration::from_secs(10), || {
            summary = all_records(&s)
                .0
                .into_iter()
                .find(|r| r["event"] == "refusals_summarized");
            summary.is_some()
        }),
        "no summary after the window closed"
    );
    let summary = summary.unwrap_or_default();
    assert_eq!(summary["client"], "vm-b");
    assert_eq!(summary["refused"], 10);
    assert_eq!(summary["suppressed"], 8);
    assert_eq!(
        summary["suppressed_by_reason"]["execute_refused/forbidden_character"],
        8
    );
    assert_eq!(
        events(&all_records(&s).0, "execute_refused", "vm-b").len(),
        2
    );
}
