//! Issue 15, findings 8 and 9: a file argument is checked and used as one open file, and a
//! child never starts in the server's working directory. The real binary over loopback;
//! the flipping loop is bounded in count and time.

use crate::harness;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use harness::{Era, Server, TOKEN_A, call, connect, is_error, structured};
use serde_json::json;

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
file_roots: [$DIR/images]
commands:
  - name: cat
    binary: /bin/cat
    description: Print a file.
    allowed_args:
      - pattern: "{{file}}"
        file_args: [file]
  - name: pwd
    binary: /bin/pwd
    allowed_args:
      - pattern: ""
  - name: echo
    binary: /bin/echo
    allowed_args:
      - pattern: "{{file}}"
        file_args: [file]
  - name: tee
    binary: /usr/bin/tee
    allowed_args:
      - pattern: "{{out}}"
        output_args: [out]
"#
    )
}

fn setup(s: &Server) -> (std::path::PathBuf, std::path::PathBuf) {
    let images = s.path("images");
    let secret = s.path("secret");
    std::fs::create_dir_all(&images).expect("mkdir images");
    std::fs::create_dir_all(&secret).expect("mkdir secret");
    std::fs::write(images.join("inside.txt"), "INSIDE\n").expect("write");
    std::fs::write(secret.join("outside.txt"), "SECRET\n").expect("write");
    (images, secret)
}

/// Swaps `images/x` between a regular file and a symlink to a file outside the roots, as a
/// local user racing the check would, with atomic renames, until `stop`.
fn flip(images: &Path, secret: &Path, stop: &AtomicBool, flips: &AtomicUsize) {
    let target = images.join("x");
    let deadline = Instant::now() + Duration::from_secs(120);
    for i in 0..10_000_000u64 {
        if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
            break;
        }
        let tmp = images.join(format!(".flip{}", i % 2));
        let _ = std::fs::remove_file(&tmp);
        let made = if i % 2 == 0 {
            std::fs::write(&tmp, "INSIDE\n")
        } else {
            std::os::unix::fs::symlink(secret.join("outside.txt"), &tmp)
        };
        if made.is_ok() && std::fs::rename(&tmp, &target).is_ok() {
            flips.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// 500 approved runs of `cat x` while `x` flips between a file inside the root and a symlink
/// to a file outside: not one prints the outside file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipping_symlink_never_leaks_the_outside_file() {
    let s = Server::start(&config());
    let (images, secret) = setup(&s);
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");
    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicUsize::new(0));
    let flipper = {
        let (stop, flips) = (stop.clone(), flips.clone());
        std::thread::spawn(move || flip(&images, &secret, &stop, &flips))
    };
    let (mut ran, mut refused, mut leaked, mut other) = (0, 0, 0, 0);
    let started = Instant::now();
    for _ in 0..500 {
        if started.elapsed() > Duration::from_secs(100) {
            break;
        }
        let r = call(
            &c,
            "execute_command",
            json!({"command": "cat", "args": ["x"]}),
        )
        .await;
        let v = structured(&r);
        if is_error(&r) && v.get("refusal").is_some() {
            refused += 1;
            continue;
        }
        let out = v["stdout"].as_str().unwrap_or_default();
        if out.contains("SECRET") {
            leaked += 1;
        } else if out == "INSIDE\n" {
            ran += 1;
        } else {
            other += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = flipper.join();
    eprintln!(
        "flipping symlink: {} calls in {:.1} s ({} flips): {ran} printed the inside file, \
         {refused} refused, {leaked} leaked, {other} other",
        ran + refused + leaked + other,
        started.elapsed().as_secs_f64(),
        flips.load(Ordering::Relaxed)
    );
    assert_eq!(leaked, 0, "the outside file was printed {leaked} times");
    assert_eq!(
        ran + refused + leaked + other,
        500,
        "bounded loop ended early"
    );
    assert!(
        ran > 0 && refused > 0,
        "the race was not exercised: {ran} ran, {refused} refused"
    );
}

/// What a tool that prints its argument sees, the hard-link rule, outputs through their
/// directory, and the children's working directory.
#[tokio::test]
async fn file_arguments_are_open_files_and_children_start_in_root() {
    let s = Server::start(&config());
    let (images, secret) = setup(&s);
    let c = connect(&s.url, Some(TOKEN_A), Era::Legacy)
        .await
        .expect("connect");

    let r = call(
        &c,
        "execute_command",
        json!({"command": "echo", "args": ["inside.txt"]}),
    )
    .await;
    let v = structured(&r);
    assert!(!is_error(&r), "{v}");
    let shown = v["argv"][1].as_str().unwrap_or_default();
    assert!(
        shown.ends_with("/images/inside.txt"),
        "argv shows the path: {v}"
    );
    // The open file under its own name (tools such as rkdeveloptool look at the name): a
    // symlink to the descriptor the child inherited.
    let passed = v["passed_argv"][1].as_str().unwrap_or_default();
    assert!(
        passed.contains("/gatecmd-args-") && passed.ends_with("/inside.txt"),
        "{v}"
    );
    let target = std::fs::read_link(passed).expect("the named argument is a symlink");
    assert!(
        target.to_string_lossy().starts_with("/proc/self/fd/"),
        "{target:?}"
    );
    assert_eq!(
        v["stdout"],
        format!("{passed}\n"),
        "echo prints what it was given"
    );

    // A hard link makes an outside file appear inside: refused unless configured.
    std::fs::hard_link(secret.join("outside.txt"), images.join("linked.txt")).expect("link");
    let r = call(
        &c,
        "execute_command",
        json!({"command": "cat", "args": ["linked.txt"]}),
    )
    .await;
    let v = structured(&r);
    assert!(is_error(&r), "{v}");
    assert!(
        v["refusal"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("hard links"),
        "{v}"
    );

    // An output goes through its opened directory: the file appears inside the root.
    let r = call(
        &c,
        "execute_command",
        json!({"command": "tee", "args": ["new.txt"]}),
    )
    .await;
    let v = structured(&r);
    assert!(!is_error(&r), "{v}");
    assert!(images.join("new.txt").exists(), "{v}");
    let passed = v["passed_argv"][1].as_str().unwrap_or_default();
    assert!(
        passed.starts_with("/proc/self/fd/") && passed.ends_with("/new.txt"),
        "{v}"
    );

    // The server's own working directory is not the child's.
    let r = call(&c, "execute_command", json!({"command": "pwd", "args": []})).await;
    assert_eq!(structured(&r)["stdout"], "/\n");
}
