use std::time::Duration;

use super::*;

fn spec(client: &str, by: Approvers, secs: u64) -> NewRequest {
    NewRequest {
        client: client.into(),
        note: Some("erase before reflash".into()),
        tool: "execute_command".into(),
        what: "/usr/bin/rkdeveloptool ef".into(),
        argv: Some(vec!["/usr/bin/rkdeveloptool".into(), "ef".into()]),
        board: Some("b1".into()),
        holder: Some(client.into()),
        files: vec![],
        rule: "approvals[0] (command rkdeveloptool)".into(),
        approvers: by,
        timeout: Duration::from_secs(secs),
        job: None,
    }
}

fn ops() -> Approvers {
    Approvers::Clients(vec!["ops".into(), "agent".into()])
}

#[tokio::test]
async fn an_approver_approves_and_the_waiter_sees_it() {
    let a = Approvals::default();
    let r = a.request(spec("agent", ops(), 60)).expect("made");
    assert_eq!(a.list_pending().len(), 1);
    let waiter = {
        let (a, r) = (a.clone(), r.clone());
        tokio::spawn(async move { a.wait(&r).await })
    };
    let (_, d) = a
        .decide(&r.id.0, "ops", Via::Page, true, Some("go".into()))
        .expect("ops approves");
    assert_eq!(d.outcome, Outcome::Approved);
    let seen = waiter.await.expect("joined");
    assert_eq!(seen.outcome, Outcome::Approved);
    assert_eq!(seen.by.as_deref(), Some("ops"));
    assert_eq!(seen.via, Some(Via::Page));
    assert!(a.list_pending().is_empty());
    assert_eq!(a.list_decided()[0].id, r.id);
    assert_eq!(a.counts().1[0], ("approved", 1));
}

#[test]
fn the_requester_cannot_approve_its_own_even_when_listed() {
    let a = Approvals::default();
    let r = a.request(spec("agent", ops(), 60)).expect("made");
    let e = a
        .decide(&r.id.0, "agent", Via::Mcp, true, None)
        .unwrap_err();
    assert!(matches!(e, ApprovalError::OwnRequest { .. }), "{e}");
    let e = a
        .decide(&r.id.0, "mallory", Via::Mcp, true, None)
        .unwrap_err();
    assert!(matches!(e, ApprovalError::NotAnApprover { .. }), "{e}");
    assert!(r.decision().is_none(), "still pending");
}

#[test]
fn a_requester_rule_is_decided_by_its_person_only() {
    let a = Approvals::default();
    let person = Approvers::Person {
        client: "agent".into(),
        person: "alice".into(),
    };
    let r = a.request(spec("agent", person, 60)).expect("made");
    assert_eq!(r.view().approvers, vec!["alice".to_string()]);
    assert_eq!(r.view().answers_for.as_deref(), Some("agent"));
    // The agent (whose process answers any elicitation) and anyone else: refused.
    let e = a
        .decide(&r.id.0, "agent", Via::Mcp, true, None)
        .unwrap_err();
    assert!(matches!(e, ApprovalError::OwnRequest { .. }), "{e}");
    let e = a.decide(&r.id.0, "ops", Via::Page, true, None).unwrap_err();
    assert!(matches!(e, ApprovalError::NotAnApprover { .. }), "{e}");
    let (_, d) = a
        .decide(&r.id.0, "alice", Via::Page, true, None)
        .expect("the person approves");
    assert_eq!((d.by.as_deref(), d.via), (Some("alice"), Some(Via::Page)));
    // An unresolved rule's request is decided by nobody.
    let r = a
        .request(spec("agent", Approvers::Requester, 60))
        .expect("made");
    let e = a
        .decide(&r.id.0, "alice", Via::Page, true, None)
        .unwrap_err();
    assert!(matches!(e, ApprovalError::RequesterOnly { .. }), "{e}");
}

#[test]
fn the_first_decision_wins() {
    let a = Approvals::default();
    let r = a.request(spec("agent", ops(), 60)).expect("made");
    a.decide(&r.id.0, "ops", Via::Mcp, false, Some("not now".into()))
        .expect("denied");
    let e = a.decide(&r.id.0, "ops", Via::Mcp, true, None).unwrap_err();
    assert!(matches!(e, ApprovalError::Unknown { .. }), "{e}");
    assert!(a.end(&r, Outcome::Expired, None, None).is_none());
    assert_eq!(r.decision().map(|d| d.outcome), Some(Outcome::Denied));
}

#[tokio::test(start_paused = true)]
async fn a_request_nobody_decides_expires_at_its_deadline() {
    let a = Approvals::default();
    let r = a.request(spec("agent", ops(), 5)).expect("made");
    let d = a.wait(&r).await;
    assert_eq!(d.outcome, Outcome::Expired);
    assert!(a.list_pending().is_empty());
}

#[test]
fn pending_requests_are_bounded_per_client() {
    let a = Approvals::default();
    for _ in 0..MAX_PENDING_PER_CLIENT {
        a.request(spec("agent", ops(), 60)).expect("made");
    }
    let e = a.request(spec("agent", ops(), 60)).unwrap_err();
    assert!(matches!(e, ApprovalError::TooMany { .. }), "{e}");
    a.request(spec("other", ops(), 60))
        .expect("another client still may");
}

#[test]
fn a_long_note_is_refused() {
    let a = Approvals::default();
    let mut s = spec("agent", ops(), 60);
    s.note = Some("x".repeat(MAX_NOTE_BYTES + 1));
    assert!(matches!(
        a.request(s).unwrap_err(),
        ApprovalError::NoteTooLong { .. }
    ));
}

#[test]
fn a_rewritten_file_hashes_differently_through_the_same_descriptor() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("image.img");
    std::fs::write(&p, b"first").expect("write");
    let f = std::fs::File::open(&p).expect("open");
    let (h1, n1) = files::digest(&f).expect("hash").expect("a file");
    assert_eq!(n1, 5);
    let mut w = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&p)
        .expect("open for writing");
    w.write_all(b"second").expect("rewrite");
    let (h2, n2) = files::digest(&f).expect("hash").expect("a file");
    assert_ne!(h1, h2);
    assert_eq!(n2, 6);
    let d = std::fs::File::open(dir.path()).expect("dir");
    assert!(files::digest(&d).expect("a directory").is_none());
}

/// Issue 46 finding 2: what a person decides on reaches every view as it will act. The
/// red team's console text displayed a `dd` after a `#`, as if commented out.
#[test]
fn bidi_controls_reach_no_view_unescaped() {
    let a = Approvals::default();
    let attack = "echo ok # \u{202e}\u{2066}dd if=/dev/zero of=/dev/mmcblk0\u{2069}\u{202c}\n";
    let mut s = spec("agent", ops(), 60);
    s.tool = "console_write".into();
    s.what = format!("console_write b1: {attack}");
    s.argv = Some(vec![attack.into()]);
    s.note = Some("harmless \u{202e}gnihton".into());
    let r = a.request(s).expect("made");
    let v = &a.list_pending()[0];
    let invisible = |t: &str| {
        t.chars()
            .any(|c| c.is_control() || gatecmd_core::output::is_invisible(c))
    };
    for text in [
        &v.what,
        v.note.as_ref().expect("note"),
        &v.argv.as_ref().expect("argv")[0],
    ] {
        assert!(!invisible(text), "{text:?}");
    }
    assert!(
        v.what
            .ends_with("<U+202E><U+2066>dd if=/dev/zero of=/dev/mmcblk0<U+2069><U+202C>\\n"),
        "{}",
        v.what
    );
    assert_eq!(v.note.as_deref(), Some("harmless <U+202E>gnihton"));
    // The approver's own note is shown the same way.
    let (v, _) = a
        .decide(&r.id.0, "ops", Via::Page, true, Some("ok\u{2067}".into()))
        .expect("decided");
    assert_eq!(
        v.decision.and_then(|d| d.note).as_deref(),
        Some("ok<U+2067>")
    );
}
