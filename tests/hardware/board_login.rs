//! `board_run` at a login prompt on a board whose operator configured no `console.login`:
//! the agent is told both ways in (board_run's `login`, or console_write), can log in with
//! the user and password it gives (never written to the audit log), and a configured
//! login still wins over the caller's. The real binary, a real MCP client over loopback,
//! pseudo-terminals playing the boards (tests/sim_board).

use crate::harness;
use crate::sim_board;

use std::time::{Duration, Instant};

use harness::{Era, Server, TOKEN_A, call, connect, structured};
use serde_json::{Value, json};
use sim_board::Start;

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
boards:
  - name: open
    usb: "1-2"
    console: {{path: $DIR/ttyOPEN, baud: 115200}}
  - name: managed
    usb: "1-3"
    console: {{path: $DIR/ttyMANAGED, baud: 115200, login: {{user: root, password_env: SIM_PW}}}}
"#
    )
}

async fn lease(a: &harness::Client, board: &str) -> String {
    let l = structured(&call(a, "lock_board", json!({"board": board})).await);
    let id = l["lease_id"].as_str().unwrap_or_default().to_string();
    assert!(!id.is_empty(), "{l}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = structured(&call(a, "list_boards", json!({})).await);
        let open = v["boards"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|b| b["name"] == board && b["console"]["state"] == "open");
        if open {
            return id;
        }
        assert!(Instant::now() < deadline, "the console never opened: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn run(a: &harness::Client, board: &str, lease: &str, login: Option<Value>) -> Value {
    let mut args =
        json!({"board": board, "command": "echo in", "lease": lease, "timeout_secs": 10});
    if let Some(l) = login {
        args["login"] = l;
    }
    structured(&call(a, "board_run", args).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_logs_in_with_its_own_user_or_is_told_how() {
    let s = Server::start_with(&config(), &[], &[("SIM_PW", sim_board::PASSWORD)]);
    sim_board::plug(&s.path("ttyOPEN"), Start::Login, 115200, None);
    sim_board::plug(&s.path("ttyMANAGED"), Start::Login, 115200, None);
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let open = lease(&a, "open").await;

    // No login anywhere: a reason of its own, naming both ways in with real arguments.
    let v = run(&a, "open", &open, None).await;
    assert_eq!(v["refusal"]["reason"], "login_needed", "{v}");
    let msg = v["refusal"]["message"].as_str().unwrap_or_default();
    for part in [
        "board_run again with login: {user:",
        "console_write {board: \"open\", text: \"root\\n\"}",
        "console_read {board: \"open\", wait_for:",
    ] {
        assert!(msg.contains(part), "{part:?} missing from {msg}");
    }

    // A user but no password, and the board asks one: told to add it.
    let v = run(&a, "open", &open, Some(json!({"user": "root"}))).await;
    assert_eq!(v["refusal"]["reason"], "login_needed", "{v}");
    assert!(
        v["refusal"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("password"),
        "{v}"
    );

    // A line end in the user name would type a second line: refused, nothing typed.
    let v = run(&a, "open", &open, Some(json!({"user": "root\nreboot"}))).await;
    assert_eq!(v["refusal"]["reason"], "forbidden_character", "{v}");

    // The caller's user and password log it in (the board was left at its password
    // prompt: the probe's newline fails that login and brings the login prompt back).
    let login = json!({"user": "root", "password": sim_board::PASSWORD});
    let v = run(&a, "open", &open, Some(login)).await;
    assert_eq!(
        (v["logged_in"].clone(), v["output"].clone()),
        (json!(true), json!("in\n")),
        "{v}"
    );

    // The operator's login wins: a wrong caller user changes nothing.
    let managed = lease(&a, "managed").await;
    let v = run(&a, "managed", &managed, Some(json!({"user": "nobody"}))).await;
    assert_eq!(
        (v["logged_in"].clone(), v["exit_code"].clone()),
        (json!(true), json!(0)),
        "{v}"
    );

    let audit = crate::harness::settled_audit(s.path("state/audit.log")).unwrap_or_default();
    assert!(
        audit.contains("\"reason\":\"login_needed\""),
        "the refusal is audited:\n{audit}"
    );
    assert!(
        !audit.contains(sim_board::PASSWORD),
        "the caller's password reached the audit log"
    );
    let log = s.log_text();
    assert!(
        !log.contains(sim_board::PASSWORD),
        "the caller's password reached the server's log"
    );
}
