//! Jobs and leases through the real server (issue 23): a lease whose TTL is shorter than
//! the job it runs is not lost while the job runs, another client stays refused for the
//! whole job, and the lease's TTL counts again from the job's end.
#![cfg(feature = "udev")]

use crate::common;
use crate::harness;

use std::time::{Duration, Instant};

use common::umockdev::{Testbed, is_inner_run, rerun_under_preload};
use common::{RK3588_MASKROM_1_2, ROOT_HUB};
use harness::*;
use serde_json::json;

fn config() -> String {
    format!(
        r#"
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
devices:
  - name: rockusb
    match: {{vid: "2207"}}
commands:
  - name: flash
    binary: {rk}
    device: rockusb
    destructive: true
    env: {{FAKE_RK_STEPS: "30", FAKE_RK_DELAY: "0.1"}}
    allowed_args:
      - pattern: wl
      - pattern: rd
"#,
        rk = fake_rk()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_shorter_than_its_job_lives_until_the_job_ends() {
    if !is_inner_run() {
        return rerun_under_preload(
            module_path!(),
            "a_lease_shorter_than_its_job_lives_until_the_job_ends",
        );
    }
    let tb = Testbed::new();
    tb.add_from_string(ROOT_HUB);
    tb.add_from_string(RK3588_MASKROM_1_2);
    let root = tb.root_dir();
    let s = Server::start_with(
        &config(),
        &[],
        &[
            ("LD_PRELOAD", "libumockdev-preload.so.0"),
            ("UMOCKDEV_DIR", root.to_str().expect("utf8")),
        ],
    );
    for era in ERAS {
        let a = connect(&s.url, Some(TOKEN_A), era)
            .await
            .expect("connect a");
        let b = connect(&s.url, Some(TOKEN_B), era)
            .await
            .expect("connect b");
        let r = call(&a, "lock_device", json!({"device": "1-2", "ttl_secs": 1})).await;
        assert!(!is_error(&r), "{era:?}: {}", text(&r));
        let lease = structured(&r)["lease_id"]
            .as_str()
            .expect("lease")
            .to_string();
        let r = call(
            &a,
            "execute_command",
            json!({"command": "flash", "args": ["wl"], "lease": lease, "background": true}),
        )
        .await;
        assert!(!is_error(&r), "{era:?}: {}", text(&r));
        let job = structured(&r)["job"].as_str().expect("job").to_string();
        let started = Instant::now();
        // Three times the lease's TTL passes while the job (3 s) runs.
        let mut looks = 0;
        while started.elapsed() < Duration::from_millis(2500) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let refused = call(&b, "lock_device", json!({"device": "1-2"})).await;
            assert_eq!(
                structured(&refused)["refusal"]["reason"],
                "device_busy",
                "{era:?} at {:?}: {}",
                started.elapsed(),
                text(&refused)
            );
            let run = call(
                &b,
                "execute_command",
                json!({"command": "flash", "args": ["rd"]}),
            )
            .await;
            assert_eq!(
                structured(&run)["refusal"]["reason"],
                "device_busy",
                "{}",
                text(&run)
            );
            let locks = call(&a, "list_locks", json!({})).await;
            assert!(
                text(&locks).contains(&lease) || structured(&locks).to_string().contains(&lease),
                "{era:?} at {:?}: the lease is gone while its job runs: {}",
                started.elapsed(),
                structured(&locks)
            );
            looks += 1;
        }
        assert!(looks >= 4);
        let done = call(&a, "wait_job", json!({"job": job, "timeout_secs": 30})).await;
        assert_eq!(structured(&done)["state"], "succeeded", "{}", text(&done));
        // The lease outlived the job and still works; its TTL counts from the job's end.
        let r = call(
            &a,
            "execute_command",
            json!({"command": "flash", "args": ["rd"], "lease": lease}),
        )
        .await;
        assert!(
            !is_error(&r),
            "{era:?}: the lease died with the job: {}",
            text(&r)
        );
        // Once it expired (1 s after the last command), vm-b gets the board.
        let mut got = false;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let r = call(&b, "lock_device", json!({"device": "1-2"})).await;
            if !is_error(&r) {
                let l = structured(&r)["lease_id"]
                    .as_str()
                    .expect("lease")
                    .to_string();
                call(&b, "unlock_device", json!({"lease": l})).await;
                got = true;
                break;
            }
        }
        assert!(got, "{era:?}: the lease never expired after the job");
    }
}
