//! The metrics rows: `/metrics` scrape time with 100 open sessions and 32 umockdev boards
//! (runs in the preloaded copy of the bench, beside the device figures), and what the
//! metric updates of one `execute_command` cost in-process, against 5 % of its 1 ms
//! overhead budget.

use std::time::{Duration, Instant};

use serde_json::json;

use super::harness::*;
use super::umockdev;
use super::{Row, Sizes, config, latency_row, pct, serve};

/// Boards in the testbed for the scrape row.
const BOARDS: u32 = 32;

/// Both rows; call under the umockdev preload.
pub async fn rows(z: &Sizes) -> Vec<Row> {
    vec![scrape(z).await, update_cost(z)]
}

async fn scrape(z: &Sizes) -> Row {
    let tb = umockdev::Testbed::new();
    tb.add_from_string(include_str!("../tests/fixtures/usb1-root-hub.umockdev"));
    for port in 2..2 + BOARDS {
        tb.add_from_string(&umockdev::rk3588_maskrom_at(port));
    }
    let root = tb.root_dir();
    let s = serve(
        &config(""),
        &[
            ("LD_PRELOAD", "libumockdev-preload.so.0"),
            ("UMOCKDEV_DIR", root.to_str().expect("utf8")),
        ],
    );
    let mut sessions = Vec::with_capacity(z.sessions);
    for i in 0..z.sessions {
        let token = if i % 2 == 0 { TOKEN_A } else { TOKEN_B };
        sessions.push(
            connect(&s.url, Some(token), Era::Legacy)
                .await
                .expect("connect"),
        );
    }
    // Some counters and a lease, so the scrape has series to write.
    call(&sessions[0], "execute_command", json!({"command": "true"})).await;
    call(&sessions[0], "lock_device", json!({"key": "usb:2207:350b"})).await;
    let http = reqwest::Client::new();
    let url = format!("{}/metrics", s.base);
    let get = || {
        http.get(&url)
            .header("authorization", format!("Bearer {TOKEN_A}"))
            .send()
    };
    let body = get().await.expect("scrape").text().await.expect("body");
    assert!(
        body.contains(&format!(
            "gatecmd_devices_attached{{kind=\"rockusb\",family=\"rockusb\",mode=\"maskrom\"}} {BOARDS}"
        )),
        "the scrape does not show the {BOARDS} boards:\n{body}"
    );
    let mut lat = Vec::with_capacity(z.calls);
    for _ in 0..z.calls {
        let t = Instant::now();
        let resp = get().await.expect("scrape");
        let _ = resp.bytes().await.expect("body");
        lat.push(t.elapsed());
    }
    let p99 = pct(&mut lat, 0.99);
    latency_row(
        &format!(
            "GET /metrics, {} sessions, {BOARDS} boards ({} KiB)",
            z.sessions,
            body.len() / 1024
        ),
        &mut lat,
        "p99 ≤ 5 ms",
        Some(p99 <= Duration::from_millis(5)),
    )
}

/// The metric updates one allowed `execute_command` makes (a count with its duration, the
/// running gauge, a lock taken at once, two audit lines, the HTTP answer), timed here.
fn update_cost(z: &Sizes) -> Row {
    use gatecmd_core::metrics::*;
    let rounds = z.calls * 10;
    let mut lat = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let running = command_running("true", "bench-a");
        lock_taken_at_once(false);
        audit_record(AuditResult::Written);
        running.finish(CommandOutcome::Ok, None, Some(Duration::from_micros(700)));
        audit_record(AuditResult::Written);
        http_answer(route_of("/mcp"), 200);
        lat.push(t.elapsed());
    }
    let median = pct(&mut lat, 0.5);
    latency_row(
        "metric updates of one execute_command (in-process)",
        &mut lat,
        "≤ 5 % of 1 ms (50 µs)",
        Some(median <= Duration::from_micros(50)),
    )
}
