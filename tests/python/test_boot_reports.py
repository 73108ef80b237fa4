"""Boot reports (issue 40) read with the official MCP Python SDK: a board whose console is a
pseudo-terminal (this test prints scripted boots made of RK3588 log lines,
tests/fixtures/boots) and whose power switch is a script; power_board on, then the boot
printed, then boot_report and the boots resources as an agent reads them."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import anyio
import pytest

from conftest import TOKEN_A, Server, connect

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "boots"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def crlf(s: str) -> str:
    return s.replace("\n", "\r\n")


@pytest.fixture
def board_bench(tmp_path):
    master, slave = os.openpty()
    power = tmp_path / "power.sh"
    power.write_text(f"#!/bin/sh\necho \"$1\" >> {tmp_path}/power.log\n")
    power.chmod(stat.S_IRWXU)
    text = f"""
clients:
  - name: vm-a
    token: {TOKEN_A}
commands:
  - name: power
    binary: {power}
    allowed_args:
      - pattern: "on"
      - pattern: "off"
boards:
  - name: b1
    usb: "1-2"
    console: {{path: {os.ttyname(slave)}, baud: 1500000}}
    power: {{on: {{command: power, args: "on"}}, off: {{command: power, args: "off"}}}}
"""
    s = Server(tmp_path, config=text)
    yield s, master
    s.stop()
    os.close(master)
    os.close(slave)


async def call(c, tool: str, **args):
    r = await c.call_tool(tool, args)
    return r, r.structured_content or {}


async def report_when(c, done, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        _, v = await call(c, "boot_report", board="b1")
        if done(v) or time.monotonic() > deadline:
            return v
        await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_an_agent_reads_its_boots_with_the_python_sdk(board_bench):
    s, master = board_bench
    async with connect(s.url, TOKEN_A, "legacy") as c:
        _, lease = await call(c, "lock_board", board="b1")
        lease_id = lease["lease_id"]
        deadline = time.monotonic() + 10
        while True:
            _, boards = await call(c, "list_boards")
            if boards["boards"][0]["console"]["state"] == "open":
                break
            assert time.monotonic() < deadline, boards
            await anyio.sleep(0.05)

        # A boot that reaches login.
        r, _ = await call(c, "power_board", board="b1", action="on", lease=lease_id)
        assert r.is_error is not True, r
        printed = crlf(fixture("firmware.log") + fixture("kernel.log") + fixture("userspace.log") + fixture("login.log"))
        os.write(master, printed.encode())
        v = await report_when(c, lambda v: v.get("outcome") == "login" and v.get("transcript") == printed)
        assert [x["stage"] for x in v["stages"]] == ["spl", "atf", "optee", "uboot", "kernel", "init", "login"], v
        assert v["faults"] == []
        assert v["outcome"] == "login"
        assert v["transcript"] == printed
        assert v["trigger"] == {"action": "power_board", "by": "vm-a", "detail": "on"}
        assert v["boot"] == 1

        # A boot that panics.
        r, _ = await call(c, "power_board", board="b1", action="on", lease=lease_id)
        assert r.is_error is not True, r
        os.write(master, crlf(fixture("firmware.log") + fixture("kernel.log") + fixture("panic.log")).encode())
        v = await report_when(c, lambda v: v.get("outcome") == "panic")
        assert v["boot"] == 2 and v["outcome"] == "panic", v
        assert [f["kind"] for f in v["faults"]] == ["kernel_panic"]
        assert "Unable to mount root fs" in v["faults"][0]["line"]
        assert v["faults"][0]["at_ms"] >= v["stages"][-1]["at_ms"]

        # The list, newest first, and one boot by its number.
        listed = await c.read_resource("gatecmd://boards/b1/boots")
        boots = json.loads(listed.contents[0].text)["boots"]
        assert [b["boot"] for b in boots] == [2, 1]
        assert [b["outcome"] for b in boots] == ["panic", "login"]
        one = await c.read_resource("gatecmd://boards/b1/boots/1")
        assert json.loads(one.contents[0].text)["transcript"] == printed

        # A boot no longer there, by number: not_found, naming what is kept.
        _, v = await call(c, "boot_report", board="b1", boot=7)
        assert v["refusal"]["reason"] == "not_found", v
        assert "1 to 2" in v["refusal"]["message"]
