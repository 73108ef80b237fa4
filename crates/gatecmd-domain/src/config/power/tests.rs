//! The power backends as configured: each form loads, its errors name file, line and field,
//! and its command line is the one documented.

use super::super::{Config, ConfigError};
use super::pdudaemon::{DEFAULT_PDUCLIENT, Listener};
use super::{PowerConfig, switch_spec};

fn errors(text: &str) -> Vec<ConfigError> {
    match Config::parse(text, "p.yaml") {
        Ok(_) => panic!("expected an error in:\n{text}"),
        Err(e) => e.0,
    }
}

fn board(power: &str) -> String {
    format!("boards:\n  - name: a\n    usb: \"1-2\"\n    power:\n{power}")
}

#[test]
fn a_pdudaemon_outlet_loads_with_its_defaults_and_runs_pduclient() {
    let c = Config::parse(
        &board("      pdudaemon: {daemon: pdu-server.lab, pdu: apc-1, port: 4}\n"),
        "p.yaml",
    )
    .expect("valid");
    let b = c.board("a").expect("board");
    let Some(PowerConfig::Pdudaemon(p)) = &b.power else {
        panic!("{:?}", b.power)
    };
    assert_eq!(p.listener, Listener::Tcp);
    assert_eq!(p.binary.to_str(), Some(DEFAULT_PDUCLIENT));
    assert_eq!(
        b.power.as_ref().map(PowerConfig::backend),
        Some("pdudaemon")
    );
    let spec = switch_spec(&c, b, false).expect("spec");
    assert_eq!(
        spec.args,
        [
            "--daemon",
            "pdu-server.lab",
            "--hostname",
            "apc-1",
            "--port",
            "4",
            "--command",
            "off"
        ]
    );
    assert!(b.power.as_ref().is_some_and(|p| p.commands().is_empty()));
    // Debian's shipped pdudaemon.conf listens over HTTP: pduclient --http.
    let c = Config::parse(
        &board("      pdudaemon: {daemon: localhost, pdu: x, port: 1, listener: http, binary: /opt/pduclient}\n"),
        "p.yaml",
    )
    .expect("valid");
    let b = c.board("a").expect("board");
    assert_eq!(
        b.power.as_ref().map(PowerConfig::describe).as_deref(),
        Some("/opt/pduclient --http --daemon localhost --hostname x --port 1 --command on|off")
    );
}

#[test]
fn pdudaemon_errors_name_line_and_field() {
    let e = errors(&board(
        "      pdudaemon:\n        daemon: \"-x\"\n        pdu: \"two words\"\n        port: 70000\n        binary: pduclient\n",
    ));
    let find = |f: &str| {
        e.iter()
            .find(|e| e.field == f)
            .unwrap_or_else(|| panic!("no error on {f}: {e:?}"))
    };
    assert_eq!(find("boards[0].power.pdudaemon.daemon").line, 6);
    assert_eq!(find("boards[0].power.pdudaemon.pdu").line, 7);
    assert!(
        find("boards[0].power.pdudaemon.port")
            .message
            .contains("0-65535")
    );
    assert!(
        find("boards[0].power.pdudaemon.binary")
            .message
            .contains("not an absolute path")
    );
    let e = errors(&board(
        "      pdudaemon: {daemon: localhost, pdu: x, port: 1, listener: udp}\n",
    ));
    assert!(e[0].message.contains("tcp"), "{}", e[0]);
}

#[test]
fn one_switch_per_board_and_the_error_lists_every_form() {
    let e = errors(&board(
        "      uhubctl: {hub: \"1-1\", port: 2}\n      pdudaemon: {daemon: localhost, pdu: x, port: 1}\n",
    ));
    assert_eq!(
        (e[0].line, e[0].field.as_str()),
        (4, "boards[0].power"),
        "{}",
        e[0]
    );
    for form in ["uhubctl: {hub", "on: {command", "pdudaemon: {daemon"] {
        assert!(e[0].message.contains(form), "{form}: {}", e[0]);
    }
    // `on` without `off` is no switch either.
    let e = errors(
        "commands:\n  - name: relay\n    binary: /bin/true\n    allowed_args: [{pattern: \"on\"}]\nboards:\n  - name: a\n    usb: \"1-2\"\n    power: {on: {command: relay, args: \"on\"}}\n",
    );
    assert_eq!(e[0].field, "boards[0].power", "{}", e[0]);
}

#[test]
fn uhubctl_is_shown_as_before() {
    let c =
        Config::parse(&board("      uhubctl: {hub: \"1-1\", port: 2}\n"), "p.yaml").expect("valid");
    let b = c.board("a").expect("board");
    assert_eq!(
        b.power.as_ref().map(PowerConfig::describe).as_deref(),
        Some("/usr/sbin/uhubctl -l 1-1 -p 2 -a on|off")
    );
    let spec = switch_spec(&c, b, true).expect("spec");
    assert_eq!(spec.args, ["-l", "1-1", "-p", "2", "-a", "on"]);
    // No switch: the refusal names the backends one could configure.
    let c = Config::parse("boards:\n  - name: a\n    usb: \"1-2\"\n", "p.yaml").expect("valid");
    let e = switch_spec(&c, c.board("a").expect("board"), true).expect_err("no switch");
    assert!(
        e.to_string().contains("uhubctl, commands, pdudaemon"),
        "{e}"
    );
}

/// docs/BOARDS.md's table of power backends has one row per backend, in the list's order.
#[test]
fn docs_boards_has_a_row_per_backend() {
    let doc = include_str!("../../../../../docs/BOARDS.md");
    let table: Vec<&str> = doc
        .lines()
        .skip_while(|l| !l.starts_with("| backend | `power:` |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .map(|c| c.trim().trim_matches('`'))
        .collect();
    assert_eq!(table, PowerConfig::NAMES, "docs/BOARDS.md's power backends");
}
