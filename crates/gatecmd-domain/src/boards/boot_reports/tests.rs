//! The boot detector fed scripted boots (tests/fixtures/boots/, RK3588 logs' lines).

use super::*;

const FIRMWARE: &str = include_str!("../../../../../tests/fixtures/boots/firmware.log");
const KERNEL: &str = include_str!("../../../../../tests/fixtures/boots/kernel.log");
const USERSPACE: &str = include_str!("../../../../../tests/fixtures/boots/userspace.log");
const LOGIN: &str = include_str!("../../../../../tests/fixtures/boots/login.log");
const PANIC: &str = include_str!("../../../../../tests/fixtures/boots/panic.log");
const OOPS: &str = include_str!("../../../../../tests/fixtures/boots/oops.log");
const NO_KERNEL: &str = include_str!("../../../../../tests/fixtures/boots/no_kernel.log");
const UBOOT_PROMPT: &str = include_str!("../../../../../tests/fixtures/boots/uboot_prompt.log");

fn boots(yaml_extra: &str) -> Boots {
    let text = format!(
        "boards:\n  - name: b1\n    usb: \"1-2\"\n    console:\n      path: /nonexistent/tty\n      baud: 115200\n{yaml_extra}"
    );
    let config = Config::parse(&text, "t.yaml").expect("valid");
    let b = Boots::new(config.boots);
    b.configure(&config);
    b
}

fn crlf(s: &str) -> String {
    s.replace('\n', "\r\n")
}

fn stages(s: &BootSummary) -> Vec<&'static str> {
    s.stages.iter().map(|x| x.stage.as_str()).collect()
}

fn faults(s: &BootSummary) -> Vec<&'static str> {
    s.faults.iter().map(|x| x.kind.as_str()).collect()
}

/// Feeds `text` in pieces of `step` bytes, as a UART hands it over, then lets a prompt
/// at its end settle.
fn feed(b: &Boots, text: &str, step: usize) {
    for piece in text.as_bytes().chunks(step) {
        b.feed("b1", piece);
        b.tick();
    }
    std::thread::sleep(PROMPT_QUIET + Duration::from_millis(20));
    b.tick();
}

#[test]
fn a_normal_boot_goes_through_every_stage_in_order_to_login() {
    let b = boots("");
    let n = b
        .power_on("b1", Trigger::action("power_board", "alice", "on"))
        .expect("board with a console");
    let printed = crlf(&format!("{FIRMWARE}{KERNEL}{USERSPACE}{LOGIN}"));
    feed(&b, &printed, 7);
    let r = b.report("b1", None).expect("report");
    assert_eq!(r.summary.boot, n);
    assert_eq!(
        stages(&r.summary),
        ["spl", "atf", "optee", "uboot", "kernel", "init", "login"]
    );
    assert!(faults(&r.summary).is_empty(), "{:?}", r.summary.faults);
    assert_eq!(r.summary.outcome, Outcome::Login);
    assert_eq!(r.transcript, printed, "the transcript is what was printed");
    assert_eq!(r.summary.trigger.by.as_deref(), Some("alice"));
    let at: Vec<u64> = r.summary.stages.iter().map(|s| s.at_ms).collect();
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "{at:?}");
    assert!(r.summary.stages[0].line.starts_with("DDR 9fffbe1e78"));
    // Logging in: the shell prompt.
    feed(&b, "root\r\nPassword: \r\nroot@rock5b:~# ", 5);
    assert_eq!(
        b.summary("b1", None).expect("summary").outcome,
        Outcome::Shell
    );
}

#[test]
fn a_panic_is_a_fault_and_the_outcome() {
    let b = boots("");
    b.power_on("b1", Trigger::action("boot_board", "alice", "to shell"));
    feed(&b, &crlf(&format!("{FIRMWARE}{KERNEL}{PANIC}")), 64);
    let s = b.summary("b1", None).expect("summary");
    assert_eq!(
        stages(&s),
        ["spl", "atf", "optee", "uboot", "kernel", "init"]
    );
    assert_eq!(faults(&s), ["kernel_panic"]);
    assert!(s.faults[0].line.contains("Unable to mount root fs"));
    assert_eq!(s.outcome, Outcome::Panic);
}

#[test]
fn a_reset_loop_is_a_reset_fault_per_boot_and_the_outcome() {
    let b = boots("");
    b.power_on("b1", Trigger::action("power_board", "alice", "on"));
    let first_lines: String = KERNEL.lines().take(6).map(|l| format!("{l}\n")).collect();
    let turn = crlf(&format!("{FIRMWARE}{first_lines}"));
    for _ in 0..4 {
        feed(&b, &turn, 100);
    }
    let list = b.list("b1").expect("list");
    assert_eq!(list.len(), 4, "{list:#?}");
    assert_eq!(
        list[0].outcome,
        Outcome::ResetLoop,
        "the third reset in a row"
    );
    assert_eq!(list[0].resets_in_a_row, 3);
    for old in &list[1..] {
        assert_eq!(faults(old), ["reset"]);
        assert_eq!(old.outcome, Outcome::ResetLoop);
        assert_eq!(old.ended_by, Some(EndedBy::Reset));
        assert_eq!(stages(old), ["spl", "atf", "optee", "uboot", "kernel"]);
    }
    assert_eq!(list[3].trigger.action, "power_board");
    assert_eq!(list[0].trigger.action, "console");
    // Each transcript is its own turn: the banner line moved to the boot it starts.
    for n in [list[1].boot, list[2].boot] {
        let r = b.report("b1", Some(n)).expect("report");
        assert_eq!(r.transcript, turn);
    }
}

#[test]
fn u_boot_without_a_kernel_stops_at_uboot() {
    let b = boots("");
    b.power_on("b1", Trigger::action("flash_board", "alice", "reset"));
    feed(
        &b,
        &crlf(&format!("{FIRMWARE}{NO_KERNEL}{UBOOT_PROMPT}")),
        33,
    );
    let s = b.summary("b1", None).expect("summary");
    assert_eq!(stages(&s), ["spl", "atf", "optee", "uboot"]);
    assert_eq!(faults(&s), ["no_kernel"]);
    assert_eq!(s.outcome, Outcome::Uboot);
    // Booting by hand from there: no longer at U-Boot.
    feed(&b, &crlf(&format!("boot\n{KERNEL}")), 33);
    assert_eq!(
        b.summary("b1", None).expect("summary").outcome,
        Outcome::Booting
    );
}

#[test]
fn an_oops_that_still_reaches_login_is_one_fault_and_a_login() {
    let b = boots("");
    b.power_on("b1", Trigger::action("power_board", "alice", "cycle"));
    feed(
        &b,
        &crlf(&format!("{FIRMWARE}{KERNEL}{OOPS}{USERSPACE}{LOGIN}")),
        512,
    );
    let s = b.summary("b1", None).expect("summary");
    assert_eq!(
        faults(&s),
        ["oops"],
        "one Oops, however many lines it matched"
    );
    assert_eq!(s.outcome, Outcome::Login);
    assert_eq!(
        stages(&s),
        ["spl", "atf", "optee", "uboot", "kernel", "init", "login"]
    );
}

#[test]
fn a_reboot_after_login_is_a_new_boot_without_a_fault() {
    let b = boots("");
    b.power_on("b1", Trigger::action("power_board", "alice", "on"));
    feed(&b, &format!("{FIRMWARE}{KERNEL}{USERSPACE}{LOGIN}"), 4096);
    feed(&b, "root\nroot@rock5b:~# ", 4096);
    feed(&b, "reboot\n", 4096);
    feed(&b, FIRMWARE, 4096);
    let list = b.list("b1").expect("list");
    assert_eq!(list.len(), 2);
    assert_eq!(list[1].outcome, Outcome::Shell);
    assert!(faults(&list[1]).is_empty());
    assert_eq!(list[1].ended_by, Some(EndedBy::Reboot));
    assert_eq!(list[0].outcome, Outcome::Booting);
    assert_eq!(list[0].trigger.action, "console");
}

#[test]
fn output_without_any_power_action_starts_a_boot_at_its_first_banner() {
    let b = boots("");
    feed(&b, "garbage before\n", 4096);
    assert!(matches!(
        b.report("b1", None),
        Err(BootLookup::NoBoot { .. })
    ));
    feed(&b, FIRMWARE, 4096);
    let r = b.report("b1", None).expect("report");
    assert_eq!(r.summary.trigger.action, "console");
    assert_eq!(r.transcript, FIRMWARE);
}

#[test]
fn a_silent_boot_after_the_bound_and_booting_again_when_output_comes() {
    let b = boots("boots:\n  silent_secs: 1\n");
    let mut rx = b.subscribe();
    b.power_on("b1", Trigger::action("power_board", "alice", "on"));
    assert_eq!(rx.try_recv().expect("new boot").boot, 1);
    assert_eq!(b.summary("b1", None).expect("s").outcome, Outcome::Booting);
    std::thread::sleep(Duration::from_millis(1100));
    b.tick();
    assert_eq!(b.summary("b1", None).expect("s").outcome, Outcome::Silent);
    assert_eq!(rx.try_recv().expect("silent announced").boot, 1);
    feed(&b, "DDR Version V1.08 20220617\n", 64);
    assert_eq!(b.summary("b1", None).expect("s").outcome, Outcome::Booting);
    assert!(rx.try_recv().is_ok(), "booting again announced");
}

#[test]
fn boots_and_transcripts_are_bounded() {
    let b = boots("boots:\n  keep: 3\n  transcript_bytes: 4096\n");
    let chatter = "[   10.000000] some driver says something fairly long here\n".repeat(200);
    for _ in 0..10 {
        b.power_on("b1", Trigger::action("power_board", "alice", "on"));
        feed(&b, &format!("{FIRMWARE}{KERNEL}{chatter}"), 1000);
    }
    let list = b.list("b1").expect("list");
    assert_eq!(
        list.iter().map(|s| s.boot).collect::<Vec<_>>(),
        [10, 9, 8],
        "newest first, the oldest dropped"
    );
    assert!(b.held_bytes("b1") <= 3 * 4096);
    let r = b.report("b1", None).expect("report");
    assert!(r.summary.transcript_dropped_bytes > 0);
    assert!(r.transcript.starts_with("DDR 9fffbe1e78"));
    assert!(r.transcript.contains("bytes of this boot not kept"));
    assert!(matches!(
        b.report("b1", Some(2)),
        Err(BootLookup::NotKept {
            oldest: 8,
            newest: 10,
            ..
        })
    ));
}

#[test]
fn a_boards_own_patterns_are_used() {
    let b = boots(
        "      boot_patterns:\n        - {stage: login, regex: 'Please press Enter'}\n        - {fault: no_kernel, regex: '^No kernel here', replace: true}\n",
    );
    b.power_on("b1", Trigger::action("power_board", "alice", "on"));
    feed(
        &b,
        &format!("{FIRMWARE}Bad Linux ARM64 Image magic!\nNo kernel here\n"),
        4096,
    );
    let s = b.summary("b1", None).expect("s");
    assert_eq!(faults(&s), ["no_kernel"]);
    assert!(s.faults[0].line.starts_with("No kernel here"));
    feed(&b, "Please press Enter to activate this console.\n", 4096);
    assert_eq!(b.summary("b1", None).expect("s").outcome, Outcome::Login);
}

#[test]
fn a_bad_board_pattern_is_refused_with_file_line_and_field() {
    let text = "boards:\n  - name: b1\n    usb: \"1-2\"\n    console:\n      path: /dev/null\n      baud: 115200\n      boot_patterns:\n        - {stage: bootloader, regex: 'x'}\n        - {fault: oops, regex: '(unclosed'}\n";
    let e = Config::parse(text, "t.yaml").expect_err("refused").0;
    let stage = e
        .iter()
        .find(|e| e.field == "boards[0].console.boot_patterns[0].stage")
        .unwrap_or_else(|| panic!("{e:?}"));
    assert_eq!(stage.line, 8, "{stage}");
    assert!(stage.message.contains("uboot"), "{stage}");
    let regex = e
        .iter()
        .find(|e| e.field == "boards[0].console.boot_patterns[1].regex")
        .unwrap_or_else(|| panic!("{e:?}"));
    assert_eq!(regex.line, 9, "{regex}");
    assert!(regex.to_string().contains("t.yaml"), "{regex}");
}

/// What flash_board reads right after its `wait_for: "login:"` matched: the login prompt
/// is in, not yet confirmed (it must stay quiet first). `settled` answers with the boot
/// as boot_report gives it a moment later (`login`), where `summary` still says
/// `booting` at `init`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_summary_is_the_report_a_moment_later() {
    let b = boots("");
    b.spawn_ticker();
    let n = b
        .power_on("b1", Trigger::action("flash_board", "alice", "reset"))
        .expect("board with a console");
    let fed = std::time::Instant::now();
    b.feed(
        "b1",
        crlf(&format!("{FIRMWARE}{KERNEL}{USERSPACE}{LOGIN}")).as_bytes(),
    );
    let now = b.summary("b1", Some(n)).expect("summary");
    if fed.elapsed() < PROMPT_QUIET / 2 {
        // (Unless this thread was descheduled for the prompt's quiet time.)
        assert_eq!(
            now.outcome,
            Outcome::Booting,
            "the prompt is not confirmed yet"
        );
    }
    let settled = b
        .settled("b1", n, Duration::from_secs(5))
        .await
        .expect("settled");
    assert_eq!(settled.outcome, Outcome::Login);
    assert_eq!(stages(&settled).last(), Some(&"login"));
    let later = b.report("b1", Some(n)).expect("report").summary;
    assert_eq!(
        (settled.outcome, stages(&settled)),
        (later.outcome, stages(&later))
    );
    // A pattern that is no prompt: bounded, answers `booting` after `within`.
    let m = b
        .power_on("b1", Trigger::action("flash_board", "alice", "reset"))
        .expect("board");
    b.feed("b1", crlf(FIRMWARE).as_bytes());
    let t = std::time::Instant::now();
    let s = b
        .settled("b1", m, Duration::from_millis(300))
        .await
        .expect("settled");
    assert_eq!(s.outcome, Outcome::Booting);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}
