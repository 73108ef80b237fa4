//! The power backends as configured: each form loads, its errors name file, line and field,
//! and its command line is the one documented.

use super::super::{Config, ConfigError};
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
fn one_switch_per_board_and_the_error_lists_every_form() {
    let e = errors(&board(
        "      uhubctl: {hub: \"1-1\", port: 2}\n      on: {command: relay, args: \"on\"}\n",
    ));
    assert_eq!(
        (e[0].line, e[0].field.as_str()),
        (4, "boards[0].power"),
        "{}",
        e[0]
    );
    for form in ["uhubctl: {hub", "on: {command"] {
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
    assert!(e.to_string().contains("uhubctl, commands"), "{e}");
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
