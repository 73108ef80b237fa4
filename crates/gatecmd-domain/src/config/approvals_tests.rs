//! `approvals:` validation (every error names file, line and field) and the lookup.

use super::*;

const BASE: &str = "clients:\n  - {name: agent, token: aaaaaaaaaaaaaaaaaaaa}\n  - {name: ops, token: bbbbbbbbbbbbbbbbbbbb}\ncommands:\n  - name: rk\n    binary: /bin/true\n    allowed_args:\n      - pattern: ef\n      - pattern: ld\n  - name: relay\n    binary: /bin/true\n    allowed_args:\n      - pattern: \"on 3\"\n      - pattern: \"off 3\"\nboards:\n  - name: b1\n    tags: {soc: rk3588}\n    usb: \"1-2\"\n    power:\n      on: {command: relay, args: \"on 3\"}\n      off: {command: relay, args: \"off 3\"}\n";

fn parse(rules: &str) -> Result<Config, ConfigErrors> {
    Config::parse(&format!("{BASE}approvals:\n{rules}"), "a.yaml")
}

fn error_on(rules: &str, field: &str) -> ConfigError {
    let errs = parse(rules).expect_err("refused").0;
    errs.into_iter()
        .find(|e| e.field == field)
        .unwrap_or_else(|| panic!("no error on {field} for:\n{rules}"))
}

#[test]
fn rules_load_in_order() {
    let c = parse(
        "  - {command: rk, args_match: \"^ef$\", approve: {by: [ops], timeout_secs: 60}}\n  - {tool: power_board, action: \"off\", approve: {by: requester}}\n  - {board_tag: {soc: rk3588}, approve: {by: [ops]}}\n",
    )
    .expect("valid");
    assert_eq!(c.approvals.len(), 3);
    assert_eq!(c.approvals[0].timeout.as_secs(), 60);
    assert_eq!(c.approvals[1].by, Approvers::Requester);
    assert_eq!(
        c.approvals[2].timeout.as_secs(),
        approvals::DEFAULT_APPROVAL_TIMEOUT_SECS
    );
}

#[test]
fn each_mistake_is_named_with_its_line() {
    let e = error_on(
        "  - {command: nope, approve: {by: [ops]}}\n",
        "approvals[0].command",
    );
    assert!(e.message.contains("unknown command"), "{e}");
    assert!(e.line > 20, "{e}");
    let e = error_on(
        "  - {command: rk, approve: {by: [ops, mallory]}}\n",
        "approvals[0].approve.by[1]",
    );
    assert!(e.message.contains("mallory"), "{e}");
    let e = error_on(
        "  - {command: rk, args_match: \"(\", approve: {by: [ops]}}\n",
        "approvals[0].args_match",
    );
    assert!(e.message.contains("regex"), "{e}");
    let e = error_on(
        "  - {tool: unlock_device, approve: {by: [ops]}}\n",
        "approvals[0].tool",
    );
    assert!(e.message.contains("power_board"), "{e}");
    let e = error_on("  - {approve: {by: [ops]}}\n", "approvals[0].approve");
    assert!(e.message.contains("select"), "{e}");
    let e = error_on(
        "  - {board: b9, approve: {by: [ops]}}\n",
        "approvals[0].board",
    );
    assert!(e.message.contains("b1"), "{e}");
    let e = error_on(
        "  - {command: rk, approve: {by: ops}}\n",
        "approvals[0].approve.by",
    );
    assert!(e.message.contains("by: [ops]"), "{e}");
    let e = error_on(
        "  - {command: rk, approve: {by: [ops], timeout_secs: 0}}\n",
        "approvals[0].approve.timeout_secs",
    );
    assert!(e.message.contains("out of range"), "{e}");
    let e = error_on(
        "  - {tool: power_board, action: reboot, approve: {by: [ops]}}\n",
        "approvals[0].action",
    );
    assert!(e.message.contains("cycle"), "{e}");
    let e = error_on(
        "  - {tool: boot_board, action: \"on\", approve: {by: [ops]}}\n",
        "approvals[0].action",
    );
    assert!(e.message.contains("maskrom"), "{e}");
    let e = error_on(
        "  - {tool: flash_board, action: write, approve: {by: [ops]}}\n",
        "approvals[0].action",
    );
    assert!(e.message.contains("leave action out"), "{e}");
}

/// `flash_board` can be held: a rule naming it holds for it alone, and a rule on a board
/// alone (everything that may change the board) holds for it as well.
#[test]
fn a_flash_is_held_by_its_own_rule_and_by_a_board_rule() {
    let c = parse(
        "  - {tool: power_board, approve: {by: [ops]}}\n  - {tool: flash_board, board: b1, approve: {by: [ops]}}\n",
    )
    .expect("valid");
    let b1 = c.board("b1").expect("board");
    let flash = |rules: &[ApprovalRule], boards: &[&BoardConfig]| {
        approval_rule(
            rules,
            Gated::Tool {
                tool: GatedTool::FlashBoard,
                action: "flash",
            },
            boards,
        )
        .map(|r| r.index)
    };
    assert_eq!(flash(&c.approvals, &[b1]), Some(1));
    assert_eq!(flash(&c.approvals, &[]), None, "the rule names board b1");
    let board_only = parse("  - {board: b1, approve: {by: [ops]}}\n").expect("valid");
    assert_eq!(flash(&board_only.approvals, &[b1]), Some(0));
}

#[test]
fn the_first_rule_that_holds_applies() {
    let c = parse(
        "  - {command: rk, args_match: \"^ef$\", approve: {by: [ops]}}\n  - {board: b1, approve: {by: [agent]}}\n  - {tool: power_board, action: \"off\", approve: {by: [ops]}}\n",
    )
    .expect("valid");
    let b1 = c.board("b1").expect("board");
    let cmd = |args: &'static [&'static str]| -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    };
    let (ef, ld) = (cmd(&["ef"]), cmd(&["ld"]));
    let of = |args: &[String], read_only: bool, boards: &[&BoardConfig]| {
        approval_rule(
            &c.approvals,
            Gated::Command {
                name: "rk",
                args,
                read_only,
            },
            boards,
        )
        .map(|r| r.index)
    };
    assert_eq!(of(&ef, false, &[]), Some(0));
    assert_eq!(of(&ld, false, &[]), None, "args_match holds for ef only");
    assert_eq!(of(&ld, false, &[b1]), Some(1), "the board rule");
    assert_eq!(
        of(&ld, true, &[b1]),
        None,
        "a read-only command on the board"
    );
    let power = |action| {
        approval_rule(
            &c.approvals,
            Gated::Tool {
                tool: GatedTool::PowerBoard,
                action,
            },
            &[b1],
        )
        .map(|r| r.index)
    };
    // The board rule comes first and holds for every power action on b1.
    assert_eq!(power("off"), Some(1));
    assert_eq!(power("on"), Some(1));
    assert_eq!(
        approval_rule(
            &[],
            Gated::Tool {
                tool: GatedTool::PowerBoard,
                action: "off"
            },
            &[b1]
        )
        .map(|r| r.index),
        None
    );
}
