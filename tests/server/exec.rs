//! The executor against real child processes.

use crate::harness;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gatecmd_domain::exec::{CHILD_PATH, Executor, Spec, StopReason};
use harness::{process_gone, read_pid_file, script};
use tokio_util::sync::CancellationToken;

fn spec(binary: impl Into<PathBuf>, args: &[&str], timeout_ms: u64) -> Spec {
    Spec {
        binary: binary.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        timeout: Duration::from_millis(timeout_ms),
        isolation: None,
        inherit: vec![],
        live_output: false,
    }
}

fn executor() -> Executor {
    Executor::new(4, 64 * 1024, Duration::from_millis(300))
}

/// A tool that starts a grandchild ignoring SIGTERM, records its pid, and itself ignores SIGTERM.
fn stubborn(dir: &std::path::Path) -> PathBuf {
    script(
        dir,
        "stubborn.sh",
        &format!(
            "trap '' TERM\n(trap '' TERM; while :; do sleep 0.05; done) &\necho $! > {dir}/grandchild.pid\necho started\nwhile :; do sleep 0.05; done",
            dir = dir.display()
        ),
    )
}

fn read_pid(dir: &std::path::Path) -> i32 {
    let p = dir.join("grandchild.pid");
    // A wait, not a timing claim: a loaded 2-core CI machine can take seconds to start bash.
    let mut pid = None;
    assert!(
        harness::eventually(Duration::from_secs(10), || {
            pid = read_pid_file(&p);
            pid.is_some()
        }),
        "the tool never wrote a complete grandchild.pid"
    );
    pid.expect("pid number")
}

/// True once the stubborn tool has written its grandchild's pid: it is running.
fn grandchild_started(dir: &std::path::Path) -> bool {
    read_pid_file(&dir.join("grandchild.pid")).is_some()
}

#[tokio::test]
async fn timeout_kills_the_whole_group_even_when_sigterm_is_ignored() {
    let dir = tempfile::tempdir().expect("tmp");
    let bin = stubborn(dir.path());
    let started = Instant::now();
    let out = executor()
        .run(&spec(bin, &[], 500), CancellationToken::new(), |_, _| {})
        .await
        .expect("run");
    assert_eq!(out.stopped, Some(StopReason::Timeout));
    assert_eq!(
        out.signal,
        Some(9),
        "SIGTERM was ignored, so SIGKILL ended it"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "started\n",
        "partial output is kept"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let gc = read_pid(dir.path());
    assert!(
        harness::eventually(Duration::from_secs(1), || process_gone(gc)),
        "grandchild {gc} survived"
    );
}

#[tokio::test]
async fn cancel_kills_the_group() {
    let dir = tempfile::tempdir().expect("tmp");
    let bin = stubborn(dir.path());
    let cancel = CancellationToken::new();
    let ex = executor();
    let s = spec(bin, &[], 60_000);
    // Cancelled once the tool has started its grandchild (the pid file is written), so the
    // cancel meets the whole group, not a process still starting.
    let cancel_when_started = async {
        harness::wait_until(
            "the tool to write grandchild.pid",
            Duration::from_secs(10),
            || grandchild_started(dir.path()),
        )
        .await;
        cancel.cancel();
    };
    let (out, ()) = tokio::join!(ex.run(&s, cancel.clone(), |_, _| {}), cancel_when_started);
    let out = out.expect("run");
    assert_eq!(out.stopped, Some(StopReason::Cancelled));
    let gc = read_pid(dir.path());
    assert!(harness::eventually(
        Duration::from_secs(1),
        || process_gone(gc)
    ));
}

#[tokio::test]
async fn dropping_the_run_kills_the_group() {
    let dir = tempfile::tempdir().expect("tmp");
    let bin = stubborn(dir.path());
    let ex = executor();
    let s = spec(bin, &[], 60_000);
    let fut = ex.run(&s, CancellationToken::new(), |_, _| {});
    // The run is dropped once the tool has started its grandchild (the pid file is written).
    tokio::select! {
        out = fut => panic!("the tool ended by itself: {out:?}"),
        () = harness::wait_until("the tool to write grandchild.pid", Duration::from_secs(10), || {
            grandchild_started(dir.path())
        }) => {}
    }
    let gc = read_pid(dir.path());
    assert!(
        harness::eventually(Duration::from_secs(1), || process_gone(gc)),
        "grandchild outlived a dropped request"
    );
}

#[tokio::test]
async fn leftovers_in_the_group_die_with_a_normal_exit() {
    let dir = tempfile::tempdir().expect("tmp");
    let bin = script(
        dir.path(),
        "daemonize.sh",
        &format!(
            "(while :; do sleep 0.05; done) >/dev/null 2>&1 &\necho $! > {}/grandchild.pid\nexit 0",
            dir.path().display()
        ),
    );
    let out = executor()
        .run(&spec(bin, &[], 5_000), CancellationToken::new(), |_, _| {})
        .await
        .expect("run");
    assert_eq!(out.exit_code, Some(0));
    let gc = read_pid(dir.path());
    assert!(harness::eventually(
        Duration::from_secs(1),
        || process_gone(gc)
    ));
}

#[tokio::test]
async fn output_is_capped_and_the_rest_counted() {
    let ex = Executor::new(1, 1000, Duration::from_millis(200));
    let out = ex
        .run(
            &spec("/usr/bin/head", &["-c", "300000", "/dev/zero"], 5_000),
            CancellationToken::new(),
            |_, _| {},
        )
        .await
        .expect("run");
    assert_eq!(
        out.exit_code,
        Some(0),
        "the child was not blocked by the cap"
    );
    assert_eq!(out.stdout.len(), 1000);
    assert_eq!(out.stdout_dropped, 299_000);
    assert_eq!(out.stderr_dropped, 0);
}

#[tokio::test]
async fn environment_is_cleared() {
    // SAFETY: set before any child is spawned by this test; the variable is unique to it.
    unsafe { std::env::set_var("GATECMD_TEST_SECRET", "do-not-leak") };
    let mut s = spec("/usr/bin/env", &[], 5_000);
    s.env.insert("RK_MODE".into(), "fast".into());
    let out = executor()
        .run(&s, CancellationToken::new(), |_, _| {})
        .await
        .expect("run");
    let env = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<&str> = env.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "LANG=C.UTF-8".to_string(),
            format!("PATH={CHILD_PATH}"),
            "RK_MODE=fast".to_string()
        ]
    );
}

#[tokio::test]
async fn stdin_is_closed() {
    let started = Instant::now();
    let out = executor()
        .run(
            &spec("/bin/cat", &[], 5_000),
            CancellationToken::new(),
            |_, _| {},
        )
        .await
        .expect("run");
    assert_eq!(out.exit_code, Some(0));
    assert!(out.stdout.is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "cat waited for input"
    );
}

#[tokio::test]
async fn lines_stream_as_they_arrive_split_on_cr_and_lf() {
    let dir = tempfile::tempdir().expect("tmp");
    let bin = script(
        dir.path(),
        "lines.sh",
        "printf 'a (10%%)\\rb (20%%)\\nc\\n'; sleep 0.2; printf 'late\\n' >&2",
    );
    let mut seen = Vec::new();
    let out = executor()
        .run(&spec(bin, &[], 5_000), CancellationToken::new(), |k, l| {
            seen.push((k, l.to_string()))
        })
        .await
        .expect("run");
    assert_eq!(out.exit_code, Some(0));
    let texts: Vec<&str> = seen.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(texts, ["a (10%)", "b (20%)", "c", "late"]);
    assert_eq!(seen[3].0, gatecmd_domain::exec::StreamKind::Stderr);
}

#[tokio::test]
async fn missing_binary_is_a_spawn_error() {
    let err = executor()
        .run(
            &spec("/nonexistent/x", &[], 1_000),
            CancellationToken::new(),
            |_, _| {},
        )
        .await;
    assert!(err.is_err_and(|e| e.to_string().contains("could not start /nonexistent/x")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_running_children_and_refuses_new_ones() {
    let dir = tempfile::tempdir().expect("tmp");
    let bin = stubborn(dir.path());
    let ex = executor();
    let ex2 = ex.clone();
    let s = spec(bin, &[], 60_000);
    let run = tokio::spawn(async move { ex2.run(&s, CancellationToken::new(), |_, _| {}).await });
    let gc = read_pid(dir.path());
    ex.shutdown().await;
    let out = run.await.expect("join").expect("run");
    assert_eq!(out.stopped, Some(StopReason::Shutdown));
    assert!(harness::eventually(
        Duration::from_secs(1),
        || process_gone(gc)
    ));
    assert!(
        ex.run(
            &spec("/bin/true", &[], 1_000),
            CancellationToken::new(),
            |_, _| {}
        )
        .await
        .is_err()
    );
}

#[tokio::test]
async fn output_is_kept_when_an_escaped_process_holds_the_pipe() {
    // A process in a new session escapes the group kill and keeps stdout open; the run must
    // still end after the grace, with what was printed before.
    let dir = tempfile::tempdir().expect("tmp");
    let bin = script(
        dir.path(),
        "escape.sh",
        "echo before\nsetsid sleep 3 &\nexit 0",
    );
    let started = Instant::now();
    let out = executor()
        .run(&spec(bin, &[], 10_000), CancellationToken::new(), |_, _| {})
        .await
        .expect("run");
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "before\n");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited for the escaped process"
    );
}

/// rkdeveloptool's way of printing progress (`RKComm`/`main.cpp`: `printf("...(%d%%)\r\n")`,
/// never `fflush`), in C, so that glibc's stdio buffers it exactly as it buffers the real
/// tool's: 4 KiB blocks into a pipe.
const PRINTS_LIKE_RKDEVELOPTOOL: &str = r#"
#include <stdio.h>
#include <unistd.h>
int main(void) {
    for (int i = 1; i <= 10; i++) {
        printf("Write LBA from file (%d%%)\r\n", i * 10);
        usleep(100000);
    }
    return 0;
}
"#;

/// A C compiler, to build the program above (the machine's gcc; CI installs it).
fn compile(dir: &std::path::Path) -> Option<PathBuf> {
    let src = dir.join("progress.c");
    let bin = dir.join("progress");
    std::fs::write(&src, PRINTS_LIKE_RKDEVELOPTOOL).expect("write");
    let ok = std::process::Command::new("cc")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(bin)
}

/// Issue 31: a command with `progress:` runs with its output made live (coreutils'
/// libstdbuf preloaded), so its progress lines arrive while it runs, not in one block at
/// its exit; the same program without it is read only when it ends.
#[tokio::test]
async fn live_output_reaches_the_server_as_the_tool_prints_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(bin) = compile(dir.path()) else {
        harness::skip(
            "live_output_reaches_the_server_as_the_tool_prints_it",
            harness::Unavailable::InstalledByCi,
            "no C compiler (cc) to build the rkdeveloptool-like program",
        );
        return;
    };
    assert!(
        std::path::Path::new(gatecmd_domain::exec::LIVE_OUTPUT_LIB).exists(),
        "coreutils' libstdbuf is missing"
    );
    let ex = executor();
    for live in [true, false] {
        let mut s = spec(&bin, &[], 10_000);
        s.live_output = live;
        let started = std::time::Instant::now();
        let mut arrivals: Vec<Duration> = Vec::new();
        let out = ex
            .run(&s, CancellationToken::new(), |_, line| {
                if line.contains('%') {
                    arrivals.push(started.elapsed());
                }
            })
            .await
            .expect("run");
        let ran = out.duration;
        assert_eq!(arrivals.len(), 10, "{arrivals:?}");
        let early = arrivals.iter().filter(|t| **t < ran / 2).count();
        if live {
            // The first lines come while the tool still runs.
            assert!(
                early >= 3,
                "live: {early} of 10 lines before half the run ({arrivals:?}, ran {ran:?})"
            );
        } else {
            // A pipe: the whole output in one block at the exit.
            assert_eq!(early, 0, "buffered: {arrivals:?}, ran {ran:?}");
        }
    }
}
