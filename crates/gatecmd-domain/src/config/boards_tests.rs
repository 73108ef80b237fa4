//! `boards:` validation: every error names file, line and field.

use super::*;

const RELAY: &str = "commands:\n  - name: relay\n    binary: /bin/true\n    allowed_args:\n      - pattern: \"on {n}\"\n      - pattern: \"off {n}\"\n    params:\n      n: \"^[0-9]$\"\n";

fn errors(text: &str) -> Vec<ConfigError> {
    match Config::parse(text, "b.yaml") {
        Ok(_) => panic!("expected an error in:\n{text}"),
        Err(e) => e.0,
    }
}

fn one(text: &str, field: &str) -> ConfigError {
    let errs = errors(text);
    errs.into_iter()
        .find(|e| e.field == field)
        .unwrap_or_else(|| panic!("no error on {field} in:\n{text}"))
}

#[test]
fn power_args_that_look_like_yaml_booleans_stay_words() {
    // `on`, `off` are booleans to a YAML 1.1 reader: unquoted in a flow list they must
    // still reach the pattern as the words written (the vboard's `power vb1 on`).
    let text = format!(
        "{RELAY}boards:\n  - name: a\n    usb: \"1-2\"\n    power:\n      on: {{command: relay, args: [on, 3]}}\n      off: {{command: relay, args: [off, 3]}}\n"
    );
    let c = Config::parse(&text, "b.yaml").expect("valid");
    match &c.board("a").and_then(|b| b.power.clone()) {
        Some(PowerConfig::Commands(c)) => {
            assert_eq!(c.on.args, ["on", "3"]);
            assert_eq!(c.off.args, ["off", "3"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_full_board_loads() {
    let text = format!(
        "{RELAY}boards:\n  - name: rock5b-1\n    tags: {{soc: rk3588, model: rock-5b}}\n    usb: \"1-2\"\n    console: {{port: \"1-3\", baud: 1500000}}\n    power: {{uhubctl: {{hub: \"1-1\", port: 2}}}}\n  - name: rock5b-2\n    usb: \"1-4\"\n    console: {{path: /dev/ttyUSB0, baud: 115200}}\n    power:\n      on: {{command: relay, args: \"on 3\"}}\n      off: {{command: relay, args: [\"off\", \"3\"]}}\n"
    );
    let c = Config::parse(&text, "b.yaml").expect("valid");
    assert_eq!(c.boards.len(), 2);
    let b = c.board("rock5b-1").expect("board");
    assert_eq!(b.tags["soc"], "rk3588");
    assert_eq!(
        b.power,
        Some(PowerConfig::Uhubctl(power::uhubctl::Uhubctl {
            hub: "1-1".parse().expect("a port path"),
            port: 2,
            binary: DEFAULT_UHUBCTL.into()
        }))
    );
    assert_eq!(c.board_at("1-4").map(|b| b.name.as_str()), Some("rock5b-2"));
    match &c.board("rock5b-2").and_then(|b| b.power.clone()) {
        Some(PowerConfig::Commands(c)) => assert_eq!(c.off.args, ["off", "3"]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn duplicate_names_and_shared_ports_are_located() {
    let text = "boards:\n  - name: a\n    usb: \"1-2\"\n  - name: a\n    usb: \"1-3\"\n  - name: b\n    usb: \"1-2\"\n";
    let e = one(text, "boards[1].name");
    assert_eq!((e.file.as_str(), e.line), ("b.yaml", 4), "{e}");
    let e = one(text, "boards[2].usb");
    assert_eq!(e.line, 7, "{e}");
    assert!(e.message.contains("already uses"), "{e}");
}

#[test]
fn a_bad_port_path_and_a_console_on_a_usb_port_are_refused() {
    let e = one("boards:\n  - name: a\n    usb: \"usb1\"\n", "boards[0].usb");
    assert_eq!(e.line, 3);
    assert!(e.message.contains("BUS-PORT"), "{e}");
    let text = "boards:\n  - name: a\n    usb: \"1-2\"\n    console: {port: \"1-3\", baud: 115200}\n  - name: b\n    usb: \"1-3\"\n";
    let e = one(text, "boards[0].console.port");
    assert_eq!(e.line, 4, "{e}");
    let e = one(
        "boards:\n  - name: a\n    usb: \"1-2\"\n    console: {port: \"1-2\", baud: 115200}\n",
        "boards[0].console.port",
    );
    assert!(e.message.contains("own usb port"), "{e}");
}

#[test]
fn a_non_standard_baud_rate_is_refused() {
    let e = one(
        "boards:\n  - name: a\n    usb: \"1-2\"\n    console:\n      port: \"1-3\"\n      baud: 1234\n",
        "boards[0].console.baud",
    );
    // The `baud:` line itself (the text search found only the `console:` line).
    assert_eq!(e.line, 6, "{e}");
    assert!(e.message.contains("1500000"), "{e}");
}

#[test]
fn power_actions_must_name_a_command_whose_pattern_matches() {
    let text = format!(
        "{RELAY}boards:\n  - name: a\n    usb: \"1-2\"\n    power:\n      on: {{command: nosuch, args: \"on 3\"}}\n      off: {{command: relay, args: \"off 33\"}}\n"
    );
    let e = one(&text, "boards[0].power.on.command");
    // The `on:` line, at its `command` key (the text search found only `power:`).
    assert_eq!((e.line, e.column), (13, 12), "{e}");
    assert!(e.message.contains("unknown command \"nosuch\""), "{e}");
    let e = one(&text, "boards[0].power.off.args");
    assert!(e.message.contains("matches none of its patterns"), "{e}");
    let e = one(
        "boards:\n  - name: a\n    usb: \"1-2\"\n    power: {uhubctl: {hub: \"x\", port: 0}}\n",
        "boards[0].power.uhubctl.hub",
    );
    assert_eq!(e.line, 4);
    let e = one(
        "boards:\n  - name: a\n    usb: \"1-2\"\n    power: {}\n",
        "boards[0].power",
    );
    assert!(e.message.contains("uhubctl"), "{e}");
}

#[test]
fn the_console_ring_size_is_configurable_within_bounds() {
    let c = Config::parse(
        "boards:\n  - name: a\n    usb: \"1-2\"\n    console: {port: \"1-3\", baud: 115200}\n  - name: b\n    usb: \"1-4\"\n    console: {port: \"1-5\", baud: 115200, buffer_bytes: 65536}\n",
        "b.yaml",
    )
    .expect("valid");
    let size = |n: &str| {
        c.board(n)
            .and_then(|b| b.console.as_ref())
            .map(|c| c.buffer_bytes)
    };
    assert_eq!(size("a"), Some(DEFAULT_CONSOLE_BUFFER_BYTES));
    assert_eq!(size("b"), Some(65536));
    for bad in ["4095", "67108865", "0"] {
        let e = one(
            &format!(
                "boards:\n  - name: a\n    usb: \"1-2\"\n    console:\n      port: \"1-3\"\n      baud: 115200\n      buffer_bytes: {bad}\n"
            ),
            "boards[0].console.buffer_bytes",
        );
        assert_eq!((e.file.as_str(), e.line), ("b.yaml", 7), "{e}");
        assert!(e.message.contains("4 KiB to 64 MiB"), "{e}");
    }
    // Flow style: the console's line.
    let e = one(
        "boards:\n  - name: a\n    usb: \"1-2\"\n    console: {port: \"1-3\", baud: 115200, buffer_bytes: 1}\n",
        "boards[0].console.buffer_bytes",
    );
    assert_eq!(e.line, 4, "{e}");
}

#[test]
fn a_boards_own_loaders_replace_flash_loaders_for_it_alone() {
    let text = "flash:\n  enabled: true\n  loaders: [/srv/loaders]\nboards:\n  - name: own\n    usb: \"1-2\"\n    loaders: [/srv/own/rk3588.bin]\n  - name: shared\n    usb: \"1-3\"\n";
    let c = Config::parse(text, "b.yaml").expect("valid");
    let own = c.board("own").expect("own");
    let shared = c.board("shared").expect("shared");
    let list = |b: &BoardConfig| b.loaders(&c.flash).map(<[std::path::PathBuf]>::to_vec);
    assert_eq!(list(own), Some(vec!["/srv/own/rk3588.bin".into()]));
    assert_eq!(list(shared), Some(vec!["/srv/loaders".into()]));
    let real = std::path::Path::new("/srv/loaders/rk3588.bin");
    assert!(!crate::config::loader_in(own.loaders(&c.flash), real));
    assert!(crate::config::loader_in(shared.loaders(&c.flash), real));
    let e = one(
        "boards:\n  - name: b\n    usb: \"1-2\"\n    loaders: [rel/x.bin]\n",
        "boards[0].loaders[0]",
    );
    assert!(e.message.contains("absolute"), "{e:?}");
}

#[test]
fn on_release_is_read_and_checked_against_the_board_s_switch() {
    let c = Config::parse(
        "commands:\n  - name: p\n    binary: /bin/true\n    allowed_args:\n      - pattern: \"{w}\"\nboards:\n  - name: b\n    usb: \"1-2\"\n    on_release: off\n    power: {on: {command: p, args: \"on\"}, off: {command: p, args: \"off\"}}\n",
        "b.yaml",
    )
    .expect("valid");
    assert_eq!(c.boards[0].on_release, crate::config::OnRelease::Off);
    let e = one(
        "boards:\n  - name: b\n    usb: \"1-2\"\n    on_release: off\n",
        "boards[0].on_release",
    );
    assert!(e.message.contains("power:"), "{e:?}");
}
