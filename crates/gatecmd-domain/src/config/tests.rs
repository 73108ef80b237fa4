//! Loading and validation: every error names its file, line and field.

use std::time::Duration;

use super::*;

fn errors(text: &str) -> Vec<ConfigError> {
    match Config::parse(text, "test.yaml") {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.0,
    }
}

#[test]
fn bundled_default_is_valid() {
    let c = Config::parse(EMBEDDED_DEFAULT, EMBEDDED_NAME).expect("bundled config");
    assert!(c.command("lsusb").is_some());
    assert_eq!(c.bind.to_string(), DEFAULT_BIND);
}

#[test]
fn audit_defaults_and_overrides() {
    let c = Config::parse("{}", "t.yaml").expect("valid");
    assert_eq!(c.audit, AuditSettings::default());
    assert_eq!(c.audit.max_bytes, 10 * 1024 * 1024);
    assert_eq!(c.audit.keep, 5);
    let c = Config::parse("audit:\n  max_bytes: 65536\n  keep: 2\n", "t.yaml").expect("valid");
    assert_eq!(
        c.audit,
        AuditSettings {
            max_bytes: 65536,
            keep: 2,
            ..AuditSettings::default()
        }
    );
    let c = Config::parse(
        "audit:\n  max_record_bytes: 2048\n  max_age_days: 0\n  refusal_burst: 1\n  refusal_window_secs: 5\n",
        "t.yaml",
    )
    .expect("valid");
    assert_eq!((c.audit.max_record_bytes, c.audit.max_age_days), (2048, 0));
    assert_eq!((c.audit.refusal_burst, c.audit.refusal_window_secs), (1, 5));
    let e = errors("audit:\n  max_record_bytes: 100\n  refusal_window_secs: 0\n");
    assert_eq!(
        (e[0].line, e[0].field.as_str()),
        (2, "audit.max_record_bytes")
    );
    assert_eq!(
        (e[1].line, e[1].field.as_str()),
        (3, "audit.refusal_window_secs")
    );
}

#[test]
fn bad_audit_settings_name_line_and_field() {
    let e = errors("limits:\n  kill_grace_secs: 1\naudit:\n  max_bytes: 10\n  keep: 0\n");
    assert_eq!(e.len(), 2, "{e:?}");
    assert_eq!((e[0].line, e[0].field.as_str()), (4, "audit.max_bytes"));
    assert!(e[0].message.contains("4096"), "{}", e[0]);
    assert_eq!((e[1].line, e[1].field.as_str()), (5, "audit.keep"));
    let e = errors("audit:\n  max_byte: 10000\n");
    assert!(e[0].message.contains("max_bytes"), "{}", e[0]);
}

#[test]
fn simple_schema_is_accepted() {
    let c = Config::parse(
        "bind: 127.0.0.1:9000\nauth_token: s3cret\ncommands:\n  - name: echo\n    binary: /bin/echo\n    description: say\n    allowed_args:\n      - pattern: hello {who}\n    timeout_secs: 5\n",
        "t.yaml",
    )
    .expect("valid");
    assert_eq!(c.clients[0].name, "default");
    assert_eq!(
        c.command("echo").map(|c| c.timeout),
        Some(Duration::from_secs(5))
    );
}

#[test]
fn relative_binary_names_line_and_field() {
    let e = errors(
        "commands:\n  - name: ls\n    binary: ls\n    allowed_args:\n      - pattern: \"\"\n",
    );
    assert_eq!(e[0].line, 3);
    assert_eq!(e[0].field, "commands[0].binary");
    assert!(e[0].message.contains("not an absolute path"), "{}", e[0]);
}

#[test]
fn unknown_key_names_line_and_field() {
    let e = errors("commands:\n  - name: ls\n    binary: /bin/ls\n    alowed_args: []\n");
    assert_eq!(e[0].line, 4);
    assert!(
        e[0].message.contains("unknown field `alowed_args`"),
        "{}",
        e[0]
    );
    assert!(
        e[0].message.contains("allowed_args"),
        "lists valid keys: {}",
        e[0]
    );
}

#[test]
fn bad_regex_names_line_and_field() {
    let e = errors(
        "commands:\n  - name: ls\n    binary: /bin/ls\n    params:\n      dir: \"[a-\"\n    allowed_args:\n      - pattern: \"{dir}\"\n",
    );
    assert_eq!(e[0].line, 5);
    assert_eq!(e[0].field, "commands[0].params.dir");
    assert!(e[0].message.contains("invalid regex"));
}

#[test]
fn unknown_device_class_is_located() {
    let e = errors(
        "devices:\n  - name: rockusb\n    match: {vid: \"2207\"}\ncommands:\n  - name: rk\n    binary: /bin/true\n    device: rockus\n    allowed_args:\n      - pattern: ld\n",
    );
    assert_eq!((e[0].line, e[0].field.as_str()), (7, "commands[0].device"));
    assert!(
        e[0].message.contains("defined under `devices:`: rockusb"),
        "{}",
        e[0]
    );
}

#[test]
fn file_args_must_name_a_slot_and_need_roots() {
    let e = errors(
        "commands:\n  - name: rk\n    binary: /bin/true\n    allowed_args:\n      - pattern: wl 0 {image}\n        file_args: [img]\n",
    );
    assert!(
        e.iter()
            .any(|e| e.message.contains("\"img\" is not a slot") && e.line == 6),
        "{e:?}"
    );
    assert!(
        e.iter().any(|e| e.message.contains("need `file_roots:`")),
        "{e:?}"
    );
}

#[test]
fn bad_hex_and_bad_bind() {
    let e = errors("bind: localhost\n");
    assert_eq!((e[0].line, e[0].field.as_str()), (1, "bind"));
    let e = errors("devices:\n  - name: x\n    match: {vid: \"22g7\"}\n");
    assert_eq!(e[0].line, 3);
    assert!(e[0].message.contains("4 hex digits"));
}

#[test]
fn numeric_vid_is_read_as_hex_digits() {
    let c = Config::parse(
        "devices:\n  - name: rk\n    match: {vid: 2207, pid: 350b}\n",
        "t",
    )
    .expect("ok");
    assert_eq!(
        (c.devices[0].vid, c.devices[0].pid),
        (Some(0x2207), Some(0x350b))
    );
}

#[test]
fn a_device_class_matches_on_family_and_mode() {
    let c = Config::parse(
        "devices:\n  - name: fb\n    match: {family: fastboot}\n  - name: mr\n    match: {vid: \"2207\", mode: maskrom}\n",
        "t",
    )
    .expect("ok");
    assert_eq!(
        (c.devices[0].vid, c.devices[0].family),
        (None, Some("fastboot"))
    );
    assert_eq!(c.devices[0].describe(), "family fastboot");
    assert_eq!(c.devices[1].describe(), "2207:* in mode maskrom");
    let mut d = gatecmd_devices::Device::sample("1-1", 2);
    (d.vid, d.pid) = (0x18d1, 0x4ee0);
    d.family = Some("fastboot");
    d.mode = Some("fastboot");
    assert!(c.devices[0].matches(&d), "any vendor's fastboot device");
    assert!(!c.devices[1].matches(&d));
    d.family = Some("dfu");
    assert!(!c.devices[0].matches(&d));
}

#[test]
fn a_device_class_needs_a_vid_or_a_family_from_the_table() {
    let e = errors("devices:\n  - name: x\n    match: {family: fastbot}\n");
    assert_eq!(
        (e[0].line, e[0].field.as_str()),
        (3, "devices[0].match.family")
    );
    assert!(e[0].message.contains("families: "), "{}", e[0].message);
    let e = errors("devices:\n  - name: x\n    match: {family: dfu, mode: maskrum}\n");
    assert_eq!(e[0].field, "devices[0].match.mode");
    let e = errors("devices:\n  - name: x\n    match: {pid: \"350b\"}\n");
    assert_eq!((e[0].line, e[0].field.as_str()), (3, "devices[0].match"));
    assert!(e[0].message.contains("at least one"), "{}", e[0].message);
    let e = errors("devices:\n  - name: x\n    match: {family: dfu, pid: \"350b\"}\n");
    assert_eq!(e[0].field, "devices[0].match.pid");
}

#[test]
fn client_needs_exactly_one_token_source() {
    let e = errors("clients:\n  - name: vm-a\n    token: a\n    token_env: B\n");
    assert_eq!(e[0].line, 2);
    assert!(e[0].message.contains("exactly one of token"));
}

#[test]
fn client_command_restriction_must_name_commands() {
    let e = errors(
        "clients:\n  - name: vm-a\n    token_env: T\n    commands: [nope]\ncommands:\n  - name: ls\n    binary: /bin/ls\n    allowed_args:\n      - pattern: \"\"\n",
    );
    assert_eq!((e[0].line, e[0].field.as_str()), (4, "clients[0].commands"));
    assert!(e[0].message.contains("defined commands: ls"));
}

#[test]
fn duplicate_commands_and_missing_patterns() {
    let e = errors(
        "commands:\n  - name: a\n    binary: /bin/true\n    allowed_args: [{pattern: x}]\n  - name: a\n    binary: /bin/true\n",
    );
    assert!(e.iter().any(|e| e.message.contains("defined twice")));
    assert!(e.iter().any(|e| e.message.contains("no allowed_args")));
}

#[test]
fn progress_regex_needs_a_group() {
    let e = errors(
        "commands:\n  - name: a\n    binary: /bin/true\n    progress: \"\\\\d+%\"\n    allowed_args: [{pattern: x}]\n",
    );
    assert_eq!(e[0].line, 4);
    assert!(e[0].message.contains("no capture group"));
}

#[test]
fn missing_binary_is_not_fatal_to_parse() {
    let c = Config::parse(
        "commands:\n  - name: rk\n    binary: /nonexistent/rkdeveloptool\n    allowed_args: [{pattern: ld}]\n",
        "t",
    )
    .expect("parses");
    assert_eq!(c.unavailable_commands().len(), 1);
    assert!(
        c.commands[0]
            .unavailable
            .as_deref()
            .is_some_and(|w| w.contains("does not exist"))
    );
}

#[test]
fn errors_about_the_shape_of_the_file_are_located() {
    // Found by tests/server/proptest_policy.rs: serde_yaml read this dedent as a second document
    // and reported it without a location (line 0). serde-saphyr locates it: `file_roots:`
    // holds no list.
    let e = errors("    file_roots: \nbind: \n");
    assert_eq!(
        (e[0].line, e[0].field.as_str()),
        (1, "file_roots"),
        "{}",
        e[0]
    );
    let e = errors("bind: \"127.0.0.1:1\"\n---\nbind: \"127.0.0.1:2\"\n");
    assert_eq!((e[0].line, e[0].column), (3, 1), "{}", e[0]);
    assert!(e[0].message.contains("single YAML document"), "{}", e[0]);
}

#[test]
fn a_wrong_number_names_the_value_and_the_range() {
    let e = errors("commands:\n  - name: a\n    binary: /bin/true\n    timeout_secs: -3\n");
    assert_eq!(
        (e[0].line, e[0].column, e[0].field.as_str()),
        (4, 19, "commands[0].timeout_secs"),
        "{}",
        e[0]
    );
    assert!(
        e[0].message.contains("\"-3\" is not a valid u64"),
        "{}",
        e[0]
    );
}

#[test]
fn usb_ids_are_read_as_written() {
    // YAML makes 0x2207 the number 8711; the digits as typed are the id.
    let c = Config::parse(
        "devices:\n  - name: rk\n    match: {vid: 0x2207, pid: 350b}\n",
        "t",
    )
    .expect("parses");
    assert_eq!(
        (c.devices[0].vid, c.devices[0].pid),
        (Some(0x2207), Some(0x350b))
    );
}

#[test]
fn display_has_file_line_column_field() {
    let e = errors("commands:\n  - name: ls\n    binary: ls\n");
    let s = e[0].to_string();
    assert!(s.starts_with("test.yaml:3:5: commands[0].binary: "), "{s}");
}
