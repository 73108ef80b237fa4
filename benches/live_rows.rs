//! Live progress (issue 31): what making a child's output live costs. One C program prints
//! 100,000 progress lines the way rkdeveloptool does (`printf` with `\r\n`, no `fflush`),
//! run by the executor with every line tapped as the progress reporter taps them, through a
//! plain pipe (glibc's 4 KiB blocks) and live (coreutils' libstdbuf preloaded: one write per
//! line). The execute_command overhead of a command without `progress:` is the overhead
//! row of this benchmark, which the flag does not touch.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gatecmd_domain::exec::{Executor, Spec};
use tokio_util::sync::CancellationToken;

use crate::{Row, Sizes, latency_row};

const LINES: u32 = 100_000;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    for (int i = 1; i <= n; i++) printf("Write LBA from file (%d%%)\r\n", (int)(i * 100LL / n));
    return 0;
}
"#;

fn build(dir: &std::path::Path) -> PathBuf {
    let src = dir.join("lines.c");
    let bin = dir.join("lines");
    std::fs::write(&src, PROGRAM).expect("write");
    let ok = std::process::Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cc failed: the live-output rows need a C compiler");
    bin
}

/// One row each: a pipe, and live output; `z.events / 20` runs of each, interleaved.
pub async fn rows(z: &Sizes) -> Vec<Row> {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = build(dir.path());
    let ex = Executor::new(4, 64 << 20, Duration::from_secs(1));
    let runs = (z.events / 20).max(3);
    let lines = if z.events < 50 { 10_000 } else { LINES };
    let mut times: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..runs {
        for (i, live) in [false, true].into_iter().enumerate() {
            let spec = Spec {
                binary: bin.clone(),
                args: vec![lines.to_string()],
                env: BTreeMap::new(),
                timeout: Duration::from_secs(60),
                isolation: None,
                inherit: vec![],
                live_output: live,
            };
            let mut seen = 0u32;
            let t0 = Instant::now();
            ex.run(&spec, CancellationToken::new(), |_, line| {
                if line.contains('%') {
                    seen += 1;
                }
            })
            .await
            .expect("run");
            times[i].push(t0.elapsed());
            assert_eq!(seen, lines, "every line tapped");
        }
    }
    let [mut pipe, mut live] = times;
    vec![
        latency_row(
            &format!("{lines} progress lines through a pipe (glibc-buffered), whole run"),
            &mut pipe,
            "",
            None,
        ),
        latency_row(
            &format!("{lines} progress lines live (libstdbuf, one write a line), whole run"),
            &mut live,
            "",
            None,
        ),
    ]
}
