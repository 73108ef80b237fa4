//! Console rows (issue #16): a board whose console is a pseudo-terminal (the bench holds the
//! master side and plays the board), served by the real server; a client that leased the
//! board reads it over MCP.
//!
//! - `wait_for` latency: the client's `console_read {cursor, wait_for}` is already waiting
//!   in the server when the bench writes the awaited line on the pty master; measured from
//!   the write to the answer.
//! - sustained capture: the bench writes at 150 KB/s (1.5 Mbaud, 10 bits a byte) while the
//!   client follows the console with `console_read {cursor, wait_for}`; bytes the capture
//!   lost (written, never captured), bytes the reader was told were dropped, and the
//!   server's CPU (utime + stime from /proc/PID/stat) over the window.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;
use crate::{Row, Sizes, latency_row, serve};

const BOARD: &str = "bench-board";
/// 1.5 Mbaud with 8N1 framing (10 bits on the wire per byte).
const BYTES_PER_SEC: usize = 150_000;
/// One write every 10 ms, as a UART driver would hand over its FIFO.
const TICK: Duration = Duration::from_millis(10);

/// The board side of a pty whose slave the server opens through `link`.
fn plug(link: &std::path::Path) -> File {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave =
        std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).expect("slave path");
    std::os::unix::fs::symlink(slave, link).expect("symlink");
    drop::<OwnedFd>(pty.slave);
    File::from(pty.master)
}

/// CPU time (user + system) the process has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf reads a constant of the running system; no memory is involved.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_secs_f64(ticks as f64 / hz as f64)
}

async fn console(c: &Client) -> Value {
    let l = call(c, "list_boards", json!({})).await;
    structured(&l)["boards"][0]["console"].clone()
}

/// Byte `i` of the sustained stream: letters, a newline every 64 (a console's lines).
fn stream_byte(i: u64) -> u8 {
    if i % 64 == 63 {
        b'\n'
    } else {
        b'a' + (i % 26) as u8
    }
}

/// The two console figures over HTTP; `z.events` latency rounds, `z.secs` of capture.
pub async fn rows(z: &Sizes) -> Vec<Row> {
    let s = serve(
        &format!(
            r#"
clients:
  - name: bench-a
    token: {TOKEN_A}
boards:
  - name: {BOARD}
    usb: "1-2"
    console: {{path: $DIR/ttyBOARD, baud: 1500000}}
"#
        ),
        &[],
    );
    let mut board = plug(&s.path("ttyBOARD"));
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");
    let lease = call(&c, "lock_board", json!({"board": BOARD, "ttl_secs": 3600})).await;
    assert!(!is_error(&lease), "{}", text(&lease));
    let deadline = Instant::now() + Duration::from_secs(10);
    while console(&c).await["state"] != "open" {
        assert!(Instant::now() < deadline, "the bench console never opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut cursor = console(&c).await["end_cursor"].as_u64().unwrap_or(0);
    let mut lat = Vec::with_capacity(z.events);
    for i in 0..z.events {
        let peer = c.peer().clone();
        let args = json!({
            "board": BOARD,
            "cursor": cursor,
            "wait_for": format!("ready-{i}\\r?\\n"),
            "timeout_secs": 10,
        });
        let waiter = tokio::spawn(async move {
            let obj = args.as_object().cloned().unwrap_or_default();
            let r = peer
                .call_tool(
                    rmcp::model::CallToolRequestParams::new("console_read").with_arguments(obj),
                )
                .await
                .expect("console_read");
            (Instant::now(), r)
        });
        // Let the read reach the server and wait there (the cursor makes it correct
        // either way; the sleep makes it measure a waiting reader).
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t0 = Instant::now();
        board
            .write_all(format!("U-Boot noise ... ready-{i}\r\n").as_bytes())
            .expect("write the pty");
        let (t1, r) = waiter.await.expect("waiter");
        let v = structured(&r);
        assert_eq!(v["matched"], true, "round {i}: {v}");
        cursor = v["next_cursor"].as_u64().expect("next_cursor");
        lat.push(t1.saturating_duration_since(t0));
    }
    let med = crate::pct(&mut lat, 0.5);
    let mut rows = vec![latency_row(
        "console bytes on the pty → waiting console_read wait_for answered",
        &mut lat,
        "≤ 5 ms median",
        Some(med <= Duration::from_millis(5)),
    )];
    rows.extend(waiting_reads(z, &s, &c, &mut board).await);
    rows.extend(sustained(z, &s, &c, board).await);
    rows
}

/// Finding 12 of issue 22: waiting `console_read`s whose `wait_for` never matches, while
/// the console runs at 45 KB/s. Server CPU with none waiting, then with the per-client cap
/// of waiting reads (`limits.max_waiting_reads_per_client`, 8 by default) waiting: each
/// wake scans only the new bytes (plus a 4 KiB overlap) at most every 20 ms.
async fn waiting_reads(z: &Sizes, s: &Server, c: &Client, board: &mut File) -> Vec<Row> {
    const RATE: usize = 45_000;
    const READERS: usize = 8;
    let secs = z.secs.max(1.0);
    let mut cores = Vec::new();
    for readers in [0, READERS] {
        let cursor = console(c).await["end_cursor"].as_u64().unwrap_or(0);
        let mut waiters = Vec::new();
        for _ in 0..readers {
            let peer = c.peer().clone();
            let args = json!({
                "board": BOARD,
                "cursor": cursor,
                "wait_for": "never-[0-9]{6}-here",
                "timeout_secs": (secs + 5.0).ceil() as u64,
            });
            waiters.push(tokio::spawn(async move {
                let obj = args.as_object().cloned().unwrap_or_default();
                peer.call_tool(
                    rmcp::model::CallToolRequestParams::new("console_read").with_arguments(obj),
                )
                .await
            }));
        }
        // Let the reads reach the server and wait there.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let cpu0 = cpu_time(s.pid());
        let t0 = Instant::now();
        let per_tick = (RATE as f64 * TICK.as_secs_f64()) as usize;
        let mut next = Instant::now();
        let mut sent = 0u64;
        while t0.elapsed().as_secs_f64() < secs {
            let chunk: Vec<u8> = (sent..sent + per_tick as u64).map(stream_byte).collect();
            board.write_all(&chunk).expect("write the pty");
            sent += per_tick as u64;
            next += TICK;
            tokio::time::sleep(next.saturating_duration_since(Instant::now())).await;
        }
        let cpu = cpu_time(s.pid()).saturating_sub(cpu0);
        cores.push(100.0 * cpu.as_secs_f64() / t0.elapsed().as_secs_f64().max(1e-9));
        for w in waiters {
            // They time out unmatched (or were refused over the cap, which would show as
            // an error here and fail the bench's honesty).
            let r = w.await.expect("waiter").expect("console_read");
            assert!(!is_error(&r), "a waiting read was refused: {}", text(&r));
            assert_eq!(structured(&r)["matched"], false);
        }
    }
    vec![Row {
        figure: format!(
            "console 45 KB/s for {secs:.1} s: server CPU with 0 → {READERS} waiting unmatched console_read (finding 12)"
        ),
        median: format!("{:.1} → {:.1} % core", cores[0], cores[1]),
        p99: "".into(),
        samples: READERS,
        target: "proportional to new bytes".into(),
        verdict: "".into(),
    }]
}

/// Writes at 1.5 Mbaud for `z.secs` while a reader follows over MCP.
async fn sustained(z: &Sizes, s: &Server, c: &Client, board: File) -> Vec<Row> {
    let start = console(c).await["end_cursor"].as_u64().unwrap_or(0);
    let total = (BYTES_PER_SEC as f64 * z.secs) as u64;
    let per_tick = (BYTES_PER_SEC as f64 * TICK.as_secs_f64()) as usize;
    let cpu0 = cpu_time(s.pid());
    let t0 = Instant::now();
    let writer = std::thread::spawn(move || {
        let mut board = board;
        let mut sent = 0u64;
        let mut next = Instant::now();
        while sent < total {
            let n = (total - sent).min(per_tick as u64);
            let chunk: Vec<u8> = (sent..sent + n).map(stream_byte).collect();
            board.write_all(&chunk).expect("write the pty");
            sent += n;
            // Paced by an absolute schedule, so a slow write does not lower the rate.
            next += TICK;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        board
    });
    // The reader: from `start` to `start + total`, every byte checked at its cursor.
    let (mut at, mut dropped, mut wrong, mut reads) = (start, 0u64, 0u64, 0usize);
    let deadline = Instant::now() + Duration::from_secs_f64(z.secs + 10.0);
    while at < start + total && Instant::now() < deadline {
        let r = call(
            c,
            "console_read",
            json!({"board": BOARD, "cursor": at, "max_bytes": 1 << 20, "wait_for": "\n", "timeout_secs": 2}),
        )
        .await;
        reads += 1;
        let v = structured(&r);
        let (Some(from), Some(to)) = (v["cursor"].as_u64(), v["next_cursor"].as_u64()) else {
            panic!("console_read failed: {}", text(&r));
        };
        dropped += v["dropped_bytes"].as_u64().unwrap_or(0);
        let got = v["text"].as_str().unwrap_or_default().as_bytes();
        if got.len() as u64 != to - from
            || got
                .iter()
                .enumerate()
                .any(|(k, b)| *b != stream_byte(from - start + k as u64))
        {
            wrong += to - from;
        }
        at = to;
    }
    let board = writer.join().expect("writer");
    let wall = t0.elapsed();
    let cpu = cpu_time(s.pid()).saturating_sub(cpu0);
    // Lost: written but never captured (the ring's end cursor counts every captured byte,
    // whether or not the ring still holds it).
    let settle = Instant::now() + Duration::from_secs(3);
    let end = loop {
        let end = console(c).await["end_cursor"].as_u64().unwrap_or(0);
        if end >= start + total || Instant::now() > settle {
            break end;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop(board);
    let lost = total.saturating_sub(end - start);
    let unread = (start + total).saturating_sub(at);
    let core = 100.0 * cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9);
    let ok = lost == 0 && dropped == 0 && wrong == 0 && unread == 0;
    vec![
        Row {
            figure: format!(
                "console 150 KB/s (1.5 Mbaud) for {:.1} s, MCP reader: lost / dropped / wrong / unread bytes",
                z.secs
            ),
            median: format!("{lost} / {dropped} / {wrong} / {unread}"),
            p99: "".into(),
            samples: total as usize,
            target: "0 lost".into(),
            verdict: if ok { "met".into() } else { "MISSED".into() },
        },
        Row {
            figure: "  server CPU meanwhile (user + system; capture and the reader's calls)".into(),
            median: format!("{core:.1} % core"),
            p99: "".into(),
            // The console_read calls answered in that time.
            samples: reads,
            target: "".into(),
            verdict: "".into(),
        },
    ]
}
