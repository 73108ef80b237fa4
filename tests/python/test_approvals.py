"""Approvals (issue 33) with the official MCP Python SDK as the requesting agent and as the
approver client: a destructive call waits for a named approver's yes, and each way a
request ends is a test — approved (it runs, the result goes to the requester), denied
(refused with the approver's note), expired, the requester approving itself, a client that
is no approver, a file rewritten between approval and run (refused, nothing ran), and a
reload that removes the rule while a request waits (it stays pending under the rule it was
made under: docs/APPROVALS.md).

The command is a real executable written here: it appends what it was run with, and the
content of its file argument, to a log the tests read, so "nothing ran" is checked on the
host, not taken from an answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import time
from pathlib import Path

import anyio
import pytest

from conftest import Server, connect, settled_text

pytestmark = pytest.mark.anyio

AGENT = "approvals-agent-token-0123456789"
OPS = "approvals-ops-token-0123456789ab"
MALLORY = "approvals-mallory-token-012345"
# The person who answers for the agent (`clients[].person`): a token only she holds.
ALICE = "approvals-alice-token-0123456789a"

RULES = """
approvals:
  - command: tool
    args_match: "^ef$"
    approve: {by: [ops], timeout_secs: 120}
  - command: tool
    args_match: "^wl "
    approve: {by: [ops, agent], timeout_secs: 120}
  - command: quick
    approve: {by: [ops], timeout_secs: 2}
  - command: mine
    approve: {by: requester, timeout_secs: 60}
"""


def config(directory: Path, rules: str = RULES) -> str:
    return f"""
clients:
  - name: agent
    token: {AGENT}
    person: alice
  - name: ops
    token: {OPS}
  - name: mallory
    token: {MALLORY}
  - name: alice
    token: {ALICE}
file_roots: [{directory}/files]
commands:
  - name: tool
    binary: {directory}/tool.sh
    description: A stand-in for rkdeveloptool that logs what it was run with.
    destructive: true
    params: {{lba: "[0-9]+"}}
    allowed_args:
      - pattern: ef
      - pattern: wl {{lba}} {{image}}
        file_args: [image]
  - name: quick
    binary: {directory}/tool.sh
    description: The same, under a rule that expires in two seconds.
    allowed_args:
      - pattern: ef
  - name: mine
    binary: {directory}/tool.sh
    description: The same, approved by the person who answers for the requesting client.
    allowed_args:
      - pattern: ef
{rules}
"""


@pytest.fixture
def bench(tmp_path):
    (tmp_path / "files").mkdir()
    tool = tmp_path / "tool.sh"
    # The child's environment is cleared: the log's path is written into the script.
    tool.write_text(
        "#!/bin/sh\n"
        f'echo "ran $*" >> {tmp_path}/ran.log\n'
        f'if [ -n "$3" ]; then cat "$3" >> {tmp_path}/ran.log; echo >> {tmp_path}/ran.log; fi\n'
        'echo "done $1"\n'
    )
    tool.chmod(stat.S_IRWXU)
    s = Server(tmp_path, config=config(tmp_path))
    yield s
    s.stop()


def ran(bench: Server) -> str:
    p = bench.dir / "ran.log"
    return p.read_text() if p.exists() else ""


async def pending(client, count: int = 1, timeout: float = 10.0) -> list[dict]:
    """The pending requests once there are `count` of them (read from gatecmd://approvals)."""
    deadline = time.monotonic() + timeout
    while True:
        r = await client.read_resource("gatecmd://approvals")
        listed = json.loads(r.contents[0].text)["pending"]
        if len(listed) >= count or time.monotonic() > deadline:
            return listed
        await anyio.sleep(0.1)


async def test_approved_runs_and_the_result_goes_to_the_requester(bench):
    progress: list[str] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    answer: dict = {}
    async with connect(bench.url, AGENT, "legacy") as agent, connect(bench.url, OPS, "legacy") as ops:

        async def ask() -> None:
            r = await agent.call_tool(
                "execute_command",
                {"command": "tool", "args": ["ef"], "note": "erase before the new loader"},
                progress_callback=on_progress,
            )
            answer["r"] = r

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            [req] = await pending(ops)
            assert req["client"] == "agent"
            assert req["note"] == "erase before the new loader"
            assert req["argv"] == [f"{bench.dir}/tool.sh", "ef"]
            assert req["approvers"] == ["ops"]
            assert req["rule"].startswith("approvals[0]")
            assert req["job"].startswith("job-")
            # The agent's call waits and says so; nothing has run.
            listed = await agent_jobs(bench)
            assert any(j["job"] == req["job"] and j["state"] == "awaiting_approval" for j in listed), listed
            await anyio.sleep(5.5)
            assert ran(bench) == ""
            ok = await ops.call_tool("approve", {"approval": req["id"], "note": "go ahead"})
            assert ok.is_error is not True, ok
            assert ok.structured_content["request"]["decision"]["outcome"] == "approved"
            assert ok.structured_content["request"]["decision"]["by"] == "ops"
        r = answer["r"]
        assert r.is_error is not True, r
        assert r.structured_content["exit_code"] == 0
        assert r.structured_content["stdout"] == "done ef\n"
        assert r.structured_content["approval"] == req["id"]
        assert ran(bench) == "ran ef\n"
        # Clients resetting their timeout on progress were told who the call waits for.
        assert any(f"awaiting approval {req['id']} by ops" in m for m in progress), progress
        decided = json.loads((await ops.read_resource("gatecmd://approvals")).contents[0].text)["decided"]
        assert decided[0]["id"] == req["id"] and decided[0]["decision"]["note"] == "go ahead"


async def agent_jobs(bench: Server) -> list[dict]:
    async with connect(bench.url, AGENT, "legacy") as c:
        return (await c.call_tool("list_jobs", {})).structured_content["jobs"]


async def test_denied_is_refused_with_the_note_and_nothing_ran(bench):
    answer: dict = {}
    async with connect(bench.url, AGENT, "legacy") as agent, connect(bench.url, OPS, "legacy") as ops:

        async def ask() -> None:
            answer["r"] = await agent.call_tool("execute_command", {"command": "tool", "args": ["ef"]})

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            [req] = await pending(ops)
            no = await ops.call_tool("deny", {"approval": req["id"], "note": "board b1 is being debugged"})
            assert no.is_error is not True, no
        r = answer["r"]
        assert r.is_error is True
        refusal = r.structured_content["refusal"]
        assert refusal["reason"] == "approval_denied"
        assert "board b1 is being debugged" in refusal["message"] and "ops" in refusal["message"]
    assert ran(bench) == ""
    log = settled_text(bench.dir / "state" / "audit.log")
    decided = [json.loads(line) for line in log.splitlines() if '"approval_decided"' in line]
    assert decided and decided[-1]["outcome"] == "denied" and decided[-1]["by"] == "ops"
    assert decided[-1]["note"] == "board b1 is being debugged"


async def test_a_request_nobody_decides_expires(bench):
    async with connect(bench.url, AGENT, "legacy") as agent:
        started = time.monotonic()
        r = await agent.call_tool("execute_command", {"command": "quick", "args": ["ef"]})
        assert r.is_error is True
        assert r.structured_content["refusal"]["reason"] == "approval_expired"
        assert 1.5 < time.monotonic() - started < 10
    assert ran(bench) == ""


async def test_the_requester_and_other_clients_cannot_approve(bench):
    image = bench.dir / "files" / "image.img"
    image.write_bytes(b"loader v2")
    async with (
        connect(bench.url, AGENT, "legacy") as agent,
        connect(bench.url, MALLORY, "legacy") as mallory,
        connect(bench.url, OPS, "legacy") as ops,
    ):
        # This rule lists the agent among its approvers: still not for its own request.
        r = await agent.call_tool(
            "execute_command", {"command": "tool", "args": ["wl", "0", "image.img"], "background": True}
        )
        assert r.is_error is not True, r
        job, approval = r.structured_content["job"], r.structured_content["approval"]
        own = await agent.call_tool("approve", {"approval": approval})
        assert own.is_error is True
        assert own.structured_content["refusal"]["reason"] == "not_an_approver"
        assert "own request" in own.structured_content["refusal"]["message"]
        other = await mallory.call_tool("approve", {"approval": approval})
        assert other.is_error is True
        assert other.structured_content["refusal"]["reason"] == "not_an_approver"
        assert "ops, agent" in other.structured_content["refusal"]["message"]
        waited = await agent.call_tool("wait_job", {"job": job, "timeout_secs": 0})
        assert waited.structured_content["state"] == "awaiting_approval"
        assert ran(bench) == ""
        await ops.call_tool("deny", {"approval": approval, "note": "cleanup"})
        end = await agent.call_tool("wait_job", {"job": job, "timeout_secs": 10})
        assert end.structured_content["state"] == "failed"
        assert "approval_denied" in end.structured_content["stop_reason"]
    assert ran(bench) == ""


async def test_a_file_rewritten_after_the_request_is_refused_and_nothing_ran(bench):
    image = bench.dir / "files" / "image.img"
    image.write_bytes(b"the image that was shown")
    async with connect(bench.url, AGENT, "legacy") as agent, connect(bench.url, OPS, "legacy") as ops:
        r = await agent.call_tool(
            "execute_command", {"command": "tool", "args": ["wl", "64", "image.img"], "background": True}
        )
        job = r.structured_content["job"]
        [req] = await pending(ops)
        [f] = req["files"]
        assert f["path"] == str(image)
        assert f["sha256"] == hashlib.sha256(b"the image that was shown").hexdigest()
        assert f["size"] == len(b"the image that was shown")
        # Rewritten in place after the approver looked at it.
        with open(image, "r+b") as w:
            w.write(b"THE IMAGE THAT WAS SWAPPED")
        ok = await ops.call_tool("approve", {"approval": req["id"]})
        assert ok.is_error is not True
        end = await agent.call_tool("wait_job", {"job": job, "timeout_secs": 10})
        s = end.structured_content
        assert s["state"] == "failed", s
        assert "changed_since_approval" in s["stop_reason"], s
        assert f["sha256"] in s["stop_reason"]
    assert ran(bench) == ""
    # And an unchanged file, approved, runs with exactly those bytes.
    async with connect(bench.url, AGENT, "legacy") as agent, connect(bench.url, OPS, "legacy") as ops:
        r = await agent.call_tool(
            "execute_command", {"command": "tool", "args": ["wl", "64", "image.img"], "background": True}
        )
        job = r.structured_content["job"]
        [req] = await pending(ops)
        await ops.call_tool("approve", {"approval": req["id"]})
        end = await agent.call_tool("wait_job", {"job": job, "timeout_secs": 10})
        assert end.structured_content["state"] == "succeeded", end.structured_content
    assert ran(bench).endswith("THE IMAGE THAT WAS SWAPPED\n")


async def test_a_reload_removing_the_rule_leaves_a_waiting_request_pending(bench):
    async with connect(bench.url, AGENT, "legacy") as agent, connect(bench.url, OPS, "legacy") as ops:
        r = await agent.call_tool("execute_command", {"command": "tool", "args": ["ef"], "background": True})
        job = r.structured_content["job"]
        [req] = await pending(ops)
        cfg = bench.dir / "config.yaml"
        cfg.write_text(config(bench.dir, rules=""))
        cfg.chmod(stat.S_IRUSR | stat.S_IWUSR)
        seen = len(bench.log)
        os.kill(bench.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while not any("configuration reloaded" in line for line in bench.log[seen:]):
            assert time.monotonic() < deadline, "no reload in the log:\n" + "\n".join(bench.log[seen:])
            await anyio.sleep(0.05)
        # The next call needs no approval any more...
        now = await agent.call_tool("execute_command", {"command": "tool", "args": ["ef"]})
        assert now.is_error is not True, now
        assert ran(bench) == "ran ef\n"
        # ...and the request made under the old rule still waits for its approver.
        still = await pending(ops)
        assert [p["id"] for p in still] == [req["id"]]
        waited = await agent.call_tool("wait_job", {"job": job, "timeout_secs": 0})
        assert waited.structured_content["state"] == "awaiting_approval"
        await ops.call_tool("approve", {"approval": req["id"]})
        end = await agent.call_tool("wait_job", {"job": job, "timeout_secs": 10})
        assert end.structured_content["state"] == "succeeded", end.structured_content
    assert ran(bench) == "ran ef\nran ef\n"


PAGE_RULES = """
approvals:
  - command: tool
    args_match: "^wl "
    approve: {by: [ops], timeout_secs: 600}
  - tool: power_board
    action: off
    approve: {by: [ops], timeout_secs: 600}
  - tool: boot_board
    action: "off"
    approve: {by: [ops], timeout_secs: 600}
"""

BOARD = """
boards:
  - name: rock5b-1
    tags: {soc: rk3588}
    usb: "1-2"
    power:
      on: {command: relay, args: "on 3"}
      off: {command: relay, args: "off 3"}
"""

RELAY = """
  - name: relay
    binary: {directory}/tool.sh
    description: The board's power relay (a stand-in that logs).
    allowed_args:
      - pattern: on 3
      - pattern: off 3
"""

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img" / "approval-pending.png"


@pytest.fixture
def board_bench(tmp_path):
    (tmp_path / "files").mkdir()
    tool = tmp_path / "tool.sh"
    tool.write_text(
        "#!/bin/sh\n"
        f'echo "ran $*" >> {tmp_path}/ran.log\n'
        f'if [ -n "$3" ]; then cat "$3" >> {tmp_path}/ran.log; echo >> {tmp_path}/ran.log; fi\n'
        'echo "done $1"\n'
    )
    tool.chmod(stat.S_IRWXU)
    text = config(tmp_path, rules=PAGE_RULES) + BOARD
    text = text.replace("\n  - name: quick", RELAY.format(directory=tmp_path) + "  - name: quick")
    s = Server(tmp_path, config=text)
    yield s
    s.stop()


async def test_the_bench_page_approves_and_denies_in_chromium(board_bench):
    """The approver is a person on the bench page in Chromium: signed in as `ops`, they see
    what will run (the power action on a board held by the agent; a write with its image's
    SHA-256), click Approve on one and Deny with a note on the other."""
    from test_page import CHROMIUM, CHROMIUM_ARGS, playwright_or_skip

    playwright_or_skip()
    from playwright.async_api import async_playwright

    bench = board_bench
    image = bench.dir / "files" / "u-boot.img"
    image.write_bytes(b"u-boot for rock5b-1\n" * 100)
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    answer: dict = {}
    async with connect(bench.url, AGENT, "legacy") as agent, async_playwright() as pw:
        lease = await agent.call_tool("lock_board", {"board": "rock5b-1", "note": "bring-up"})
        assert lease.is_error is not True, lease
        lease_id = lease.structured_content["lease_id"]
        write = await agent.call_tool(
            "execute_command",
            {
                "command": "tool",
                "args": ["wl", "64", "u-boot.img"],
                "background": True,
                "note": "new u-boot for the display bring-up",
            },
        )
        job = write.structured_content["job"]

        async def power_off() -> None:
            answer["power"] = await agent.call_tool(
                "power_board",
                {"board": "rock5b-1", "action": "off", "lease": lease_id, "note": "cold boot into MaskROM"},
            )

        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = await (await browser.new_context(viewport={"width": 1440, "height": 900})).new_page()
            await page.goto(bench.base + "/")
            await page.fill("#token", OPS)
            async with page.expect_navigation():
                await page.click("button[type=submit]")
            await page.wait_for_selector("#status.live", timeout=5000)
            async with anyio.create_task_group() as tg:
                tg.start_soon(power_off)
                power_row = 'tr[data-approval][data-client="agent"]:has-text("power_board rock5b-1 off")'
                write_row = f'tr[data-approval]:has([data-sha256="{digest}"])'
                await page.wait_for_selector(power_row, timeout=5000)
                await page.wait_for_selector(write_row, timeout=5000)
                row_text = await page.inner_text(power_row)
                assert "held by agent" in row_text and "cold boot into MaskROM" in row_text, row_text
                assert ran(bench) == ""
                DOCS_IMG.parent.mkdir(parents=True, exist_ok=True)
                await page.locator("#approvals-card").screenshot(path=str(DOCS_IMG))
                # Approve the power action.
                await page.fill(f"{power_row} input", "ok, MaskROM it")
                await page.click(f"{power_row} button.approve")
                await page.wait_for_selector(power_row, state="detached", timeout=5000)
            power = answer["power"]
            assert power.is_error is not True, power
            assert power.structured_content["state"] == "off"
            assert ran(bench) == "ran off 3\n"
            # Deny the write, with a note the agent reads.
            await page.fill(f"{write_row} input", "wrong image: use the signed one")
            await page.click(f"{write_row} button.danger")
            await page.wait_for_selector(write_row, state="detached", timeout=5000)
            end = await agent.call_tool("wait_job", {"job": job, "timeout_secs": 10})
            assert end.structured_content["state"] == "failed"
            assert "approval_denied" in end.structured_content["stop_reason"]
            assert "wrong image: use the signed one" in end.structured_content["stop_reason"]
            # The last decisions show both, with the approver and the note.
            await page.wait_for_selector('li[data-decision="approval_decided"]:has-text("denied by ops")', timeout=5000)
            await page.wait_for_selector('li[data-decision="approval_decided"]:has-text("approved by ops")', timeout=5000)
        finally:
            await browser.close()
    assert ran(bench) == "ran off 3\n", "the denied write never ran"


async def test_the_page_shows_no_buttons_to_a_non_approver_and_refuses_its_post(board_bench):
    from test_page import CHROMIUM, CHROMIUM_ARGS, playwright_or_skip

    playwright_or_skip()
    from playwright.async_api import async_playwright

    bench = board_bench
    (bench.dir / "files" / "x.img").write_bytes(b"x")
    async with connect(bench.url, AGENT, "legacy") as agent, async_playwright() as pw:
        r = await agent.call_tool(
            "execute_command", {"command": "tool", "args": ["wl", "1", "x.img"], "background": True}
        )
        approval = r.structured_content["approval"]
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = await (await browser.new_context()).new_page()
            await page.goto(bench.base + "/")
            await page.fill("#token", MALLORY)
            async with page.expect_navigation():
                await page.click("button[type=submit]")
            row = f'tr[data-approval="{approval}"]'
            await page.wait_for_selector(row, timeout=5000)
            assert await page.locator(f"{row} button").count() == 0
            assert "for ops" in await page.inner_text(row)
            # The POST itself, from the page's own origin with its CSRF token: refused.
            status = await page.evaluate(
                """async (id) => {
                    const csrf = document.querySelector('meta[name="csrf-token"]').content;
                    const r = await fetch("/approval", {method: "POST", credentials: "same-origin",
                      headers: {"Content-Type": "application/x-www-form-urlencoded", "X-CSRF-Token": csrf},
                      body: new URLSearchParams({id, decision: "approve"}).toString()});
                    return [r.status, await r.text()];
                }""",
                approval,
            )
            assert status[0] == 403 and "may not decide" in status[1], status
            # Without the CSRF token, even an approver's session would be refused.
            status = await page.evaluate(
                """async (id) => (await fetch("/approval", {method: "POST", credentials: "same-origin",
                      headers: {"Content-Type": "application/x-www-form-urlencoded"},
                      body: new URLSearchParams({id, decision: "approve"}).toString()})).status""",
                approval,
            )
            assert status == 403, status
        finally:
            await browser.close()
        assert (await agent.call_tool("wait_job", {"job": r.structured_content["job"], "timeout_secs": 0})).structured_content[
            "state"
        ] == "awaiting_approval"
    assert ran(bench) == ""


async def test_the_host_cli_decides_with_an_approvers_token(bench):
    """`gatecmd approve ID` / `gatecmd deny ID`: an MCP client of the running server with an
    approver client's token from an owner-only file or $GATECMD_TOKEN, never argv."""
    import subprocess

    from conftest import gatecmd_bin

    def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        full = {k: v for k, v in os.environ.items() if k != "GATECMD_TOKEN"}
        full.update(env or {})
        return subprocess.run(
            [gatecmd_bin(), *args, "--url", bench.url], capture_output=True, text=True, env=full, timeout=30
        )

    token_file = bench.dir / "ops.token"
    token_file.write_text(OPS + "\n")
    async with connect(bench.url, AGENT, "legacy") as agent:
        r = await agent.call_tool("execute_command", {"command": "tool", "args": ["ef"], "background": True})
        approval, job = r.structured_content["approval"], r.structured_content["job"]
        # A token file others may read is refused before anything is sent.
        token_file.chmod(0o644)
        loose = cli("approve", approval, "--token-file", str(token_file))
        assert loose.returncode != 0 and "chmod 600" in loose.stderr, loose
        # The requester's own token: the server refuses, the CLI says why.
        own = cli("approve", approval, env={"GATECMD_TOKEN": AGENT})
        assert own.returncode != 0 and "not_an_approver" in own.stderr, own
        assert ran(bench) == ""
        token_file.chmod(0o600)
        ok = cli("approve", approval, "--note", "from the host", "--token-file", str(token_file))
        assert ok.returncode == 0, ok
        assert f"{approval} approved" in ok.stdout
        end = await agent.call_tool("wait_job", {"job": job, "timeout_secs": 10})
        assert end.structured_content["state"] == "succeeded", end.structured_content
        # And a denial through the environment variable.
        r = await agent.call_tool("execute_command", {"command": "tool", "args": ["ef"], "background": True})
        no = cli("deny", r.structured_content["approval"], "--note", "not today", env={"GATECMD_TOKEN": OPS})
        assert no.returncode == 0, no
        end = await agent.call_tool("wait_job", {"job": r.structured_content["job"], "timeout_secs": 10})
        assert "not today" in end.structured_content["stop_reason"]
    assert ran(bench) == "ran ef\n"
    log = settled_text(bench.dir / "state" / "audit.log")
    assert OPS not in log and AGENT not in log, "a token reached the audit log"
    # `gatecmd check` shows the rules as they will apply.
    check = subprocess.run(
        [gatecmd_bin(), "check", "--config", str(bench.dir / "config.yaml")], capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check
    assert "approval: approvals[0] (command tool, args ^ef$) waits for ops (at most 120 s)" in check.stdout, check.stdout
    assert "approvals[3] (command mine) waits for the person who answers for the requesting client" in check.stdout


async def page_session(base: str, token: str) -> tuple:
    """An HTTP client signed in to the bench page as the holder of `token`, the way a
    browser is: POST /signin from the page's origin (a session cookie), then the page's
    CSRF token from its `<meta name="csrf-token">`."""
    import re

    import httpx2

    http = httpx2.AsyncClient(base_url=base, follow_redirects=False, timeout=10, trust_env=False)
    r = await http.post("/signin", data={"token": token}, headers={"Origin": base})
    assert r.status_code == 303, (r.status_code, r.text)
    page = await http.get("/")
    m = re.search(r'<meta name="csrf-token" content="([^"]+)"', page.text)
    assert m, page.text[:500]
    return http, m.group(1)


async def test_by_requester_is_decided_by_the_person_on_the_page_not_by_the_agents_process(bench):
    """Issue 37, finding 5: `by: requester` used to be decided by the MCP elicitation's
    answer, which the agent's own process gives (it ran 2-4 ms after the request). Now the
    request is for the person who answers for the agent (`clients[].person: alice`); the
    agent's client gets a URL elicitation pointing at the request on the bench page, and
    its accept approves nothing. Alice signs in on the page with her own token and
    approves: then it runs, audited as approved by alice via the page."""
    from mcp import types

    asked: list = []
    completed: list[str] = []

    async def agent_process(context, params):
        # Exactly what a script holding the agent's token would do: say yes at once.
        asked.append(params)
        return types.ElicitResult(action="accept", content={"approve": True})

    async def on_message(message) -> None:
        if isinstance(message, types.ElicitCompleteNotification):
            completed.append(message.params.elicitation_id)

    answer: dict = {}
    async with (
        connect(bench.url, AGENT, "legacy", elicitation_callback=agent_process, message_handler=on_message) as agent,
        connect(bench.url, AGENT, "legacy") as agent_again,
    ):

        async def ask() -> None:
            answer["r"] = await agent.call_tool(
                "execute_command", {"command": "mine", "args": ["ef"], "note": "my own call"}
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            with anyio.fail_after(10):
                while not asked:
                    await anyio.sleep(0.02)
            [req] = await pending(agent_again)
            p = asked[0]
            assert p.mode == "url", p
            assert p.url == f"{bench.base}/approval/{req['id']}", p
            assert p.elicitation_id == req["id"]
            assert "alice" in p.message and "approves nothing" in p.message, p.message
            assert req["approvers"] == ["alice"] and req["answers_for"] == "agent", req
            # The agent said yes at once; nothing ran, the call still waits.
            await anyio.sleep(1.5)
            assert ran(bench) == "" and "r" not in answer
            # Nor does the agent's token decide it through the approve tool.
            own = await agent_again.call_tool("approve", {"approval": req["id"]})
            assert own.structured_content["refusal"]["reason"] == "not_an_approver", own
            assert ran(bench) == ""
            # Alice follows the link: the sign-in form, leading back to the request.
            import httpx2

            async with httpx2.AsyncClient(follow_redirects=False, timeout=10, trust_env=False) as anon:
                form = await anon.get(p.url)
                assert form.status_code == 200 and f'action="/signin#{req["id"]}"' in form.text, form.text
            http, csrf = await page_session(bench.base, ALICE)
            try:
                there = await http.get(f"/approval/{req['id']}")
                assert there.status_code == 303 and there.headers["location"] == f"/#{req['id']}", there
                snap = (await http.get("/state")).json()
                [row] = [a for a in snap["approvals"] if a["id"] == req["id"]]
                assert row["may_decide"] is True, row
                # Without the session's CSRF token: refused, nothing ran.
                bad = await http.post(
                    "/approval", data={"id": req["id"], "decision": "approve"}, headers={"Origin": bench.base}
                )
                assert bad.status_code == 403 and ran(bench) == "", bad.text
                ok = await http.post(
                    "/approval",
                    data={"id": req["id"], "decision": "approve", "note": "looked at it"},
                    headers={"Origin": bench.base, "X-CSRF-Token": csrf},
                )
                assert ok.status_code == 200, ok.text
                assert f"{req['id']} approved by alice" in ok.text
            finally:
                await http.aclose()
        r = answer["r"]
        assert r.is_error is not True, r
        assert r.structured_content["stdout"] == "done ef\n"
        with anyio.fail_after(5):
            while req["id"] not in completed:
                await anyio.sleep(0.05)
    assert ran(bench) == "ran ef\n"
    log = settled_text(bench.dir / "state" / "audit.log")
    [decided] = [
        json.loads(line) for line in log.splitlines() if '"approval_decided"' in line and req["id"] in line
    ]
    assert decided["outcome"] == "approved", decided
    assert decided["by"] == "alice" and decided["via"] == "page", decided
    assert decided["note"] == "looked at it"
    [requested] = [
        json.loads(line) for line in log.splitlines() if '"approval_requested"' in line and req["id"] in line
    ]
    assert requested["approvers"] == ["alice"] and requested["answers_for"] == "agent", requested


async def test_by_requester_without_url_elicitation_or_person(bench):
    """A client that cannot be sent the link still waits, and the person decides (here
    with the approve tool from her own client); the agent declining the link withdraws
    its own request; a client nobody answers for is refused at once, naming the key."""
    from mcp import types

    async with connect(bench.url, AGENT, "legacy") as plain, connect(bench.url, ALICE, "legacy") as alice:
        r = await plain.call_tool("execute_command", {"command": "mine", "args": ["ef"], "background": True})
        assert r.is_error is not True, r
        assert "by alice (who answers for agent" in r.content[0].text, r.content[0].text
        ok = await alice.call_tool("approve", {"approval": r.structured_content["approval"]})
        assert ok.structured_content["request"]["decision"]["via"] == "mcp", ok
        end = await plain.call_tool("wait_job", {"job": r.structured_content["job"], "timeout_secs": 10})
        assert end.structured_content["state"] == "succeeded", end.structured_content
    assert ran(bench) == "ran ef\n"

    async def decline(context, params):
        return types.ElicitResult(action="decline")

    async with connect(bench.url, AGENT, "legacy", elicitation_callback=decline) as agent:
        no = await agent.call_tool("execute_command", {"command": "mine", "args": ["ef"]})
        assert no.is_error is True
        assert no.structured_content["refusal"]["reason"] == "approval_ended", no
        assert "declined in the requesting client" in no.structured_content["refusal"]["message"]
    async with connect(bench.url, MALLORY, "legacy") as mallory:
        r = await mallory.call_tool("execute_command", {"command": "mine", "args": ["ef"]})
        assert r.is_error is True
        refusal = r.structured_content["refusal"]
        assert refusal["reason"] == "approval_unavailable", refusal
        assert "person:" in refusal["message"] and "mallory" in refusal["message"], refusal
    assert ran(bench) == "ran ef\n"


async def test_approvers_are_told_and_metrics_count(bench):
    """An approver subscribed to gatecmd://approvals is notified when a request comes and
    when it is decided; /metrics shows it pending, then counted by outcome."""
    import urllib.request
    import warnings

    from mcp import types

    updates: list[str] = []
    moved = anyio.Event()

    async def on_message(message) -> None:
        nonlocal moved
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))
            moved.set()

    def metric(name: str) -> float:
        req = urllib.request.Request(bench.base + "/metrics", headers={"Authorization": f"Bearer {OPS}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            if line.split(" ")[0] == name:
                return float(line.split(" ")[-1])
        raise AssertionError(f"{name} not in the scrape:\n{text}")

    async def next_update() -> None:
        nonlocal moved
        with anyio.fail_after(5):
            while "gatecmd://approvals" not in updates:
                moved = anyio.Event()
                await moved.wait()
        updates.clear()

    async with (
        connect(bench.url, OPS, "legacy", message_handler=on_message) as ops,
        connect(bench.url, AGENT, "legacy") as agent,
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resources/subscribe is the 2025-11-25 way, on purpose
            await ops.subscribe_resource("gatecmd://approvals")
        denied_before = metric('gatecmd_approval_decisions_total{outcome="denied"}')
        r = await agent.call_tool("execute_command", {"command": "tool", "args": ["ef"], "background": True})
        await next_update()
        assert metric("gatecmd_approvals_pending") == 1
        await ops.call_tool("deny", {"approval": r.structured_content["approval"]})
        await next_update()
        await agent.call_tool("wait_job", {"job": r.structured_content["job"], "timeout_secs": 10})
        assert metric("gatecmd_approvals_pending") == 0
        assert metric('gatecmd_approval_decisions_total{outcome="denied"}') == denied_before + 1


async def test_boot_board_waits_for_its_approver(board_bench):
    bench = board_bench
    answer: dict = {}
    async with connect(bench.url, AGENT, "legacy") as agent, connect(bench.url, OPS, "legacy") as ops:
        lease = (await agent.call_tool("lock_board", {"board": "rock5b-1"})).structured_content["lease_id"]

        async def boot() -> None:
            answer["r"] = await agent.call_tool(
                "boot_board", {"board": "rock5b-1", "to": "off", "lease": lease, "note": "power it down"}
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(boot)
            [req] = await pending(ops)
            assert req["what"] == "boot_board rock5b-1 to off" and req["holder"] == "agent", req
            assert req["note"] == "power it down"
            # Nothing was done to the board yet; the board's key is not held while it waits.
            assert ran(bench) == ""
            locks = (await agent.call_tool("list_locks", {})).structured_content
            assert not any(k.get("running") for k in locks.get("locks", [])), locks
            await ops.call_tool("approve", {"approval": req["id"]})
        r = answer["r"]
        assert r.is_error is not True, r
        assert r.structured_content["state"] == "off"
    assert ran(bench) == "ran off 3\n"


FLASH_RULES = """
approvals:
  - tool: flash_board
    approve: {by: [ops], timeout_secs: 120}
"""


@pytest.fixture
def flash_bench(tmp_path):
    (tmp_path / "files").mkdir()
    tool = tmp_path / "tool.sh"
    tool.write_text(f'#!/bin/sh\necho "ran $*" >> {tmp_path}/ran.log\n')
    tool.chmod(stat.S_IRWXU)
    # The board's MaskROM action is the relay stand-in; nothing will enumerate at 1-2, so an
    # approved flash stops at await_rockusb after a second.
    board = BOARD + '      maskrom: {command: relay, args: "on 3"}\n'
    flash = "flash:\n  enabled: true\n  boards: [rock5b-1]\n  device_wait_secs: 1\n"
    text = config(tmp_path, rules=FLASH_RULES) + board + flash
    text = text.replace("\n  - name: quick", RELAY.format(directory=tmp_path) + "  - name: quick")
    s = Server(tmp_path, config=text)
    yield s
    s.stop()


async def test_flash_board_waits_for_its_approver_even_in_the_background(flash_bench):
    """flash_board under a rule waits in its call, before its job exists, also with
    `background: true`: the approver sees the image's SHA-256, the agent hears who it waits
    for, and the job exists only once approved."""
    bench = flash_bench
    image = bench.dir / "files" / "disk.img"
    image.write_bytes(b"rootfs for rock5b-1\n" * 4096)
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    progress: list[str] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    answer: dict = {}
    async with connect(bench.url, AGENT, "legacy") as agent, connect(bench.url, OPS, "legacy") as ops:
        lease = (await agent.call_tool("lock_board", {"board": "rock5b-1"})).structured_content["lease_id"]

        async def flash() -> None:
            answer["r"] = await agent.call_tool(
                "flash_board",
                {"board": "rock5b-1", "image": "disk.img", "lease": lease, "background": True, "note": "new rootfs"},
                progress_callback=on_progress,
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(flash)
            [req] = await pending(ops)
            assert req["tool"] == "flash_board" and req["holder"] == "agent", req
            assert req["what"] == f"flash_board rock5b-1 {image}", req
            assert req["files"] == [{"path": str(image), "sha256": digest, "size": image.stat().st_size}], req
            assert req["note"] == "new rootfs"
            # No job and nothing done to the board while it waits.
            assert await agent_jobs(bench) == []
            assert ran(bench) == ""
            await anyio.sleep(5.5)
            assert "r" not in answer, "the background call answered before the approval"
            ok = await ops.call_tool("approve", {"approval": req["id"]})
            assert ok.is_error is not True, ok
        r = answer["r"]
        assert r.is_error is not True, r
        job = r.structured_content["job"]
        assert r.structured_content["state"] == "running"
        assert any(f"awaiting approval {req['id']} by ops" in m for m in progress), progress
        end = await agent.call_tool("wait_job", {"job": job, "timeout_secs": 30})
        result = end.structured_content["result"]
        assert end.structured_content["state"] == "failed", end.structured_content
        assert result["failure"]["step"] == "await_rockusb", result
        # The approved flash ran: the board's MaskROM action switched the relay.
        assert ran(bench) == "ran on 3\n"


BOARD_RULES = """
approvals:
  - board: b1
    approve: {by: [ops], timeout_secs: 120}
"""


class FakeUboot:
    """The board end of a pty console: records every byte typed into it, and answers like
    U-Boot at its `=> ` prompt (a newline gets the prompt; `CMD; echo 'a''b':$?` gets a
    line of output, the marker with status 0, and the prompt)."""

    def __init__(self) -> None:
        import threading

        self.master, self._slave = os.openpty()
        self.tty = os.ttyname(self._slave)
        self.typed = b""
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import select

        line = b""
        while not self._stop:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if not ready:
                continue
            try:
                got = os.read(self.master, 4096)
            except OSError:
                return
            with self._lock:
                self.typed += got
            line += got
            while b"\n" in line:
                one, line = line.split(b"\n", 1)
                text = one.decode(errors="replace").strip("\r")
                if "; echo '" in text:
                    marker = text.split("; echo ", 1)[1].replace("'", "").replace("$?", "0")
                    os.write(self.master, b"\r\nfrom u-boot\r\n" + marker.encode() + b"\r\n=> ")
                else:
                    os.write(self.master, b"\r\n=> ")

    def seen(self) -> bytes:
        with self._lock:
            return self.typed

    def close(self) -> None:
        self._stop = True
        time.sleep(0.2)
        os.close(self.master)
        os.close(self._slave)


@pytest.fixture
def console_bench(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "tool.sh").write_text("#!/bin/sh\n")
    (tmp_path / "tool.sh").chmod(stat.S_IRWXU)
    board = FakeUboot()
    text = config(tmp_path, rules=BOARD_RULES) + f"""
boards:
  - name: b1
    usb: "1-2"
    console: {{path: {board.tty}, baud: 115200}}
"""
    s = Server(tmp_path, config=text)
    yield s, board
    s.stop()
    board.close()


async def test_a_board_rule_holds_the_console_tools_until_the_yes(console_bench):
    """Issue 37, finding 6: a rule on board b1 alone ("everything that may change b1") held
    power_board but not console_write, which typed `dd if=/dev/zero of=/dev/mmcblk0` into
    b1 in 35 ms. Now console_write, board_run and uboot_run wait for the approver, nothing
    typed into the board before the yes; the approver sees the board and exactly what
    will be typed."""
    bench, board = console_bench
    dd = "dd if=/dev/zero of=/dev/mmcblk0\n"
    answers: dict = {}
    async with connect(bench.url, AGENT, "legacy") as agent, connect(bench.url, OPS, "legacy") as ops:
        lease = (await agent.call_tool("lock_board", {"board": "b1"})).structured_content["lease_id"]
        await anyio.sleep(0.5)  # the console is open; nothing was typed yet
        assert board.seen() == b""

        async def call(name: str, args: dict) -> None:
            answers[name] = await agent.call_tool(name, args)

        async with anyio.create_task_group() as tg:
            # console_write: held, then approved: the exact bytes arrive after the yes.
            tg.start_soon(call, "console_write", {"board": "b1", "text": dd})
            [req] = await pending(ops)
            assert req["tool"] == "console_write" and req["board"] == "b1" and req["holder"] == "agent", req
            assert json.dumps(dd) in req["what"] and hashlib.sha256(dd.encode()).hexdigest() in req["what"], req
            await anyio.sleep(1.0)
            assert board.seen() == b"" and "console_write" not in answers
            await ops.call_tool("approve", {"approval": req["id"]})
        r = answers["console_write"]
        assert r.is_error is not True, r
        with anyio.fail_after(5):
            while dd.encode() not in board.seen():
                await anyio.sleep(0.05)
        typed_before = board.seen()

        async with anyio.create_task_group() as tg:
            # board_run: held, then denied: nothing more typed.
            tg.start_soon(call, "board_run", {"board": "b1", "command": "rm -rf /data", "lease": lease})
            [req] = await pending(ops)
            assert req["tool"] == "board_run" and req["what"] == "board_run b1: rm -rf /data", req
            await anyio.sleep(1.0)
            assert board.seen() == typed_before
            await ops.call_tool("deny", {"approval": req["id"], "note": "not on b1"})
        r = answers["board_run"]
        assert r.is_error is True and r.structured_content["refusal"]["reason"] == "approval_denied", r
        assert board.seen() == typed_before

        async with anyio.create_task_group() as tg:
            # uboot_run: held (the board's key is free meanwhile), then approved: it runs.
            tg.start_soon(call, "uboot_run", {"board": "b1", "command": "mmc erase 0 100", "lease": lease})
            [req] = await pending(ops)
            assert req["what"] == "uboot_run b1: mmc erase 0 100", req
            locks = (await agent.call_tool("list_locks", {})).structured_content
            assert not any(k.get("running") for k in locks.get("locks", [])), locks
            await anyio.sleep(1.0)
            assert board.seen() == typed_before
            await ops.call_tool("approve", {"approval": req["id"]})
        r = answers["uboot_run"]
        assert r.is_error is not True, r
        assert r.structured_content["exit_code"] == 0, r.structured_content
        assert b"mmc erase 0 100" in board.seen()[len(typed_before) :]
    log = settled_text(bench.dir / "state" / "audit.log")
    decided = [json.loads(line) for line in log.splitlines() if '"approval_decided"' in line]
    assert [(d["what"].split(":")[0], d["outcome"]) for d in decided] == [
        ("console_write b1", "approved"),
        ("board_run b1", "denied"),
        ("uboot_run b1", "approved"),
    ], decided


async def test_the_link_names_gatecmds_own_port_whatever_host_the_client_sends(bench):
    """Issue 46, finding 3: the approval link was built from the request's `Host` header,
    whose check looks at the name only: a session opened with `Host: 127.0.0.1:6666` was
    told to send the person to port 6666, which any local process or VM forwarding can
    serve. Now the link names the host and the port of gatecmd's own listener."""
    from contextlib import asynccontextmanager

    from mcp import types
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    asked: list = []

    async def agent_process(context, params):
        asked.append(params)
        return types.ElicitResult(action="decline")

    @asynccontextmanager
    async def hostile():
        headers = {"Authorization": f"Bearer {AGENT}", "Host": "127.0.0.1:6666"}
        async with create_mcp_http_client(headers=headers) as http:
            async with Client(
                streamable_http_client(bench.url, http_client=http), mode="legacy", elicitation_callback=agent_process
            ) as client:
                yield client

    async with hostile() as agent:
        r = await agent.call_tool("execute_command", {"command": "mine", "args": ["ef"]})
    assert asked, "no elicitation reached the client"
    url = asked[0].url
    port = bench.base.rsplit(":", 1)[1]
    assert url.startswith(f"http://127.0.0.1:{port}/approval/apr-"), url
    assert ":6666" not in url, url
    # Declining the link withdrew the request: nothing ran.
    assert r.is_error, r
    assert ran(bench) == ""


async def test_the_approver_sees_the_attack_text_as_it_acts(bench):
    """Issue 46, finding 2: bidi controls in what a person approves reordered it (a `dd`
    displayed after a `#`). Every view of a request — gatecmd://approvals, the bench page's
    state — shows them written out (`<U+202E>`), never as the characters."""
    attack = "echo ok # \u202e\u2066dd if=/dev/zero of=/dev/mmcblk0\u2069\u202c"
    async with connect(bench.url, AGENT, "legacy") as agent, connect(bench.url, OPS, "legacy") as ops:
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                await agent.call_tool("execute_command", {"command": "tool", "args": ["ef"], "note": attack})

            tg.start_soon(ask)
            [req] = await pending(ops)
            shown = req["note"]
            assert not any(c in shown for c in "\u202e\u2066\u2069\u202c"), ascii(shown)
            assert shown == "echo ok # <U+202E><U+2066>dd if=/dev/zero of=/dev/mmcblk0<U+2069><U+202C>", shown
            http, _ = await page_session(bench.base, OPS)
            try:
                snap = (await http.get("/state")).json()
                [row] = [a for a in snap["approvals"] if a["id"] == req["id"]]
                assert "\u202e" not in json.dumps(row, ensure_ascii=False) and "<U+202E>" in row["note"], row
            finally:
                await http.aclose()
            await ops.call_tool("deny", {"approval": req["id"], "note": "no"})
    assert ran(bench) == ""
