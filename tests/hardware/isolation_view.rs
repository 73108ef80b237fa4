//! The isolated view over a plain directory tree shaped like sysfs and devfs (no
//! umockdev): what the child sees, and that the host's tree is untouched.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gatecmd_domain::exec::isolation::{IsolationError, Plan, Privilege, Roots};
use gatecmd_domain::exec::{Executor, Spec};
use tokio_util::sync::CancellationToken;

use crate::harness;
use harness::Unavailable;

/// `<root>/sys` with a root hub and boards 1-2 (devnum 2) and 1-3 (devnum 4), each with
/// one interface, linked from `bus/usb/devices` like the kernel does; `<root>/dev` with
/// their usbfs nodes.
fn fake_tree(root: &Path) {
    let hub = root.join("sys/devices/pci0000:00/usb1");
    let listing = root.join("sys/bus/usb/devices");
    std::fs::create_dir_all(&listing).unwrap();
    std::fs::create_dir_all(root.join("dev/bus/usb/001")).unwrap();
    std::fs::create_dir_all(&hub).unwrap();
    std::os::unix::fs::symlink("../../../devices/pci0000:00/usb1", listing.join("usb1")).unwrap();
    for (port, devnum) in [("1-2", 2), ("1-3", 4)] {
        let dev = hub.join(port);
        std::fs::create_dir_all(dev.join(format!("{port}:1.0"))).unwrap();
        std::fs::write(dev.join("busnum"), "1\n").unwrap();
        std::fs::write(dev.join("devnum"), format!("{devnum}\n")).unwrap();
        std::os::unix::fs::symlink(
            format!("../../../devices/pci0000:00/usb1/{port}"),
            listing.join(port),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            format!("../../../devices/pci0000:00/usb1/{port}/{port}:1.0"),
            listing.join(format!("{port}:1.0")),
        )
        .unwrap();
        std::fs::write(root.join(format!("dev/bus/usb/001/{devnum:03}")), port).unwrap();
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn the_child_sees_only_its_board_and_the_host_keeps_everything() {
    view_test(Privilege::current()).await;
}

/// Set for the re-run of [`unprivileged_through_a_user_namespace`] as nobody.
const AS_NOBODY: &str = "GATECMD_ISOLATION_AS_NOBODY";

/// The same, as an unprivileged user: this test binary re-runs itself as uid 65534.
#[tokio::test]
async fn unprivileged_through_a_user_namespace() {
    if std::env::var_os(AS_NOBODY).is_some() {
        assert!(!nix::unistd::geteuid().is_root());
        return view_test(Privilege::UserNamespace).await;
    }
    if !nix::unistd::geteuid().is_root() {
        return harness::skip(
            "unprivileged_through_a_user_namespace",
            Unavailable::CiMachine,
            "not root, cannot switch to an unprivileged user",
        );
    }
    use std::os::unix::process::CommandExt;
    let (_exe_dir, exe) = harness::reachable_by_nobody(&std::env::current_exe().unwrap());
    let me = harness::test_path(module_path!(), "unprivileged_through_a_user_namespace");
    let out = std::process::Command::new(&exe)
        .args([me.as_str(), "--exact", "--test-threads=1"])
        .env(AS_NOBODY, "1")
        .env("TMPDIR", "/tmp")
        .uid(65534)
        .gid(65534)
        .output();
    let out = out.expect("re-running as nobody");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let userns_disabled = stdout.contains("does not allow unprivileged user namespaces");
    if userns_disabled {
        harness::skip(
            "unprivileged_through_a_user_namespace",
            Unavailable::CiMachine,
            "this host does not allow unprivileged user namespaces",
        );
    }
    assert!(
        out.status.success() || userns_disabled,
        "as nobody:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("1 passed") || userns_disabled, "{stdout}");
}

async fn view_test(privilege: Privilege) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fake_tree(root);
    let roots = Roots {
        sysfs: root.join("sys"),
        devfs: root.join("dev"),
    };
    let plan = Plan::new(&roots, &"1-3".parse().unwrap(), privilege).unwrap();
    assert_eq!(plan.view.privilege, privilege);
    assert_eq!(plan.view.sysfs_entries, vec!["1-3", "1-3:1.0"]);
    assert_eq!((plan.view.busnum, plan.view.devnum), (1, 4));

    // The child lists both replaced directories, reads its board's devnum through the
    // kept symlink, and reads its node (the bind mount of the real one).
    let listing = roots.listing().display().to_string();
    let usbfs = roots.usbfs().display().to_string();
    let script = format!(
        "ls -1 {listing}; echo --; ls -1 {usbfs} {usbfs}/001; echo --; cat {listing}/1-3/devnum; cat {usbfs}/001/004; echo; touch {listing}/x 2>/dev/null && echo writable || echo read-only"
    );
    let spec = Spec {
        binary: "/bin/sh".into(),
        args: vec!["-c".into(), script],
        env: BTreeMap::new(),
        timeout: Duration::from_secs(10),
        isolation: Some(Arc::clone(&plan.setup)),
        inherit: vec![],
        live_output: false,
    };
    let ex = Executor::new(2, 64 * 1024, Duration::from_millis(300));
    let out = ex
        .run(&spec, CancellationToken::new(), |_, _| {})
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.exit_code,
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        format!("1-3\n1-3:1.0\n--\n{usbfs}:\n001\n\n{usbfs}/001:\n004\n--\n4\n1-3\nread-only\n")
    );
    // The host's tree is as it was.
    assert_eq!(
        names(&roots.listing()),
        vec!["1-2", "1-2:1.0", "1-3", "1-3:1.0", "usb1"]
    );
    assert_eq!(names(&root.join("dev/bus/usb/001")), vec!["002", "004"]);
}

#[test]
fn a_board_missing_from_sysfs_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree(dir.path());
    let roots = Roots {
        sysfs: dir.path().join("sys"),
        devfs: dir.path().join("dev"),
    };
    let err = Plan::new(&roots, &"1-4".parse().unwrap(), Privilege::Root).unwrap_err();
    assert!(matches!(err, IsolationError::NotInSysfs { .. }));
    assert!(
        err.to_string().contains("call wait_for_device, then retry"),
        "{err}"
    );
    std::fs::remove_file(dir.path().join("dev/bus/usb/001/004")).unwrap();
    let err = Plan::new(&roots, &"1-3".parse().unwrap(), Privilege::Root).unwrap_err();
    assert!(err.to_string().contains("has no usbfs node at"), "{err}");
}
