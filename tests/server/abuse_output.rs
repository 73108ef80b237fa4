//! Issue 15, finding 2: a command that prints many short lines, watched with a progress token
//! by clients that never read their answers, must not grow the server's memory, and a
//! shutdown must end within its grace whatever the backlog. The real binary over loopback;
//! every loop is bounded in count and time.

use crate::harness;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use harness::{Server, TOKEN_A, eventually, script};

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
limits:
  kill_grace_secs: 2
commands:
  - name: flood
    binary: $DIR/flood.sh
    description: Many short lines with a percentage.
    progress: "([0-9]+)%"
    timeout_secs: 120
    params: {{bytes: "[0-9]{{1,10}}"}}
    allowed_args:
      - pattern: "{{bytes}}"
      - pattern: "forever"
"#
    )
}

/// Peak and current resident memory of `pid`, in KiB (VmHWM, VmRSS).
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Sends a 2026-07-28 `execute_command` call with a progress token and never reads a byte of
/// the answer: the socket stays open, its receive buffer fills, and the server's writes stall.
fn call_without_reading(s: &Server, args: &str, id: u32) -> TcpStream {
    let addr = s.base.trim_start_matches("http://");
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"execute_command","arguments":{{"command":"flood","args":[{args}]}},"_meta":{{"progressToken":{id},"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN_A}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: execute_command\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.write_all(req.as_bytes()).expect("send request");
    sock
}

/// `GET /health` over a fresh connection, answered 200 within 5 s.
fn health(s: &Server) -> bool {
    use std::io::Read;
    let addr = s.base.trim_start_matches("http://");
    let Ok(mut sock) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = sock.set_read_timeout(Some(Duration::from_secs(5)));
    let req = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if sock.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let _ = sock.read_to_end(&mut answer);
    answer.starts_with(b"HTTP/1.1 200")
}

fn finished_runs(s: &Server) -> usize {
    s.log_text().matches("execute_command finished").count()
}

/// Two clients that never read, each on 100 MB of `ab 50%` lines: the runs end, the server
/// answers others meanwhile, and its peak resident memory grows by less than 48 MiB.
#[test]
fn progress_flood_to_clients_that_do_not_read_stays_bounded() {
    let s = Server::start(&config());
    script(
        s.dir.path(),
        "flood.sh",
        "if [ \"$1\" = forever ]; then exec yes 'ab 50%'; fi\nyes 'ab 50%' | head -c \"$1\"\necho 'done 100%'",
    );
    // One small run first, read whole: the server builds its tool list on its first MCP
    // request and faults back the code that answers, and that first-use cost is not what
    // this test bounds (it made the debug server's RSS 7.8 -> ~28 MiB by itself).
    {
        use std::io::Read;
        let mut warm = call_without_reading(&s, r#""100""#, 10);
        let _ = warm.set_read_timeout(Some(Duration::from_secs(30)));
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("done 100%") {
            match warm.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        assert!(
            eventually(Duration::from_secs(30), || finished_runs(&s) >= 1),
            "the warm-up run did not finish:\n{}",
            s.log_text()
        );
    }
    let pid = s.pid();
    let (before_peak, before) = memory_kib(pid);
    let started = Instant::now();
    let _a = call_without_reading(&s, r#""100000000""#, 11);
    let _b = call_without_reading(&s, r#""100000000""#, 12);

    // Others are served meanwhile.
    let mut slowest = Duration::ZERO;
    let mut checks = 0;
    let done = eventually(Duration::from_secs(90), || {
        let t = Instant::now();
        let ok = health(&s);
        assert!(ok, "/health failed during the flood");
        slowest = slowest.max(t.elapsed());
        checks += 1;
        std::thread::sleep(Duration::from_millis(100));
        finished_runs(&s) >= 3
    });
    let (peak, now) = memory_kib(pid);
    eprintln!(
        "progress flood: 2 × 100 MB of lines to clients that do not read: done in {:.1} s; \
         server RSS before {} KiB (peak {before_peak}), peak {} KiB, after {} KiB; \
         /health slowest {:?} over {checks} checks",
        started.elapsed().as_secs_f64(),
        before,
        peak,
        now,
        slowest
    );
    assert!(done, "the two runs did not finish:\n{}", s.log_text());
    // Growth, not the absolute figure: the debug server holds ~28 MiB after its first call
    // (the page and the metrics added their share), while a flood that was buffered would
    // add the 200 MB it sends. Seen: 32–37 MiB of growth (allocator high-water marks of the
    // line splitting).
    let grown = peak.saturating_sub(before);
    assert!(
        grown < 48 * 1024,
        "peak RSS grew by {grown} KiB (≥ 48 MiB) during a 200 MB flood: output or progress is \
         buffered without bound"
    );
    assert!(slowest < Duration::from_secs(1), "/health took {slowest:?}");
}

/// A SIGTERM while two non-reading clients watch an endless flood: the server is gone within
/// its kill grace plus a margin, its child with it.
#[test]
fn shutdown_ends_within_the_grace_whatever_the_backlog() {
    let mut s = Server::start(&config());
    script(
        s.dir.path(),
        "flood.sh",
        "if [ \"$1\" = forever ]; then exec yes 'ab 50%'; fi\nyes 'ab 50%' | head -c \"$1\"",
    );
    let _a = call_without_reading(&s, r#""forever""#, 21);
    let _b = call_without_reading(&s, r#""forever""#, 22);
    assert!(
        eventually(Duration::from_secs(10), || s
            .log_text()
            .matches("allowed")
            .count()
            >= 2),
        "the floods did not start:\n{}",
        s.log_text()
    );
    std::thread::sleep(Duration::from_secs(2)); // let the backlog build, as an attacker would
    let t = Instant::now();
    s.signal(nix::sys::signal::Signal::SIGTERM);
    let status = s.wait(Duration::from_secs(15));
    eprintln!("shutdown under a progress flood took {:?}", t.elapsed());
    assert!(
        status.is_some(),
        "the server did not stop within 15 s of SIGTERM"
    );
    assert!(
        t.elapsed() < Duration::from_secs(2 + 5),
        "shutdown took {:?}, more than the 2 s grace plus 5 s",
        t.elapsed()
    );
}
