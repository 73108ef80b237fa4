//! The bundled recipes (recipes/*.yaml) through `include:` and the real `gatecmd check`:
//! each is clean on a machine with its tool (esptool, from PyPI, is the one whose absence
//! is the only complaint), and a fragment that breaks the rules is refused with its own
//! file and line.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness;
use harness::Unavailable;

fn check(config: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gatecmd"))
        .arg("check")
        .arg("--config")
        .arg(config)
        .env("GATECMD_CONFIG", "")
        .output()
        .expect("run gatecmd check");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn recipes() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("recipes/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    found.sort();
    found
}

/// A main file that includes `include` (written as given), with a file root and an
/// isolation view over `dir`'s own empty sysfs and devfs (this machine has no USB bus).
fn main_config(dir: &Path, include: &str, extra: &str) -> PathBuf {
    for d in ["images", "sys/bus/usb/devices", "dev/bus/usb"] {
        std::fs::create_dir_all(dir.join(d)).expect("mkdir");
    }
    let p = dir.join("gatecmd.yaml");
    std::fs::write(
        &p,
        format!(
            "file_roots: [{root}/images]\ninclude: [{include}]\nisolation:\n  sysfs_root: {root}/sys\n  devfs_root: {root}/dev\n{extra}",
            root = dir.display()
        ),
    )
    .expect("write");
    p
}

/// The binary a recipe names (its first `binary:`).
fn binary_of(recipe: &Path) -> String {
    let text = std::fs::read_to_string(recipe).expect("read");
    text.lines()
        .find_map(|l| l.trim().strip_prefix("binary: "))
        .expect("a binary")
        .to_string()
}

#[test]
fn every_bundled_recipe_is_clean() {
    let all = recipes();
    let names: Vec<String> = all
        .iter()
        .map(|p| p.file_stem().expect("stem").to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["dfu-util", "esptool", "fastboot", "sunxi-fel", "uuu"],
        "the recipes docs/FAMILIES.md documents"
    );
    let root = nix::unistd::geteuid().is_root();
    for recipe in &all {
        let dir = tempfile::tempdir().expect("tmp");
        let (code, out, err) = check(&main_config(dir.path(), &recipe.display().to_string(), ""));
        let binary = binary_of(recipe);
        let name = recipe.display();
        // Every recipe's commands and device classes are printed.
        assert!(out.contains(&format!("    {binary} ")), "{name}: {out}");
        assert!(out.contains("device classes:\n"), "{name}: {out}");
        if !Path::new(&binary).exists() {
            // Only esptool comes from outside Debian; the Debian tools are installed by
            // `scripts/setup.sh --test`.
            if !binary.ends_with("/esptool") {
                harness::skip(
                    "every_bundled_recipe_is_clean",
                    Unavailable::InstalledByCi,
                    &format!("{binary} is not installed"),
                );
                continue;
            }
            assert_eq!(code, 1, "{name}: {out}{err}");
            let problems: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
            assert_eq!(
                problems,
                [format!(
                    "error: command \"esptool\": {binary} does not exist on this host"
                )],
                "{name}: a missing binary is its only problem: {err}"
            );
            continue;
        }
        if !root && out.contains("isolated") {
            harness::skip(
                "every_bundled_recipe_is_clean",
                Unavailable::CiMachine,
                "an isolated recipe's view is probed as root",
            );
            continue;
        }
        assert_eq!(code, 0, "{name}: {out}{err}");
        assert!(!err.contains("error"), "{name}: {err}");
    }
}

#[test]
fn a_recipe_with_a_shell_metacharacter_or_a_relative_binary_is_refused_at_its_line() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(
        dir.path().join("bad.yaml"),
        "devices:\n  - name: fb\n    match: {family: fastboot}\ncommands:\n  - name: fb\n    binary: /usr/bin/fastboot\n    device: fb\n    allowed_args:\n      - pattern: flash boot x;reboot\n  - name: fb2\n    binary: fastboot\n    allowed_args:\n      - pattern: devices\n",
    )
    .expect("write");
    // Relative to the main file's directory.
    let (code, out, err) = check(&main_config(dir.path(), "bad.yaml", ""));
    assert_eq!(code, 2, "{out}{err}");
    let bad = dir.path().join("bad.yaml");
    assert!(
        err.contains(&format!(
            "{}:9:9: commands[0].allowed_args[0].pattern: literal \"x;reboot\"",
            bad.display()
        )) && err.contains("forbidden character ';'"),
        "{err}"
    );
    assert!(
        err.contains(&format!("{}:11:", bad.display())) && err.contains("commands[1].binary"),
        "{err}"
    );
    assert!(out.is_empty(), "nothing printed as if valid: {out}");
}

#[test]
fn a_fragment_holds_only_devices_and_commands_and_names_are_defined_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::create_dir_all(d.join("conf.d")).expect("mkdir");
    std::fs::write(
        d.join("conf.d/10-clients.yaml"),
        "clients:\n  - name: sneaky\n    token: x\n",
    )
    .expect("write");
    std::fs::write(
        d.join("conf.d/20-echo.yaml"),
        "commands:\n  - name: echo\n    binary: /bin/echo\n    allowed_args:\n      - pattern: hi\n",
    )
    .expect("write");
    std::fs::write(d.join("conf.d/notes.txt"), "not read").expect("write");
    let extra = "commands:\n  - name: echo\n    binary: /bin/echo\n    allowed_args:\n      - pattern: hello\n";
    let (code, _, err) = check(&main_config(d, "conf.d", extra));
    assert_eq!(code, 2, "{err}");
    let clients = d.join("conf.d/10-clients.yaml");
    assert!(
        err.contains(&format!("{}:1:", clients.display()))
            && err.contains("holds only `devices:` and `commands:`"),
        "{err}"
    );
    let echo = d.join("conf.d/20-echo.yaml");
    assert!(
        err.contains(&format!("{}:2:", echo.display())) && err.contains("defined twice"),
        "{err}"
    );
    assert!(!err.contains("notes.txt"), "{err}");
    // A missing file is an error at the include line of the main file.
    let (code, _, err) = check(&main_config(d, "nowhere.yaml", ""));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{}:2:", d.join("gatecmd.yaml").display()))
            && err.contains("include[0]")
            && err.contains("nowhere.yaml"),
        "{err}"
    );
}

#[test]
fn a_recipe_s_commands_join_the_allowlist_with_the_main_file_s() {
    let dir = tempfile::tempdir().expect("tmp");
    let fastboot = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/fastboot.yaml");
    let extra = "commands:\n  - name: echo\n    binary: /bin/echo\n    allowed_args:\n      - pattern: hello\n";
    let (_, out, err) = check(&main_config(
        dir.path(),
        &fastboot.display().to_string(),
        extra,
    ));
    assert!(out.contains("  fastboot: family fastboot\n"), "{out}{err}");
    assert!(
        out.contains("  echo (timeout") && out.contains("  fastboot (timeout"),
        "{out}"
    );
}

/// The `allowed_args` patterns of a recipe, as written (`- pattern: …` lines).
fn patterns_of(recipe: &Path) -> Vec<String> {
    std::fs::read_to_string(recipe)
        .expect("read")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- pattern: "))
        .map(str::to_string)
        .collect()
}

/// Runs the real uuu in its dry mode (`-dry`: the commands it would run are printed, no USB
/// is touched) with `args`, killed after 20 s; its stdout and stderr.
fn uuu_dry(args: &[String], cwd: &Path) -> String {
    use std::io::Read;
    let mut child = Command::new("/usr/bin/uuu")
        .arg("-dry")
        .args(args)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run uuu");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("uuu -dry {args:?} still ran after 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut out = String::new();
    for pipe in [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn Read>),
        child.stderr.take().map(|p| Box::new(p) as Box<dyn Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut p = pipe;
        p.read_to_string(&mut out).expect("read uuu's output");
    }
    out
}

/// The uuu lead of issue 37: given a bare file, uuu reads it as its own command script when
/// it starts with `uuu_version` (libuuu/cmd.cpp, `uuu_auto_detect_file`), and a script's
/// `SDP: boot -f PATH` sends any host file to the board. No pattern of the recipe may hand
/// uuu a file that way: with every file slot filled with such a script, uuu -dry (the real
/// binary) lists the agent's file as a `-f` argument and never the host file the script
/// names. The old pattern `-v {bootloader}` is run too, to show the script is real.
#[test]
fn no_uuu_pattern_runs_an_image_as_a_uuu_script() {
    if !Path::new("/usr/bin/uuu").exists() {
        harness::skip(
            "no_uuu_pattern_runs_an_image_as_a_uuu_script",
            Unavailable::InstalledByCi,
            "/usr/bin/uuu is not installed",
        );
        return;
    }
    // uuu takes a script's paths from the script's directory (gatecmd hands it
    // /proc/self/fd/N, so `../../../etc/…` reaches any host file): the host file here is
    // beside the directory the image is in.
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir(dir.path().join("images")).expect("mkdir");
    std::fs::write(dir.path().join("host-secret"), "not for the board\n").expect("write");
    let image = dir.path().join("images/boot.img");
    std::fs::write(&image, "uuu_version 1.0.0\nSDP: boot -f ../host-secret\n").expect("write");
    let image = image.display().to_string();
    let secret = "host-secret";

    // As uuu.yaml had it: the image is run as a script naming the host file.
    let old = uuu_dry(&["-v".into(), image.clone()], dir.path());
    assert!(
        old.contains("SDP: boot -f ../host-secret"),
        "uuu no longer reads a bare uuu_version file as a script; this test must be revisited: {old}"
    );

    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/uuu.yaml");
    let with_files: Vec<String> = patterns_of(&recipe)
        .into_iter()
        .filter(|p| p.contains('{'))
        .collect();
    assert!(with_files.len() >= 4, "{with_files:?}");
    for pattern in with_files {
        let args: Vec<String> = pattern
            .split_whitespace()
            .map(|w| {
                if w.starts_with('{') {
                    image.clone()
                } else {
                    w.to_string()
                }
            })
            .collect();
        let out = uuu_dry(&args, dir.path());
        assert!(
            !out.contains(secret),
            "`{pattern}` let uuu run the image as a script naming {secret}: {out}"
        );
        assert!(
            out.contains(&format!("-f {image}")),
            "`{pattern}`: uuu should send the image itself: {out}"
        );
    }
}
