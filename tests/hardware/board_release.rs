//! A board returned to a known state when its lease ends (`boards[].on_release`): off
//! after `unlock_device`, MaskROM after the lease expired, nothing for `keep`; each run
//! through the power runner and audited. The real server, a real MCP client, a power
//! switch that is a script logging what it was asked.

use crate::harness;

use std::time::Duration;

use harness::{Era, Server, TOKEN_A, TOKEN_B, call, connect, eventually, script, structured};

const OPS: &str = "ops-token-0123456789abcdef";
use serde_json::json;

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
  - name: ops
    token: {OPS}
    admin: true
commands:
  - name: power
    binary: $DIR/power.sh
    allowed_args:
      - pattern: "{{b}} {{what}}"
boards:
  - name: goes-off
    usb: "1-2"
    on_release: off
    power: {{on: {{command: power, args: "goes-off on"}}, off: {{command: power, args: "goes-off off"}}}}
  - name: to-maskrom
    usb: "1-3"
    on_release: maskrom
    power:
      on: {{command: power, args: "to-maskrom on"}}
      off: {{command: power, args: "to-maskrom off"}}
      maskrom: {{command: power, args: "to-maskrom maskrom"}}
  - name: kept
    usb: "1-4"
    power: {{on: {{command: power, args: "kept on"}}, off: {{command: power, args: "kept off"}}}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_is_switched_to_its_on_release_state_when_its_lease_ends() {
    let s = Server::start(&config());
    let dir = s.dir.path().to_path_buf();
    script(
        &dir,
        "power.sh",
        &format!("echo \"$1 $2\" >> {}/power.log", dir.display()),
    );
    let log = || std::fs::read_to_string(dir.join("power.log")).unwrap_or_default();
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let lease = |board: &'static str, ttl: Option<u64>| {
        let a = &a;
        async move {
            let mut args = json!({"board": board});
            if let Some(t) = ttl {
                args["ttl_secs"] = t.into();
            }
            let v = structured(&call(a, "lock_board", args).await);
            v["lease_id"].as_str().unwrap_or_default().to_string()
        }
    };

    // Unlocked: switched off.
    let l = lease("goes-off", None).await;
    let v = structured(&call(&a, "unlock_device", json!({"lease": l})).await);
    assert_eq!(v["released"], true, "{v}");
    assert!(
        eventually(Duration::from_secs(10), || log().contains("goes-off off")),
        "not switched off: {:?}",
        log()
    );

    // Expired: put into MaskROM.
    let _l = lease("to-maskrom", Some(1)).await;
    assert!(
        eventually(Duration::from_secs(15), || log()
            .contains("to-maskrom maskrom")),
        "not put into MaskROM: {:?}",
        log()
    );

    // keep (the default): nothing.
    let l = lease("kept", None).await;
    call(&a, "unlock_device", json!({"lease": l})).await;
    let audit = || crate::harness::settled_audit(s.path("state/audit.log")).unwrap_or_default();
    assert!(eventually(Duration::from_secs(10), || audit()
        .lines()
        .filter(|l| l.contains("\"event\":\"on_release\""))
        .count()
        == 2));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!log().contains("kept"), "{:?}", log());

    // Audited: who, which lease, how it ended, what was done.
    let text = audit();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["event"] == "on_release")
        .collect();
    let off = lines
        .iter()
        .find(|v| v["board"] == "goes-off")
        .expect("goes-off's line");
    assert_eq!(
        (
            &off["client"],
            &off["ended"],
            &off["action"],
            &off["outcome"]
        ),
        (
            &json!("vm-a"),
            &json!("released"),
            &json!("off"),
            &json!("ran")
        ),
        "{off}"
    );
    let maskrom = lines
        .iter()
        .find(|v| v["board"] == "to-maskrom")
        .expect("to-maskrom's line");
    assert_eq!(
        (&maskrom["ended"], &maskrom["action"], &maskrom["outcome"]),
        (&json!("expired"), &json!("maskrom"), &json!("ran")),
        "{maskrom}"
    );
    // And the power runner's own line, via on_release.
    assert!(
        text.lines()
            .any(|l| l.contains("\"via\":\"on_release\"") && l.contains("goes-off")),
        "{text}"
    );
}

fn bin() -> std::path::PathBuf {
    std::env::var_os("GATECMD_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_BIN_EXE_gatecmd")))
}

/// `gatecmd leases [end ID]` with `token`; (success, stdout, stderr).
async fn leases(url: &str, token: &str, args: &[&str]) -> (bool, String, String) {
    let (url, token) = (url.to_string(), token.to_string());
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(bin())
            .arg("leases")
            .args(&args)
            .args(["--url", &url])
            .env("GATECMD_TOKEN", token)
            .output()
            .expect("run gatecmd leases");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .expect("join")
}

/// The operator's `gatecmd leases`: an admin token lists every lease with its id and ends
/// one through the unlock use case (audited as force_released, on_release runs); another
/// client's token sees no other client's id and cannot end its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gatecmd_leases_lists_and_an_admin_ends_a_lease() {
    let s = Server::start(&config());
    let dir = s.dir.path().to_path_buf();
    script(
        &dir,
        "power.sh",
        &format!("echo \"$1 $2\" >> {}/power.log", dir.display()),
    );
    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let v = structured(
        &call(
            &a,
            "lock_board",
            json!({"board": "goes-off", "note": "flashing"}),
        )
        .await,
    );
    let id = v["lease_id"].as_str().unwrap_or_default().to_string();
    assert!(id.starts_with("lease-"), "{v}");

    let (ok, out, err) = leases(&s.url, OPS, &[]).await;
    assert!(ok, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("board:goes-off"))
        .unwrap_or_else(|| panic!("no row for the board:\n{out}"));
    assert!(
        row.contains("vm-a") && row.contains(&id) && row.contains("flashing"),
        "{row}"
    );

    // Another client sees the lease, not its id, and cannot end it.
    let (ok, out, _) = leases(&s.url, TOKEN_B, &[]).await;
    assert!(
        ok && out.contains("board:goes-off") && !out.contains(&id),
        "{out}"
    );
    let (ok, _, err) = leases(&s.url, TOKEN_B, &["end", &id]).await;
    assert!(!ok, "a non-admin ended another client's lease");
    assert!(err.contains("lease"), "{err}");

    // The admin ends it: released, audited as the operator's, and on_release runs.
    let (ok, out, err) = leases(&s.url, OPS, &["end", &id]).await;
    assert!(ok, "{err}");
    assert!(out.contains(&id) && out.contains("board:goes-off"), "{out}");
    let log = || std::fs::read_to_string(dir.join("power.log")).unwrap_or_default();
    assert!(
        eventually(Duration::from_secs(10), || log().contains("goes-off off")),
        "{:?}",
        log()
    );
    let audit = crate::harness::settled_audit(s.path("state/audit.log")).unwrap_or_default();
    assert!(
        audit
            .lines()
            .any(|l| l.contains("\"kind\":\"force_released\"") && l.contains("ops")),
        "{audit}"
    );
    let (ok, out, _) = leases(&s.url, OPS, &[]).await;
    assert!(ok && out.contains("no leases"), "{out}");
}

#[test]
fn on_release_needs_the_switch_it_names() {
    let bin = bin();
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.yaml");
    std::fs::write(
        &cfg,
        "boards:\n  - name: b\n    usb: \"1-2\"\n    on_release: maskrom\n",
    )
    .expect("write");
    let out = std::process::Command::new(bin)
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .expect("run check");
    let err =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("boards[0].on_release") && err.contains("power.maskrom"),
        "{err}"
    );
}
