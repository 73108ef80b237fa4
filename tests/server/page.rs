//! The bench page over real HTTP against the real binary: what a visitor without a session
//! sees, sign-in and its cookie, CSRF and same-origin checks on every POST, Host checks,
//! viewers, the admin release, and the event stream following a lease taken over MCP.

use crate::harness;

use std::time::{Duration, Instant};

use harness::*;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

const ADMIN_TOKEN: &str = "token-for-ops-admin-5555555";

fn config(viewers: &str) -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
  - name: ops
    token: {ADMIN_TOKEN}
    admin: true
{viewers}
commands:
  - name: echo
    binary: /usr/bin/echo
    description: Print a word.
    params: {{a: "[a-z]+"}}
    allowed_args:
      - pattern: "{{a}}"
"#
    )
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// `Origin` of the page itself.
fn origin(s: &Server) -> String {
    s.base.clone()
}

/// Signs in with `token` from `from` (an Origin header value, or none).
async fn sign_in(s: &Server, token: &str, from: Option<&str>) -> reqwest::Response {
    let mut req = http()
        .post(format!("{}/signin", s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"));
    if let Some(o) = from {
        req = req.header("origin", o);
    }
    req.send().await.expect("POST /signin")
}

/// The session cookie (`name=value`) set by a sign-in answer.
fn session_cookie(r: &reqwest::Response) -> String {
    let set = r
        .headers()
        .get("set-cookie")
        .expect("a session cookie")
        .to_str()
        .expect("ascii");
    set.split(';').next().expect("name=value").to_string()
}

async fn signed_in(s: &Server, token: &str) -> String {
    let r = sign_in(s, token, Some(&origin(s))).await;
    assert_eq!(r.status(), 303, "sign-in with a right token");
    session_cookie(&r)
}

async fn get(s: &Server, path: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut req = http().get(format!("{}{path}", s.base));
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    req.send().await.expect("GET")
}

fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf-token\" content=\"")
        .expect("csrf meta")
        + 27;
    html[at..at + 64].to_string()
}

#[tokio::test]
async fn nothing_of_the_bench_without_a_session() {
    let s = Server::start(&config(""));
    let r = get(&s, "/", None).await;
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .expect("csp")
        .to_string();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"));
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    let body = r.text().await.expect("body");
    assert!(
        body.contains("action=\"/signin\""),
        "the sign-in form: {body}"
    );
    for bench in [
        "data-device",
        "Locks and leases",
        "vm-a",
        "csrf-token",
        "/events",
    ] {
        assert!(!body.contains(bench), "{bench:?} shown before sign-in");
    }
    for path in ["/state", "/events"] {
        assert_eq!(get(&s, path, None).await.status(), 401, "{path}");
    }
    // A made-up session id is no session.
    let fake = format!("gatecmd_page={}", "ab".repeat(32));
    assert_eq!(get(&s, "/state", Some(&fake)).await.status(), 401);
    // The assets carry no data and load without a session.
    assert_eq!(get(&s, "/page.js", None).await.status(), 200);
}

#[tokio::test]
async fn sign_in_sets_a_strict_http_only_cookie_and_refuses_wrong_tokens() {
    let s = Server::start(&config(""));
    let wrong = sign_in(&s, "not-a-token", Some(&origin(&s))).await;
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());
    assert!(wrong.text().await.expect("body").contains("not valid"));

    let r = sign_in(&s, TOKEN_A, Some(&origin(&s))).await;
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/");
    let set = r.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_string();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attr), "{attr} in {set}");
    }
    let cookie = session_cookie(&r);
    let id = cookie.strip_prefix("gatecmd_page=").expect("named");
    assert_eq!(id.len(), 64);
    assert!(
        !set.contains(TOKEN_A),
        "the cookie holds an id, not the token"
    );

    let page = get(&s, "/", Some(&cookie))
        .await
        .text()
        .await
        .expect("page");
    assert!(page.contains("Locks and leases") && page.contains("vm-a"));
    let state: Value = get(&s, "/state", Some(&cookie))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(state["viewer"]["client"], "vm-a");
    assert_eq!(state["viewer"]["admin"], false);
    assert_eq!(state["version"], env!("CARGO_PKG_VERSION"));
    assert!(state["source"].is_string() && state["decisions"].is_array());
    assert!(!s.log_text().contains(TOKEN_A), "no token in the log");
    // Saved for a restart as digests only.
    let saved = std::fs::read_to_string(s.path("state/page-sessions.json")).expect("saved");
    assert!(!saved.contains(id) && !saved.contains(TOKEN_A));
}

#[tokio::test]
async fn cross_origin_and_origin_less_posts_are_refused() {
    let s = Server::start(&config(""));
    // Another port on loopback is another origin, though /mcp's policy accepts it.
    let other = s
        .base
        .rsplit_once(':')
        .map(|(h, _)| format!("{h}:1"))
        .expect("port");
    for from in [
        Some(other.as_str()),
        Some("http://evil.example"),
        Some("null"),
        None,
    ] {
        let r = sign_in(&s, TOKEN_A, from).await;
        assert_eq!(r.status(), 403, "sign-in from {from:?}");
        assert!(r.headers().get("set-cookie").is_none());
    }
    let cookie = signed_in(&s, TOKEN_A).await;
    let page = get(&s, "/", Some(&cookie))
        .await
        .text()
        .await
        .expect("page");
    let csrf = csrf_of(&page);
    let post = |path: &'static str, from: Option<String>, body: String| {
        let mut req = http()
            .post(format!("{}{path}", s.base))
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(o) = from {
            req = req.header("origin", o);
        }
        req.send()
    };
    let r = post("/signout", Some(other.clone()), format!("csrf={csrf}"))
        .await
        .expect("post");
    assert_eq!(r.status(), 403, "cross-origin sign-out");
    let r = post("/signout", Some(origin(&s)), "csrf=wrong".into())
        .await
        .expect("post");
    assert_eq!(r.status(), 403, "wrong CSRF token");
    let r = post("/signout", Some(origin(&s)), String::new())
        .await
        .expect("post");
    assert_eq!(r.status(), 403, "no CSRF token");
    assert_eq!(
        get(&s, "/state", Some(&cookie)).await.status(),
        200,
        "still signed in"
    );
    let r = post("/signout", Some(origin(&s)), format!("csrf={csrf}"))
        .await
        .expect("post");
    assert_eq!(r.status(), 303);
    assert!(
        r.headers()["set-cookie"]
            .to_str()
            .expect("ascii")
            .contains("Max-Age=0")
    );
    assert_eq!(
        get(&s, "/state", Some(&cookie)).await.status(),
        401,
        "signed out"
    );
}

#[tokio::test]
async fn host_policy_and_viewers_apply() {
    let s = Server::start(&config("page:\n  viewers: [vm-a, ops]\n"));
    let mut h = HeaderMap::new();
    h.insert("host", HeaderValue::from_static("evil.example"));
    let r = http()
        .get(format!("{}/", s.base))
        .headers(h)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 403, "DNS rebinding: a foreign Host");
    // An absolute-form target names the host the client meant.
    let addr = s.base.trim_start_matches("http://").to_string();
    let status = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&addr).expect("connect");
        write!(
            c,
            "GET http://evil.example/ HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .expect("write");
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out.lines().next().unwrap_or_default().to_string()
    })
    .await
    .expect("join");
    assert!(status.contains(" 403 "), "{status}");
    // A NAT guest reaches the page as 10.0.2.2 (an allowed Host): its own origin is fine
    // for the page, though not a loopback origin.
    let port = s
        .base
        .rsplit_once(':')
        .map(|(_, p)| p.to_string())
        .expect("port");
    let nat = format!("10.0.2.2:{port}");
    let r = http()
        .post(format!("{}/signin", s.base))
        .header("host", &nat)
        .header("origin", format!("http://{nat}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN_A}"))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 303, "same origin by the NAT address");
    let cookie = session_cookie(&r);
    let r = http()
        .get(format!("{}/state", s.base))
        .header("host", &nat)
        .header("origin", format!("http://{nat}"))
        .header("cookie", cookie)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    let r = sign_in(&s, TOKEN_B, Some(&origin(&s))).await;
    assert_eq!(r.status(), 403, "vm-b is not a viewer");
    assert!(r.headers().get("set-cookie").is_none());
    signed_in(&s, TOKEN_A).await;
}

#[tokio::test]
async fn no_auth_on_loopback_serves_the_page_without_sign_in() {
    let s = Server::start_with(&config(""), &["--no-auth"], &[]);
    let page = get(&s, "/", None).await.text().await.expect("page");
    assert!(page.contains("Locks and leases"));
    let state: Value = get(&s, "/state", None).await.json().await.expect("json");
    assert_eq!(state["viewer"]["client"], "anonymous");
}

/// Reads the SSE body until a `snapshot` event satisfies `pred` or `deadline` passes.
async fn next_snapshot(
    resp: &mut reqwest::Response,
    buf: &mut String,
    deadline: Instant,
    pred: impl Fn(&Value) -> bool,
) -> Option<Value> {
    loop {
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            if let Some(data) = frame
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .filter(|_| frame.contains("event: snapshot"))
            {
                let v: Value = serde_json::from_str(data).expect("snapshot json");
                if pred(&v) {
                    return Some(v);
                }
            }
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        match tokio::time::timeout(left, resp.chunk()).await {
            Ok(Ok(Some(c))) => buf.push_str(&String::from_utf8_lossy(&c)),
            _ => return None,
        }
    }
}

#[tokio::test]
async fn the_stream_follows_a_lease_and_an_admin_releases_it() {
    let s = Server::start(&config(""));
    let cookie = signed_in(&s, ADMIN_TOKEN).await;
    let mut resp = get(&s, "/events", Some(&cookie)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut buf = String::new();
    let first = next_snapshot(
        &mut resp,
        &mut buf,
        Instant::now() + Duration::from_secs(5),
        |_| true,
    )
    .await
    .expect("a snapshot on connect");
    assert_eq!(first["viewer"]["admin"], true);

    let client = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    // A refusal reaches the page's decisions with its stable reason.
    let r = call(
        &client,
        "execute_command",
        json!({"command": "echo", "args": ["a;b"]}),
    )
    .await;
    assert!(is_error(&r));
    let refused = next_snapshot(
        &mut resp,
        &mut buf,
        Instant::now() + Duration::from_secs(2),
        |v| v["decisions"][0]["kind"] == "refused",
    )
    .await
    .expect("the refusal on the stream");
    assert!(
        refused["decisions"][0]["reason"].is_string(),
        "{}",
        refused["decisions"][0]
    );
    assert_eq!(refused["decisions"][0]["client"], "vm-a");
    let r = call(
        &client,
        "lock_device",
        json!({"key": "usb:2207:350b", "note": "flashing"}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let took = Instant::now();
    let seen = next_snapshot(&mut resp, &mut buf, took + Duration::from_secs(2), |v| {
        v["locks"].as_array().is_some_and(|l| {
            l.iter()
                .any(|k| k["key"] == "usb:2207:350b" && k["holder"] == "vm-a")
        })
    })
    .await
    .expect("the lease on the stream");
    let latency = took.elapsed();
    assert!(
        latency < Duration::from_millis(250),
        "lease → event in {latency:?}"
    );
    let lock = &seen["locks"][0];
    assert_eq!(lock["note"], "flashing");
    assert!(lock["expires_at"].is_string());
    assert!(
        !seen.to_string().contains("lease_id"),
        "no lease id on the page"
    );
    assert!(
        seen["decisions"][0]["event"] == "taken",
        "{}",
        seen["decisions"]
    );

    // Release from the page: an admin, same origin, CSRF token.
    let page = get(&s, "/", Some(&cookie))
        .await
        .text()
        .await
        .expect("page");
    let csrf = csrf_of(&page);
    let release = |token: Option<String>, cookie: String| {
        let mut req = http()
            .post(format!("{}/release", s.base))
            .header("cookie", cookie)
            .header("origin", origin(&s))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("key=usb:2207:350b");
        if let Some(t) = token {
            req = req.header("x-csrf-token", t);
        }
        req.send()
    };
    assert_eq!(
        release(None, cookie.clone()).await.expect("post").status(),
        403
    );
    let b_cookie = signed_in(&s, TOKEN_B).await;
    let b_page = get(&s, "/", Some(&b_cookie))
        .await
        .text()
        .await
        .expect("page");
    let r = release(Some(csrf_of(&b_page)), b_cookie)
        .await
        .expect("post");
    assert_eq!(r.status(), 403, "not an admin");
    let r = release(Some(csrf), cookie.clone()).await.expect("post");
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    let gone = next_snapshot(
        &mut resp,
        &mut buf,
        Instant::now() + Duration::from_secs(2),
        |v| v["decisions"][0]["event"] == "force_released",
    )
    .await
    .expect("the release on the stream");
    assert!(gone["locks"].as_array().is_some_and(|l| l.is_empty()));
    assert!(
        gone["decisions"][0]["what"]
            .as_str()
            .is_some_and(|w| w.contains("ops (bench page)"))
    );
    drop(client);
}
