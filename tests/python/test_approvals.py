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

from conftest import Server, connect

pytestmark = pytest.mark.anyio

AGENT = "approvals-agent-token-0123456789"
OPS = "approvals-ops-token-0123456789ab"
MALLORY = "approvals-mallory-token-012345"

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
"""


def config(directory: Path, rules: str = RULES) -> str:
    return f"""
clients:
  - name: agent
    token: {AGENT}
  - name: ops
    token: {OPS}
  - name: mallory
    token: {MALLORY}
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
    log = (bench.dir / "state" / "audit.log").read_text()
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
