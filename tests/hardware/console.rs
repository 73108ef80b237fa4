//! Board consoles against a pseudo-terminal standing in for the serial adapter: the test
//! holds the master side (it plays the board), the server opens the slave through a
//! symlink (`console: {path: ...}`) and owns it (raw mode, baud). Driven through the
//! library API and the tool functions (`console_read`, `console_write`) until the
//! `boards:` configuration exists.

use crate::harness;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gatecmd_core::identity::ClientIdentity;
use gatecmd_domain::audit::Audit;
use gatecmd_domain::console::{ConsoleConfig, ConsoleSettings, ConsoleState, Consoles, NoLease};
use gatecmd_mcp::console::console_access;
use gatecmd_mcp::tools::console_read::{self, ConsoleReadRequest};
use gatecmd_mcp::tools::console_write::{self, ConsoleWriteRequest};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const BOARD: &str = "rock5b-1";

/// The board side of a pseudo-terminal whose slave the server opens through `link`.
struct FakeBoard {
    master: File,
}

impl FakeBoard {
    /// A new pty; `link` is (re)pointed at its slave, replacing any previous link at once
    /// (as udev replaces a /dev/serial/by-path link when the adapter comes back).
    fn plug(link: &Path) -> FakeBoard {
        let pty = nix::pty::openpty(None, None).expect("openpty");
        let slave_path = std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd()))
            .expect("slave path");
        let tmp = link.with_extension("new");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&slave_path, &tmp).expect("symlink");
        std::fs::rename(&tmp, link).expect("swap link");
        // The server opens its own slave descriptor; the pty lives while the master does.
        drop::<OwnedFd>(pty.slave);
        FakeBoard {
            master: File::from(pty.master),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).expect("write to the master");
    }
}

/// Alice holds the board; Bob does not (and is told Alice does).
fn access() -> Arc<dyn gatecmd_domain::console::BoardAccess> {
    Arc::new(|client: &str, board: &str| {
        if client == "alice" {
            Ok(())
        } else {
            Err(NoLease {
                held_by_other: true,
                message: format!("board {board} is leased by alice"),
            })
        }
    })
}

fn consoles(link: &Path, ring_bytes: usize) -> Consoles {
    let settings = ConsoleSettings {
        retry: Duration::from_millis(20),
        ..Default::default()
    };
    let c = Consoles::new(settings, access());
    c.start(
        [(
            BOARD.to_string(),
            ConsoleConfig {
                port: None,
                path: Some(link.to_path_buf()),
                baud: 1_500_000,
                buffer_bytes: ring_bytes,
            },
        )],
        None,
    );
    c
}

async fn wait_state(c: &Consoles, want: ConsoleState) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = c.view(BOARD).expect("console");
        if v.state == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "console never became {want:?}: {v:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The configured boards of these tests.
fn boards() -> Vec<String> {
    vec![BOARD.to_string()]
}

fn who(name: &str) -> ClientIdentity {
    ClientIdentity::local(name)
}

fn read_req(cursor: Option<u64>, wait_for: Option<&str>) -> ConsoleReadRequest {
    ConsoleReadRequest {
        board: BOARD.into(),
        cursor,
        max_bytes: None,
        wait_for: wait_for.map(str::to_string),
        timeout_secs: Some(10),
    }
}

async fn read(c: &Consoles, client: &ClientIdentity, req: ConsoleReadRequest) -> Value {
    let r = console_read::read(c, &boards(), client, req, &CancellationToken::new()).await;
    let v = r.structured_content.expect("structured");
    assert_ne!(r.is_error, Some(true), "{v}");
    v
}

struct Setup {
    _dir: tempfile::TempDir,
    link: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let link = dir.path().join("ttyBOARD");
    Setup { link, _dir: dir }
}

const BOOT_LOG: &[u8] = b"\r\nU-Boot SPL 2024.01 (Jan 01 2024)\r\n\x1b[1;32mTrying to boot from MMC1\x1b[0m\r\n\
    DRAM:  8 GiB\r\nLoading: 10%\rLoading: 20%\rLoading: 100%\r\n\x1b[33mHit any key to stop autoboot:  3 \x1b[0m";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boot_log_is_captured_cleaned_and_waited_for() {
    let s = setup();
    let mut board = FakeBoard::plug(&s.link);
    let c = consoles(&s.link, 1 << 20);
    wait_state(&c, ConsoleState::Open).await;
    let view = c.view(BOARD).expect("view");
    assert_eq!(view.baud, 1_500_000);
    assert_eq!(view.tty.as_deref(), Some(s.link.to_str().expect("utf-8")));

    let console = c.get(BOARD).expect("console");
    let watchers = console.watchers();
    let from = console.bounds().1;
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            let v = read(&c, &who("alice"), read_req(Some(from), Some("Hit any key"))).await;
            (v, Instant::now())
        })
    };
    // Sent once the waiter watches the console (it subscribes before it looks at the ring,
    // and reads from the cursor before the log): no guessed delay.
    tokio::time::timeout(Duration::from_secs(5), async {
        while console.watchers() <= watchers {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the waiter never started waiting");
    board.send(BOOT_LOG);
    let written = Instant::now();
    let (v, answered) = waiter.await.expect("join");
    let latency = answered.duration_since(written);
    println!("bytes on the pty -> wait_for answered: {latency:?}");
    assert_eq!(v["matched"], true, "{v}");
    assert_eq!(v["match_text"], "Hit any key");
    assert!(latency < Duration::from_millis(500), "{latency:?}");

    // The whole log from cursor 0: escapes gone, \r overwrites applied, \r\n as \n.
    let v = read(&c, &who("alice"), read_req(Some(0), None)).await;
    assert_eq!(
        v["text"],
        "\nU-Boot SPL 2024.01 (Jan 01 2024)\nTrying to boot from MMC1\nDRAM:  8 GiB\n\
         Loading: 100%\nHit any key to stop autoboot:  3 "
    );
    assert_eq!(v["cursor"], 0);
    assert_eq!(v["next_cursor"], BOOT_LOG.len());
    assert_eq!(v["dropped_bytes"], 0);
    assert_eq!(v["state"], "open");

    // Without a cursor: the recent tail, which here is everything.
    let tail = read(&c, &who("alice"), read_req(None, None)).await;
    assert_eq!(tail["text"], v["text"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_and_writing_need_the_board_lease() {
    let s = setup();
    let mut board = FakeBoard::plug(&s.link);
    let c = consoles(&s.link, 1 << 20);
    wait_state(&c, ConsoleState::Open).await;
    let state_dir = tempfile::tempdir().expect("tempdir");
    let audit = Audit::open(state_dir.path(), &Default::default()).expect("audit");

    // Ctrl-C reaches the board side as one byte, untranslated.
    let r = console_write::write(
        &c,
        &boards(),
        &audit,
        &who("alice"),
        ConsoleWriteRequest {
            board: BOARD.into(),
            text: "\u{3}".into(),
        },
    )
    .await;
    assert_ne!(r.is_error, Some(true), "{:?}", r.structured_content);
    let mut got = [0u8; 1];
    board.master.read_exact(&mut got).expect("read the master");
    assert_eq!(got, [3]);

    // A command line goes out as given, \n not turned into \r\n (raw mode).
    let r = console_write::write(
        &c,
        &boards(),
        &audit,
        &who("alice"),
        ConsoleWriteRequest {
            board: BOARD.into(),
            text: "printenv\n".into(),
        },
    )
    .await;
    assert_ne!(r.is_error, Some(true));
    let mut got = [0u8; 9];
    board.master.read_exact(&mut got).expect("read the master");
    assert_eq!(&got, b"printenv\n");

    // Bob holds no lease: refused both ways, with the reason; as admin he may read.
    let r = console_write::write(
        &c,
        &boards(),
        &audit,
        &who("bob"),
        ConsoleWriteRequest {
            board: BOARD.into(),
            text: "reset\n".into(),
        },
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    let refusal = &r.structured_content.expect("structured")["refusal"];
    assert_eq!(refusal["reason"], "device_busy", "{refusal}");
    let r = console_read::read(
        &c,
        &boards(),
        &who("bob"),
        read_req(None, None),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    let mut admin = who("bob");
    admin.admin = true;
    read(&c, &admin, read_req(None, None)).await;

    // An unknown board is named as such: not_found, as from every tool (issue 29).
    let mut req = read_req(None, None);
    req.board = "nope".into();
    let r = console_read::read(&c, &boards(), &admin, req, &CancellationToken::new()).await;
    let refusal = &r.structured_content.expect("structured")["refusal"];
    assert_eq!(refusal["reason"], "not_found", "{refusal}");
    assert!(
        refusal["message"]
            .as_str()
            .is_some_and(|m| m.contains("no board is named \"nope\"")),
        "{refusal}"
    );
    // A configured board without a console is another matter.
    let mut req = read_req(None, None);
    req.board = "quiet".into();
    let with_quiet = [BOARD.to_string(), "quiet".to_string()];
    let r = console_read::read(&c, &with_quiet, &admin, req, &CancellationToken::new()).await;
    assert_eq!(
        r.structured_content.expect("structured")["refusal"]["reason"],
        "not_configured"
    );

    // The audit log has length and SHA-256 of each write, never the text (every line
    // enqueued written first: the writer thread writes them, docs/AUDIT.md "Writing").
    audit.flush();
    let log = crate::harness::settled_audit(state_dir.path().join("audit.log")).expect("audit log");
    let writes: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "console_write")
        .collect();
    assert_eq!(writes.len(), 3, "{log}");
    assert_eq!(writes[1]["bytes"], 9);
    assert_eq!(writes[1]["sha256"], sha256_hex(b"printenv\n"));
    assert_eq!(writes[2]["outcome"], "refused");
    assert!(!log.contains("printenv"), "{log}");
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Byte `i` of the burst: printable text in 64-byte lines, so the cleaned text equals the
/// raw bytes and every byte says where it belongs.
fn burst_byte(i: u64) -> u8 {
    if i % 64 == 63 {
        b'\n'
    } else {
        b'a' + (i % 26) as u8
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_10_mb_burst_loses_only_what_dropped_bytes_reports() {
    const TOTAL: u64 = 10 * 1000 * 1000;
    const RING: usize = 1 << 20;
    let s = setup();
    let board = FakeBoard::plug(&s.link);
    let c = consoles(&s.link, RING);
    wait_state(&c, ConsoleState::Open).await;

    let started = Instant::now();
    let writer = std::thread::spawn(move || {
        let mut board = board;
        let data: Vec<u8> = (0..TOTAL).map(burst_byte).collect();
        for chunk in data.chunks(64 * 1024) {
            board.send(chunk);
        }
        board
    });
    // A reader that keeps up as well as it can: every byte it sees is checked against its
    // absolute cursor, and what it never saw must be reported as dropped.
    let mut cursor = 0u64;
    let (mut seen, mut dropped) = (0u64, 0u64);
    while cursor < TOTAL {
        let mut req = read_req(Some(cursor), Some("[a-z]"));
        req.max_bytes = Some(RING);
        let v = read(&c, &who("alice"), req).await;
        let from = v["cursor"].as_u64().expect("cursor");
        let to = v["next_cursor"].as_u64().expect("next_cursor");
        let text = v["text"].as_str().expect("text").as_bytes();
        assert_eq!(text.len() as u64, to - from);
        assert!(
            text.iter()
                .enumerate()
                .all(|(k, b)| *b == burst_byte(from + k as u64)),
            "bytes {from}..{to} are not what was sent there"
        );
        assert_eq!(v["dropped_bytes"].as_u64(), Some(from - cursor));
        seen += to - from;
        dropped += from - cursor;
        cursor = to;
    }
    let _board = writer.join().expect("writer");
    let elapsed = started.elapsed();
    assert_eq!(seen + dropped, TOTAL);
    assert_eq!(c.view(BOARD).expect("view").end_cursor, TOTAL);
    println!(
        "10 MB burst captured in {elapsed:?} ({:.1} MB/s); the reader saw {seen} bytes, \
         {dropped} dropped and reported",
        TOTAL as f64 / elapsed.as_secs_f64() / 1e6
    );

    // A reader that slept through the burst is told exactly what it lost.
    let v = read(&c, &who("alice"), read_req(Some(0), None)).await;
    assert_eq!(v["dropped_bytes"].as_u64(), Some(TOTAL - RING as u64));
    assert_eq!(v["cursor"].as_u64(), Some(TOTAL - RING as u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capture_resumes_when_the_adapter_comes_back() {
    let s = setup();
    let mut board = FakeBoard::plug(&s.link);
    let c = consoles(&s.link, 1 << 20);
    wait_state(&c, ConsoleState::Open).await;
    board.send(b"first boot\r\n");
    let v = read(&c, &who("alice"), read_req(Some(0), Some("first boot"))).await;
    assert_eq!(v["matched"], true);

    // Unplugged: the master goes, the slave hangs up, the link dangles.
    drop(board);
    wait_state(&c, ConsoleState::Absent).await;
    let view = c.view(BOARD).expect("view");
    assert!(view.error.is_some(), "{view:?}");
    let r = console_write::write(
        &c,
        &boards(),
        &Audit::disabled(),
        &who("alice"),
        ConsoleWriteRequest {
            board: BOARD.into(),
            text: "x".into(),
        },
    )
    .await;
    assert_eq!(
        r.structured_content.expect("structured")["refusal"]["reason"],
        "device_absent"
    );

    // Re-enumerated: a new pty behind the same link.
    let mut board = FakeBoard::plug(&s.link);
    wait_state(&c, ConsoleState::Open).await;
    board.send(b"second boot\r\n");
    let v = read(&c, &who("alice"), read_req(Some(0), Some("second boot"))).await;
    assert_eq!(v["matched"], true);
    assert_eq!(v["text"], "first boot\nsecond boot\n");

    // And writing works on the new tty.
    let r = console_write::write(
        &c,
        &boards(),
        &Audit::disabled(),
        &who("alice"),
        ConsoleWriteRequest {
            board: BOARD.into(),
            text: "\u{3}".into(),
        },
    )
    .await;
    assert_ne!(r.is_error, Some(true));
    let mut got = [0u8; 1];
    board.master.read_exact(&mut got).expect("read");
    assert_eq!(got, [3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_announced_at_most_ten_times_a_second() {
    let s = setup();
    let mut board = FakeBoard::plug(&s.link);
    let c = consoles(&s.link, 1 << 20);
    wait_state(&c, ConsoleState::Open).await;
    let mut changes = c.subscribe();
    // 1 s of chatter, a line every 5 ms.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(1) {
        board.send(b"[    1.234567] a kernel line\r\n");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut n = 0;
    while let Ok(Ok(name)) = tokio::time::timeout(Duration::from_millis(300), changes.recv()).await
    {
        assert_eq!(name, BOARD);
        n += 1;
    }
    println!("1.3 s of console output -> {n} announcements");
    assert!((3..=14).contains(&n), "{n} announcements");

    // The resource: state and the recent output, for the lease holder or an admin.
    let uri = gatecmd_mcp::resources::console_uri(BOARD);
    assert_eq!(uri, "gatecmd://boards/rock5b-1/console");
    assert!(gatecmd_mcp::resources::is_known(&uri));
    assert!(!gatecmd_mcp::resources::is_known(
        "gatecmd://boards//console"
    ));
    let snap = console_access::snapshot(&c, &boards(), &who("alice"), BOARD).expect("snapshot");
    assert_eq!(snap.console.state, ConsoleState::Open);
    assert!(snap.text.ends_with("a kernel line\n"), "{:?}", snap.text);
    assert_eq!(snap.next_cursor, snap.console.end_cursor);
    assert!(console_access::snapshot(&c, &boards(), &who("bob"), BOARD).is_err());
}

/// Over HTTP with the real binary: the tools are listed with output schemas; a board that
/// is not configured is `not_found` from both, as from every other tool (issue 29; the
/// write refusal is audited by length and SHA-256).
#[tokio::test]
async fn the_console_tools_are_served_over_http() {
    let s = harness::Server::start(&format!(
        "clients:\n  - name: vm-a\n    token: {}\ncommands:\n  - name: echo\n    binary: /bin/echo\n    allowed_args:\n      - pattern: \"{{word}}\"\n",
        harness::TOKEN_A
    ));
    let c = harness::connect(&s.url, Some(harness::TOKEN_A), harness::Era::Modern)
        .await
        .expect("connect");
    let tools = c.list_all_tools().await.expect("tools/list");
    for (name, read_only) in [("console_read", true), ("console_write", false)] {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        let t = tools
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name} not in {names:?}"));
        assert!(t.output_schema.is_some(), "{name}");
        assert_eq!(
            t.annotations.as_ref().and_then(|a| a.read_only_hint),
            Some(read_only)
        );
    }
    let r = harness::call(&c, "console_read", serde_json::json!({"board": BOARD})).await;
    assert_eq!(harness::structured(&r)["refusal"]["reason"], "not_found");
    let r = harness::call(
        &c,
        "console_write",
        serde_json::json!({"board": BOARD, "text": "\u{3}"}),
    )
    .await;
    assert_eq!(harness::structured(&r)["refusal"]["reason"], "not_found");
    let log = crate::harness::settled_audit(s.path("state/audit.log")).expect("audit.log");
    let line: Value = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .find(|v: &Value| v["event"] == "console_write")
        .expect("console_write audited");
    assert_eq!(line["bytes"], 1);
    assert_eq!(line["sha256"], sha256_hex(b"\x03"));
    assert_eq!(line["client"], "vm-a");
}
