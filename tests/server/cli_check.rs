//! `gatecmd check` on the bundled configuration and on broken ones.

use std::process::Command;

use crate::harness;
use harness::Unavailable;

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

/// A config with one isolated command whose views are built over `root`.
fn isolated_config(dir: &std::path::Path, root: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("iso.yaml");
    std::fs::write(
        &p,
        format!(
            r#"
devices:
  - name: rockusb
    match: {{vid: "2207"}}
isolation:
  sysfs_root: {root}/sys
  devfs_root: {root}/dev
commands:
  - name: ld
    binary: /bin/true
    device: rockusb
    isolate: true
    allowed_args:
      - pattern: ld
"#,
            root = root.display()
        ),
    )
    .expect("write");
    p
}

#[test]
fn check_says_whether_isolated_commands_can_run_here() {
    let dir = tempfile::tempdir().expect("tmp");
    // A host without a USB bus: nothing to build a view over.
    let (code, out, err) = check(Some(&isolated_config(dir.path(), dir.path())));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(
            "isolated commands (ld) cannot run on this host: isolation: mounting a tmpfs over"
        ) && err.contains("/sys/bus/usb/devices failed"),
        "{err}"
    );
    // With the directories the view replaces, the probe builds an (empty) view.
    std::fs::create_dir_all(dir.path().join("sys/bus/usb/devices")).expect("mkdir");
    std::fs::create_dir_all(dir.path().join("dev/bus/usb")).expect("mkdir");
    let (code, out, err) = check(Some(&isolated_config(dir.path(), dir.path())));
    let root = nix::unistd::geteuid().is_root();
    if root {
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains("isolation: OK for ld (root: a mount namespace per command"),
            "{out}"
        );
        assert!(
            out.contains("(timeout 60 s, device rockusb, isolated)"),
            "{out}"
        );
    } else {
        harness::skip(
            "check_says_whether_isolated_commands_can_run_here",
            Unavailable::CiMachine,
            "the isolation-OK checks need root",
        );
    }
    // The probe's mounts stayed in the probe's namespace.
    assert_eq!(
        std::fs::read_dir(dir.path().join("sys/bus/usb/devices"))
            .expect("dir")
            .count(),
        0
    );
}

#[test]
fn check_works_unprivileged_through_a_user_namespace() {
    if !nix::unistd::geteuid().is_root() {
        return harness::skip(
            "check_works_unprivileged_through_a_user_namespace",
            Unavailable::CiMachine,
            "needs root to switch to an unprivileged user",
        );
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::create_dir_all(dir.path().join("sys/bus/usb/devices")).expect("mkdir");
    std::fs::create_dir_all(dir.path().join("dev/bus/usb")).expect("mkdir");
    let cfg = isolated_config(dir.path(), dir.path());
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (_bin_dir, bin) = harness::reachable_by_nobody(env!("CARGO_BIN_EXE_gatecmd").as_ref());
    let out = Command::new(&bin)
        .arg("check")
        .arg("--config")
        .arg(&cfg)
        .env("GATECMD_CONFIG", "")
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run gatecmd check as nobody");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let userns_allowed = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .map(|v| v.trim() != "0")
        .unwrap_or(false)
        && std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone")
            .map(|v| v.trim() != "0")
            .unwrap_or(true);
    if userns_allowed {
        assert!(
            stdout.contains(
                "isolation: OK for ld (unprivileged: a user + mount namespace per command"
            ),
            "{stdout}{stderr}"
        );
    } else {
        assert!(
            stderr.contains("does not allow unprivileged user namespaces"),
            "{stderr}"
        );
    }
}

#[test]
fn an_isolated_command_needs_a_device_class() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("bad.yaml");
    std::fs::write(
        &p,
        "commands:\n  - name: ld\n    binary: /bin/true\n    isolate: true\n    allowed_args:\n      - pattern: ld\n",
    )
    .expect("write");
    let (code, _, err) = check(Some(&p));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(":4:5: commands[0].isolate: an isolated command needs `device:`"),
        "{err}"
    );
}

/// Issue 29, finding 6: the console password is typed into a board its holder controls, so
/// a holder that plants a fake `login:`/`Password:` reads it back. gatecmd says so where
/// the operator sets it, rather than promising the password goes nowhere else.
#[test]
fn a_console_password_is_named_as_known_to_every_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.yaml");
    std::fs::write(
        &cfg,
        "boards:\n  - name: b1\n    usb: \"1-2\"\n    console: {path: /dev/null, baud: 115200, login: {user: root, password_env: B1_PW}}\n  - name: b2\n    usb: \"1-3\"\n    console: {path: /dev/null, baud: 115200, login: {user: root}}\n",
    )
    .expect("write");
    let (code, out, err) = check(Some(&cfg));
    assert_eq!(code, 0, "{out}{err}");
    let notes: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("note: board"))
        .collect();
    assert_eq!(notes.len(), 1, "only b1 sets a password: {out}");
    assert!(
        notes[0].contains("b1")
            && notes[0].contains("$B1_PW")
            && notes[0].contains("every client that may lease b1"),
        "{}",
        notes[0]
    );
    // The note names the variable, never a value.
    assert!(!out.contains("secret"), "{out}");
}
