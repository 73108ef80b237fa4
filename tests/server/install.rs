//! The service packaging: scripts/install.sh into a temporary root (twice: idempotent),
//! and `systemd-analyze verify` on the unit where systemd-analyze exists.

use crate::harness;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_gatecmd");

fn install(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(format!("{REPO}/scripts/install.sh"));
    cmd.args(args)
        .args(["--binary", BIN])
        .env_remove("DESTDIR")
        .env_remove("PREFIX");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run install.sh");
    assert!(
        out.status.success(),
        "install.sh failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn install_into_a_temporary_root_is_idempotent() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let rs = root.to_str().expect("utf8");
    // First with DESTDIR, then with --root: the two spellings mean the same.
    let first = install(&[], &[("DESTDIR", rs)]);
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(stdout.contains("Next steps"), "{stdout}");
    assert!(
        stdout.contains("systemctl enable --now gatecmd"),
        "{stdout}"
    );

    let expect = [
        ("usr/local/bin/gatecmd", 0o755),
        ("etc/systemd/system/gatecmd.service", 0o644),
        ("etc/udev/rules.d/60-gatecmd.rules", 0o644),
        ("etc/sysusers.d/gatecmd.conf", 0o644),
        // The serial drivers, loaded at boot before the unit (as the .deb's
        // /usr/lib/modules-load.d/gatecmd.conf): its console DeviceAllow= lines need them.
        ("etc/modules-load.d/gatecmd.conf", 0o644),
        (
            "usr/local/share/gatecmd/allowed_commands.yaml.example",
            0o644,
        ),
        ("etc/gatecmd", 0o750),
        ("etc/gatecmd/allowed_commands.yaml", 0o600),
    ];
    for (rel, m) in expect {
        assert_eq!(mode(&root.join(rel)), m, "{rel}");
    }
    assert_eq!(
        std::fs::read(root.join("usr/local/bin/gatecmd")).expect("binary"),
        std::fs::read(BIN).expect("built binary")
    );
    assert_eq!(
        std::fs::read(root.join("etc/modules-load.d/gatecmd.conf")).expect("modules-load.d"),
        std::fs::read(format!("{REPO}/packaging/modules-load.d/gatecmd.conf")).expect("packaging")
    );
    let unit =
        std::fs::read_to_string(root.join("etc/systemd/system/gatecmd.service")).expect("unit");
    assert!(unit.contains(
        "ExecStart=/usr/local/bin/gatecmd serve --config /etc/gatecmd/allowed_commands.yaml"
    ));

    // The operator edits the config; a second run keeps it and changes nothing else.
    let cfg = root.join("etc/gatecmd/allowed_commands.yaml");
    std::fs::write(&cfg, "# mine\n").expect("edit config");
    let second = install(&["--root", rs], &[]);
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(
        stdout.contains("everything was already in place"),
        "{stdout}"
    );
    assert!(!stdout.contains("  installed"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&cfg).expect("config"), "# mine\n");
    for (rel, m) in expect {
        assert_eq!(mode(&root.join(rel)), m, "{rel} after the second run");
    }
    // A bare staging root gets no passwd of its own.
    assert!(!root.join("etc/passwd").exists());
    assert!(stdout.contains("skipped    user and group"), "{stdout}");
}

#[test]
fn a_prefix_is_written_into_the_unit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let rs = tmp.path().to_str().expect("utf8");
    install(&["--root", rs, "--prefix", "/usr"], &[]);
    let unit = std::fs::read_to_string(tmp.path().join("etc/systemd/system/gatecmd.service"))
        .expect("unit");
    assert!(unit.contains("ExecStart=/usr/bin/gatecmd serve"), "{unit}");
    assert!(tmp.path().join("usr/bin/gatecmd").exists());
}

#[test]
fn users_are_created_once_in_a_root_with_a_passwd_file() {
    if Command::new("systemd-sysusers")
        .arg("--version")
        .output()
        .is_err()
    {
        return harness::skip(
            "users_are_created_once_in_a_root_with_a_passwd_file",
            harness::Unavailable::InstalledByCi,
            "systemd-sysusers is not installed (scripts/setup.sh --test installs systemd)",
        );
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    std::fs::create_dir_all(root.join("etc")).expect("mkdir");
    std::fs::write(root.join("etc/passwd"), "").expect("passwd");
    std::fs::write(root.join("etc/group"), "").expect("group");
    let rs = root.to_str().expect("utf8");
    install(&["--root", rs], &[]);
    install(&["--root", rs], &[]);
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).expect("passwd");
    let group = std::fs::read_to_string(root.join("etc/group")).expect("group");
    assert_eq!(
        passwd.lines().filter(|l| l.starts_with("gatecmd:")).count(),
        1,
        "{passwd}"
    );
    assert_eq!(
        group.lines().filter(|l| l.starts_with("gatecmd:")).count(),
        1,
        "{group}"
    );
    assert!(
        passwd.contains(":/var/lib/gatecmd:/usr/sbin/nologin"),
        "{passwd}"
    );
}

#[test]
fn install_refuses_a_missing_binary_with_a_hint() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = Command::new(format!("{REPO}/scripts/install.sh"))
        .args([
            "--root",
            tmp.path().to_str().expect("utf8"),
            "--binary",
            "/nonexistent/gatecmd",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cargo build --release"));
}

#[test]
fn the_unit_has_the_required_settings() {
    let unit = std::fs::read_to_string(format!("{REPO}/packaging/gatecmd.service")).expect("unit");
    for line in [
        "User=gatecmd",
        "Group=gatecmd",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "ReadWritePaths=/var/lib/gatecmd",
        "DeviceAllow=char-usb_device rw",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
        "StateDirectory=gatecmd gatecmd/images",
        "ExecReload=/bin/kill -HUP $MAINPID",
        // Issue 38: consoles, and the namespaces isolated commands unshare.
        "DeviceAllow=char-ttyACM rw",
        "DeviceAllow=char-ttyUSB rw",
        "SupplementaryGroups=dialout",
        "RestrictNamespaces=user mnt",
    ] {
        assert!(unit.lines().any(|l| l == line), "missing `{line}`");
    }
    // PrivateDevices= would hide /dev/bus/usb from the service.
    assert!(!unit.lines().any(|l| l.starts_with("PrivateDevices=")));
    let sysusers =
        std::fs::read_to_string(format!("{REPO}/packaging/gatecmd.sysusers")).expect("sysusers");
    assert!(sysusers.contains("g gatecmd"));
    let rules =
        std::fs::read_to_string(format!("{REPO}/udev-rules/60-gatecmd.rules")).expect("rules");
    assert!(
        rules.contains("GROUP=\"gatecmd\""),
        "the udev rules grant the service's group"
    );
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        return harness::skip(
            "the_unit_passes_systemd_analyze_verify",
            harness::Unavailable::InstalledByCi,
            "systemd-analyze is not installed here, so the unit is not verified \
             (scripts/setup.sh --test installs systemd)",
        );
    }
    // verify checks that ExecStart= exists: point a copy at the binary just built.
    let tmp = tempfile::tempdir().expect("tempdir");
    let unit = std::fs::read_to_string(format!("{REPO}/packaging/gatecmd.service"))
        .expect("unit")
        .replace("/usr/local/bin/gatecmd", BIN);
    let path = tmp.path().join("gatecmd.service");
    std::fs::write(&path, unit).expect("write unit");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{stderr}"
    );
    // Unknown keys and bad values are only warnings (exit 0): any line about our unit fails.
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("gatecmd.service"))
        .collect();
    assert!(
        ours.is_empty(),
        "systemd-analyze warns about the unit:\n{stderr}"
    );
    if !stderr.trim().is_empty() {
        eprintln!("systemd-analyze (not about the unit):\n{stderr}");
    }
}
