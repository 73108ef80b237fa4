//! `approvals:` validation (every error names file, line and field) and the lookup.

use super::*;

const BASE: &str = "clients:\n  - {name: agent, token: aaaaaaaaaaaaaaaaaaaa, person: alice}\n  - {name: ops, token: bbbbbbbbbbbbbbbbbbbb}\n  - {name: alice, token: cccccccccccccccccccc}\ncommands:\n  - name: rk\n    binary: /bin/true\n    allowed_args:\n      - pattern: ef\n      - pattern: ld\n  - name: relay\n    binary: /bin/true\n    allowed_args:\n      - pattern: \"on 3\"\n      - pattern: \"off 3\"\nboards:\n  - name: b1\n    tags: {soc: rk3588}\n    usb: \"1-2\"\n    power:\n      on: {command: relay, args: \"on 3\"}\n      off: {command: relay, args: \"off 3\"}\n";

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
    assert_eq!(c.persons.get("agent").map(String::as_str), Some("alice"));
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

/// `by: requester` is answered by a person (`clients[].person`): the person must be another
/// configured client, and a rule nobody could answer is refused at load.
#[test]
fn a_person_is_another_client_and_a_requester_rule_needs_one() {
    let text = |agent: &str, rules: &str| {
        BASE.replace(
            "{name: agent, token: aaaaaaaaaaaaaaaaaaaa, person: alice}",
            agent,
        ) + "approvals:\n"
            + rules
    };
    let rule = "  - {command: rk, approve: {by: requester}}\n";
    let on = |agent: &str, rules: &str, field: &str| {
        let errs = Config::parse(&text(agent, rules), "a.yaml")
            .expect_err("refused")
            .0;
        errs.into_iter()
            .find(|e| e.field == field)
            .unwrap_or_else(|| panic!("no error on {field}"))
    };
    let e = on(
        "{name: agent, token: aaaaaaaaaaaaaaaaaaaa, person: agent}",
        rule,
        "clients[0].person",
    );
    assert!(e.message.contains("cannot answer for itself"), "{e}");
    assert_eq!(e.line, 2, "{e}");
    let e = on(
        "{name: agent, token: aaaaaaaaaaaaaaaaaaaa, person: bob}",
        rule,
        "clients[0].person",
    );
    assert!(e.message.contains("unknown client \"bob\""), "{e}");
    // She decides on the page: a page she may not sign in to is refused.
    let errs = Config::parse(
        &(text(
            "{name: agent, token: aaaaaaaaaaaaaaaaaaaa, person: alice}",
            rule,
        ) + "page: {viewers: [ops]}\n"),
        "a.yaml",
    )
    .expect_err("refused")
    .0;
    let e = errs
        .iter()
        .find(|e| e.field == "clients[0].person")
        .expect("an error on clients[0].person");
    assert!(e.message.contains("page.viewers"), "{e}");
    let e = on(
        "{name: agent, token: aaaaaaaaaaaaaaaaaaaa}",
        rule,
        "approvals[0].approve.by",
    );
    assert!(e.message.contains("clients[].person"), "{e}");
    // A person for a client that may not run the command does not answer for this rule.
    let e = on(
        "{name: agent, token: aaaaaaaaaaaaaaaaaaaa, person: alice, commands: [relay]}",
        rule,
        "approvals[0].approve.by",
    );
    assert!(e.message.contains("person"), "{e}");
}

/// A rule on a board alone holds for every tool that can change the board: the console
/// tools too (issue 37, finding 6), and a rule may name each of them.
#[test]
fn a_board_rule_holds_the_console_tools() {
    let c = parse("  - {board: b1, approve: {by: [ops]}}\n").expect("valid");
    let b1 = c.board("b1").expect("board");
    for tool in [
        GatedTool::ConsoleWrite,
        GatedTool::BoardRun,
        GatedTool::UbootRun,
    ] {
        let held = approval_rule(&c.approvals, Gated::Tool { tool, action: "" }, &[b1]);
        assert_eq!(held.map(|r| r.index), Some(0), "{}", tool.as_str());
    }
    let c = parse(
        "  - {tool: console_write, approve: {by: [ops]}}\n  - {tool: board_run, board: b1, approve: {by: [ops]}}\n  - {tool: uboot_run, board_tag: {soc: rk3588}, approve: {by: [ops]}}\n",
    )
    .expect("valid");
    let of = |tool| {
        approval_rule(&c.approvals, Gated::Tool { tool, action: "" }, &[b1]).map(|r| r.index)
    };
    assert_eq!(of(GatedTool::ConsoleWrite), Some(0));
    assert_eq!(of(GatedTool::BoardRun), Some(1));
    assert_eq!(of(GatedTool::UbootRun), Some(2));
    assert_eq!(of(GatedTool::PowerBoard), None);
    let e = error_on(
        "  - {tool: console_write, action: type, approve: {by: [ops]}}\n",
        "approvals[0].action",
    );
    assert!(e.message.contains("leave action out"), "{e}");
}
