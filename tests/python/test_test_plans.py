"""Test plans (issue 50) with the official MCP Python SDK: a board whose console is a real
interactive bash on a pseudo-terminal of its own (Debian's bash, coloured prompt, bracketed
paste), joined to the pty the server opens by a relay; this test also writes console lines
onto that wire (a kernel panic) while a step runs. run_test_plan's answer is read as an
agent reads it, and its JUnit report is parsed back with Python's XML parser, as a CI
system would."""

from __future__ import annotations

import fcntl
import os
import subprocess
import termios
import threading
import time
import tty
import xml.etree.ElementTree as ET

import json

import anyio
import pytest

from conftest import TOKEN_A, TOKEN_B, Server, connect, settled_text

PS1 = r"\[\e]0;\u@\h: \w\a\]\[\033[01;32m\]\u@\h\[\033[00m\]:\[\033[01;34m\]\w\[\033[00m\]\$ "


def relay(src: int, dst: int) -> None:
    def run():
        while True:
            try:
                data = os.read(src, 4096)
                if not data:
                    return
                os.write(dst, data)
            except OSError:
                return

    threading.Thread(target=run, daemon=True).start()


@pytest.fixture
def bash_board(tmp_path):
    yield from board_with(tmp_path, "")


@pytest.fixture
def gated_board(tmp_path):
    yield from board_with(tmp_path, "approvals:\n  - tool: board_run\n    approve: {by: [vm-b], timeout_secs: 60}\n")


def board_with(tmp_path, extra: str):
    board_m, board_s = os.openpty()
    wire_m, wire_s = os.openpty()
    tty.setraw(wire_s)  # a UART does not echo

    def ctty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    bash = subprocess.Popen(
        ["/bin/bash", "--norc", "--noprofile", "-i"],
        stdin=board_s,
        stdout=board_s,
        stderr=board_s,
        env={"PATH": "/usr/bin:/bin", "TERM": "xterm-256color", "HOME": str(tmp_path), "PS1": PS1, "INPUTRC": "/dev/null"},
        cwd=tmp_path,
        start_new_session=True,
        preexec_fn=ctty,
    )
    relay(board_m, wire_m)
    relay(wire_m, board_m)
    text = f"""
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
file_roots: [{tmp_path}]
boards:
  - name: b1
    usb: "1-2"
    console: {{path: {os.ttyname(wire_s)}, baud: 115200}}
{extra}"""
    s = Server(tmp_path, config=text)
    yield s, wire_m
    s.stop()
    bash.kill()
    bash.wait()
    for fd in (board_m, board_s, wire_m, wire_s):
        os.close(fd)


async def call(c, tool: str, **args):
    r = await c.call_tool(tool, args)
    return r, r.structured_content or {}


async def leased(c) -> str:
    _, lease = await call(c, "lock_board", board="b1")
    deadline = time.monotonic() + 10
    while True:
        _, boards = await call(c, "list_boards")
        if boards["boards"][0]["console"]["state"] == "open":
            return lease["lease_id"]
        assert time.monotonic() < deadline, boards
        await anyio.sleep(0.05)


def junit(text: str) -> ET.Element:
    root = ET.fromstring(text.encode())
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    return suites[0]


@pytest.mark.anyio
async def test_an_agent_runs_plans_and_a_ci_system_reads_their_junit(bash_board):
    s, wire = bash_board
    async with connect(s.url, TOKEN_A, "legacy") as c:
        lease = await leased(c)

        # A passing plan, given as YAML text.
        plan = (
            "name: smoke <&>\n"
            "steps:\n"
            "  - {name: hello, run: echo hello, expect: '^hello$'}\n"
            "  - {name: kernel, run: uname -s, expect: Linux}\n"
        )
        r, v = await call(c, "run_test_plan", board="b1", lease=lease, plan=plan)
        assert r.is_error is not True, r
        assert v["verdict"] == "pass", v
        assert [x["verdict"] for x in v["steps"]] == ["pass", "pass"]
        assert v["steps"][0]["output"] == "hello\n"
        suite = junit(v["junit"])
        assert suite.get("name") == "smoke <&>"
        assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("2", "0", "0", "0")
        assert [t.get("name") for t in suite.findall("testcase")] == ["hello", "kernel"]
        assert suite.find("testcase/system-out").text == "hello\n"

        # A failing expect (continue), a failing exit code, a skipped step, from a file.
        (s.dir / "plan.json").write_text(
            '{"name": "checks", "steps": ['
            '{"name": "expect", "run": "echo actual", "expect": "wanted", "continue": true},'
            '{"name": "exit", "run": "false"},'
            '{"name": "skipped", "run": "true"}]}'
        )
        r, v = await call(c, "run_test_plan", board="b1", lease=lease, plan_file=str(s.dir / "plan.json"))
        assert r.is_error is True
        assert v["verdict"] == "fail", v
        assert [(x["verdict"], x["exit_code"]) for x in v["steps"]] == [("fail", 0), ("fail", 1), ("skipped", None)]
        suite = junit(v["junit"])
        assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("3", "2", "0", "1")
        cases = {t.get("name"): t for t in suite.findall("testcase")}
        assert "wanted" in cases["expect"].find("failure").get("message")
        assert "exit code 1" in cases["exit"].find("failure").get("message")
        assert cases["skipped"].find("skipped") is not None

        # A kernel panic printed while a step runs fails the plan with its line; a step that
        # times out is an error.
        def panic_later():
            time.sleep(1.5)
            os.write(wire, b"\r\n[   42.000000] Kernel panic - not syncing: Attempted to kill init!\r\n")

        threading.Thread(target=panic_later, daemon=True).start()
        plan = {"name": "watch", "steps": [{"name": "sleep", "run": "sleep 20", "timeout_secs": 30}]}
        r, v = await call(c, "run_test_plan", board="b1", lease=lease, plan=plan)
        assert v["verdict"] == "fail", v
        assert v["faults"][0]["kind"] == "kernel_panic"
        assert "Attempted to kill init" in v["faults"][0]["line"]
        suite = junit(v["junit"])
        assert suite.get("failures") == "2", ET.tostring(suite)  # the step and the console case
        console = [t for t in suite.findall("testcase") if t.get("name") == "console"]
        assert "kernel_panic" in console[0].find("failure").text

        plan = {"name": "slow", "steps": [{"name": "hang", "run": "sleep 30", "timeout_secs": 1}, {"name": "after", "run": "true"}]}
        r, v = await call(c, "run_test_plan", board="b1", lease=lease, plan=plan)
        assert v["verdict"] == "error", v
        assert [x["verdict"] for x in v["steps"]] == ["error", "skipped"]
        suite = junit(v["junit"])
        assert (suite.get("errors"), suite.get("skipped")) == ("1", "1")

        # Another client is refused; nothing runs.
        async with connect(s.url, TOKEN_B, "legacy") as b:
            r, v = await call(b, "run_test_plan", board="b1", plan={"name": "x", "steps": [{"name": "x", "run": "true"}]})
            assert r.is_error is True
            assert v["refusal"]["reason"] in ("lease_invalid", "device_busy"), v


async def pending(client, timeout: float = 10.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        r = await client.read_resource("gatecmd://approvals")
        listed = json.loads(r.contents[0].text)["pending"]
        if listed or time.monotonic() > deadline:
            return listed
        await anyio.sleep(0.1)


@pytest.mark.anyio
async def test_a_board_run_rule_holds_a_plan_until_the_yes(gated_board):
    """A rule on board_run holds run_test_plan too (a plan is a string of board_runs): the
    approver sees every command line; a no runs nothing, a yes runs the plan."""
    s, _ = gated_board
    plan = {"name": "gated", "steps": [{"name": "a", "run": "echo first"}, {"name": "b", "run": "echo second"}]}
    answers: dict = {}
    async with connect(s.url, TOKEN_A, "legacy") as agent, connect(s.url, TOKEN_B, "legacy") as ops:
        lease = await leased(agent)

        async def run(key: str) -> None:
            answers[key] = await agent.call_tool("run_test_plan", {"board": "b1", "lease": lease, "plan": plan})

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "denied")
            [req] = await pending(ops)
            assert req["tool"] == "run_test_plan" and req["board"] == "b1", req
            assert "echo first ; echo second" in req["what"], req
            await ops.call_tool("deny", {"approval": req["id"], "note": "not now"})
        r = answers["denied"]
        assert r.is_error is True and r.structured_content["refusal"]["reason"] == "approval_denied", r

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "approved")
            [req] = await pending(ops)
            await ops.call_tool("approve", {"approval": req["id"]})
        v = answers["approved"].structured_content
        assert v["verdict"] == "pass", v
        assert [x["output"] for x in v["steps"]] == ["first\n", "second\n"]
    log = settled_text(s.dir / "state" / "audit.log")
    started = [json.loads(line) for line in log.splitlines() if '"test_plan_started"' in line]
    assert len(started) == 1, started  # the denied plan never started
