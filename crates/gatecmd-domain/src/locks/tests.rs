//! Behaviour tests for the lock manager, on a real tokio runtime. TTL tests
//! run with paused time, so they are exact and instant.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use tokio::time::{Instant, sleep, timeout};

use super::*;

fn k(text: &str) -> LockKey {
    text.parse().unwrap()
}

fn board() -> LockKey {
    k("usb:2207:350b")
}

fn client(name: &str) -> ClientName {
    ClientName(name.to_owned())
}

fn mgr() -> LockManager {
    LockManager::new(LockSettings::default())
}

fn cmd(who: &str, keys: &[LockKey]) -> CommandLockRequest {
    CommandLockRequest {
        keys: keys.to_vec(),
        client: client(who),
        session: None,
        lease: None,
        command: format!("rkdeveloptool by {who}"),
        shared: vec![],
    }
}

fn cmd_with_lease(who: &str, key: &LockKey, lease: &LeaseId) -> CommandLockRequest {
    CommandLockRequest {
        lease: Some(lease.clone()),
        ..cmd(who, std::slice::from_ref(key))
    }
}

fn lease_req(who: &str, key: &LockKey) -> LeaseRequest {
    LeaseRequest {
        key: key.clone(),
        client: client(who),
        session: None,
        ttl: None,
        note: None,
        wait: Duration::ZERO,
        shared: vec![],
    }
}

fn queue_len(m: &LockManager, key: &LockKey) -> usize {
    m.key_state(key).map_or(0, |s| s.queue_len)
}

/// Lets spawned tasks run until `key` has `n` waiters.
async fn until_queued(m: &LockManager, key: &LockKey, n: usize) {
    for _ in 0..10_000 {
        if queue_len(m, key) == n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("queue of {key} never reached {n}");
}

fn busy(err: LockError) -> BusyInfo {
    match err {
        LockError::Busy(info) => *info,
        other => panic!("expected Busy, got {other:?}"),
    }
}

fn drain(rx: &mut gatecmd_core::events::Events<LockEvent>) -> Vec<LockEventKind> {
    let mut kinds = Vec::new();
    while let Ok(event) = rx.try_recv() {
        kinds.push(event.kind);
    }
    kinds
}

// ---- exclusion and queueing -------------------------------------------

#[tokio::test]
async fn free_key_is_taken_at_once_and_freed_on_drop() {
    let m = mgr();
    let guard = m.try_acquire_for_command(cmd("vm-a", &[board()])).unwrap();
    let state = m.key_state(&board()).unwrap();
    assert_eq!(state.running.unwrap().client, client("vm-a"));
    drop(guard);
    assert_eq!(m.key_state(&board()), None);
    assert!(m.snapshot().keys.is_empty());
}

#[tokio::test]
async fn second_command_is_refused_naming_the_running_one() {
    let m = mgr();
    let _a = m.try_acquire_for_command(cmd("vm-a", &[board()])).unwrap();
    let info = busy(
        m.try_acquire_for_command(cmd("vm-b", &[board()]))
            .unwrap_err(),
    );
    assert_eq!(info.holder, client("vm-a"));
    assert_eq!(info.held_by, HeldBy::Command);
    assert_eq!(info.command.as_deref(), Some("rkdeveloptool by vm-a"));
    assert_eq!(info.queue_len, 0);
    assert_eq!(info.expires_at, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_under_heavy_concurrency() {
    let m = mgr();
    let inside = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    // Who holds a lease right now: no other client's command may run then.
    let leased_by = Arc::new(std::sync::Mutex::new(None::<ClientName>));

    let mut tasks = Vec::new();
    for t in 0..40 {
        let (m, inside, max_seen, runs, leased_by) = (
            m.clone(),
            inside.clone(),
            max_seen.clone(),
            runs.clone(),
            leased_by.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let me = client(&format!("vm-{t}"));
            let run = |lease: Option<LeaseId>| {
                let req = CommandLockRequest {
                    keys: vec![board(), k("group:rk")],
                    client: me.clone(),
                    session: None,
                    lease,
                    command: "rkdeveloptool rd".to_owned(),
                    shared: vec![],
                };
                let (m, inside, max_seen, runs, leased_by) = (
                    m.clone(),
                    inside.clone(),
                    max_seen.clone(),
                    runs.clone(),
                    leased_by.clone(),
                );
                let me = me.clone();
                async move {
                    let _g = m
                        .acquire_for_command_wait(req, Duration::from_secs(60))
                        .await
                        .unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_seen.fetch_max(now, Ordering::SeqCst);
                    if let Some(holder) = leased_by.lock().unwrap().clone() {
                        assert_eq!(holder, me, "ran during another client's lease");
                    }
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    runs.fetch_add(1, Ordering::SeqCst);
                }
            };
            for i in 0..10 {
                if (t + i) % 7 == 0 {
                    let lease = m
                        .lock(LeaseRequest {
                            wait: Duration::from_secs(60),
                            ..lease_req(&me.0, &board())
                        })
                        .await
                        .unwrap();
                    *leased_by.lock().unwrap() = Some(me.clone());
                    run(Some(lease.lease_id.clone())).await;
                    run(Some(lease.lease_id.clone())).await;
                    *leased_by.lock().unwrap() = None;
                    m.unlock(&lease.lease_id, &me).unwrap();
                } else {
                    run(None).await;
                }
            }
        }));
    }
    for task in tasks {
        timeout(Duration::from_secs(60), task)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(max_seen.load(Ordering::SeqCst), 1);
    assert!(runs.load(Ordering::SeqCst) >= 400);
    assert!(m.snapshot().keys.is_empty(), "{:?}", m.snapshot());
}

#[tokio::test]
async fn five_waiters_are_served_in_fifo_order() {
    let m = mgr();
    let first = m.try_acquire_for_command(cmd("vm-0", &[board()])).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 1..=5 {
        let (mc, tx) = (m.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let g = mc
                .acquire_for_command(cmd(&format!("vm-{i}"), &[board()]))
                .await
                .unwrap();
            tx.send(i).unwrap();
            tokio::task::yield_now().await;
            drop(g);
        }));
        until_queued(&m, &board(), i).await;
    }
    drop(tx);
    drop(first);
    for task in tasks {
        task.await.unwrap();
    }
    let mut order = Vec::new();
    while let Some(i) = rx.recv().await {
        order.push(i);
    }
    assert_eq!(order, vec![1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn lease_and_command_requests_share_one_queue() {
    let m = mgr();
    let running = m.try_acquire_for_command(cmd("vm-a", &[board()])).unwrap();
    let lease_waiter = tokio::spawn({
        let m = m.clone();
        async move {
            m.lock(LeaseRequest {
                wait: Duration::from_secs(60),
                ..lease_req("vm-b", &board())
            })
            .await
        }
    });
    until_queued(&m, &board(), 1).await;
    let cmd_waiter = tokio::spawn({
        let m = m.clone();
        async move {
            m.acquire_for_command_wait(cmd("vm-c", &[board()]), Duration::from_secs(60))
                .await
                .map(|g| g.keys().cloned().collect::<Vec<_>>())
        }
    });
    until_queued(&m, &board(), 2).await;

    drop(running);
    let lease = lease_waiter.await.unwrap().unwrap();
    assert_eq!(lease.holder, client("vm-b"));
    // vm-c is behind vm-b's lease now.
    assert_eq!(queue_len(&m, &board()), 1);
    assert!(!cmd_waiter.is_finished());

    m.unlock(&lease.lease_id, &client("vm-b")).unwrap();
    assert_eq!(cmd_waiter.await.unwrap().unwrap(), vec![board()]);
}

#[tokio::test(start_paused = true)]
async fn wait_timeout_is_busy_with_queue_info() {
    let m = mgr();
    let _held = m.try_acquire_for_command(cmd("vm-a", &[board()])).unwrap();
    let _patient = tokio::spawn({
        let m = m.clone();
        async move { m.acquire_for_command(cmd("vm-c", &[board()])).await }
    });
    until_queued(&m, &board(), 1).await;

    let start = Instant::now();
    let err = m
        .acquire_for_command_wait(cmd("vm-b", &[board()]), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    let info = busy(err.clone());
    assert_eq!(info.queue_len, 1, "only the patient waiter is left");
    assert_eq!(info.waited_secs, 5);
    assert!(
        err.to_string().ends_with(
            "; 1 waiting; waited 5s. Retry with wait_secs to queue for it, or try later."
        ),
        "{err}"
    );
}

#[tokio::test]
async fn dropping_a_waiting_future_leaves_the_queue_at_once() {
    let m = mgr();
    let held = m.try_acquire_for_command(cmd("vm-a", &[board()])).unwrap();
    let mut waiting = Box::pin(m.acquire_for_command(cmd("vm-b", &[board()])));
    assert!(futures::poll!(&mut waiting).is_pending());
    assert_eq!(queue_len(&m, &board()), 1);
    drop(waiting);
    assert_eq!(queue_len(&m, &board()), 0);
    drop(held);
    assert_eq!(m.key_state(&board()), None);
}

#[tokio::test]
async fn a_key_handed_to_a_waiter_that_gave_up_passes_on() {
    let m = mgr();
    let held = m.try_acquire_for_command(cmd("vm-a", &[board()])).unwrap();
    let mut b = Box::pin(m.acquire_for_command(cmd("vm-b", &[board()])));
    assert!(futures::poll!(&mut b).is_pending());
    let mut c = Box::pin(m.acquire_for_command(cmd("vm-c", &[board()])));
    assert!(futures::poll!(&mut c).is_pending());

    drop(held);
    // Handed over at once, before vm-b's future runs again.
    let running = m.key_state(&board()).unwrap().running.unwrap();
    assert_eq!(running.client, client("vm-b"));
    drop(b);
    let running = m.key_state(&board()).unwrap().running.unwrap();
    assert_eq!(running.client, client("vm-c"));
    let g = c.await.unwrap();
    drop(g);
    assert_eq!(m.key_state(&board()), None);
}

#[tokio::test]
async fn a_lease_handed_to_a_waiter_that_gave_up_is_ended() {
    let m = mgr();
    let mut events = m.subscribe();
    let held = m.try_acquire_for_command(cmd("vm-a", &[board()])).unwrap();
    let mut b = Box::pin(m.lock(LeaseRequest {
        wait: Duration::from_secs(60),
        ..lease_req("vm-b", &board())
    }));
    assert!(futures::poll!(&mut b).is_pending());
    drop(held);
    assert_eq!(
        m.key_state(&board()).unwrap().lease.unwrap().holder,
        client("vm-b")
    );
    drop(b);
    assert_eq!(m.key_state(&board()), None);
    let kinds = drain(&mut events);
    assert!(kinds.ends_with(&[LockEventKind::Taken, LockEventKind::Released]));
}

#[tokio::test]
async fn a_newcomer_cannot_barge_past_waiters() {
    let m = mgr();
    let held = m.try_acquire_for_command(cmd("vm-a", &[board()])).unwrap();
    let waiter = tokio::spawn({
        let m = m.clone();
        async move {
            let g = m
                .acquire_for_command(cmd("vm-b", &[board()]))
                .await
                .unwrap();
            sleep(Duration::from_millis(20)).await;
            drop(g);
        }
    });
    until_queued(&m, &board(), 1).await;
    drop(held);
    // vm-b's task has not run since, yet the key is already its.
    let info = busy(
        m.try_acquire_for_command(cmd("vm-c", &[board()]))
            .unwrap_err(),
    );
    assert_eq!(info.holder, client("vm-b"));
    waiter.await.unwrap();
}

#[tokio::test]
async fn two_commands_of_one_lease_run_one_after_the_other() {
    let m = mgr();
    let lease = m.lock(lease_req("vm-a", &board())).await.unwrap();
    let first = m
        .try_acquire_for_command(cmd_with_lease("vm-a", &board(), &lease.lease_id))
        .unwrap();
    let info = busy(
        m.try_acquire_for_command(cmd_with_lease("vm-a", &board(), &lease.lease_id))
            .unwrap_err(),
    );
    assert_eq!(info.holder, client("vm-a"));
    let second = tokio::spawn({
        let m = m.clone();
        let req = cmd_with_lease("vm-a", &board(), &lease.lease_id);
        async move {
            m.acquire_for_command_wait(req, Duration::from_secs(60))
                .await
                .map(drop)
        }
    });
    until_queued(&m, &board(), 1).await;
    drop(first);
    second.await.unwrap().unwrap();
}

// ---- multiple keys ---------------------------------------------------------

#[tokio::test]
async fn several_keys_are_sorted_and_deduplicated() {
    let m = mgr();
    let g = m
        .try_acquire_for_command(cmd(
            "vm-a",
            &[k("usb:2207:350b"), k("group:rk"), k("usb:2207:350b")],
        ))
        .unwrap();
    let keys: Vec<_> = g.keys().cloned().collect();
    assert_eq!(keys, vec![k("usb:2207:350b"), k("group:rk")]);
    assert_eq!(m.snapshot().keys.len(), 2);
}

#[tokio::test]
async fn a_failed_try_on_several_keys_holds_none() {
    let m = mgr();
    let (k1, k2) = (k("usb:2207:0001"), k("usb:2207:0002"));
    let _b = m
        .try_acquire_for_command(cmd("vm-b", std::slice::from_ref(&k2)))
        .unwrap();
    let info = busy(
        m.try_acquire_for_command(cmd("vm-a", &[k2.clone(), k1.clone()]))
            .unwrap_err(),
    );
    assert_eq!(info.key, k2);
    assert_eq!(m.key_state(&k1), None);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_wait_on_several_keys_releases_the_earlier_ones() {
    let m = mgr();
    let (k1, k2) = (k("usb:2207:0001"), k("usb:2207:0002"));
    let _b = m
        .try_acquire_for_command(cmd("vm-b", std::slice::from_ref(&k2)))
        .unwrap();
    let attempt = tokio::spawn({
        let m = m.clone();
        let req = cmd("vm-a", &[k1.clone(), k2.clone()]);
        async move {
            m.acquire_for_command_wait(req, Duration::from_secs(5))
                .await
        }
    });
    until_queued(&m, &k2, 1).await;
    // While it queues for k2 it holds k1: ordered locking.
    assert_eq!(
        m.key_state(&k1).unwrap().running.unwrap().client,
        client("vm-a")
    );
    let info = busy(attempt.await.unwrap().unwrap_err());
    assert_eq!(info.key, k2);
    assert_eq!(m.key_state(&k1), None);
    assert_eq!(queue_len(&m, &k2), 0);
}

#[tokio::test]
async fn a_command_without_keys_needs_no_lock() {
    let m = mgr();
    let g = m.try_acquire_for_command(cmd("vm-a", &[])).unwrap();
    assert_eq!(g.keys().count(), 0);
}

// ---- leases -----------------------------------------------------------------

#[tokio::test]
async fn a_lease_admits_only_its_holder() {
    let m = mgr();
    let lease = m
        .lock(LeaseRequest {
            session: Some(SessionId("s-a".into())),
            note: Some("flashing rk3588".into()),
            ..lease_req("vm-a", &board())
        })
        .await
        .unwrap();
    let id = &lease.lease_id;

    // Another client, without the id: busy, naming the lease.
    let info = busy(
        m.try_acquire_for_command(cmd("vm-b", &[board()]))
            .unwrap_err(),
    );
    assert_eq!(info.held_by, HeldBy::Lease);
    assert_eq!(info.note.as_deref(), Some("flashing rk3588"));
    assert_eq!(info.expires_in_secs, Some(600));

    // Another client with the id: refused at once, even when willing to wait.
    let start = Instant::now();
    let err = m
        .acquire_for_command_wait(
            cmd_with_lease("vm-b", &board(), id),
            Duration::from_secs(30),
        )
        .await
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(
        err,
        LockError::NotYourLease {
            lease_id: id.clone(),
            owner: client("vm-a"),
            client: client("vm-b"),
            retake: Retake::Device,
        }
    );

    // The holder with the id.
    drop(
        m.try_acquire_for_command(cmd_with_lease("vm-a", &board(), id))
            .unwrap(),
    );
    // The holder's session without the id.
    drop(
        m.try_acquire_for_command(CommandLockRequest {
            session: Some(SessionId("s-a".into())),
            ..cmd("vm-a", &[board()])
        })
        .unwrap(),
    );
    // The holder from elsewhere without the id: like anyone else.
    busy(
        m.try_acquire_for_command(cmd("vm-a", &[board()]))
            .unwrap_err(),
    );
    busy(
        m.try_acquire_for_command(CommandLockRequest {
            session: Some(SessionId("s-other".into())),
            ..cmd("vm-a", &[board()])
        })
        .unwrap_err(),
    );
    // Someone else who happens to share the session id: still not theirs.
    busy(
        m.try_acquire_for_command(CommandLockRequest {
            session: Some(SessionId("s-a".into())),
            ..cmd("vm-b", &[board()])
        })
        .unwrap_err(),
    );
}

#[tokio::test]
async fn an_unknown_lease_is_refused() {
    let m = mgr();
    let ghost = LeaseId("lease-00000000-0000-4000-8000-000000000000".into());
    let err = m
        .try_acquire_for_command(cmd_with_lease("vm-a", &board(), &ghost))
        .unwrap_err();
    assert_eq!(
        err,
        LockError::UnknownLease {
            lease_id: ghost.clone(),
            retake: Retake::Device,
        }
    );
    let err = m
        .acquire_for_command(cmd_with_lease("vm-a", &board(), &ghost))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        LockError::UnknownLease {
            lease_id: ghost.clone(),
            retake: Retake::Device,
        }
    );
    assert!(matches!(
        m.unlock(&ghost, &client("vm-a")),
        Err(LockError::UnknownLease { .. })
    ));
    assert!(matches!(
        m.force_unlock(&ghost, "root"),
        Err(LockError::UnknownLease { .. })
    ));
}

#[tokio::test]
async fn the_holder_is_not_blocked_by_strangers_queued_for_its_lease() {
    let m = mgr();
    let lease = m.lock(lease_req("vm-a", &board())).await.unwrap();
    let _stranger = tokio::spawn({
        let m = m.clone();
        async move { m.acquire_for_command(cmd("vm-b", &[board()])).await }
    });
    until_queued(&m, &board(), 1).await;
    drop(
        m.try_acquire_for_command(cmd_with_lease("vm-a", &board(), &lease.lease_id))
            .unwrap(),
    );
    assert_eq!(queue_len(&m, &board()), 1);
}

#[tokio::test]
async fn asking_again_for_a_held_key_is_already_held() {
    let m = mgr();
    let lease = m.lock(lease_req("vm-a", &board())).await.unwrap();
    let err = m
        .lock(LeaseRequest {
            wait: Duration::from_secs(30),
            ..lease_req("vm-a", &board())
        })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        LockError::AlreadyHeld {
            key: board(),
            client: client("vm-a"),
            lease_id: lease.lease_id.clone(),
            expires_at: lease.expires_at,
        }
    );
    assert_eq!(m.snapshot().keys.len(), 1);
}

#[tokio::test]
async fn ttl_defaults_and_limits() {
    let m = mgr();
    let lease = m.lock(lease_req("vm-a", &board())).await.unwrap();
    assert_eq!(lease.ttl_secs, 600);
    assert_eq!(lease.key, board());
    assert_eq!(lease.holder, client("vm-a"));
    assert!(lease.lease_id.0.starts_with("lease-"));

    let too_long = m
        .lock(LeaseRequest {
            ttl: Some(Duration::from_secs(3601)),
            ..lease_req("vm-a", &k("group:rk"))
        })
        .await
        .unwrap_err();
    assert_eq!(
        too_long,
        LockError::TtlTooLong {
            requested: Duration::from_secs(3601),
            max: Duration::from_secs(3600),
        }
    );
    let zero = m
        .lock(LeaseRequest {
            ttl: Some(Duration::ZERO),
            ..lease_req("vm-a", &k("group:rk"))
        })
        .await
        .unwrap_err();
    assert!(matches!(zero, LockError::ZeroTtl { .. }));
    let max = m
        .lock(LeaseRequest {
            ttl: Some(Duration::from_secs(3600)),
            ..lease_req("vm-a", &k("group:rk"))
        })
        .await
        .unwrap();
    assert_eq!(max.ttl_secs, 3600);
}

#[tokio::test]
async fn a_lease_needs_the_key_free_of_running_commands() {
    let m = mgr();
    let running = m.try_acquire_for_command(cmd("vm-b", &[board()])).unwrap();
    let info = busy(m.lock(lease_req("vm-a", &board())).await.unwrap_err());
    assert_eq!(info.held_by, HeldBy::Command);
    drop(running);
    m.lock(lease_req("vm-a", &board())).await.unwrap();
}

#[tokio::test]
async fn unlock_refuses_other_clients_and_frees_the_key() {
    let m = mgr();
    let lease = m.lock(lease_req("vm-a", &board())).await.unwrap();
    let err = m.unlock(&lease.lease_id, &client("vm-b")).unwrap_err();
    assert!(matches!(err, LockError::NotYourLease { .. }));
    assert!(m.key_state(&board()).unwrap().lease.is_some());

    let ended = m.unlock(&lease.lease_id, &client("vm-a")).unwrap();
    assert_eq!(ended.lease_id, lease.lease_id);
    assert_eq!(m.key_state(&board()), None);
    assert!(matches!(
        m.unlock(&lease.lease_id, &client("vm-a")),
        Err(LockError::UnknownLease { .. })
    ));
}

#[tokio::test]
async fn unlock_during_a_command_frees_the_key_when_it_ends() {
    let m = mgr();
    let lease = m.lock(lease_req("vm-a", &board())).await.unwrap();
    let running = m
        .try_acquire_for_command(cmd_with_lease("vm-a", &board(), &lease.lease_id))
        .unwrap();
    let waiter = tokio::spawn({
        let m = m.clone();
        async move {
            m.acquire_for_command(cmd("vm-b", &[board()]))
                .await
                .map(drop)
        }
    });
    until_queued(&m, &board(), 1).await;

    m.unlock(&lease.lease_id, &client("vm-a")).unwrap();
    // The lease is gone at once; the command keeps the key.
    let state = m.key_state(&board()).unwrap();
    assert_eq!(state.lease, None);
    assert_eq!(state.running.unwrap().client, client("vm-a"));
    assert!(matches!(
        m.try_acquire_for_command(cmd_with_lease("vm-a", &board(), &lease.lease_id)),
        Err(LockError::UnknownLease { .. })
    ));
    assert!(!waiter.is_finished());

    drop(running);
    waiter.await.unwrap().unwrap();
}

#[tokio::test]
async fn force_unlock_ends_anyones_lease() {
    let m = mgr();
    let mut events = m.subscribe();
    let lease = m.lock(lease_req("vm-a", &board())).await.unwrap();
    let ended = m.force_unlock(&lease.lease_id, "admin").unwrap();
    assert_eq!(ended.holder, client("vm-a"));
    assert_eq!(m.key_state(&board()), None);
    let _taken = events.try_recv().unwrap();
    let forced = events.try_recv().unwrap();
    assert_eq!(forced.kind, LockEventKind::ForceReleased);
    assert_eq!(forced.reason.as_deref(), Some("force-unlocked by admin"));
}

#[tokio::test]
async fn release_session_ends_that_sessions_leases() {
    let m = mgr();
    let s = SessionId("s-1".into());
    let in_session = |key: &LockKey| LeaseRequest {
        session: Some(s.clone()),
        ..lease_req("vm-a", key)
    };
    let (k1, k2, k3) = (k("usb:2207:0001"), k("usb:2207:0002"), k("usb:2207:0003"));
    m.lock(in_session(&k1)).await.unwrap();
    m.lock(in_session(&k2)).await.unwrap();
    m.lock(lease_req("vm-a", &k3)).await.unwrap();
    let waiter = tokio::spawn({
        let m = m.clone();
        let k1 = k1.clone();
        async move {
            m.lock(LeaseRequest {
                wait: Duration::from_secs(60),
                ..lease_req("vm-b", &k1)
            })
            .await
        }
    });
    until_queued(&m, &k1, 1).await;

    let ended = m.release_session(&s);
    let keys: Vec<_> = ended.iter().map(|l| l.key.clone()).collect();
    assert_eq!(keys, vec![k1.clone(), k2.clone()]);
    assert_eq!(waiter.await.unwrap().unwrap().holder, client("vm-b"));
    assert_eq!(m.key_state(&k2), None);
    assert!(m.key_state(&k3).unwrap().lease.is_some());
    assert!(m.release_session(&s).is_empty());
}

// ---- TTL (paused time) ---------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_lease_expires_after_its_ttl() {
    let m = mgr();
    let mut events = m.subscribe();
    m.lock(LeaseRequest {
        ttl: Some(Duration::from_secs(60)),
        ..lease_req("vm-a", &board())
    })
    .await
    .unwrap();
    sleep(Duration::from_secs(59)).await;
    assert!(m.key_state(&board()).is_some());
    sleep(Duration::from_secs(2)).await;
    assert_eq!(m.key_state(&board()), None);
    assert_eq!(
        drain(&mut events),
        vec![LockEventKind::Taken, LockEventKind::Expired]
    );
}

#[tokio::test(start_paused = true)]
async fn a_command_renews_its_lease_at_start_and_end() {
    let m = mgr();
    let mut events = m.subscribe();
    let lease = m
        .lock(LeaseRequest {
            ttl: Some(Duration::from_secs(60)),
            ..lease_req("vm-a", &board())
        })
        .await
        .unwrap();
    let remaining = |m: &LockManager| {
        busy(
            m.try_acquire_for_command(cmd("vm-b", &[board()]))
                .unwrap_err(),
        )
    };

    sleep(Duration::from_secs(50)).await;
    assert_eq!(remaining(&m).expires_in_secs, Some(10));
    let g = m
        .try_acquire_for_command(cmd_with_lease("vm-a", &board(), &lease.lease_id))
        .unwrap();
    assert_eq!(remaining(&m).expires_in_secs, Some(60));
    sleep(Duration::from_secs(20)).await;
    drop(g);
    assert_eq!(remaining(&m).expires_in_secs, Some(60));
    let kinds = drain(&mut events);
    assert!(kinds.contains(&LockEventKind::Renewed));
    assert!(kinds.contains(&LockEventKind::CommandFinished));

    // 110 s after it was taken, a 60 s lease lives on thanks to its command.
    sleep(Duration::from_secs(40)).await;
    assert!(m.key_state(&board()).unwrap().lease.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_lease_does_not_expire_while_its_command_runs() {
    let m = mgr();
    let lease = m
        .lock(LeaseRequest {
            ttl: Some(Duration::from_secs(10)),
            ..lease_req("vm-a", &board())
        })
        .await
        .unwrap();
    let g = m
        .try_acquire_for_command(cmd_with_lease("vm-a", &board(), &lease.lease_id))
        .unwrap();
    sleep(Duration::from_secs(300)).await;
    assert!(m.key_state(&board()).unwrap().lease.is_some());
    let info = busy(
        m.try_acquire_for_command(cmd("vm-b", &[board()]))
            .unwrap_err(),
    );
    assert!(
        info.to_string()
            .contains(", expires 10s after the running command ends;"),
        "{info}"
    );

    drop(g); // the TTL restarts now
    sleep(Duration::from_secs(9)).await;
    assert!(m.key_state(&board()).is_some());
    sleep(Duration::from_secs(2)).await;
    assert_eq!(m.key_state(&board()), None);
}

#[tokio::test(start_paused = true)]
async fn expiry_hands_the_key_to_the_next_waiter() {
    let m = mgr();
    m.lock(LeaseRequest {
        ttl: Some(Duration::from_secs(30)),
        ..lease_req("vm-a", &board())
    })
    .await
    .unwrap();
    let start = Instant::now();
    let lease_b = tokio::spawn({
        let m = m.clone();
        async move {
            m.lock(LeaseRequest {
                wait: Duration::from_secs(120),
                ..lease_req("vm-b", &board())
            })
            .await
        }
    });
    until_queued(&m, &board(), 1).await;
    let cmd_c = tokio::spawn({
        let m = m.clone();
        async move {
            m.acquire_for_command_wait(cmd("vm-c", &[board()]), Duration::from_secs(700))
                .await
                .map(drop)
        }
    });
    let b = lease_b.await.unwrap().unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    assert_eq!(b.holder, client("vm-b"));
    // vm-c queued behind vm-b's new lease gets the key when that expires.
    cmd_c.await.unwrap().unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(630));
}

// ---- visibility --------------------------------------------------------------------

#[tokio::test]
async fn snapshot_shows_leases_commands_and_queues_in_key_order() {
    let m = mgr();
    let lease = m
        .lock(lease_req("vm-a", &k("usb:2207:350b")))
        .await
        .unwrap();
    let _g = m
        .try_acquire_for_command(cmd("vm-b", &[k("group:rk")]))
        .unwrap();
    let _w = tokio::spawn({
        let m = m.clone();
        async move { m.acquire_for_command(cmd("vm-c", &[k("group:rk")])).await }
    });
    until_queued(&m, &k("group:rk"), 1).await;

    let view = m.snapshot();
    let keys: Vec<_> = view.keys.iter().map(|s| s.key.to_string()).collect();
    assert_eq!(keys, vec!["usb:2207:350b", "group:rk"]);
    assert_eq!(view.keys[0].lease.as_ref(), Some(&lease));
    assert_eq!(
        view.keys[1].running.as_ref().unwrap().client,
        client("vm-b")
    );
    assert_eq!(view.keys[1].queue_len, 1);

    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["keys"][0]["key"], "usb:2207:350b");
    assert_eq!(json["keys"][0]["lease"]["holder"], "vm-a");
    assert_eq!(
        json["keys"][1]["running"]["command"],
        "rkdeveloptool by vm-b"
    );
    let _schema = schemars::schema_for!(LocksView);
}

#[tokio::test]
async fn events_describe_each_change_and_refusal() {
    let m = mgr();
    let mut events = m.subscribe();
    let lease = m.lock(lease_req("vm-a", &board())).await.unwrap();
    drop(
        m.try_acquire_for_command(cmd_with_lease("vm-a", &board(), &lease.lease_id))
            .unwrap(),
    );
    let _ = m.try_acquire_for_command(cmd("vm-b", &[board()]));
    m.unlock(&lease.lease_id, &client("vm-a")).unwrap();

    let mut all = Vec::new();
    while let Ok(e) = events.try_recv() {
        all.push(e);
    }
    let kinds: Vec<_> = all.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            LockEventKind::Taken,
            LockEventKind::CommandStarted,
            LockEventKind::CommandFinished,
            LockEventKind::Renewed,
            LockEventKind::Refused,
            LockEventKind::Released,
        ]
    );
    let refused = &all[4];
    assert_eq!(refused.client, client("vm-b"));
    assert!(
        refused
            .reason
            .as_deref()
            .unwrap()
            .starts_with("device usb:2207:350b is locked by client \"vm-a\" (lease) since ")
    );
    let json = serde_json::to_value(&all[1]).unwrap();
    assert_eq!(json["kind"], "command_started");
    assert_eq!(json["reason"], "rkdeveloptool by vm-a");
}

#[tokio::test]
async fn shutdown_ends_queued_waits() {
    let m = mgr();
    let _held = m.try_acquire_for_command(cmd("vm-a", &[board()])).unwrap();
    let waiter = tokio::spawn({
        let m = m.clone();
        async move {
            m.acquire_for_command(cmd("vm-b", &[board()]))
                .await
                .map(drop)
        }
    });
    until_queued(&m, &board(), 1).await;
    m.shutdown();
    assert_eq!(waiter.await.unwrap().unwrap_err(), LockError::ShutDown);
    assert_eq!(
        m.acquire_for_command(cmd("vm-c", &[board()]))
            .await
            .unwrap_err(),
        LockError::ShutDown
    );
}

// ---- refusal messages, word for word -----------------------------------------

fn fixed_busy() -> BusyInfo {
    BusyInfo {
        key: board(),
        holder: client("vm-a"),
        held_by: HeldBy::Lease,
        note: Some("flashing rk3588".into()),
        command: None,
        since: Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap(),
        expires_at: Some(Utc.with_ymd_and_hms(2026, 11, 30, 9, 10, 0).unwrap()),
        expires_in_secs: Some(598),
        ttl_secs: Some(600),
        queue_len: 2,
        waited_secs: 0,
        via: None,
    }
}

#[test]
fn busy_by_lease_with_note() {
    assert_eq!(
        LockError::Busy(Box::new(fixed_busy())).to_string(),
        "device usb:2207:350b is locked by client \"vm-a\" (lease, note: \"flashing rk3588\") since 2026-11-30T09:00:00Z, expires in 9m 58s; 2 waiting. Retry with wait_secs (up to the lease's remaining time) to queue for it, or try later."
    );
}

#[test]
fn busy_by_lease_without_note_under_a_minute() {
    let info = BusyInfo {
        note: None,
        expires_in_secs: Some(42),
        queue_len: 0,
        ..fixed_busy()
    };
    assert_eq!(
        info.to_string(),
        "device usb:2207:350b is locked by client \"vm-a\" (lease) since 2026-11-30T09:00:00Z, expires in 42s; 0 waiting. Retry with wait_secs (up to the lease's remaining time) to queue for it, or try later."
    );
}

#[test]
fn busy_by_lease_with_its_command_running() {
    let info = BusyInfo {
        command: Some("rkdeveloptool wl 0 image.img".into()),
        queue_len: 1,
        ..fixed_busy()
    };
    assert_eq!(
        info.to_string(),
        "device usb:2207:350b is locked by client \"vm-a\" (lease, note: \"flashing rk3588\", running \"rkdeveloptool wl 0 image.img\") since 2026-11-30T09:00:00Z, expires 10m 0s after the running command ends; 1 waiting. Retry with wait_secs (up to the lease's remaining time) to queue for it, or try later."
    );
}

#[test]
fn busy_by_a_command_after_waiting() {
    let info = BusyInfo {
        key: k("group:rk"),
        held_by: HeldBy::Command,
        note: None,
        command: Some("rkdeveloptool rd".into()),
        since: Utc.with_ymd_and_hms(2026, 11, 30, 9, 5, 7).unwrap(),
        expires_at: None,
        expires_in_secs: None,
        ttl_secs: None,
        queue_len: 0,
        waited_secs: 65,
        ..fixed_busy()
    };
    assert_eq!(
        info.to_string(),
        "device group:rk is locked by client \"vm-a\" (running \"rkdeveloptool rd\") since 2026-11-30T09:05:07Z; 0 waiting; waited 1m 5s. Retry with wait_secs to queue for it, or try later."
    );
}

#[test]
fn other_refusals() {
    let id = LeaseId("lease-7f3c".into());
    let cases = [
        (
            LockError::NotYourLease {
                lease_id: id.clone(),
                owner: client("vm-a"),
                client: client("vm-b"),
                retake: Retake::Device,
            },
            "lease lease-7f3c belongs to client \"vm-a\", not \"vm-b\"; take your own lease with lock_device.",
        ),
        (
            LockError::UnknownLease {
                lease_id: id.clone(),
                retake: Retake::Board("vb1".into()),
            },
            "lease lease-7f3c is unknown or has ended (unlocked, expired, or its session closed); take a new lease with lock_board {board: \"vb1\"}.",
        ),
        (
            LockError::UnknownLease {
                lease_id: id.clone(),
                retake: Retake::Either,
            },
            "lease lease-7f3c is unknown or has ended (unlocked, expired, or its session closed); take a new lease with the tool that took it (lock_board for a board, lock_device for a device).",
        ),
        (
            LockError::AlreadyHeld {
                key: board(),
                client: client("vm-a"),
                lease_id: id.clone(),
                expires_at: Utc.with_ymd_and_hms(2026, 11, 30, 9, 10, 0).unwrap(),
            },
            "client \"vm-a\" already holds device usb:2207:350b with lease lease-7f3c (expires 2026-11-30T09:10:00Z); pass that lease with your commands, or unlock_device it first.",
        ),
        (
            LockError::TtlTooLong {
                requested: Duration::from_secs(7200),
                max: Duration::from_secs(3600),
            },
            "ttl_secs 7200 exceeds the maximum of 3600; ask for at most 3600 seconds.",
        ),
        (
            LockError::ZeroTtl {
                default: Duration::from_secs(600),
            },
            "ttl_secs must be at least 1; omit it for the default of 600 seconds.",
        ),
        (
            LockError::ShutDown,
            "the lock manager has shut down (gatecmd is stopping); retry once it is back.",
        ),
    ];
    for (err, text) in cases {
        assert_eq!(err.to_string(), text);
    }
}

#[tokio::test]
async fn a_live_refusal_matches_the_documented_format() {
    let m = mgr();
    let _lease = m
        .lock(LeaseRequest {
            note: Some("flashing rk3588".into()),
            ..lease_req("vm-a", &board())
        })
        .await
        .unwrap();
    let err = m
        .try_acquire_for_command(cmd("vm-b", &[board()]))
        .unwrap_err();
    let info = busy(err.clone());
    let since = info
        .since
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert_eq!(
        err.to_string(),
        format!(
            "device usb:2207:350b is locked by client \"vm-a\" (lease, note: \"flashing rk3588\") since {since}, expires in 10m 0s; 0 waiting. Retry with wait_secs (up to the lease's remaining time) to queue for it, or try later."
        )
    );
}

// ---- board keys and shared holds (isolated commands) ----------------------------

fn port(id: &str) -> LockKey {
    k(&format!("port:{id}"))
}

/// An isolated command on board `id`: `port:ID` exclusive, the VID:PID key shared.
fn board_cmd(who: &str, id: &str) -> CommandLockRequest {
    CommandLockRequest {
        shared: vec![board()],
        command: format!("rkdeveloptool wl on {id} by {who}"),
        ..cmd(who, &[port(id)])
    }
}

fn board_lease(who: &str, id: &str) -> LeaseRequest {
    LeaseRequest {
        shared: vec![board()],
        ..lease_req(who, &port(id))
    }
}

#[tokio::test]
async fn commands_on_two_boards_of_one_vid_pid_run_at_once() {
    let m = mgr();
    let a = m.try_acquire_for_command(board_cmd("vm-a", "1-2")).unwrap();
    let b = m.try_acquire_for_command(board_cmd("vm-b", "1-3")).unwrap();
    assert_eq!(
        a.keys().cloned().collect::<Vec<_>>(),
        vec![board(), port("1-2")]
    );
    let usb = m.key_state(&board()).unwrap();
    assert_eq!(usb.running, None);
    assert_eq!(
        usb.shared.iter().map(|h| h.via.clone()).collect::<Vec<_>>(),
        vec![port("1-2"), port("1-3")]
    );
    // The same board is still one command at a time.
    let info = busy(
        m.try_acquire_for_command(board_cmd("vm-b", "1-2"))
            .unwrap_err(),
    );
    assert_eq!(info.key, port("1-2"));
    assert_eq!(info.holder, client("vm-a"));
    drop((a, b));
    assert!(m.snapshot().keys.is_empty());
}

#[tokio::test]
async fn a_whole_vid_pid_command_waits_for_every_board_command() {
    let m = mgr();
    let a = m.try_acquire_for_command(board_cmd("vm-a", "1-2")).unwrap();
    let b = m.try_acquire_for_command(board_cmd("vm-b", "1-3")).unwrap();
    let info = busy(
        m.try_acquire_for_command(cmd("vm-c", &[board()]))
            .unwrap_err(),
    );
    assert_eq!(info.key, board());
    assert_eq!(info.holder, client("vm-a"));
    assert_eq!(info.via, Some(port("1-2")));
    assert!(
        info.to_string().starts_with(
            "device usb:2207:350b is locked by client \"vm-a\" (running \"rkdeveloptool wl on 1-2 by vm-a\", through board port:1-2) since "
        ),
        "{info}"
    );
    let m2 = m.clone();
    let c = tokio::spawn(async move { m2.acquire_for_command(cmd("vm-c", &[board()])).await });
    until_queued(&m, &board(), 1).await;
    drop(a);
    tokio::task::yield_now().await;
    assert!(!c.is_finished(), "ran while board 1-3 was still in use");
    drop(b);
    let c = timeout(Duration::from_secs(1), c)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // While it runs, no board command starts.
    let info = busy(
        m.try_acquire_for_command(board_cmd("vm-a", "1-2"))
            .unwrap_err(),
    );
    assert_eq!((info.key, info.held_by), (board(), HeldBy::Command));
    drop(c);
    let _again = m.try_acquire_for_command(board_cmd("vm-a", "1-2")).unwrap();
}

#[tokio::test]
async fn board_commands_do_not_starve_a_queued_whole_vid_pid_command() {
    let m = mgr();
    let a = m.try_acquire_for_command(board_cmd("vm-a", "1-2")).unwrap();
    let m2 = m.clone();
    let whole = tokio::spawn(async move { m2.acquire_for_command(cmd("vm-c", &[board()])).await });
    until_queued(&m, &board(), 1).await;
    // A later board command on a free board does not overtake the queued one.
    assert!(m.try_acquire_for_command(board_cmd("vm-b", "1-3")).is_err());
    let m3 = m.clone();
    let later = tokio::spawn(async move { m3.acquire_for_command(board_cmd("vm-b", "1-3")).await });
    until_queued(&m, &board(), 2).await;
    drop(a);
    let whole = timeout(Duration::from_secs(1), whole)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    tokio::task::yield_now().await;
    assert!(
        !later.is_finished(),
        "the board command overtook the whole-VID:PID one"
    );
    drop(whole);
    let _later = timeout(Duration::from_secs(1), later)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_vid_pid_lease_covers_every_board() {
    let m = mgr();
    let lease = m.lock(lease_req("vm-a", &board())).await.unwrap();
    // Others cannot use any board of that VID:PID...
    let info = busy(
        m.try_acquire_for_command(board_cmd("vm-b", "1-3"))
            .unwrap_err(),
    );
    assert_eq!((info.key, info.held_by), (board(), HeldBy::Lease));
    assert!(m.lock(board_lease("vm-b", "1-3")).await.is_err());
    // ...the holder can, under its lease, one board at a time each.
    let req = |id| CommandLockRequest {
        lease: Some(lease.lease_id.clone()),
        ..board_cmd("vm-a", id)
    };
    let g2 = m.try_acquire_for_command(req("1-2")).unwrap();
    let g3 = m.try_acquire_for_command(req("1-3")).unwrap();
    assert!(m.try_acquire_for_command(req("1-2")).is_err());
    // And a whole-VID:PID command of the holder waits for its board commands.
    let info = busy(
        m.try_acquire_for_command(cmd_with_lease("vm-a", &board(), &lease.lease_id))
            .unwrap_err(),
    );
    assert_eq!(info.via, Some(port("1-2")));
    drop((g2, g3));
    let _whole = m
        .try_acquire_for_command(cmd_with_lease("vm-a", &board(), &lease.lease_id))
        .unwrap();
}

#[tokio::test]
async fn a_board_lease_keeps_the_vid_pid_from_others_but_not_other_boards() {
    let m = mgr();
    let mut events = m.subscribe();
    let a = m.lock(board_lease("vm-a", "1-2")).await.unwrap();
    assert_eq!(a.key, port("1-2"));
    assert_eq!(drain(&mut events), vec![LockEventKind::Taken]);
    // Another client leases and uses another board of the same VID:PID.
    let b = m.lock(board_lease("vm-b", "1-3")).await.unwrap();
    let gb = m
        .try_acquire_for_command(CommandLockRequest {
            lease: Some(b.lease_id.clone()),
            ..board_cmd("vm-b", "1-3")
        })
        .unwrap();
    // Nobody gets the whole VID:PID, by lease or by command.
    let info = busy(m.lock(lease_req("vm-c", &board())).await.unwrap_err());
    assert_eq!(info.via, Some(port("1-2")));
    assert_eq!(info.held_by, HeldBy::Lease);
    assert!(m.try_acquire_for_command(cmd("vm-c", &[board()])).is_err());
    // The board itself: only its holder.
    assert!(m.try_acquire_for_command(board_cmd("vm-c", "1-2")).is_err());
    let ga = m
        .try_acquire_for_command(CommandLockRequest {
            lease: Some(a.lease_id.clone()),
            ..board_cmd("vm-a", "1-2")
        })
        .unwrap();
    drop((ga, gb));
    m.unlock(&b.lease_id, &client("vm-b")).unwrap();
    // vm-a's own board lease does not keep vm-a's whole-VID:PID command out...
    let whole = m
        .try_acquire_for_command(cmd_with_lease("vm-a", &board(), &a.lease_id))
        .unwrap();
    drop(whole);
    // ...but ending the lease is what frees the VID:PID for others.
    let m2 = m.clone();
    let c = tokio::spawn(async move {
        m2.lock(LeaseRequest {
            wait: Duration::from_secs(5),
            ..lease_req("vm-c", &board())
        })
        .await
    });
    until_queued(&m, &board(), 1).await;
    m.unlock(&a.lease_id, &client("vm-a")).unwrap();
    let c = timeout(Duration::from_secs(1), c)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(c.key, board());
    assert!(m.key_state(&port("1-2")).is_none());
}

#[tokio::test]
async fn a_board_lease_that_times_out_waiting_leaves_nothing_behind() {
    let m = mgr();
    let whole = m.try_acquire_for_command(cmd("vm-c", &[board()])).unwrap();
    let err = m
        .lock(LeaseRequest {
            wait: Duration::from_millis(50),
            ..board_lease("vm-a", "1-2")
        })
        .await
        .unwrap_err();
    assert_eq!(busy(err).waited_secs, 1);
    drop(whole);
    assert!(m.snapshot().keys.is_empty(), "{:?}", m.snapshot());
    // And a board lease taken after waiting holds its VID:PID key shared.
    let whole = m.try_acquire_for_command(cmd("vm-c", &[board()])).unwrap();
    let m2 = m.clone();
    let a = tokio::spawn(async move {
        m2.lock(LeaseRequest {
            wait: Duration::from_secs(5),
            ..board_lease("vm-a", "1-2")
        })
        .await
    });
    until_queued(&m, &board(), 1).await;
    drop(whole);
    let a = timeout(Duration::from_secs(1), a)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(m.try_acquire_for_command(cmd("vm-c", &[board()])).is_err());
    m.unlock(&a.lease_id, &client("vm-a")).unwrap();
    assert!(m.snapshot().keys.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_vid_pid_lease_does_not_expire_while_a_board_command_under_it_runs() {
    let m = mgr();
    let lease = m
        .lock(LeaseRequest {
            ttl: Some(Duration::from_secs(60)),
            ..lease_req("vm-a", &board())
        })
        .await
        .unwrap();
    let g = m
        .try_acquire_for_command(CommandLockRequest {
            lease: Some(lease.lease_id.clone()),
            ..board_cmd("vm-a", "1-2")
        })
        .unwrap();
    sleep(Duration::from_secs(600)).await;
    assert!(m.key_state(&board()).unwrap().lease.is_some());
    drop(g);
    sleep(Duration::from_secs(59)).await;
    assert!(m.key_state(&board()).unwrap().lease.is_some());
    sleep(Duration::from_secs(2)).await;
    assert_eq!(m.key_state(&board()), None);
}

#[tokio::test]
async fn a_board_lease_expiring_or_ending_with_its_session_frees_the_vid_pid() {
    let m = mgr();
    let s = SessionId::from("s-1");
    m.lock(LeaseRequest {
        session: Some(s.clone()),
        ..board_lease("vm-a", "1-2")
    })
    .await
    .unwrap();
    assert!(m.key_state(&board()).is_some());
    assert_eq!(m.release_session(&s).len(), 1);
    assert!(m.snapshot().keys.is_empty());
}

// ---- per-client limits (issue 15) --------------------------------------------------

fn limited(leases: usize, waiters: usize) -> LockManager {
    LockManager::new(LockSettings {
        max_leases_per_client: leases,
        max_waiters_per_client: waiters,
        ..LockSettings::default()
    })
}

#[test]
fn limits_have_their_documented_defaults() {
    let s = LockSettings::default();
    assert_eq!(s.max_leases_per_client, 32);
    assert_eq!(s.max_waiters_per_client, 32);
    assert_eq!(s.max_note_bytes, 1024);
    assert_eq!(s.max_listed, 256);
}

#[tokio::test(start_paused = true)]
async fn a_client_at_its_lease_limit_is_refused_until_it_unlocks() {
    let m = limited(2, 32);
    let first = m.lock(lease_req("vm-a", &port("1-1"))).await.unwrap();
    m.lock(lease_req("vm-a", &port("1-2"))).await.unwrap();
    let mut events = m.subscribe();

    let err = m.lock(lease_req("vm-a", &port("1-3"))).await.unwrap_err();
    assert_eq!(
        err,
        LockError::TooManyLeases {
            client: client("vm-a"),
            held: 2,
            max: 2,
        }
    );
    assert_eq!(
        err.to_string(),
        "client \"vm-a\" already holds or waits for 2 leases, the limit (leases.max_leases_per_client) is 2; release a lease with unlock_device first (list_locks shows yours)."
    );
    // Nothing of the refused request stays behind, and the refusal is on record.
    assert!(m.key_state(&port("1-3")).is_none());
    assert_eq!(drain(&mut events), vec![LockEventKind::Refused]);

    // Another client is not affected by vm-a's count.
    m.lock(lease_req("vm-b", &port("1-3"))).await.unwrap();

    m.unlock(&first.lease_id, &client("vm-a")).unwrap();
    m.lock(lease_req("vm-a", &port("1-4"))).await.unwrap();

    // An expired lease no longer counts.
    sleep(Duration::from_secs(601)).await;
    m.lock(lease_req("vm-a", &port("1-5"))).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn waiting_lease_requests_count_against_the_lease_limit() {
    let m = limited(2, 32);
    m.lock(lease_req("vm-b", &board())).await.unwrap();
    m.lock(lease_req("vm-a", &port("1-1"))).await.unwrap();
    // vm-a's second lease request waits for vm-b's key...
    let waiting = tokio::spawn({
        let m = m.clone();
        async move {
            m.lock(LeaseRequest {
                wait: Duration::from_secs(60),
                ..lease_req("vm-a", &board())
            })
            .await
        }
    });
    until_queued(&m, &board(), 1).await;
    // ...and takes the last place: a third is refused at once, so that the
    // waiter, once granted, does not take vm-a past its limit.
    let err = m.lock(lease_req("vm-a", &port("1-2"))).await.unwrap_err();
    assert!(matches!(
        err,
        LockError::TooManyLeases {
            held: 2,
            max: 2,
            ..
        }
    ));

    // Once the waiter gives up, its place is free again.
    waiting.abort();
    let _ = waiting.await;
    until_queued(&m, &board(), 0).await;
    m.lock(lease_req("vm-a", &port("1-2"))).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_client_at_its_waiter_limit_is_refused_a_queue_place() {
    let m = limited(32, 2);
    let _busy = m
        .try_acquire_for_command(cmd("vm-b", &[board(), k("group:rk")]))
        .unwrap();
    let mut waits = Vec::new();
    for key in [board(), k("group:rk")] {
        waits.push(tokio::spawn({
            let m = m.clone();
            async move { m.acquire_for_command(cmd("vm-a", &[key])).await }
        }));
    }
    until_queued(&m, &board(), 1).await;
    until_queued(&m, &k("group:rk"), 1).await;

    // A third wait, for a command or a lease, finds no queue place...
    let err = m
        .acquire_for_command_wait(cmd("vm-a", &[board()]), Duration::from_secs(30))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        LockError::TooManyWaiters {
            client: client("vm-a"),
            waiting: 2,
            max: 2,
        }
    );
    assert_eq!(
        err.to_string(),
        "client \"vm-a\" already has 2 requests waiting for locks, the limit (leases.max_waiters_per_client) is 2; let one of them finish or give up first, or retry without wait_secs to be answered at once."
    );
    let err = m
        .lock(LeaseRequest {
            wait: Duration::from_secs(30),
            ..lease_req("vm-a", &board())
        })
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::TooManyWaiters { .. }));
    assert_eq!(queue_len(&m, &board()), 1);
    // ...while an answer-at-once request is still told who is in the way,
    // and another client still queues.
    let busy_now = m
        .try_acquire_for_command(cmd("vm-a", &[board()]))
        .unwrap_err();
    assert!(matches!(busy_now, LockError::Busy(_)));
    let other = tokio::spawn({
        let m = m.clone();
        async move { m.acquire_for_command(cmd("vm-c", &[board()])).await }
    });
    until_queued(&m, &board(), 2).await;

    // A wait that ends frees its place.
    waits.remove(0).abort();
    until_queued(&m, &board(), 1).await;
    let again = tokio::spawn({
        let m = m.clone();
        async move { m.acquire_for_command(cmd("vm-a", &[board()])).await }
    });
    until_queued(&m, &board(), 2).await;
    drop((again, other, waits));
}

#[tokio::test]
async fn a_note_over_the_limit_is_refused_not_cut() {
    let m = LockManager::new(LockSettings {
        max_note_bytes: 8,
        ..LockSettings::default()
    });
    let err = m
        .lock(LeaseRequest {
            note: Some("flashing!".to_owned()),
            ..lease_req("vm-a", &board())
        })
        .await
        .unwrap_err();
    assert_eq!(err, LockError::NoteTooLong { bytes: 9, max: 8 });
    assert_eq!(
        err.to_string(),
        "the note is 9 bytes, the limit (leases.max_note_bytes) is 8; shorten it to at most 8 bytes (others see it when they find the device busy)."
    );
    assert!(m.key_state(&board()).is_none());
    let lease = m
        .lock(LeaseRequest {
            note: Some("flashing".to_owned()),
            ..lease_req("vm-a", &board())
        })
        .await
        .unwrap();
    assert_eq!(lease.note.as_deref(), Some("flashing"));
}

#[tokio::test]
async fn a_snapshot_lists_at_most_max_listed_keys_and_counts_the_rest() {
    let m = LockManager::new(LockSettings {
        max_listed: 2,
        ..LockSettings::default()
    });
    for (who, id) in [("vm-a", "1-1"), ("vm-b", "1-2"), ("vm-c", "1-3")] {
        m.lock(lease_req(who, &port(id))).await.unwrap();
    }
    let view = m.snapshot();
    let keys: Vec<_> = view.keys.iter().map(|s| s.key.to_string()).collect();
    assert_eq!(keys, vec!["port:1-1", "port:1-2"]);
    assert_eq!(view.omitted, 1);
    // The key left out is still there for whoever asks about it.
    assert!(m.key_state(&port("1-3")).is_some());
    assert_eq!(mgr().snapshot().omitted, 0);
}

#[tokio::test]
async fn new_settings_apply_to_the_next_request_and_spare_what_is_held() {
    let m = mgr();
    m.lock(lease_req("vm-a", &port("1-1"))).await.unwrap();
    m.lock(lease_req("vm-a", &port("1-2"))).await.unwrap();
    m.set_settings(LockSettings {
        max_leases_per_client: 1,
        ..LockSettings::default()
    });
    assert_eq!(m.settings().max_leases_per_client, 1);
    // Both leases stay; a third is refused under the new limit.
    assert_eq!(m.snapshot().keys.len(), 2);
    let err = m.lock(lease_req("vm-a", &port("1-3"))).await.unwrap_err();
    assert!(matches!(
        err,
        LockError::TooManyLeases {
            held: 2,
            max: 1,
            ..
        }
    ));
}

// ---- boards (docs/BOARDS.md) -------------------------------------------

/// A board lease holds its port key and its device's VID:PID key shared: another client's
/// commands and leases on any of the three keys wait, the holder's own commands run.
#[tokio::test]
async fn a_board_lease_keeps_strangers_off_its_port_and_vid_pid() {
    let m = mgr();
    let (b, port, usb) = (k("board:rock5b-1"), k("port:1-2"), board());
    let lease = m
        .lock(LeaseRequest {
            shared: vec![port.clone(), usb.clone()],
            ..lease_req("vm-a", &b)
        })
        .await
        .unwrap();
    for keys in [
        vec![b.clone()],
        vec![port.clone()],
        vec![usb.clone()],
        vec![usb.clone(), b.clone()],
    ] {
        let err = m.try_acquire_for_command(cmd("vm-b", &keys)).err();
        assert!(matches!(err, Some(LockError::Busy(_))), "{keys:?}: {err:?}");
    }
    for key in [&port, &usb, &b] {
        let err = m.lock(lease_req("vm-b", key)).await.err();
        assert!(matches!(err, Some(LockError::Busy(_))), "{key}: {err:?}");
    }
    // The holder: an isolated command (port exclusive, VID:PID shared) and a class command.
    let isolated = CommandLockRequest {
        keys: vec![b.clone(), port.clone()],
        shared: vec![usb.clone()],
        lease: Some(lease.lease_id.clone()),
        ..cmd("vm-a", &[])
    };
    drop(m.try_acquire_for_command(isolated).unwrap());
    let class = CommandLockRequest {
        keys: vec![usb.clone(), b.clone()],
        lease: Some(lease.lease_id.clone()),
        ..cmd("vm-a", &[])
    };
    drop(m.try_acquire_for_command(class).unwrap());
    m.unlock(&lease.lease_id, &client("vm-a")).unwrap();
    drop(
        m.try_acquire_for_command(cmd("vm-b", &[port.clone(), b.clone()]))
            .unwrap(),
    );
}

/// A client queued for a held board holds nothing while it waits: the holder's own
/// commands on the board's device still run (a waiter's early shared hold on the VID:PID
/// used to keep them out until the waiter gave up).
#[tokio::test]
async fn a_board_lease_waiter_does_not_block_the_holders_commands() {
    let m = mgr();
    let (b, usb) = (k("board:rock5b-1"), board());
    let lease = m
        .lock(LeaseRequest {
            shared: vec![usb.clone()],
            ..lease_req("vm-a", &b)
        })
        .await
        .unwrap();
    let waiter = {
        let m = m.clone();
        let (b, usb) = (b.clone(), usb.clone());
        tokio::spawn(async move {
            m.lock(LeaseRequest {
                shared: vec![usb],
                wait: Duration::from_secs(30),
                ..lease_req("vm-b", &b)
            })
            .await
        })
    };
    for _ in 0..100 {
        if m.key_state(&b).is_some_and(|s| s.queue_len == 1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(m.key_state(&b).map(|s| s.queue_len), Some(1), "vm-b queued");
    let class = CommandLockRequest {
        keys: vec![usb.clone(), b.clone()],
        lease: Some(lease.lease_id.clone()),
        ..cmd("vm-a", &[])
    };
    let running = m.try_acquire_for_command(class);
    assert!(running.is_ok(), "the holder's command: {:?}", running.err());
    drop(running);
    m.unlock(&lease.lease_id, &client("vm-a")).unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(got.holder, client("vm-b"));
    let usb_state = m.key_state(&usb).unwrap();
    assert_eq!(
        usb_state.shared.len(),
        1,
        "vm-b's lease holds the VID:PID shared"
    );
}

/// The other way round: a port lease (or a command) on the board keeps lock_board out.
#[tokio::test]
async fn a_port_lease_keeps_a_board_lease_out() {
    let m = mgr();
    let (b, port) = (k("board:rock5b-1"), k("port:1-2"));
    let held = m.lock(lease_req("vm-b", &port)).await.unwrap();
    let err = m
        .lock(LeaseRequest {
            shared: vec![port.clone()],
            ..lease_req("vm-a", &b)
        })
        .await
        .err();
    assert!(matches!(err, Some(LockError::Busy(_))), "{err:?}");
    assert_eq!(
        m.key_state(&b),
        None,
        "a refused board lease leaves no trace"
    );
    m.unlock(&held.lease_id, &client("vm-b")).unwrap();
}
