//! Lab rows (issue 49): what a board of another host costs an agent. Two servers on
//! loopback, each with the tests' simulated board on a pty at 1.5 Mbaud; the agent of
//! bench-1 leases its own board and bench-2's (`lock_board {scope: "lab"}`), then times
//! `board_run "echo hi"` on each, `list_boards` of its host against the lab's, and a
//! remote lease taken and released.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;
use crate::sim_board::{self, Start};
use crate::{Row, Sizes, latency_row, serve};

const PEER_TOKEN: &str = "bench-peer-token-0123456789abcdef";
const BAUD: u32 = 1_500_000;

fn board_yaml(name: &str) -> String {
    format!(
        "boards:\n  - name: {name}\n    usb: \"1-2\"\n    tags: {{soc: rk3588}}\n    console: {{path: $DIR/ttyBOARD, baud: {BAUD}}}\n"
    )
}

/// Until both boards' consoles are open (the lab's list shows each).
async fn consoles_open(c: &Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let l = call(c, "list_boards", json!({"scope": "lab"})).await;
        let v = structured(&l);
        let open = v["boards"]
            .as_array()
            .is_some_and(|b| b.len() == 2 && b.iter().all(|b| b["console"]["state"] == "open"));
        if open {
            return;
        }
        assert!(Instant::now() < deadline, "the consoles never opened: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn timed(c: &Client, n: usize, tool: &str, args: serde_json::Value) -> Vec<Duration> {
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n.max(3) {
        let t0 = Instant::now();
        let r = call(c, tool, args.clone()).await;
        lat.push(t0.elapsed());
        assert!(!is_error(&r), "{tool}: {}", text(&r));
    }
    lat
}

/// The lab rows; `z.events` calls each.
pub async fn rows(z: &Sizes) -> Vec<Row> {
    let s2 = serve(
        &format!(
            "clients:\n  - {{name: bench-1, token: {PEER_TOKEN}, peer: true, write_roots: [$DIR]}}\nfile_roots: [$DIR]\nflash:\n  enabled: true\n  boards: [b2]\n{}",
            board_yaml("b2")
        ),
        &[],
    );
    sim_board::plug(&s2.path("ttyBOARD"), Start::Shell, BAUD, None);
    let s1 = serve(
        &format!(
            "clients:\n  - {{name: bench-a, token: {TOKEN_A}}}\nfile_roots: [$DIR]\nflash:\n  enabled: true\n  boards: [b1]\nlabgrid:\n  peers:\n    - {{name: bench-2, url: \"{}\", token: {PEER_TOKEN}}}\n{}",
            s2.url,
            board_yaml("b1")
        ),
        &[],
    );
    sim_board::plug(&s1.path("ttyBOARD"), Start::Shell, BAUD, None);
    let c = connect(&s1.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let here = call(&c, "lock_board", json!({"board": "b1", "ttl_secs": 3600})).await;
    assert!(!is_error(&here), "{}", text(&here));
    let there = call(
        &c,
        "lock_board",
        json!({"match": {"soc": "rk3588"}, "scope": "lab", "ttl_secs": 3600}),
    )
    .await;
    let remote = structured(&there)["board"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(remote, "bench-2/b2", "{}", text(&there));
    consoles_open(&c).await;
    let n = z.events;
    let mut rows = Vec::new();
    let here_lease = structured(&here)["lease_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let there_lease = structured(&there)["lease_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let run = |b: &str, l: &str| json!({"board": b, "lease": l, "command": "echo hi"});
    let mut local = timed(&c, n, "board_run", run("b1", &here_lease)).await;
    rows.push(latency_row(
        &format!("board_run \"echo hi\", this host's board ({BAUD} baud)"),
        &mut local,
        "",
        None,
    ));
    let mut far = timed(&c, n, "board_run", run(&remote, &there_lease)).await;
    rows.push(latency_row(
        &format!("board_run \"echo hi\", a peer's board through this host ({BAUD} baud)"),
        &mut far,
        "",
        None,
    ));
    let mut list = timed(&c, n, "list_boards", json!({})).await;
    rows.push(latency_row(
        "list_boards, this host (1 board)",
        &mut list,
        "",
        None,
    ));
    let mut lab = timed(&c, n, "list_boards", json!({"scope": "lab"})).await;
    rows.push(latency_row(
        "list_boards {scope: lab}, two hosts (1 board each)",
        &mut lab,
        "",
        None,
    ));
    rows.extend(flash_rows(&c, &s1, (&here_lease, &there_lease), &remote).await);
    let lease = structured(&there)["lease_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let r = call(&c, "unlock_device", json!({"lease": lease})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let mut cycle = Vec::with_capacity(n);
    for _ in 0..n.max(3) {
        let t0 = Instant::now();
        let r = call(&c, "lock_board", json!({"board": remote, "ttl_secs": 60})).await;
        let lease = structured(&r)["lease_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let u = call(&c, "unlock_device", json!({"lease": lease})).await;
        cycle.push(t0.elapsed());
        assert!(!is_error(&u), "{}", text(&u));
    }
    rows.push(latency_row(
        "lock_board + unlock_device of a peer's board",
        &mut cycle,
        "",
        None,
    ));
    drop(s1);
    drop(s2);
    rows
}

/// Bytes of the image a flash row sends.
const IMAGE_MIB: usize = 64;

/// A background `flash_board` answered (the image's files checked and the job started; on
/// a peer's board, the image sent there first), then its job followed to its end (it fails
/// at once: no USB here). The difference between the two is what a remote flash adds: the
/// image's transfer to the board's host.
async fn flash_rows(c: &Client, s1: &Server, leases: (&str, &str), remote: &str) -> Vec<Row> {
    let image: Vec<u8> = (0..(IMAGE_MIB << 20) / 4)
        .flat_map(|i: usize| (i as u32).to_le_bytes())
        .collect();
    std::fs::write(s1.path("disk.img"), &image).expect("image");
    let mut rows = Vec::new();
    for (board, lease, what) in [
        ("b1", leases.0, "this host's board"),
        (remote, leases.1, "a peer's board (image sent there)"),
    ] {
        let mut lat = Vec::new();
        for _ in 0..5 {
            let t0 = Instant::now();
            let r = call(
                c,
                "flash_board",
                json!({"board": board, "lease": lease, "image": "disk.img", "background": true}),
            )
            .await;
            lat.push(t0.elapsed());
            assert!(!is_error(&r), "flash_board: {}", text(&r));
            let job = structured(&r)["job"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            for _ in 0..30 {
                let w = call(c, "wait_job", json!({"job": job, "timeout_secs": 5})).await;
                if structured(&w)["state"] != "running" {
                    break;
                }
            }
        }
        let mut sorted = lat.clone();
        let median = crate::pct(&mut sorted, 0.5);
        let rate = IMAGE_MIB as f64 / median.as_secs_f64();
        rows.push(latency_row(
            &format!(
                "flash_board {{background}} answered, {IMAGE_MIB} MiB image, {what}: {rate:.0} MiB/s by the median"
            ),
            &mut lat,
            "",
            None,
        ));
    }
    rows
}
