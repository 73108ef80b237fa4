//! The real server over real HTTP, driven by rmcp's client in both protocol revisions.

use crate::harness;

use std::time::Duration;

use harness::*;
use serde_json::json;

fn config(extra_commands: &str) -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
    commands: [echo]
file_roots: [$DIR/images]
commands:
  - name: echo
    binary: /bin/echo
    description: Print words.
    read_only: true
    allowed_args:
      - pattern: "{{word}}"
      - pattern: "hello {{word}}"
  - name: touch
    binary: $DIR/touch.sh
    description: Leave a marker file.
    allowed_args:
      - pattern: "{{word}}"
  - name: fail
    binary: /bin/false
    allowed_args:
      - pattern: ""
  - name: missing
    binary: /nonexistent/tool
    allowed_args:
      - pattern: ""
{extra_commands}
"#
    )
}

fn start() -> Server {
    let s = Server::start(&config(""));
    // Written after start: availability is checked at call time, not only at load.
    std::fs::create_dir_all(s.path("images")).expect("mkdir");
    script(
        s.dir.path(),
        "touch.sh",
        &format!("touch {}/marker-$1", s.dir.path().display()),
    );
    s
}

#[tokio::test]
async fn lists_and_runs_commands_in_both_eras() {
    let s = start();
    for era in ERAS {
        let c = connect(&s.url, Some(TOKEN_A), era).await.expect("connect");
        let info = c.peer_info().expect("server info");
        assert_eq!(
            info.server_info.as_ref().map(|i| i.name.as_str()),
            Some("gatecmd"),
            "{era:?}"
        );

        let tools = c.list_all_tools().await.expect("tools/list");
        let exec = tools
            .iter()
            .find(|t| t.name == "execute_command")
            .expect("execute_command");
        assert!(
            exec.output_schema.is_some(),
            "structured output is declared"
        );
        assert_eq!(
            exec.annotations.as_ref().and_then(|a| a.destructive_hint),
            Some(true)
        );
        let list = tools
            .iter()
            .find(|t| t.name == "list_commands")
            .expect("list_commands");
        assert_eq!(
            list.annotations.as_ref().and_then(|a| a.read_only_hint),
            Some(true)
        );

        let r = call(&c, "list_commands", json!({})).await;
        let names: Vec<String> = structured(&r)["commands"]
            .as_array()
            .expect("commands")
            .iter()
            .map(|c| c["name"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(names, ["echo", "touch", "fail", "missing"]);
        let missing = &structured(&r)["commands"][3];
        assert_eq!(missing["available"], json!(false));
        assert!(text(&r).contains("/bin/echo hello {word}"), "{}", text(&r));

        let r = call(
            &c,
            "execute_command",
            json!({"command": "echo", "args": ["hello", "world"]}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        let v = structured(&r);
        assert_eq!(v["stdout"], json!("hello world\n"));
        assert_eq!(v["exit_code"], json!(0));
        assert_eq!(v["argv"], json!(["/bin/echo", "hello", "world"]));
        assert_eq!(v["timed_out"], json!(false));
        assert!(text(&r).contains("hello world"));

        // A single string is split on whitespace.
        let r = call(
            &c,
            "execute_command",
            json!({"command": "echo", "args": "hello there"}),
        )
        .await;
        assert_eq!(structured(&r)["stdout"], json!("hello there\n"), "{era:?}");
        c.cancel().await.expect("close");
    }
}

/// The tool list an agent's client fetches, parses and compiles on every `tools/list` and
/// `list_changed` (issue 47): at most 64 KiB in all and 8 KiB a tool, measured as the wire
/// sends it (each tool as rmcp serialises it). Prints the figures docs/PERFORMANCE.md
/// quotes (`cargo test --test server mcp_http::tool_list_fits -- --nocapture`).
#[tokio::test]
async fn tool_list_fits_an_agents_budget() {
    const LIST_BYTES: usize = 64 * 1024;
    const TOOL_BYTES: usize = 8 * 1024;
    let s = start();
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let tools = c.list_all_tools().await.expect("tools/list");
    let total = serde_json::to_vec(&json!({ "tools": &tools }))
        .expect("serialise")
        .len();
    let mut rows: Vec<(usize, String, usize, usize, usize)> = tools
        .iter()
        .map(|t| {
            let len = |v: serde_json::Value| serde_json::to_vec(&v).expect("serialise").len();
            (
                len(serde_json::to_value(t).expect("tool")),
                t.name.to_string(),
                t.description.as_deref().map_or(0, str::len),
                len(serde_json::Value::Object((*t.input_schema).clone())),
                t.output_schema
                    .as_ref()
                    .map_or(0, |o| len(serde_json::Value::Object((**o).clone()))),
            )
        })
        .collect();
    rows.sort_by(|a, b| b.cmp(a));
    println!("tools/list: {total} bytes, {} tools", tools.len());
    println!(
        "{:<16} {:>6} {:>6} {:>6} {:>6}",
        "tool", "entry", "desc", "input", "output"
    );
    for (entry, name, desc, input, output) in &rows {
        println!("{name:<16} {entry:>6} {desc:>6} {input:>6} {output:>6}");
    }
    assert!(
        total <= LIST_BYTES,
        "tools/list is {total} bytes, over {LIST_BYTES}"
    );
    for (entry, name, ..) in &rows {
        assert!(
            *entry <= TOOL_BYTES,
            "{name}'s entry is {entry} bytes, over {TOOL_BYTES}"
        );
    }
    // Lean, not empty: every tool keeps a description, an input schema and an output schema
    // whose answer fields are named.
    for t in &tools {
        assert!(
            t.description.as_deref().is_some_and(|d| d.len() > 40),
            "{}: no description",
            t.name
        );
        let out = t.output_schema.as_ref().expect("output schema");
        assert!(
            out.get("properties")
                .and_then(|p| p.as_object())
                .is_some_and(|p| !p.is_empty()),
            "{}: output schema names no field",
            t.name
        );
    }
    c.cancel().await.expect("close");
}

#[tokio::test]
async fn refusals_are_tool_errors_and_run_nothing() {
    let s = start();
    for era in ERAS {
        let c = connect(&s.url, Some(TOKEN_A), era).await.expect("connect");
        let marker = s.path("marker-x;id");
        let r = call(
            &c,
            "execute_command",
            json!({"command": "touch", "args": ["x;id"]}),
        )
        .await;
        assert!(is_error(&r));
        assert!(text(&r).contains("forbidden character ';'"), "{}", text(&r));
        let r = call(
            &c,
            "execute_command",
            json!({"command": "touch", "args": ["a", "b"]}),
        )
        .await;
        assert!(is_error(&r));
        assert!(text(&r).contains("too many arguments"), "{}", text(&r));
        let r = call(
            &c,
            "execute_command",
            json!({"command": "touch", "args": ["-rf"]}),
        )
        .await;
        assert!(text(&r).contains("starts with '-'"), "{}", text(&r));
        let r = call(
            &c,
            "execute_command",
            json!({"command": "rm", "args": ["-rf", "/"]}),
        )
        .await;
        assert!(is_error(&r));
        assert!(
            text(&r).contains(
                "unknown command \"rm\". Commands you may run: echo, touch, fail, missing"
            ),
            "{}",
            text(&r)
        );
        let r = call(&c, "execute_command", json!({"command": "missing"})).await;
        assert!(
            text(&r).contains("unavailable on this host"),
            "{}",
            text(&r)
        );
        assert!(!marker.exists());
        assert!(std::fs::read_dir(s.dir.path()).expect("ls").all(|e| {
            !e.expect("entry")
                .file_name()
                .to_string_lossy()
                .starts_with("marker")
        }));

        // A failing command is an error result that still carries the facts.
        let r = call(&c, "execute_command", json!({"command": "fail"})).await;
        assert!(is_error(&r));
        assert_eq!(structured(&r)["exit_code"], json!(1));
        assert!(text(&r).contains("exit code 1"));

        // The allowed form does run.
        let r = call(
            &c,
            "execute_command",
            json!({"command": "touch", "args": ["ok"]}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert!(s.path("marker-ok").exists());
        std::fs::remove_file(s.path("marker-ok")).expect("rm");
        c.cancel().await.expect("close");
    }
}

#[tokio::test]
async fn dry_run_runs_nothing() {
    let s = start();
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let r = call(
        &c,
        "execute_command",
        json!({"command": "touch", "args": ["dry"], "dry_run": true}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let v = structured(&r);
    assert_eq!(v["dry_run"], json!(true));
    assert_eq!(v["argv"][1], json!("dry"));
    assert!(v["exit_code"].is_null());
    // A dry run makes every check a real run makes, the wait limit included.
    let r = call(
        &c,
        "execute_command",
        json!({"command": "touch", "args": ["dry"], "dry_run": true, "wait_secs": 3601}),
    )
    .await;
    assert!(is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["refusal"]["reason"], "limit", "{}", text(&r));
    assert!(text(&r).contains("3601"), "{}", text(&r));
    // And it is the same refusal, word for word, as the real run's.
    let real = call(
        &c,
        "execute_command",
        json!({"command": "touch", "args": ["dry"], "wait_secs": 3601}),
    )
    .await;
    assert!(is_error(&real), "{}", text(&real));
    assert_eq!(structured(&real)["refusal"], structured(&r)["refusal"]);
    assert_eq!(text(&real), text(&r));
    // Then a real run: once its own "finished" line is logged, the server is done with the
    // dry run too, and every run logs such a line, so the log shows that only this one ran.
    let r = call(
        &c,
        "execute_command",
        json!({"command": "touch", "args": ["real"]}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert!(s.path("marker-real").exists());
    s.wait_for_log("the real run as finished", Duration::from_secs(5), |l| {
        l.contains("execute_command finished") && l.contains("command=touch")
    })
    .await;
    let finished = s.log_lines(|l| l.contains("execute_command finished"));
    assert_eq!(finished.len(), 1, "only the real run ran: {finished:?}");
    let allowed = s.log_lines(|l| l.contains("verdict=\"allowed\""));
    assert!(
        allowed.len() == 1 && allowed[0].contains(r#""real"]"#),
        "only the real run was allowed to start: {allowed:?}"
    );
    assert!(!s.path("marker-dry").exists(), "a dry run ran the command");
}

#[tokio::test]
async fn client_command_restrictions_apply() {
    let s = start();
    let c = connect(&s.url, Some(TOKEN_B), Era::Legacy)
        .await
        .expect("connect");
    let r = call(&c, "list_commands", json!({})).await;
    assert_eq!(structured(&r)["commands"].as_array().map(Vec::len), Some(1));
    let r = call(
        &c,
        "execute_command",
        json!({"command": "touch", "args": ["b"]}),
    )
    .await;
    assert!(is_error(&r));
    assert!(
        text(&r).contains("Commands you may run: echo."),
        "{}",
        text(&r)
    );
    assert!(!s.path("marker-b").exists());
    // The client name reaches the handler and the log.
    let r = call(
        &c,
        "execute_command",
        json!({"command": "echo", "args": ["hi"]}),
    )
    .await;
    assert!(!is_error(&r));
    assert!(
        eventually(Duration::from_secs(2), || s
            .log_text()
            .contains("client=vm-b")),
        "{}",
        s.log_text()
    );
    assert!(!s.log_text().contains(TOKEN_B), "a token reached the log");
}

#[tokio::test]
async fn timeout_secs_is_bounded_by_the_command() {
    let s = start();
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let r = call(
        &c,
        "execute_command",
        json!({"command": "echo", "args": ["x"], "timeout_secs": 100000}),
    )
    .await;
    assert!(is_error(&r));
    assert!(
        text(&r).contains("exceeds this command's limit of 60 s"),
        "{}",
        text(&r)
    );
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#;
const CALL: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_command","arguments":{"command":"touch","args":["auth"]},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

async fn post(s: &Server, headers: &[(&str, &str)], body: &str) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if body.contains("tools/call") {
        req = req
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "execute_command");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("http")
}

#[tokio::test]
async fn bad_credentials_get_401_and_run_nothing() {
    let s = start();
    let good = format!("Bearer {TOKEN_A}");
    let cases = [
        None,
        Some(format!("bearer {TOKEN_A}")),
        Some(format!("BEARER {TOKEN_A}")),
        Some(format!("Bearer  {TOKEN_A}")),
        Some(format!("Bearer {TOKEN_A}x")),
        Some("Bearer wrong".into()),
        Some(format!("Basic {TOKEN_A}")),
        Some(TOKEN_A.to_string()),
    ];
    for auth in &cases {
        for body in [INIT, CALL] {
            let headers: Vec<(&str, &str)> =
                auth.iter().map(|a| ("authorization", a.as_str())).collect();
            let r = post(&s, &headers, body).await;
            assert_eq!(r.status(), 401, "{auth:?}");
            let www = r
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            assert!(www.starts_with("Bearer"), "{www}");
            let v: serde_json::Value = r.json().await.expect("json body");
            assert_eq!(v["error"], json!("unauthorized"));
        }
    }
    assert!(
        !s.path("marker-auth").exists(),
        "an unauthenticated call ran"
    );
    // The same call with the right header works (so the refusals above were about auth).
    let r = post(&s, &[("authorization", &good)], CALL).await;
    let status = r.status();
    let body = r.text().await.unwrap_or_default();
    assert_eq!(status, 200, "{body}");
    assert!(eventually(Duration::from_secs(3), || s
        .path("marker-auth")
        .exists()));
    // Every run logs a "finished" line: once this one's is there, exactly one means none of
    // the refused calls above ran (no waiting for something that should not happen).
    s.wait_for_log(
        "the authenticated run as finished",
        Duration::from_secs(5),
        |l| l.contains("execute_command finished") && l.contains("command=touch"),
    )
    .await;
    let finished = s.log_lines(|l| l.contains("execute_command finished"));
    assert_eq!(
        finished.len(),
        1,
        "only the authenticated call ran: {finished:?}"
    );
    let allowed = s.log_lines(|l| l.contains("verdict=\"allowed\""));
    assert!(
        allowed.len() == 1 && allowed[0].contains(r#""auth"]"#),
        "only the authenticated call was allowed to start: {allowed:?}"
    );
    // The rmcp client with a wrong token fails to connect.
    assert!(connect(&s.url, Some("nope"), Era::Legacy).await.is_err());
    assert!(connect(&s.url, None, Era::Modern).await.is_err());
}

#[tokio::test]
async fn origin_and_host_checks() {
    let s = start();
    let auth = format!("Bearer {TOKEN_A}");
    let a = ("authorization", auth.as_str());
    let r = post(&s, &[a, ("origin", "http://evil.example")], INIT).await;
    assert_eq!(r.status(), 403);
    let v: serde_json::Value = r.json().await.expect("json");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or_default()
            .contains("allowed_origins")
    );
    // Refused before auth: a bad Origin without a token is 403, not 401.
    assert_eq!(
        post(&s, &[("origin", "http://evil.example")], INIT)
            .await
            .status(),
        403
    );
    assert_eq!(
        post(&s, &[a, ("origin", "http://localhost:5173")], INIT)
            .await
            .status(),
        200
    );
    let port = s
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .unwrap_or("0")
        .to_string();
    let evil_host = format!("evil.example:{port}");
    assert_eq!(
        post(&s, &[a, ("host", &evil_host)], INIT).await.status(),
        403
    );
    let nat = format!("10.0.2.2:{port}");
    assert_eq!(
        post(&s, &[a, ("host", &nat)], INIT).await.status(),
        200,
        "a NAT guest's Host is accepted"
    );
}

#[tokio::test]
async fn health_needs_no_auth_and_says_nothing_secret() {
    let s = start();
    let r = reqwest::get(format!("{}/health", s.base))
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    let body = r.text().await.expect("body");
    assert!(body.contains("\"status\":\"ok\""));
    assert!(!body.contains(TOKEN_A) && !body.contains("vm-a"));
}

#[test]
fn no_auth_is_refused_off_loopback() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatecmd"))
        .args(["serve", "--no-auth", "--bind", "0.0.0.0:0"])
        .env("GATECMD_CONFIG", "")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--no-auth is refused on 0.0.0.0:0"), "{err}");
}

#[tokio::test]
async fn no_auth_on_loopback_serves_anonymous() {
    let s = Server::start_with(&config(""), &["--no-auth"], &[]);
    let c = connect(&s.url, None, Era::Legacy)
        .await
        .expect("connect without token");
    let r = call(
        &c,
        "execute_command",
        json!({"command": "echo", "args": ["open"]}),
    )
    .await;
    assert_eq!(structured(&r)["stdout"], json!("open\n"));
}

#[tokio::test]
async fn generated_token_when_none_is_configured() {
    let yaml = "commands:\n  - name: echo\n    binary: /bin/echo\n    allowed_args: [{pattern: \"{w}\"}]\n";
    let s = Server::start(yaml);
    let token_path = s.path("state/token");
    assert!(
        eventually(Duration::from_secs(2), || s
            .log_text()
            .contains("generated into")),
        "{}",
        s.log_text()
    );
    let token = std::fs::read_to_string(&token_path).expect("token file");
    assert!(
        !s.log_text().contains(token.trim()),
        "the generated token was printed"
    );
    let c = connect(&s.url, Some(token.trim()), Era::Modern)
        .await
        .expect("connect");
    let r = call(
        &c,
        "execute_command",
        json!({"command": "echo", "args": ["gen"]}),
    )
    .await;
    assert_eq!(structured(&r)["stdout"], json!("gen\n"));
}

/// A POST answered within the JSON window (src/transport/json_answer.rs) gets one JSON body, in both
/// eras, with the session header kept; one that takes longer gets the SSE stream, whose
/// headers come when the window ends, long before the answer.
#[tokio::test]
async fn quick_answers_are_json_and_slow_ones_stream() {
    let s = Server::start(&config(
        r#"  - name: sleeper
    binary: /bin/sleep
    params: {n: "[0-9]"}
    allowed_args:
      - pattern: "{n}""#,
    ));
    script(s.dir.path(), "touch.sh", "exit 0");
    let auth = format!("Bearer {TOKEN_A}");
    let content_type = |r: &reqwest::Response| {
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };

    // Legacy: initialize, then a call in the session.
    let r = post(&s, &[("authorization", &auth)], INIT).await;
    assert_eq!(r.status(), 200);
    assert_eq!(content_type(&r), "application/json");
    let session = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("session id on a JSON initialize answer")
        .to_string();
    let init: serde_json::Value = r.json().await.expect("json");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    // In the session (`post` adds 2026-07-28 headers to tool calls; these go without).
    let in_session = |body: &'static str| {
        reqwest::Client::new()
            .post(&s.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", &auth)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .body(body)
            .send()
    };
    let r = in_session(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await
        .expect("http");
    assert_eq!(r.status(), 202);
    let echo = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"execute_command","arguments":{"command":"echo","args":["hello","there"]}}}"#;
    let r = in_session(echo).await.expect("http");
    assert_eq!(content_type(&r), "application/json");
    let v: serde_json::Value = r.json().await.expect("json");
    assert_eq!(v["id"], 5);
    assert_eq!(
        v["result"]["structuredContent"]["stdout"], "hello there\n",
        "{v}"
    );

    // 2026-07-28, stateless: the same, whether rmcp answers a quick tool as JSON itself or
    // the window catches a command's answer.
    let r = post(&s, &[("authorization", &auth)], CALL).await;
    assert_eq!(content_type(&r), "application/json");
    let v: serde_json::Value = r.json().await.expect("json");
    assert_eq!(v["result"]["isError"], false, "{v}");
    let r = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", &auth)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "list_commands")
        .body(
            CALL.replace("execute_command", "list_commands")
                .replace(r#"{"command":"touch","args":["auth"]}"#, "{}"),
        )
        .send()
        .await
        .expect("http");
    assert_eq!(content_type(&r), "application/json");
    let v: serde_json::Value = r.json().await.expect("json");
    assert!(
        v["result"]["structuredContent"]["commands"].is_array(),
        "{v}"
    );
    let slow_modern = CALL.replace(
        r#"{"command":"touch","args":["auth"]}"#,
        r#"{"command":"sleeper","args":["3"]}"#,
    );
    // rmcp holds a 2026-07-28 call's headers until its first message; the layer does not.
    let t = std::time::Instant::now();
    let r = post(&s, &[("authorization", &auth)], &slow_modern).await;
    let headers_after = t.elapsed();
    assert_eq!(content_type(&r), "text/event-stream", "a long call streams");
    let body = r.text().await.expect("body");
    assert!(
        headers_after < Duration::from_millis(2900) && t.elapsed() >= Duration::from_secs(3),
        "headers after {headers_after:?}, answer after {:?}",
        t.elapsed()
    );
    assert!(body.starts_with(":\n\n"), "a keep-alive first: {body:?}");
    assert!(
        body.contains("data: {") && body.contains("\"exit_code\":0"),
        "{body}"
    );

    // Slower than the window: the stream, with the answer as its event.
    let slow = r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"execute_command","arguments":{"command":"sleeper","args":["4"]}}}"#;
    let t = std::time::Instant::now();
    let r = in_session(slow).await.expect("http");
    let headers_after = t.elapsed();
    assert_eq!(content_type(&r), "text/event-stream");
    let body = r.text().await.expect("body");
    let body_after = t.elapsed();
    assert!(
        headers_after < Duration::from_millis(3500) && body_after >= Duration::from_secs(4),
        "headers after {headers_after:?}, answer after {body_after:?}"
    );
    let answer = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .find(|d| d.contains("\"id\":6"))
        .expect("the answer event");
    let v: serde_json::Value = serde_json::from_str(answer).expect("json");
    assert_eq!(v["result"]["structuredContent"]["exit_code"], 0);

    // Ending the session: 204 (the Python SDK warns on anything but 200 or 204).
    let r = reqwest::Client::new()
        .delete(&s.url)
        .header("authorization", &auth)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), 204);
    let r = in_session(echo).await.expect("http");
    assert_eq!(r.status(), 404, "the session is gone");
}
