//! The Debian package (issue 30), for real: scripts/deb.sh packages the binary under test
//! with cargo-deb, dpkg installs it on this machine, `gatecmd check` runs on the installed
//! configuration (named, found by the search order, and as the service's user), `gatecmd
//! serve` starts as the unit starts it, the files are where the package promises with the
//! owners and modes it promises, then `dpkg --remove` keeps the conffile and the state and
//! `dpkg --purge` leaves nothing behind.
//!
//! This machine has no systemd as PID 1, so the unit itself runs in the service lane
//! (tests/python/test_service_lane.py: the same .deb in a Debian 12 guest with systemd).
//!
//! It changes the machine, so it is `#[ignore]`d in the parallel lanes of
//! scripts/cargo-tests.sh (an installed /etc/gatecmd/allowed_commands.yaml would change
//! what `gatecmd check` finds in tests/server/cli_check.rs) and `make test` runs it alone after
//! them (`make test-deb` runs only it). It refuses to touch a gatecmd that is already
//! installed, and a guard purges the package (and removes the user and group it created)
//! however the test ends.

use crate::harness;

use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use harness::Unavailable;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const CONF: &str = "/etc/gatecmd/allowed_commands.yaml";
const TEST: &str = "the_package_installs_checks_and_purges_cleanly";

/// Every file the package installs, with its mode, owner and group after `configure`.
const FILES: [(&str, u32, &str, &str); 11] = [
    ("/usr/bin/gatecmd", 0o755, "root", "root"),
    (
        "/usr/lib/systemd/system/gatecmd.service",
        0o644,
        "root",
        "root",
    ),
    ("/usr/lib/sysusers.d/gatecmd.conf", 0o644, "root", "root"),
    (
        "/usr/lib/modules-load.d/gatecmd.conf",
        0o644,
        "root",
        "root",
    ),
    (
        "/usr/lib/udev/rules.d/60-gatecmd.rules",
        0o644,
        "root",
        "root",
    ),
    (CONF, 0o600, "gatecmd", "gatecmd"),
    ("/usr/share/doc/gatecmd/README.md", 0o644, "root", "root"),
    ("/usr/share/doc/gatecmd/copyright", 0o644, "root", "root"),
    (
        "/usr/share/doc/gatecmd/docs/CONFIG.md",
        0o644,
        "root",
        "root",
    ),
    (
        "/usr/share/doc/gatecmd/udev-rules/README.md",
        0o644,
        "root",
        "root",
    ),
    // The recipes an operator includes (docs/FAMILIES.md).
    (
        "/usr/share/gatecmd/recipes/fastboot.yaml",
        0o644,
        "root",
        "root",
    ),
];

/// Directories the package creates or adopts; those that did not exist before must be gone
/// after the purge.
const DIRS: [&str; 9] = [
    "/etc/gatecmd",
    "/usr/share/gatecmd/recipes",
    "/usr/share/gatecmd",
    "/usr/share/doc/gatecmd",
    "/usr/lib/systemd/system",
    "/usr/lib/sysusers.d",
    "/usr/lib/udev/rules.d",
    "/usr/lib/udev",
    "/var/lib/gatecmd",
];

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// dpkg ARGS, waiting out another dpkg or apt holding its lock (a shared machine).
fn dpkg(args: &[&str]) -> Output {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = run(Command::new("dpkg")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive"));
        let locked = !out.status.success() && text(&out).contains("lock");
        if !locked || Instant::now() >= deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn dpkg_ok(args: &[&str]) -> String {
    let out = dpkg(args);
    assert!(
        out.status.success(),
        "dpkg {args:?} failed:\n{}",
        text(&out)
    );
    text(&out)
}

/// dpkg's status of the package gatecmd (`install ok installed`, `deinstall ok
/// config-files`, …), ending in `not-installed` when it is not on the machine.
fn status() -> String {
    let out = run(Command::new("dpkg-query").args(["-W", "-f=${Status}", "gatecmd"]));
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || s.is_empty() {
        "not-installed".into()
    } else {
        s
    }
}

fn known(db: &str, name: &str) -> bool {
    run(Command::new("getent").args([db, name]))
        .status
        .success()
}

fn name_of(db: &str, id: u32) -> String {
    let out = run(Command::new("getent").args([db, &id.to_string()]));
    String::from_utf8_lossy(&out.stdout)
        .split(':')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Purges the package and removes the user and group the test made, whatever happens.
struct Restore {
    user_existed: bool,
    group_existed: bool,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let mut undone = Vec::new();
        if !status().ends_with("not-installed") {
            let out = dpkg(&["--purge", "gatecmd"]);
            undone.push(format!("dpkg --purge gatecmd: {}", text(&out).trim()));
        }
        if !self.user_existed && known("passwd", "gatecmd") {
            let out = run(Command::new("userdel").arg("gatecmd"));
            undone.push(format!("userdel gatecmd: {}", out.status));
        }
        if !self.group_existed && known("group", "gatecmd") {
            let out = run(Command::new("groupdel").arg("gatecmd"));
            undone.push(format!("groupdel gatecmd: {}", out.status));
        }
        if std::thread::panicking() && !undone.is_empty() {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "{TEST}: restored the machine:\n  {}",
                undone.join("\n  ")
            );
        }
    }
}

/// /usr/bin/gatecmd run as `user` with its groups, as the unit's User= and Group= run it
/// (setpriv execs it: the pid is the server's).
fn as_user(user: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        user,
        "--regid",
        user,
        "--init-groups",
        "/usr/bin/gatecmd",
    ]);
    c
}

/// Serves the installed configuration as the unit does, in the state directory systemd's
/// StateDirectory= would make, until it says it listens; returns its log.
fn serve_as_the_unit() -> String {
    for dir in ["/var/lib/gatecmd", "/var/lib/gatecmd/images"] {
        std::fs::create_dir(dir).expect(dir);
        let chown = run(Command::new("chown").args(["gatecmd:gatecmd", dir]));
        assert!(chown.status.success(), "{}", text(&chown));
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750)).expect(dir);
    }
    let mut child = as_user("gatecmd")
        .args(["serve", "--config", CONF, "--bind", "127.0.0.1:0"])
        .env_clear()
        .env("STATE_DIRECTORY", "/var/lib/gatecmd")
        .env("GATECMD_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gatecmd serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut log = Vec::new();
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        let up = line.starts_with("gatecmd: listening on ");
        log.push(line);
        if up {
            break;
        }
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let _ = child.wait();
    log.join("\n")
}

/// `gatecmd check` on the installed config; `who` runs it as that user (as the unit does).
fn check(config: Option<&str>, who: Option<&str>) -> (i32, String, String) {
    let mut cmd = match who {
        Some(user) => as_user(user),
        None => Command::new("/usr/bin/gatecmd"),
    };
    cmd.arg("check").env_remove("GATECMD_CONFIG");
    if let Some(c) = config {
        cmd.args(["--config", c]);
    }
    let out = run(&mut cmd);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Exit 0, or 1 only for the bundled config's tools missing here (as tests/server/cli_check.rs).
fn assert_valid(what: &str, (code, out, err): &(i32, String, String)) {
    let missing = ["/usr/bin/lsusb", "/usr/bin/rkdeveloptool"]
        .iter()
        .any(|b| !Path::new(b).exists());
    let ok = *code == 0 || (*code == 1 && missing && err.contains("does not exist on this host"));
    assert!(ok, "{what}: exit {code}\n{out}{err}");
}

fn mode_owner(path: &str) -> (u32, String, String) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (
        m.permissions().mode() & 0o7777,
        name_of("passwd", m.uid()),
        name_of("group", m.gid()),
    )
}

fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{TEST}: {line}");
}

#[test]
#[ignore = "installs the gatecmd package on this machine: `make test` runs it alone, after the \
            other tests (`make test-deb`)"]
fn the_package_installs_checks_and_purges_cleanly() {
    if !nix::unistd::geteuid().is_root() {
        return harness::skip(
            TEST,
            Unavailable::CiMachine,
            "not root: dpkg installs packages as root only",
        );
    }
    if !runs("dpkg") || !runs("dpkg-query") {
        return harness::skip(
            TEST,
            Unavailable::CiMachine,
            "no dpkg: not a Debian machine",
        );
    }
    let deb_tool = run(Command::new("cargo").args(["deb", "--version"]));
    if !deb_tool.status.success() {
        return harness::skip(
            TEST,
            Unavailable::InstalledByCi,
            "cargo-deb is not installed (scripts/setup.sh --test or --deb installs it)",
        );
    }

    // One of these tests at a time on a machine (worktrees share it).
    let lock = File::create("/tmp/gatecmd-deb-test.lock").expect("lock file");
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("flock");

    // Someone's gatecmd, from this package or from `make install`, is never touched.
    let before = status();
    assert!(
        before.ends_with("not-installed"),
        "a gatecmd package is on this machine already (dpkg status `{before}`): this test \
         installs and purges its own and will not remove yours. Remove it first \
         (`dpkg --purge gatecmd`, after saving /etc/gatecmd) or run the test elsewhere."
    );
    let taken: Vec<&str> = FILES
        .iter()
        .map(|f| f.0)
        .chain(["/etc/gatecmd", "/var/lib/gatecmd", "/usr/share/doc/gatecmd"])
        .filter(|p| Path::new(p).exists())
        .collect();
    assert!(
        taken.is_empty(),
        "these exist and are not the package's (a `make install`?): {taken:?}; the test's \
         purge would delete a configuration or state it did not make, so it stops here"
    );
    let dirs_before: Vec<bool> = DIRS.iter().map(|d| Path::new(d).exists()).collect();
    let _restore = Restore {
        user_existed: known("passwd", "gatecmd"),
        group_existed: known("group", "gatecmd"),
    };

    // Build: the binary this test was built with, packaged without a build.
    let started = Instant::now();
    let bin = std::env::var_os("GATECMD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gatecmd")));
    let out_dir = tempfile::tempdir().expect("tempdir");
    let built = run(Command::new(format!("{REPO}/scripts/deb.sh"))
        .arg("--binary")
        .arg(&bin)
        .arg("--output")
        .arg(out_dir.path())
        .arg("--fast"));
    assert!(built.status.success(), "scripts/deb.sh:\n{}", text(&built));
    let deb = String::from_utf8_lossy(&built.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string();
    assert!(
        deb.ends_with(".deb") && Path::new(&deb).is_file(),
        "no .deb named on deb.sh's last line:\n{}",
        text(&built)
    );
    say(&format!(
        "built {deb} ({} KiB) in {:.1?}",
        std::fs::metadata(&deb).map_or(0, |m| m.len() / 1024),
        started.elapsed()
    ));

    // The control data, before anything is installed.
    let field = |name: &str| {
        let out = run(Command::new("dpkg-deb").args(["-f", &deb, name]));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(field("Package"), "gatecmd");
    let depends = field("Depends");
    for dep in ["libc6", "libudev1", "libusb-1.0-0"] {
        assert!(depends.contains(dep), "Depends: {depends}");
    }
    assert_eq!(field("Recommends"), "rkdeveloptool, usbutils");
    let conffiles = run(Command::new("dpkg-deb").args(["--info", &deb, "conffiles"]));
    assert_eq!(String::from_utf8_lossy(&conffiles.stdout).trim(), CONF);
    let info = text(&run(Command::new("dpkg-deb").args(["--info", &deb])));
    for script in ["postinst", "prerm", "postrm"] {
        assert!(info.contains(script), "no {script} in the package:\n{info}");
    }

    // Install.
    let t = Instant::now();
    dpkg_ok(&["-i", &deb]);
    say(&format!("dpkg -i in {:.1?}", t.elapsed()));
    let installed = dpkg_ok(&["-s", "gatecmd"]);
    assert!(
        installed.contains("Status: install ok installed"),
        "{installed}"
    );

    // The files, where promised, with the owners and modes promised.
    for (path, mode, user, group) in FILES {
        assert_eq!(
            mode_owner(path),
            (mode, user.to_string(), group.to_string()),
            "{path}: (mode, owner, group)"
        );
    }
    assert_eq!(
        mode_owner("/etc/gatecmd"),
        (0o750, "root".into(), "gatecmd".into()),
        "/etc/gatecmd"
    );
    let same = |installed: &str, source: &str| {
        assert_eq!(
            std::fs::read_to_string(installed).expect(installed),
            std::fs::read_to_string(format!("{REPO}/{source}")).expect(source),
            "{installed} is not {source}"
        );
    };
    same(CONF, "allowed_commands.yaml");
    same(
        "/usr/lib/sysusers.d/gatecmd.conf",
        "packaging/gatecmd.sysusers",
    );
    same(
        "/usr/lib/udev/rules.d/60-gatecmd.rules",
        "udev-rules/60-gatecmd.rules",
    );
    for r in ["dfu-util", "esptool", "fastboot", "sunxi-fel", "uuu"] {
        same(
            &format!("/usr/share/gatecmd/recipes/{r}.yaml"),
            &format!("recipes/{r}.yaml"),
        );
    }
    let unit = std::fs::read_to_string("/usr/lib/systemd/system/gatecmd.service").expect("unit");
    assert!(
        unit.lines()
            .any(|l| l
                == "ExecStart=/usr/bin/gatecmd serve --config /etc/gatecmd/allowed_commands.yaml"),
        "{unit}"
    );
    assert!(
        unit.contains("Documentation=file:///usr/share/doc/gatecmd/README.md"),
        "{unit}"
    );
    assert!(!unit.contains("/usr/local"), "{unit}");
    // The user the unit runs as, made by postinst from the sysusers entry.
    let passwd = text(&run(Command::new("getent").args(["passwd", "gatecmd"])));
    assert!(
        passwd
            .trim_end()
            .ends_with(":/var/lib/gatecmd:/usr/sbin/nologin"),
        "{passwd}"
    );
    let version = text(&run(Command::new("/usr/bin/gatecmd").arg("--version")));
    assert!(
        version.contains(env!("CARGO_PKG_VERSION")),
        "/usr/bin/gatecmd --version: {version}"
    );
    if runs("systemd-analyze") {
        let out = run(Command::new("systemd-analyze")
            .args(["verify", "/usr/lib/systemd/system/gatecmd.service"]));
        let complaints: Vec<&str> = std::str::from_utf8(&out.stderr)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("gatecmd.service"))
            .collect();
        assert!(
            out.status.success() && complaints.is_empty(),
            "systemd-analyze verify on the installed unit:\n{}",
            text(&out)
        );
    } else {
        harness::skip(
            TEST,
            Unavailable::InstalledByCi,
            "systemd-analyze is not installed, so the installed unit is not verified \
             (scripts/setup.sh --test installs systemd)",
        );
    }

    // `gatecmd check`: the config named as the unit names it, found by the search order,
    // and read as the user the unit runs as.
    let named = check(Some(CONF), None);
    assert_valid("check --config", &named);
    assert!(named.1.contains("2 command(s)"), "{}", named.1);
    let found = check(None, None);
    assert_valid("check (search order)", &found);
    assert!(
        found
            .1
            .contains("config: /etc/gatecmd/allowed_commands.yaml (from system path)"),
        "{}",
        found.1
    );
    assert_valid("check as gatecmd", &check(Some(CONF), Some("gatecmd")));
    // The server as the unit starts it: the installed config, as gatecmd, its state in
    // /var/lib/gatecmd (which the purge below must delete).
    let log = serve_as_the_unit();
    assert!(
        log.contains("gatecmd: listening on http://127.0.0.1:"),
        "gatecmd serve as the unit runs it did not start:\n{log}"
    );
    assert!(
        log.contains("/etc/gatecmd/allowed_commands.yaml"),
        "the log names no config:\n{log}"
    );
    assert_eq!(
        mode_owner("/var/lib/gatecmd/token"),
        (0o600, "gatecmd".into(), "gatecmd".into()),
        "the generated token"
    );
    say(log
        .lines()
        .find(|l| l.starts_with("gatecmd: listening on "))
        .unwrap_or_default());
    // An admin adds a client with an inline token: the file's owner-only mode is what lets
    // the server accept it. Writing in place keeps the owner and mode, as an editor would.
    let mut edited = std::fs::read_to_string(CONF).expect("conf");
    edited.push_str("\nclients:\n  - name: vm-a\n    token: a-token-of-the-admins-0123456789\n");
    std::fs::write(CONF, &edited).expect("edit conf");
    assert_valid(
        "check as gatecmd, inline token",
        &check(Some(CONF), Some("gatecmd")),
    );

    // Remove: the program goes, the edited conffile stays.
    dpkg_ok(&["--remove", "gatecmd"]);
    assert_eq!(status(), "deinstall ok config-files");
    for (path, ..) in FILES.iter().filter(|f| f.0 != CONF) {
        assert!(!Path::new(path).exists(), "{path} is left after remove");
    }
    assert_eq!(
        std::fs::read_to_string(CONF).expect("conf after remove"),
        edited
    );
    assert!(
        Path::new("/var/lib/gatecmd/token").exists(),
        "remove keeps the state"
    );

    // Purge: nothing is left but the user and group (Debian leaves system users).
    let t = Instant::now();
    dpkg_ok(&["--purge", "gatecmd"]);
    say(&format!(
        "dpkg --remove, --purge; purge in {:.1?}",
        t.elapsed()
    ));
    let after = status();
    assert!(
        after.ends_with("not-installed"),
        "dpkg still knows gatecmd: {after}"
    );
    for (path, ..) in FILES {
        assert!(!Path::new(path).exists(), "{path} is left after purge");
    }
    for (dir, existed) in DIRS.iter().zip(&dirs_before) {
        assert_eq!(
            Path::new(dir).exists(),
            *existed,
            "{dir}: existed before the test: {existed}"
        );
    }
    let leftovers: Vec<_> = std::fs::read_dir("/var/lib/dpkg/info")
        .expect("dpkg info")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gatecmd."))
        .collect();
    assert!(leftovers.is_empty(), "dpkg's records: {leftovers:?}");
    assert!(known("passwd", "gatecmd"), "purge keeps the user gatecmd");
    say(&format!("whole test in {:.1?}", started.elapsed()));
}

/// The maintainer scripts parse as POSIX sh (Debian's /bin/sh is dash), do nothing for the
/// actions that need nothing, and refuse an action they do not know. Runs in the lanes:
/// none of these calls changes the machine.
#[test]
fn maintainer_scripts_parse_and_refuse_unknown_actions() {
    for (script, noop) in [
        ("postinst", "abort-upgrade"),
        ("prerm", "upgrade"),
        ("postrm", "abort-install"),
    ] {
        let path = format!("{REPO}/packaging/deb/{script}");
        let mode = std::fs::metadata(&path).expect(&path).permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "{script} is not executable");
        let parsed = run(Command::new("sh").arg("-n").arg(&path));
        assert!(parsed.status.success(), "{script}: {}", text(&parsed));
        let quiet = run(Command::new("sh").arg(&path).arg(noop));
        assert!(quiet.status.success(), "{script} {noop}: {}", text(&quiet));
        let bogus = run(Command::new("sh").arg(&path).arg("bogus"));
        assert_eq!(bogus.status.code(), Some(1), "{script} bogus");
        assert!(text(&bogus).contains("unknown argument 'bogus'"));
    }
}
