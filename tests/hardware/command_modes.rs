//! What gatecmd knows of a board, used for commands (issue 47): a command that fails on a
//! device in a mode its pattern does not work in (`modes:`) is told the mode and the call
//! that gets there; `flash.loaders` holds for a command's loader arguments (`loader_args:`)
//! as for flash_board, before anything runs; `list_boards` shows the flashing policy per
//! board; the audit's lock lines name the file the caller named. The real server, a real
//! MCP client, a umockdev RK3588 in MaskROM at port 1-2 and a tool script that logs its
//! arguments.
#![cfg(feature = "udev")]

use crate::common;
use crate::harness;

use common::umockdev::{Testbed, is_inner_run, rerun_under_preload};
use common::{RK3588_MASKROM_1_2, ROOT_HUB};
use harness::*;
use serde_json::{Value, json};

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
file_roots: [$DIR/images]
devices:
  - name: rockusb
    match: {{vid: "2207"}}
flash:
  enabled: true
  loaders: [$DIR/images/loaders]
boards:
  - name: rk
    usb: "1-2"
commands:
  - name: rk
    binary: $DIR/rk.sh
    device: rockusb
    destructive: true
    params:
      lba: "[0-9]{{1,10}}"
    allowed_args:
      - pattern: db {{loader}}
        file_args: [loader]
        loader_args: [loader]
        modes: [maskrom]
      - pattern: ul {{loader}}
        file_args: [loader]
        loader_args: [loader]
        modes: [loader]
      - pattern: wl {{lba}} {{image}}
        file_args: [image]
        modes: [loader]
      - pattern: ld
"#
    )
}

async fn exec(c: &Client, args: Value) -> Value {
    let r = call(
        c,
        "execute_command",
        json!({"command": "rk", "args": args, "board": "rk"}),
    )
    .await;
    structured(&r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_and_loaders_are_used_for_commands() {
    if !is_inner_run() {
        return rerun_under_preload(module_path!(), "modes_and_loaders_are_used_for_commands");
    }
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    tb.add_from_string(RK3588_MASKROM_1_2);
    let root = tb.root_dir();
    let s = Server::start_with(
        &config(),
        &[],
        &[
            ("LD_PRELOAD", "libumockdev-preload.so.0"),
            ("UMOCKDEV_DIR", root.to_str().expect("utf8")),
        ],
    );
    let dir = s.dir.path().to_path_buf();
    // The tool: logs its first argument; `wl` fails as rkdeveloptool's does in MaskROM.
    script(
        &dir,
        "rk.sh",
        &format!(
            "echo \"$1\" >> {}/ran\nif [ \"$1\" = wl ]; then echo 'Write LBA failed!'; exit 1; fi",
            dir.display()
        ),
    );
    let loaders = dir.join("images/loaders");
    std::fs::create_dir_all(&loaders).expect("mkdir");
    std::fs::write(loaders.join("rk3588_loader.bin"), b"loader").expect("write");
    std::fs::write(dir.join("images/evil.bin"), b"evil").expect("write");
    std::fs::write(dir.join("images/disk.img"), b"image").expect("write");
    let c = connect(&s.url, Some(TOKEN_A), Era::Modern)
        .await
        .expect("connect");
    let ran = || std::fs::read_to_string(dir.join("ran")).unwrap_or_default();

    // list_boards: flashing on for this client, the allowed loader files by name.
    let v = structured(&call(&c, "list_boards", json!({})).await);
    let flash = &v["boards"][0]["flash"];
    assert_eq!(flash["enabled"], true, "{v}");
    assert_eq!(
        flash["loaders"],
        json!([loaders.join("rk3588_loader.bin").display().to_string()]),
        "{v}"
    );

    // A loader the operator did not allow: refused before anything ran, naming the
    // allowed files; `ul` likewise.
    for word in ["db", "ul"] {
        let v = exec(&c, json!([word, "evil.bin"])).await;
        assert_eq!(v["refusal"]["reason"], "not_permitted", "{v}");
        let msg = v["refusal"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("flash.loaders") && msg.contains("loaders/rk3588_loader.bin"),
            "{msg}"
        );
    }
    assert_eq!(ran(), "", "a refused loader ran the tool");

    // `wl` in MaskROM fails; the answer says why and names the step that gets there.
    let v = exec(&c, json!(["wl", "0", "disk.img"])).await;
    assert_eq!(v["exit_code"], 1, "{v}");
    let hint = v["mode_hint"].as_str().unwrap_or_default();
    for part in [
        "device 1-2 is in maskrom mode",
        "`rk wl {lba} {image}` works in loader mode",
        "execute_command {command: \"rk\", args: [\"db\", \"{loader}\"], device: \"1-2\"}",
        "flash_board {board: \"rk\"",
    ] {
        assert!(hint.contains(part), "{part:?} missing from {hint}");
    }
    // `ul` works in Loader mode only: from MaskROM the step is the loader too.
    let allowed = "loaders/rk3588_loader.bin";
    let v = exec(&c, json!(["ul", allowed])).await;
    assert!(v.get("mode_hint").is_none(), "ul succeeded: no hint {v}");

    // An allowed loader runs, and the lock's audit line names it, not the link the tool got.
    let v = exec(&c, json!(["db", allowed])).await;
    assert_eq!(v["exit_code"], 0, "{v}");
    assert!(v.get("mode_hint").is_none(), "{v}");
    assert_eq!(ran(), "wl\nul\ndb\n");
    let audit = crate::harness::settled_audit(s.path("state/audit.log")).unwrap_or_default();
    let locks: Vec<&str> = audit
        .lines()
        .filter(|l| l.contains("\"event\":\"lock\"") && l.contains("rk db"))
        .collect();
    assert!(!locks.is_empty(), "no lock line for the db:\n{audit}");
    for l in locks {
        assert!(
            l.contains(&format!(
                "rk db {}",
                loaders.join("rk3588_loader.bin").display()
            )),
            "{l}"
        );
    }
    assert!(
        !audit.contains("gatecmd-args-"),
        "the audit names a temporary link:\n{audit}"
    );
}
