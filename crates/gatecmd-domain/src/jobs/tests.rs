use super::*;

fn spec(client: &str) -> JobSpec {
    JobSpec {
        client: client.into(),
        command: "flash".into(),
        argv: vec!["/bin/flash".into()],
        lock_keys: vec![],
        device: None,
        board: None,
        timeout_secs: 60,
        uncancellable: false,
        origin: Origin::Background,
    }
}

fn settings(keep: usize) -> JobSettings {
    JobSettings {
        keep_finished: keep,
        ..JobSettings::default()
    }
}

#[test]
fn a_job_is_its_clients_only() {
    let jobs = Jobs::new(settings(4));
    let j = jobs.start(spec("vm-a"));
    assert!(jobs.get("vm-a", &j.id.0).is_ok());
    let e = jobs.get("vm-b", &j.id.0).err().expect("refused");
    assert!(matches!(e, JobError::Unknown { .. }), "{e}");
    assert!(jobs.cancel("vm-b", &j.id.0).is_err());
    assert!(j.state().is_running(), "another client's cancel stopped it");
    assert_eq!(jobs.list("vm-b").len(), 0);
    assert_eq!(jobs.list("vm-a").len(), 1);
}

#[test]
fn finished_jobs_are_kept_up_to_the_bound_oldest_forgotten_first() {
    let jobs = Jobs::new(settings(2));
    let running = jobs.start(spec("vm-a"));
    let mut ids = vec![];
    for _ in 0..5 {
        let j = jobs.start(spec("vm-a"));
        jobs.finish(&j, JobState::Succeeded, JobEnd::default());
        ids.push(j.id.0.clone());
    }
    let other = jobs.start(spec("vm-b"));
    jobs.finish(&other, JobState::Failed, JobEnd::default());
    let left: Vec<String> = jobs.list("vm-a").into_iter().map(|v| v.id.0).collect();
    assert_eq!(
        left,
        vec![running.id.0.clone(), ids[3].clone(), ids[4].clone()]
    );
    assert!(jobs.get("vm-a", &ids[0]).is_err());
    assert_eq!(
        jobs.list("vm-b").len(),
        1,
        "one client's jobs do not evict another's"
    );
}

#[test]
fn a_cancel_never_job_refuses_cancel_job_and_an_ended_one_is_returned_as_is() {
    let jobs = Jobs::new(settings(4));
    let j = jobs.start(JobSpec {
        uncancellable: true,
        ..spec("vm-a")
    });
    assert!(matches!(
        jobs.cancel("vm-a", &j.id.0),
        Err(JobError::Uncancellable { .. })
    ));
    assert!(!j.cancel.is_cancelled());
    let k = jobs.start(spec("vm-a"));
    jobs.finish(&k, JobState::Succeeded, JobEnd::default());
    let again = jobs.cancel("vm-a", &k.id.0).expect("ended job");
    assert_eq!(again.state(), JobState::Succeeded);
    assert!(!again.cancel.is_cancelled());
}

#[test]
fn a_detach_notice_is_told_once() {
    let jobs = Jobs::new(settings(4));
    let j = jobs.start(spec("vm-a"));
    j.mark_detached();
    assert!(jobs.take_notices("vm-b").is_empty());
    let told = jobs.take_notices("vm-a");
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].origin, Origin::Detached);
    assert!(jobs.take_notices("vm-a").is_empty());
}

#[test]
fn output_is_read_from_cursors_and_the_ring_drops_the_oldest() {
    let jobs = Jobs::new(JobSettings {
        output_bytes: 8,
        ..settings(4)
    });
    let j = jobs.start(spec("vm-a"));
    j.push_line(false, "abc");
    let (out, _) = j.output(0, 0, 100);
    assert_eq!(out.bytes, b"abc\n");
    j.push_line(false, "defghij");
    let (out, err) = j.output(out.to, 0, 100);
    assert_eq!(out.dropped, 0);
    assert_eq!(out.bytes, b"defghij\n");
    assert!(err.bytes.is_empty());
    let (all, _) = j.output(0, 0, 100);
    assert_eq!(all.dropped, 4, "the first line is gone");
    assert!(j.held_bytes() <= 8);
}

#[test]
fn a_job_awaiting_approval_is_alive_and_may_be_withdrawn_even_if_uncancellable() {
    let jobs = Jobs::new(settings(4));
    let mut s = spec("vm-a");
    s.uncancellable = true;
    let job = jobs.start_awaiting(s);
    assert_eq!(job.state(), JobState::AwaitingApproval);
    assert!(job.state().is_running(), "not ended");
    assert_eq!(jobs.list("vm-a")[0].state.as_str(), "awaiting_approval");
    jobs.cancel("vm-a", &job.id.0).expect("withdrawn");
    assert!(job.cancel_token().is_cancelled());
    job.approved();
    assert_eq!(job.state(), JobState::Running, "approved: it runs");
}
