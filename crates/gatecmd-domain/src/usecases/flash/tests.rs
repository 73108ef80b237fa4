//! The flash use case on a real state (locks, jobs, audit, the flash itself, which stops at
//! the MaskROM step: the board has no power and nothing is on a bus): how many times one
//! call reads the image through, with and without an approval, and what an approval binds.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gatecmd_core::refusal::{Refusal, RefusalReason};

use super::*;
use crate::approvals::NewRequest;
use crate::config::Config;
use crate::flash::hash::hashes_of;
use crate::jobs::{Job, JobState, Origin};
use crate::locks::{ClientName, LeaseId, LeaseRequest, LockKey};
use crate::state::AppState;

fn config(dir: &std::path::Path, approvals: bool) -> Config {
    let rule = if approvals {
        "approvals:\n  - {tool: flash_board, approve: {by: [ops], timeout_secs: 60}}\n"
    } else {
        ""
    };
    let yaml = format!(
        "clients:\n  - {{name: vm-a, token: aaaaaaaaaaaaaaaaaaaa}}\n  \
         - {{name: ops, token: bbbbbbbbbbbbbbbbbbbb}}\n\
         file_roots: [{root}]\nstate_dir: {root}/state\n\
         boards:\n  - name: b1\n    usb: \"1-2\"\n\
         flash:\n  enabled: true\n  boards: [b1]\n{rule}",
        root = dir.display()
    );
    Config::parse(&yaml, "t.yaml").expect("config")
}

/// What the approval round trip saw; `edit` runs before the yes (a file rewritten while
/// the person looked).
struct Person {
    asked: Mutex<Vec<NewRequest>>,
    edit: Option<Box<dyn Fn() + Send + Sync>>,
}

impl Approve for Person {
    async fn approve(
        &self,
        request: NewRequest,
        key: LockKey,
        lease: Option<LeaseId>,
    ) -> Result<String, Refusal> {
        assert_eq!(key, LockKey::Board("b1".into()));
        assert!(lease.is_some());
        self.asked.lock().expect("lock").push(request);
        if let Some(edit) = &self.edit {
            edit();
        }
        Ok("apr-1".into())
    }
}

fn person(edit: Option<Box<dyn Fn() + Send + Sync>>) -> Person {
    Person {
        asked: Mutex::new(Vec::new()),
        edit,
    }
}

async fn leased(state: &AppState) -> String {
    let lease = state
        .locks
        .lock(LeaseRequest {
            key: LockKey::Board("b1".into()),
            client: ClientName("vm-a".into()),
            session: None,
            ttl: None,
            note: None,
            wait: Duration::ZERO,
            shared: vec![],
        })
        .await
        .expect("lease");
    lease.lease_id.0
}

fn ask(lease: &str) -> Ask {
    Ask {
        tool: "flash_board",
        client: "vm-a".into(),
        session: None,
        lease: Some(lease.to_string()),
        board: "b1".into(),
        image: "disk.img".into(),
        bmap: None,
        loader: None,
        usbplug: None,
        wait_for: None,
        timeout_secs: Some(60),
        note: Some("the new image".into()),
        received: Instant::now(),
    }
}

/// Runs the flash to its end; the job's state and the image's SHA-256 it names.
async fn run(state: &Arc<AppState>, ask: &Ask, prepared: Prepared) -> (JobState, Arc<Job>) {
    let job = launch(
        state,
        ask,
        Origin::Background,
        prepared,
        Progress::default(),
        |_: &Job, st, _| Answer {
            result: None,
            text: format!("ended {st:?}"),
        },
    );
    let until = Instant::now() + Duration::from_secs(20);
    while job.state().is_running() {
        assert!(Instant::now() < until, "the flash did not end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (job.state(), job)
}

/// Without an approval the flash hashes the image once, beside the flash; with one, the
/// approval's hash (shown to the approver) is the only one: the re-check after the yes
/// compares the file's stamp, and the flash names the image by the approved SHA-256.
/// Before this use case the approved call read the image three times (the request, the
/// re-hash after the yes, the flash's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_reads_the_image_through_once_with_or_without_an_approval() {
    for approvals in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let image = dir.path().join("disk.img");
        std::fs::write(&image, vec![7u8; 1 << 20]).expect("image");
        let state = AppState::new(config(dir.path(), approvals));
        let lease = leased(&state).await;
        let ask = ask(&lease);
        let who = person(None);
        let prepared = match prepare(&state, &ask, &who).await {
            Ok(p) => p,
            Err(e) => panic!("refused: {e:?}"),
        };
        let (st, _) = run(&state, &ask, prepared).await;
        assert_eq!(st, JobState::Failed, "no power.maskrom: it stops there");
        let opened = std::fs::File::open(&image).expect("open");
        assert_eq!(
            hashes_of(&opened),
            1,
            "approvals: {approvals}: the image was read through more than once"
        );
        let asked = who.asked.lock().expect("lock");
        assert_eq!(asked.len(), usize::from(approvals));
        if let Some(r) = asked.first() {
            use sha2::{Digest, Sha256};
            assert_eq!(
                r.files[0].sha256,
                hex::encode(Sha256::digest(vec![7u8; 1 << 20]))
            );
            assert_eq!(r.what, format!("flash_board b1 {}", image.display()));
        }
    }
}

/// A file rewritten in place while the person looked is refused after the yes without
/// being read again, the approved SHA-256 named; so is one truncated and written back to
/// the same size, and nothing of the board is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_changed_after_the_hash_are_refused_after_the_yes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let image = dir.path().join("disk.img");
    std::fs::write(&image, vec![7u8; 4096]).expect("image");
    let state = AppState::new(config(dir.path(), true));
    let lease = leased(&state).await;
    let ask = ask(&lease);
    let rewrite = |path: std::path::PathBuf, same_size: bool| -> Box<dyn Fn() + Send + Sync> {
        Box::new(move || {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .expect("open");
            if same_size {
                f.set_len(0).expect("truncate");
                f.write_all_at(&[7u8; 4096], 0).expect("write back");
            } else {
                f.write_all_at(b"changed", 0).expect("rewrite");
            }
        })
    };
    for same_size in [false, true] {
        let who = person(Some(rewrite(image.clone(), same_size)));
        let started = Instant::now();
        let refused = prepare(&state, &ask, &who).await.err();
        let Some(Refused::ChangedSinceApproval { why }) = refused else {
            panic!("not refused changed_since_approval: {refused:?}");
        };
        let approved = &who.asked.lock().expect("lock")[0].files[0];
        assert!(why.contains(&approved.sha256), "{why}");
        assert!(why.contains("changed since it was approved"), "{why}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the wait for a still file is bounded"
        );
        // Nothing held: the board's key is free for the next call.
        assert!(state.client_slot("vm-a").is_some());
    }
}

/// The surface's refusal of the approval passes through, and the call holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_is_the_surfaces_refusal() {
    struct No;
    impl Approve for No {
        async fn approve(
            &self,
            _: NewRequest,
            _: LockKey,
            _: Option<LeaseId>,
        ) -> Result<String, Refusal> {
            Err(Refusal::new(RefusalReason::ApprovalDenied, "no"))
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("disk.img"), b"x").expect("image");
    let state = AppState::new(config(dir.path(), true));
    let lease = leased(&state).await;
    let r = prepare(&state, &ask(&lease), &No).await.err();
    assert!(
        matches!(&r, Some(Refused::Approval(r)) if r.reason == RefusalReason::ApprovalDenied),
        "{r:?}"
    );
    assert!(state.client_slot("vm-a").is_some());
}
