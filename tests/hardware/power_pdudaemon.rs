//! The `pdudaemon` power backend against Debian's real pdudaemon: the daemon runs with a
//! `localcmdline` PDU (its driver runs a shell command per request; here it appends
//! `<port> on|off` to a file), gatecmd runs Debian's `pduclient` through its executor, and
//! `power_board` on, off and cycle are driven over MCP. A request the daemon refuses (a PDU
//! it does not know) is a failed action with pduclient's own words, and `gatecmd check`
//! prints the pduclient command line.

use crate::harness;

use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::*;
use serde_json::{Value, json};

const PDUDAEMON: &str = "/usr/sbin/pdudaemon";
const PDUCLIENT: &str = "/usr/bin/pduclient";
/// pduclient always dials this port of the daemon's host.
const PDUDAEMON_PORT: u16 = 16421;

/// A pdudaemon started by the test, stopped on drop.
struct Daemon {
    child: Child,
    /// The loopback address it listens on.
    addr: Ipv4Addr,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback address of this test's own: pduclient cannot be told another port than
/// 16421, so concurrent runs on one host each take an address of 127.0.0.0/8.
fn own_loopback_address() -> Ipv4Addr {
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    let [_, a, b, c] = seed.to_be_bytes();
    Ipv4Addr::new(127, a.max(1), b, c.clamp(2, 254))
}

/// Starts Debian's pdudaemon with one `localcmdline` PDU, `bench-pdu`, whose outlets write
/// `<port> on|off` lines to `outlets`; waits until it listens.
fn start_daemon(dir: &Path, outlets: &Path) -> Daemon {
    let addr = own_loopback_address();
    let conf = json!({
        "daemon": {"hostname": addr.to_string(), "port": PDUDAEMON_PORT, "listener": "tcp",
                   "logging_level": "DEBUG"},
        "pdus": {"bench-pdu": {
            "driver": "localcmdline",
            "cmd_on": format!("echo '%s on' >> {}", outlets.display()),
            "cmd_off": format!("echo '%s off' >> {}", outlets.display()),
        }},
    });
    let conf_path = dir.join("pdudaemon.conf");
    std::fs::write(&conf_path, conf.to_string()).expect("write pdudaemon.conf");
    let log = std::fs::File::create(dir.join("pdudaemon.log")).expect("pdudaemon log");
    let child = Command::new(PDUDAEMON)
        .arg("--conf")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn pdudaemon");
    let daemon = Daemon { child, addr };
    let at = SocketAddrV4::new(addr, PDUDAEMON_PORT);
    let listening = eventually(Duration::from_secs(30), || {
        TcpStream::connect_timeout(&at.into(), Duration::from_millis(200)).is_ok()
    });
    let log = std::fs::read_to_string(dir.join("pdudaemon.log")).unwrap_or_default();
    assert!(listening, "pdudaemon did not listen on {at}:\n{log}");
    daemon
}

fn config(daemon: Ipv4Addr) -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
boards:
  - name: rig
    usb: "2-1"
    power: {{pdudaemon: {{daemon: "{daemon}", pdu: bench-pdu, port: 3}}}}
  - name: stray
    usb: "2-2"
    power:
      pdudaemon: {{daemon: "{daemon}", pdu: no-such-pdu, port: 1}}
"#
    )
}

fn argv(daemon: Ipv4Addr, pdu: &str, port: u32, command: &str) -> Value {
    json!([
        PDUCLIENT,
        "--daemon",
        daemon.to_string(),
        "--hostname",
        pdu,
        "--port",
        port.to_string(),
        "--command",
        command
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_board_drives_a_pdu_through_pdudaemon() {
    let test = "power_board_drives_a_pdu_through_pdudaemon";
    if !Path::new(PDUDAEMON).exists() || !Path::new(PDUCLIENT).exists() {
        return skip(
            test,
            Unavailable::InstalledByCi,
            "needs Debian's pdudaemon and pdudaemon-client (scripts/setup.sh --test)",
        );
    }
    let work = tempfile::tempdir().expect("tempdir");
    let outlets = work.path().join("outlets");
    let daemon = start_daemon(work.path(), &outlets);
    let s = Server::start(&config(daemon.addr));
    let switched = || std::fs::read_to_string(&outlets).unwrap_or_default();

    let a = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("a");
    let r = call(&a, "lock_board", json!({"board": "rig"})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let lease = structured(&r)["lease_id"].clone();

    // On, then off: pduclient returns once the daemon has switched the outlet.
    let r = call(
        &a,
        "power_board",
        json!({"board": "rig", "action": "on", "lease": lease}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let v = structured(&r);
    assert_eq!(v["argv"], json!([argv(daemon.addr, "bench-pdu", 3, "on")]));
    assert_eq!(
        (v["state"].as_str(), v["exit_code"].as_i64()),
        (Some("on"), Some(0))
    );
    assert_eq!(switched(), "3 on\n");
    let r = call(
        &a,
        "power_board",
        json!({"board": "rig", "action": "off", "lease": lease}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["state"], "off");
    assert_eq!(switched(), "3 on\n3 off\n");

    // A cycle is gatecmd's off, wait, on: two requests, in order, under the one lease.
    let started = Instant::now();
    let r = call(
        &a,
        "power_board",
        json!({"board": "rig", "action": "cycle", "off_secs": 1, "lease": lease}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let v = structured(&r);
    assert_eq!(
        v["argv"],
        json!([
            argv(daemon.addr, "bench-pdu", 3, "off"),
            argv(daemon.addr, "bench-pdu", 3, "on")
        ])
    );
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "off_secs waited"
    );
    assert_eq!(switched(), "3 on\n3 off\n3 off\n3 on\n");
    let l = call(&a, "list_boards", json!({})).await;
    assert_eq!(
        structured(&l)["boards"][0]["power"],
        json!({"backend": "pdudaemon", "state": "on"})
    );

    // A PDU the daemon does not know: it answers nack, pduclient exits 127 saying so, the
    // action fails and the board's state is unknown.
    let r = call(&a, "lock_board", json!({"board": "stray"})).await;
    let stray = structured(&r)["lease_id"].clone();
    let r = call(
        &a,
        "power_board",
        json!({"board": "stray", "action": "on", "lease": stray}),
    )
    .await;
    assert!(is_error(&r), "{}", text(&r));
    let v = structured(&r);
    assert_eq!(
        (v["state"].as_str(), v["exit_code"].as_i64()),
        (Some("unknown"), Some(127))
    );
    assert!(
        v["output"].as_str().is_some_and(|o| o.contains("nack")),
        "{v}"
    );
    assert_eq!(
        switched(),
        "3 on\n3 off\n3 off\n3 on\n",
        "nothing else switched"
    );
    let audit = crate::harness::settled_audit(s.path("state/audit.log")).unwrap_or_default();
    assert!(audit.contains("\"event\":\"power_board\""), "{audit}");

    // `gatecmd check` shows the command line each board's switch runs.
    let out = Command::new(env!("CARGO_BIN_EXE_gatecmd"))
        .arg("check")
        .arg("--config")
        .arg(s.path("config.yaml"))
        .output()
        .expect("run gatecmd check");
    let printed = String::from_utf8_lossy(&out.stdout);
    let line = format!(
        "rig: usb 2-1, power {PDUCLIENT} --daemon {} --hostname bench-pdu --port 3 --command on|off",
        daemon.addr
    );
    assert!(printed.contains(&line), "{printed}");
}
