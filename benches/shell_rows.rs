//! `board_run` rows (issue #24): `board_run {command: "echo hi"}` round trips over a
//! console played on a pty by the board simulator of the tests (tests/sim_board: echoing
//! shell, coloured prompt), whose output is paced at the line rate, since a pty has none:
//! 115200 and 1.5 Mbaud (10 bits a byte). Each call is a newline probe, the command line,
//! the status line and their echoes and answers: about 150 bytes each way.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;
use crate::sim_board::{self, Start};
use crate::{Row, Sizes, latency_row, serve};

/// Which board answers: the tests' simulator, or an ordinary interactive bash (Debian's
/// coloured prompt with its window title, bracketed paste, readline) on a pty of its own,
/// joined to the server's by a relay paced at the baud rate (issue 29).
#[derive(Clone, Copy)]
enum Board {
    Sim,
    Bash,
}

/// One row per board and baud rate; `z.events` calls each.
pub async fn rows(z: &Sizes) -> Vec<Row> {
    let mut rows = vec![];
    for (board, baud) in [
        (Board::Sim, 115_200u32),
        (Board::Sim, 1_500_000),
        (Board::Bash, 115_200),
    ] {
        let s = serve(
            &format!(
                r#"
clients:
  - name: bench-a
    token: {TOKEN_A}
boards:
  - name: sim
    usb: "1-2"
    console: {{path: $DIR/ttyBOARD, baud: {baud}}}
"#
            ),
            &[],
        );
        match board {
            Board::Sim => sim_board::plug(&s.path("ttyBOARD"), Start::Shell, baud, None),
            Board::Bash => sim_board::plug_bash(&s.path("ttyBOARD"), baud),
        }
        let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
            .await
            .expect("connect");
        let lease = call(&c, "lock_board", json!({"board": "sim", "ttl_secs": 3600})).await;
        assert!(!is_error(&lease), "{}", text(&lease));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let l = call(&c, "list_boards", json!({})).await;
            if structured(&l)["boards"][0]["console"]["state"] == "open" {
                break;
            }
            assert!(Instant::now() < deadline, "the bench console never opened");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut lat = Vec::with_capacity(z.events);
        for _ in 0..z.events.max(3) {
            let t0 = Instant::now();
            let r = call(
                &c,
                "board_run",
                json!({"board": "sim", "command": "echo hi"}),
            )
            .await;
            lat.push(t0.elapsed());
            let v = structured(&r);
            assert_eq!(
                (v["output"].as_str(), v["exit_code"].as_i64()),
                (Some("hi\n"), Some(0)),
                "{v}"
            );
        }
        rows.push(latency_row(
            &match board {
                Board::Sim => {
                    format!("board_run \"echo hi\" round trip over the console at {baud} baud")
                }
                Board::Bash => format!(
                    "board_run \"echo hi\" on an interactive bash (pty, coloured prompt, bracketed paste) at {baud} baud"
                ),
            },
            &mut lat,
            "",
            None,
        ));
        if matches!(board, Board::Bash) {
            rows.push(plan_row(&c, z).await);
        }
    }
    rows
}

/// Issue 50: `run_test_plan` of ten `echo hi` steps (each judged by its exit code and an
/// `expect`) on the interactive bash, per step: the whole call's time over ten.
async fn plan_row(c: &Client, z: &Sizes) -> Row {
    let steps: Vec<_> = (0..10)
        .map(|i| json!({"name": format!("s{i}"), "run": "echo hi", "expect": "^hi$"}))
        .collect();
    let plan = json!({"name": "bench", "steps": steps});
    let mut lat = Vec::new();
    for _ in 0..(z.events / 10).max(3) {
        let t0 = Instant::now();
        let r = call(c, "run_test_plan", json!({"board": "sim", "plan": plan})).await;
        lat.push(t0.elapsed() / 10);
        let v = structured(&r);
        assert_eq!(v["verdict"], "pass", "{v}");
    }
    latency_row(
        "run_test_plan of 10 \"echo hi\" steps on the interactive bash at 115200 baud, per step",
        &mut lat,
        "",
        None,
    )
}
