//! A board's serial console end to end: the real binary with a `boards:` entry whose console
//! is a pseudo-terminal (the test holds the master side and plays the board), real MCP
//! clients over loopback, board leases deciding who reads and writes.

use crate::harness;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use harness::{Era, Server, TOKEN_A, TOKEN_B, call, connect, is_error, structured};
use serde_json::json;

/// The board side of a pty whose slave the server opens through `link`.
fn plug(link: &std::path::Path) -> File {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave =
        std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).expect("slave path");
    std::os::unix::fs::symlink(slave, link).expect("symlink");
    drop::<OwnedFd>(pty.slave);
    File::from(pty.master)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_board_console_is_read_waited_for_and_written_over_mcp() {
    let s = Server::start(&format!(
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
boards:
  - name: rock5b-1
    tags: {{soc: rk3588}}
    usb: "1-2"
    console: {{path: $DIR/ttyBOARD, baud: 1500000}}
"#
    ));
    let mut board = plug(&s.path("ttyBOARD"));
    let a = std::sync::Arc::new(
        connect(&s.url, Some(TOKEN_A), Era::Legacy)
            .await
            .expect("a"),
    );
    let b = connect(&s.url, Some(TOKEN_B), Era::Modern)
        .await
        .expect("b");

    // Nobody holds the board: no reading, no writing.
    let r = call(&a, "console_read", json!({"board": "rock5b-1"})).await;
    assert_eq!(
        structured(&r)["refusal"]["reason"],
        "lease_missing",
        "{r:?}"
    );
    let lease = call(&a, "lock_board", json!({"board": "rock5b-1"})).await;
    assert!(!is_error(&lease), "{lease:?}");
    let lease_id = structured(&lease)["lease_id"].clone();

    // The capture opens the tty by itself; wait until list_boards says so.
    let deadline = Instant::now() + Duration::from_secs(10);
    let from = loop {
        let l = call(&a, "list_boards", json!({})).await;
        let console = &structured(&l)["boards"][0]["console"];
        if console["state"] == "open" {
            break console["end_cursor"].as_u64().expect("end_cursor");
        }
        assert!(Instant::now() < deadline, "the console never opened: {l:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // A U-Boot-like log, awaited with wait_for from the cursor before it: the read finds it
    // whether its request reaches the server before the bytes (the usual case: it waits) or
    // after them, so nothing here guesses how long the request takes.
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            let r = call(
                &a,
                "console_read",
                json!({"board": "rock5b-1", "cursor": from, "wait_for": "Hit any key", "timeout_secs": 10}),
            )
            .await;
            (r, t.elapsed())
        })
    };
    board
        .write_all(b"\r\nU-Boot 2024.01\r\n\x1b[1mDRAM:\x1b[0m 8 GiB\r\nHit any key to stop autoboot:  3 \x08\x08\x08 2")
        .expect("boot log");
    let (r, took) = waiter.await.expect("waiter");
    let v = structured(&r);
    assert_eq!(v["matched"], true, "{v}");
    let text = v["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("DRAM: 8 GiB") && !text.contains('\x1b'),
        "{v}"
    );
    eprintln!("console_read wait_for over MCP answered {took:?} after it was sent");

    // Ctrl-C reaches the board side, byte for byte.
    let w = call(
        &a,
        "console_write",
        json!({"board": "rock5b-1", "text": "\u{3}"}),
    )
    .await;
    assert!(!is_error(&w), "{w:?}");
    let mut got = [0u8; 1];
    board.read_exact(&mut got).expect("read the board side");
    assert_eq!(got, [3]);

    // Another client is kept out while vm-a holds the board, and told by whom.
    let r = call(
        &b,
        "console_write",
        json!({"board": "rock5b-1", "text": "x"}),
    )
    .await;
    let v = structured(&r);
    assert_eq!(v["refusal"]["reason"], "device_busy", "{v}");
    assert!(
        v["refusal"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("vm-a"),
        "{v}"
    );
    let u = call(&a, "unlock_device", json!({"lease": lease_id})).await;
    assert!(!is_error(&u), "{u:?}");
    let r = call(&a, "console_read", json!({"board": "rock5b-1"})).await;
    assert_eq!(structured(&r)["refusal"]["reason"], "lease_missing");
}

/// Byte `i` of the small-ring test's output: letters only, so cleaning keeps every byte.
fn letter(i: usize) -> u8 {
    b'a' + (i % 26) as u8
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_configured_ring_loses_exactly_what_dropped_bytes_says_and_reloads() {
    const RING: usize = 4096;
    const SENT: usize = 10_000;
    let s = Server::start(&format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
boards:
  - name: small
    usb: "1-2"
    console: {{path: $DIR/ttyBOARD, baud: 115200, buffer_bytes: {RING}}}
"#
    ));
    let mut board = plug(&s.path("ttyBOARD"));
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let lease = call(&a, "lock_board", json!({"board": "small"})).await;
    assert!(!is_error(&lease), "{lease:?}");
    let console = || async {
        let l = call(&a, "list_boards", json!({})).await;
        structured(&l)["boards"][0]["console"].clone()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while console().await["state"] != "open" {
        assert!(Instant::now() < deadline, "the console never opened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let data: Vec<u8> = (0..SENT).map(letter).collect();
    board.write_all(&data).expect("write");
    let deadline = Instant::now() + Duration::from_secs(10);
    let view = loop {
        let v = console().await;
        if v["end_cursor"] == SENT {
            break v;
        }
        assert!(Instant::now() < deadline, "not all captured: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(view["buffer_bytes"], RING, "{view}");
    assert_eq!(view["buffered_bytes"], RING, "{view}");

    // From the start: the ring kept the last RING bytes and says it lost the rest.
    let r = call(
        &a,
        "console_read",
        json!({"board": "small", "cursor": 0, "max_bytes": 1_000_000}),
    )
    .await;
    let v = structured(&r);
    let lost = (SENT - RING) as u64;
    assert_eq!(v["dropped_bytes"].as_u64(), Some(lost), "{v}");
    assert_eq!(v["cursor"].as_u64(), Some(lost), "{v}");
    assert_eq!(v["next_cursor"].as_u64(), Some(SENT as u64), "{v}");
    let text = v["text"].as_str().unwrap_or_default().as_bytes();
    assert_eq!(
        text,
        &data[SENT - RING..],
        "the kept bytes are the newest ones"
    );
    // From inside the kept part: nothing lost.
    let r = call(
        &a,
        "console_read",
        json!({"board": "small", "cursor": SENT - 100}),
    )
    .await;
    let v = structured(&r);
    assert_eq!(v["dropped_bytes"].as_u64(), Some(0), "{v}");
    assert_eq!(v["text"].as_str().map(str::len), Some(100), "{v}");

    // A reload with a bigger ring applies it: the console starts over with the new size.
    let cfg = s.path("config.yaml");
    let yaml = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(
        &cfg,
        yaml.replace(&format!("buffer_bytes: {RING}"), "buffer_bytes: 8192"),
    )
    .expect("rewrite config");
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = console().await;
        if v["buffer_bytes"] == 8192 && v["state"] == "open" {
            assert_eq!(v["end_cursor"], 0, "a changed console starts over: {v}");
            break;
        }
        assert!(Instant::now() < deadline, "the reload did not apply: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    board.write_all(&data).expect("write again");
    let deadline = Instant::now() + Duration::from_secs(10);
    while console().await["buffered_bytes"] != 8192 {
        assert!(Instant::now() < deadline, "not captured after the reload");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
