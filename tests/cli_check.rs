//! `gatecmd check` on the bundled configuration and on broken ones.

use std::process::Command;

fn check(config: Option<&std::path::Path>) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatecmd"));
    cmd.arg("check").env("GATECMD_CONFIG", "");
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let out = cmd.output().expect("run gatecmd check");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bundled_config_is_valid_and_printed_in_full() {
    let bundled = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("allowed_commands.yaml");
    let (code, out, err) = check(Some(&bundled));
    let missing: Vec<&str> = ["/usr/bin/lsusb", "/usr/bin/rkdeveloptool"]
        .into_iter()
        .filter(|b| !std::path::Path::new(b).exists())
        .collect();
    if missing.is_empty() {
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("OK: 2 command(s)"), "{out}");
    } else {
        // Without the tools installed, check must say exactly which are missing.
        assert_eq!(code, 1, "{out}{err}");
        for m in missing {
            assert!(
                err.contains(&format!("{m} does not exist on this host")),
                "{err}"
            );
        }
    }
    assert!(
        out.contains("/usr/bin/rkdeveloptool wl {lba} {image}"),
        "{out}"
    );
    assert!(out.contains("/usr/bin/lsusb -v -d {vidpid}"), "{out}");
    assert!(out.contains("rockusb: 2207:*"), "{out}");
}

#[test]
fn embedded_default_is_used_without_a_file() {
    let (_, out, _) = check(None);
    assert!(
        out.contains("config: <embedded allowed_commands.yaml>"),
        "{out}"
    );
}

#[test]
fn broken_config_reports_every_error_with_location() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("bad.yaml");
    std::fs::write(
        &p,
        "bind: nowhere\ncommands:\n  - name: ls\n    binary: ls\n    allowed_args:\n      - pattern: \"{dir}\"\n        file_args: [dir]\n",
    )
    .expect("write");
    let (code, out, err) = check(Some(&p));
    assert_eq!(code, 2, "{out}{err}");
    let f = p.display();
    assert!(
        err.contains(&format!(
            "{f}:1:1: bind: \"nowhere\" is not an address:port"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{f}:4:5: commands[0].binary: \"ls\" is not an absolute path"
        )),
        "{err}"
    );
    assert!(
        err.contains("commands[0].allowed_args[0].file_args: file arguments need `file_roots:`"),
        "{err}"
    );
    assert!(err.contains("3 error(s)"), "{err}");
    assert!(out.is_empty());
}

#[test]
fn yaml_syntax_error_is_located() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("bad.yaml");
    std::fs::write(&p, "commands:\n  - name: [unclosed\n").expect("write");
    let (code, _, err) = check(Some(&p));
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("{}:", p.display())) && err.contains(":3:1:") || err.contains(":2:"),
        "{err}"
    );
}

#[test]
fn missing_binary_fails_check_but_names_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("c.yaml");
    std::fs::write(&p, "commands:\n  - name: rk\n    binary: /opt/none/rkdeveloptool\n    allowed_args: [{pattern: ld}]\n").expect("write");
    let (code, out, err) = check(Some(&p));
    assert_eq!(code, 1);
    assert!(
        err.contains("/opt/none/rkdeveloptool does not exist on this host"),
        "{err}"
    );
    assert!(out.contains("rk (timeout 60 s) UNAVAILABLE"), "{out}");
}

#[test]
fn world_readable_config_with_a_token_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("c.yaml");
    std::fs::write(&p, "auth_token: hunter2\n").expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (code, _, err) = check(Some(&p));
    assert_eq!(code, 2);
    assert!(
        err.contains("readable by others (mode 644)") && err.contains("chmod 600"),
        "{err}"
    );
    assert!(!err.contains("hunter2"));
}
