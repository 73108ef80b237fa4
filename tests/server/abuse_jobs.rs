//! Issue 23: a flood of background jobs from one client stops at its limit (the running
//! ones at `limits.max_concurrent_per_client`, refused with a `limit` reason naming it;
//! the finished ones kept at `jobs.keep_finished`), and the server's memory stays flat
//! however many jobs it has seen. The real binary over loopback; every loop is bounded in
//! count and time.

use crate::harness;

use std::time::{Duration, Instant};

use harness::*;
use serde_json::json;

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
limits:
  max_concurrent_per_client: 3
jobs:
  keep_finished: 5
  output_bytes: 65536
commands:
  - name: chatty
    binary: $DIR/chatty.sh
    description: 256 KiB of output, then a short pause.
    allowed_args:
      - pattern: ""
"#
    )
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

const ROUNDS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_flood_stops_at_the_limit_and_memory_stays_flat() {
    let s = Server::start(&config());
    script(
        s.dir.path(),
        "chatty.sh",
        "head -c 262144 /dev/zero | tr '\\0' 'x' | fold -w 100\nsleep 0.05\n",
    );
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("connect b");
    let (mut started, mut refused) = (0usize, 0usize);
    let (mut warm, mut mid) = (0, 0);
    let t0 = Instant::now();
    for i in 0..ROUNDS {
        if i == 30 {
            // Past the warm-up: the allocator's pools and the tables are at their size.
            tokio::time::sleep(Duration::from_millis(300)).await;
            warm = rss_kib(s.pid());
        }
        if i == ROUNDS / 2 + 20 {
            mid = rss_kib(s.pid());
        }
        let r = call(
            &a,
            "execute_command",
            json!({"command": "chatty", "background": true}),
        )
        .await;
        if is_error(&r) {
            let v = structured(&r);
            assert_eq!(v["refusal"]["reason"], "limit", "{}", text(&r));
            assert!(
                text(&r).contains("limits.max_concurrent_per_client"),
                "{}",
                text(&r)
            );
            refused += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        } else {
            started += 1;
        }
        let listed = call(&a, "list_jobs", json!({})).await;
        let jobs = structured(&listed)["jobs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let running = jobs.iter().filter(|j| j["state"] == "running").count();
        let finished = jobs.len() - running;
        // A job frees its slot when its child is gone, a moment before it is marked
        // ended: one more may show running in that moment.
        assert!(
            running <= 3 + 1,
            "round {i}: {running} jobs running for one client"
        );
        assert!(
            finished <= 5,
            "round {i}: {finished} finished jobs kept for one client"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the flood took too long"
        );
    }
    assert!(
        refused > 0,
        "the running-jobs limit never refused ({started} started)"
    );
    assert!(started >= 50, "too few jobs ran: {started}");
    // Another client is not crowded out by vm-a's flood.
    let r = call(
        &b,
        "execute_command",
        json!({"command": "chatty", "background": true}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let end = rss_kib(s.pid());
    // 250+ jobs of 256 KiB output each went through; kept: 5 finished × 64 KiB × 2 streams.
    eprintln!("{started} jobs started, {refused} refused; RSS {warm} -> {mid} -> {end} KiB");
    assert!(
        end < warm + 16 * 1024,
        "RSS grew from {warm} KiB to {end} KiB over {started} jobs"
    );
    // Flat: the second half of the flood adds (next to) nothing to the first's. A leak of
    // what those jobs printed would be ~47 MiB (94 jobs × 2 × 256 KiB); allocator arenas
    // warming up on a loaded machine have reached 6.5 MiB, hence the 8 MiB.
    assert!(
        end < mid + 8 * 1024,
        "RSS still grows: {mid} KiB half-way, {end} KiB at the end"
    );
}
