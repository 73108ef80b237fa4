//! The HTTP front under abuse (issue 15), on the real binary over loopback sockets: half-open
//! connections under a low open-file limit, sessions bound to the client that opened them,
//! the per-client session cap, and strictly parsed Host/Origin/request targets. Every loop
//! is bounded in count and time, and each test prints what it measured.

use crate::harness;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use harness::*;

fn config(limits: &str) -> String {
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
    description: Print words.
    read_only: true
    allowed_args:
      - pattern: "{{word}}"
limits: {{{limits}}}
"#
    )
}

/// `127.0.0.1:PORT` of a server.
fn addr(s: &Server) -> String {
    s.base.trim_start_matches("http://").to_string()
}

/// Sends one raw HTTP/1.1 request and returns the status code and the body text.
fn raw(addr: &str, head: &str, body: &str) -> (u16, String) {
    let mut tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let req = format!(
        "{head}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(req.as_bytes()).expect("write");
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// Raises this process's open-file limit to `want` (or the hard limit); returns what it got.
fn raise_nofile(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write and read only the struct passed.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = want.min(lim.rlim_max);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

/// Sets another process's open-file limit (as `prlimit --pid PID --nofile=N:N` does).
fn limit_nofile_of(pid: u32, n: u64) {
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: prlimit reads only the struct passed; the old value is not asked for.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &lim,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// Sockets the server holds open.
fn sockets_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

const CALL_ECHO: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_command","arguments":{"command":"echo","args":["alive"]},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_do_not_starve_clients() {
    const FLOOD: usize = 2000;
    // Default limits, so that the same test runs against a server without these keys.
    let s = Server::start(&config(""));
    limit_nofile_of(s.pid(), 1024);
    let got = raise_nofile(FLOOD as u64 + 512);
    assert!(
        got >= FLOOD as u64 + 256,
        "this test needs {FLOOD} sockets; the hard open-file limit is {got}"
    );
    let a = addr(&s);
    let started = Instant::now();
    let mut held = Vec::with_capacity(FLOOD);
    let mut refused = 0usize;
    for _ in 0..FLOOD {
        match TcpStream::connect_timeout(&a.parse().expect("addr"), Duration::from_secs(2)) {
            Ok(mut t) => {
                // Half a request header, then silence.
                let _ = t.write_all(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-half: ");
                held.push(t);
            }
            Err(_) => refused += 1,
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "flood took too long"
        );
    }
    let flood_ms = started.elapsed().as_millis();
    let server_sockets = sockets_of(s.pid());

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .expect("client");
    let t = Instant::now();
    let health = http.get(format!("{}/health", s.base)).send().await;
    let health_ms = t.elapsed().as_millis();
    let health = health.map(|r| r.status().as_u16());
    let t = Instant::now();
    let call = http
        .post(&s.url)
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "execute_command")
        .body(CALL_ECHO)
        .send()
        .await;
    let call = match call {
        Ok(r) => {
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            (status, body.contains("alive"))
        }
        Err(e) => panic!("authenticated call failed after {:?}: {e}", t.elapsed()),
    };
    let call_ms = t.elapsed().as_millis();
    println!(
        "{FLOOD} half-open connections in {flood_ms} ms ({refused} refused at connect); \
         server (nofile 1024) holds {server_sockets} sockets; /health {health:?} in {health_ms} ms; \
         execute_command {call:?} in {call_ms} ms"
    );
    assert_eq!(health.ok(), Some(200));
    assert!(health_ms < 1000, "/health took {health_ms} ms");
    assert_eq!(call, (200, true));
    assert!(call_ms < 1000, "execute_command took {call_ms} ms");
    // Bounded by `max_connections` (512, plus the listener and a few files): a flood faster
    // than the 500 ms during which a new connection is never evicted can fill the server up
    // to that cap, and past it an old half-open connection gives way to each newcomer, as
    // the two answers above show.
    assert!(
        server_sockets <= 512 + 16,
        "the server holds {server_sockets} sockets for half-open connections"
    );

    // A header dripped one byte at a time is closed by the same deadline as silence.
    let drip_addr = a.clone();
    let drip = std::thread::spawn(move || -> Option<Duration> {
        let opened = Instant::now();
        let mut t = TcpStream::connect(&drip_addr).ok()?;
        t.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
        let _ = t.write_all(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-drip: ");
        let mut buf = [0u8; 256];
        for _ in 0..40 {
            if t.write_all(b"a").is_err() || matches!(t.read(&mut buf), Ok(0)) {
                return Some(opened.elapsed());
            }
        }
        None
    });

    // The survivors (the newest unauthenticated ones) are closed by the 10 s deadline.
    let closed_by = Instant::now();
    let gone = eventually(Duration::from_secs(15), || sockets_of(s.pid()) < 8);
    println!(
        "after the 10 s header timeout: {} sockets left ({} ms)",
        sockets_of(s.pid()),
        closed_by.elapsed().as_millis()
    );
    assert!(gone, "half-open connections outlived the header timeout");
    let dripped = drip.join().expect("drip thread");
    println!("a header dripped byte by byte was closed after {dripped:?}");
    assert!(
        dripped.is_some_and(|d| d < Duration::from_secs(15)),
        "a dripped header kept its connection: {dripped:?}"
    );
    drop(held);
}

/// Opens a legacy session as `token` over raw HTTP and returns its id.
fn open_session(a: &str, token: &str) -> String {
    const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let (status, text) = raw(
        a,
        &format!("POST /mcp HTTP/1.1\r\nhost: {a}\r\nauthorization: Bearer {token}"),
        INIT,
    );
    assert_eq!(status, 200, "{text}");
    let id = text
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id"))
                .map(|(_, v)| v.trim().to_string())
        })
        .expect("mcp-session-id in the answer");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (status, text) = raw(
        a,
        &format!(
            "POST /mcp HTTP/1.1\r\nhost: {a}\r\nauthorization: Bearer {token}\r\n\
             mcp-session-id: {id}\r\nmcp-protocol-version: 2025-11-25"
        ),
        initialized,
    );
    assert_eq!(status, 202, "{text}");
    id
}

/// A request in session `id` as `token`.
fn in_session(a: &str, method: &str, token: &str, id: &str, body: &str) -> (u16, String) {
    raw(
        a,
        &format!(
            "{method} /mcp HTTP/1.1\r\nhost: {a}\r\nauthorization: Bearer {token}\r\n\
             mcp-session-id: {id}\r\nmcp-protocol-version: 2025-11-25"
        ),
        body,
    )
}

fn tool_call(name: &str, args: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{name}","arguments":{args}}}}}"#
    )
}

/// A stateless (2026-07-28) `tools/call` of `tool` as `token`, with `session` as its
/// `Mcp-Session-Id` header if given.
fn stateless(a: &str, token: &str, session: Option<&str>, tool: &str, args: &str) -> (u16, String) {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"{tool}","arguments":{args},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    let session = session
        .map(|id| format!("\r\nmcp-session-id: {id}"))
        .unwrap_or_default();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {a}\r\nauthorization: Bearer {token}\r\n\
         mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: {tool}{session}"
    );
    raw(a, &head, &body)
}

#[tokio::test]
async fn another_clients_session_is_refused_and_its_leases_kept() {
    let s = Server::start(&config(""));
    let a = addr(&s);
    let sa = open_session(&a, TOKEN_A);
    let lock = tool_call("lock_device", r#"{"key":"usb:2207:350b"}"#);
    let (status, text) = in_session(&a, "POST", TOKEN_A, &sa, &lock);
    assert!(status == 200 && text.contains("lease_id"), "{text}");

    // B with A's session id: every method is answered as for an unknown session.
    let list = tool_call("list_locks", "{}");
    let (del, _) = in_session(&a, "DELETE", TOKEN_B, &sa, "");
    let (post, _) = in_session(&a, "POST", TOKEN_B, &sa, &list);
    let (get, _) = in_session(&a, "GET", TOKEN_B, &sa, "");
    // A stateless request cannot attach to a session it does not own, nor to a made-up one.
    let claim = r#"{"key":"usb:2207:0006"}"#;
    let (b_claims_a, _) = stateless(&a, TOKEN_B, Some(&sa), "lock_device", claim);
    let (made_up, _) = stateless(&a, TOKEN_A, Some("made-up"), "lock_device", claim);
    println!(
        "B with A's session: DELETE {del}, POST {post}, GET {get}; stateless claim by B {b_claims_a}, made-up id {made_up}"
    );
    assert_eq!((del, post, get), (404, 404, 404));
    assert_eq!((b_claims_a, made_up), (404, 404));

    // A's session and lease are intact.
    let (status, text) = in_session(&a, "POST", TOKEN_A, &sa, &list);
    assert!(
        status == 200 && text.contains("usb:2207:350b"),
        "A's lease is gone: {text}"
    );

    // A stateless request from A naming A's own session still does not join it: its lease
    // outlives the session, while the session's own lease ends with it.
    let (status, text) = stateless(&a, TOKEN_A, Some(&sa), "lock_device", claim);
    assert!(status == 200 && text.contains("lease_id"), "{text}");
    let (del, _) = in_session(&a, "DELETE", TOKEN_A, &sa, "");
    assert_eq!(del, 204);
    let (_, text) = stateless(&a, TOKEN_A, None, "list_locks", "{}");
    println!("after A's DELETE: {}", text.lines().last().unwrap_or(""));
    assert!(
        !text.contains("usb:2207:350b"),
        "the session's lease survived it"
    );
    assert!(
        text.contains("usb:2207:0006"),
        "a stateless lease was tied to a session"
    );
}

#[tokio::test]
async fn session_cap_closes_the_longest_idle_session() {
    // The default cap (limits.max_sessions_per_client).
    const CAP: usize = 64;
    const OPENED: usize = 72;
    let s = Server::start(&config(""));
    let a = addr(&s);
    let b = open_session(&a, TOKEN_B);
    let started = Instant::now();
    let ids: Vec<String> = (0..OPENED).map(|_| open_session(&a, TOKEN_A)).collect();
    let ping = r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#;
    let live: Vec<bool> = ids
        .iter()
        .map(|id| in_session(&a, "POST", TOKEN_A, id, ping).0 == 200)
        .collect();
    let live_count = live.iter().filter(|l| **l).count();
    let b_alive = in_session(&a, "POST", TOKEN_B, &b, ping).0 == 200;
    println!(
        "{OPENED} initialize calls by one client in {} ms with a cap of {CAP}: {live_count} sessions live; \
         the other client's session alive: {b_alive}",
        started.elapsed().as_millis()
    );
    assert_eq!(live_count, CAP);
    assert!(
        live[OPENED - CAP..].iter().all(|l| *l),
        "the newest sessions must be the live ones"
    );
    assert!(b_alive, "one client's sessions evicted another's");
    assert!(s.log_text().contains("max_sessions_per_client"));
}

#[tokio::test]
async fn host_origin_and_absolute_targets_are_parsed_strictly() {
    const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let s = Server::start(&config(""));
    let a = addr(&s);
    let auth = format!("authorization: Bearer {TOKEN_A}");
    let cases = [
        (
            format!("POST /mcp HTTP/1.1\r\nhost: [::1]evil.example\r\n{auth}"),
            403,
        ),
        (
            format!("POST /mcp HTTP/1.1\r\nhost: [::1]evil.example:80\r\n{auth}"),
            403,
        ),
        (
            format!(
                "POST /mcp HTTP/1.1\r\nhost: {a}\r\norigin: http://[::1]evil.example\r\n{auth}"
            ),
            403,
        ),
        (
            format!("POST http://evil.example/mcp HTTP/1.1\r\nhost: {a}\r\n{auth}"),
            403,
        ),
        (
            format!("POST http://[::1]evil.example/mcp HTTP/1.1\r\nhost: {a}\r\n{auth}"),
            403,
        ),
        // The controls: the same requests, well-formed, pass.
        (
            format!("POST /mcp HTTP/1.1\r\nhost: [::1]:80\r\norigin: http://[::1]:5173\r\n{auth}"),
            200,
        ),
        (
            format!("POST http://{a}/mcp HTTP/1.1\r\nhost: {a}\r\n{auth}"),
            200,
        ),
    ];
    for (head, want) in &cases {
        let (status, text) = raw(&a, head, INIT);
        let first = head.lines().take(3).collect::<Vec<_>>().join(" | ");
        println!("{status} ← {first}");
        assert_eq!(status, *want, "{first}: {text}");
        if *want == 403 {
            assert!(text.contains("\"forbidden\""), "{text}");
        }
    }
}

#[tokio::test]
async fn past_max_connections_new_ones_get_503() {
    const CAP: usize = 16;
    let s = Server::start(&config(&format!(
        "max_connections: {CAP}, max_unauthenticated_connections: 64"
    )));
    let a = addr(&s);
    // Authenticated keep-alive connections fill the table.
    let mut held = Vec::new();
    for _ in 0..CAP {
        let mut t = TcpStream::connect(&a).expect("connect");
        t.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let req = format!(
            "POST /mcp HTTP/1.1\r\nhost: {a}\r\nauthorization: Bearer {TOKEN_A}\r\n\
             content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
             mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: execute_command\r\n\
             content-length: {}\r\n\r\n{CALL_ECHO}",
            CALL_ECHO.len()
        );
        t.write_all(req.as_bytes()).expect("write");
        let mut buf = [0u8; 64];
        let n = t.read(&mut buf).expect("read");
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(t);
    }
    let (status, text) = raw(&a, &format!("GET /health HTTP/1.1\r\nhost: {a}"), "");
    println!("{CAP} connections open; the next one: {status}");
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("max_connections"));
    drop(held);
    assert!(eventually(Duration::from_secs(5), || raw(
        &a,
        &format!("GET /health HTTP/1.1\r\nhost: {a}"),
        ""
    )
    .0 == 200));
}
