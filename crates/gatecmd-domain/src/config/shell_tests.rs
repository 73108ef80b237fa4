//! `boards[].console`'s shell keys and `power.maskrom`: defaults, values, located errors.

use super::*;

const POWER: &str = "commands:\n  - name: relay\n    binary: /bin/true\n    allowed_args:\n      - pattern: \"on\"\n      - pattern: \"off\"\n      - pattern: \"maskrom\"\n";

#[test]
fn shell_keys_default_and_load() {
    let c = Config::parse(
        "boards:\n  - name: a\n    usb: \"1-2\"\n    console: {path: /dev/ttyS2, baud: 115200}\n",
        "s.yaml",
    )
    .expect("valid");
    let b = c.board("a").expect("a");
    assert_eq!(b.shell, ShellConfig::default());
    assert_eq!(b.shell.prompt, DEFAULT_PROMPT);
    assert_eq!(b.shell.login_prompt, "login:");
    assert_eq!(b.shell.uboot.prompt, "=> ");
    assert_eq!(b.maskrom, None);

    let text = format!(
        "{POWER}boards:\n  - name: a\n    usb: \"1-2\"\n    console:\n      path: /dev/ttyS2\n      baud: 1500000\n      login: {{user: root, password_env: BOARD_PW}}\n      prompt: 'root@\\w+:.*# $'\n      uboot: {{interrupt: \" \", prompt: \"=> \"}}\n      boot_timeout_secs: 30\n    power:\n      on: {{command: relay, args: \"on\"}}\n      off: {{command: relay, args: \"off\"}}\n      maskrom: {{command: relay, args: \"maskrom\"}}\n"
    );
    let c = Config::parse(&text, "s.yaml").expect("valid");
    let b = c.board("a").expect("a");
    let login = b.shell.login.as_ref().expect("login");
    assert_eq!(
        (login.user.as_str(), login.password_env.as_deref()),
        ("root", Some("BOARD_PW"))
    );
    assert_eq!(b.shell.prompt, r"root@\w+:.*# $");
    assert_eq!(b.shell.uboot.interrupt, " ");
    assert_eq!(b.shell.boot_timeout, std::time::Duration::from_secs(30));
    assert_eq!(
        b.maskrom.as_ref().map(|m| m.args.clone()),
        Some(vec!["maskrom".to_string()])
    );
}

#[test]
fn bad_shell_keys_are_refused_with_file_line_and_field() {
    let text = "boards:\n  - name: a\n    usb: \"1-2\"\n    console:\n      path: /dev/ttyS2\n      baud: 115200\n      prompt: '(['\n      boot_timeout_secs: 0\n      login: {user: \"ro ot\", password_env: \"1X\"}\n";
    let errs = match Config::parse(text, "s.yaml") {
        Ok(_) => panic!("invalid"),
        Err(e) => e.0,
    };
    let find = |f: &str| {
        errs.iter()
            .find(|e| e.field == f)
            .unwrap_or_else(|| panic!("no error on {f}: {errs:?}"))
    };
    let e = find("boards[0].console.prompt");
    assert_eq!((e.file.as_str(), e.line), ("s.yaml", 7), "{e}");
    assert!(e.message.contains("regex"), "{e}");
    assert_eq!(find("boards[0].console.boot_timeout_secs").line, 8);
    assert!(
        find("boards[0].console.login.user")
            .message
            .contains("printable")
    );
    assert!(
        find("boards[0].console.login.password_env")
            .message
            .contains("environment variable")
    );
    let text = format!(
        "{POWER}boards:\n  - name: a\n    usb: \"1-2\"\n    power:\n      on: {{command: relay, args: \"on\"}}\n      off: {{command: relay, args: \"off\"}}\n      maskrom: {{command: nope}}\n"
    );
    let errs = match Config::parse(&text, "s.yaml") {
        Ok(_) => panic!("invalid"),
        Err(e) => e.0,
    };
    assert!(
        errs.iter()
            .any(|e| e.field == "boards[0].power.maskrom.command"),
        "{errs:?}"
    );
}

#[test]
fn a_boards_usbplug_pair_loads_and_a_relative_path_is_refused_where_it_is() {
    let c = Config::parse(
        "boards:\n  - name: a\n    usb: \"1-2\"\n    usbplug: {ddr: /srv/loaders/ddr.bin, usbplug: /srv/loaders/usbplug.bin}\n",
        "s.yaml",
    )
    .expect("valid");
    let p = c.board("a").and_then(|b| b.usbplug.clone()).expect("pair");
    assert_eq!(p.ddr, std::path::PathBuf::from("/srv/loaders/ddr.bin"));
    assert_eq!(
        p.usbplug,
        std::path::PathBuf::from("/srv/loaders/usbplug.bin")
    );
    let e = Config::parse(
        "boards:\n  - name: a\n    usb: \"1-2\"\n    usbplug: {ddr: ddr.bin, usbplug: /srv/u.bin}\n",
        "s.yaml",
    )
    .expect_err("relative");
    assert!(
        e.0.iter().any(|e| e.field == "boards[0].usbplug.ddr"),
        "{:?}",
        e.0
    );
    let e = Config::parse(
        "boards:\n  - name: a\n    usb: \"1-2\"\n    usbplug: {ddr: /a.bin}\n",
        "s.yaml",
    )
    .expect_err("both files");
    assert!(format!("{:?}", e.0).contains("usbplug"), "{:?}", e.0);
}
