"""Issue 24 on a real kernel: the virtual board of docs/VBOARD.md (gatecmd-vboard in a
usbvm guest, tests/python/vbench.py) driven through gatecmd by the official MCP Python SDK:
boot_board {to: maskrom} → db and wl with Debian's rkdeveloptool → boot_board {to: shell}
→ board_run {command: "uname -a"} over the board's real CDC-ACM console, logging in at
its `login:` prompt, then the same checks as a `run_test_plan` (issue 50). Its own VM (the bench of test_vboard_usbvm.py is that file's).
"""

from __future__ import annotations

import os

import mcp_types as types
import pytest

import vbench
from conftest import connect
from vbench import TOKEN_A, TOKEN_B, sha256

pytestmark = pytest.mark.anyio

IMAGE = vbench.bootable_image(256 * 1024, b"board_run")
U1, C1 = vbench.PORTS["vb1"]


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def with_shell(original):
    """vbench's configuration plus what board_run and boot_board need on vb1: the login
    (root, no password, as the vboard asks) and power.maskrom (MaskROM held, reset)."""

    def config(*args, **kwargs) -> str:
        t = original(*args, **kwargs)
        console = f'console: {{port: "{C1}", baud: 1500000}}'
        off = "      off: {command: vboard-power, args: [power, vb1, off]}\n"
        assert console in t and off in t, t
        t = t.replace(console, f'console: {{port: "{C1}", baud: 1500000, login: {{user: root}}}}', 1)
        t = t.replace(off, off + "      maskrom: {command: vboard-power, args: [power, vb1, on, --maskrom]}\n", 1)
        return t

    return config


@pytest.fixture(scope="module")
def bench():
    try:
        gatecmd = vbench.binary("GATECMD_BIN")
        vboard = vbench.binary("GATECMD_VBOARD_BIN")
        vbench.check_prerequisites()
    except vbench.Unavailable as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {e}")
        pytest.skip(str(e))
    original = vbench.config
    vbench.config = with_shell(original)
    try:
        # vb1's power.on boots from flash; MaskROM is its own action.
        b = vbench.Bench(gatecmd, vboard, files={"shell.img": IMAGE}, flash_size="4M", power_on_vb1=["power", "vb1", "on"])
    finally:
        vbench.config = original
    yield b
    b.stop()
    if os.environ.get("KEEP_VBENCH"):
        print(f"vbench work dir kept: {b.work}")
    else:
        b.cleanup()


async def test_maskrom_flash_boot_and_uname_over_the_console(bench):
    try:
        await scenario(bench)
    except BaseException:
        print("guest log (tail):\n" + bench.log()[-8000:])
        raise


async def scenario(bench) -> None:
    async with connect(bench.url, TOKEN_A, "legacy") as client:

        async def call(tool: str, args: dict, ok: bool = True) -> dict:
            r = await client.call_tool(tool, args)
            if ok:
                assert r.is_error is not True, f"{tool} {args}: {text(r)}"
            return r.structured_content

        lease = (await call("lock_board", {"board": "vb1", "ttl_secs": 600}))["lease_id"]
        common = {"board": "vb1", "lease": lease}

        b = await call("boot_board", {**common, "to": "maskrom", "timeout_secs": 60})
        assert b["state"] == "maskrom" and b["steps"] == ["maskrom", "await_maskrom"], b
        devices = (await call("list_devices", {"id": U1}))["devices"]
        assert devices and devices[0]["mode"] == "maskrom", devices

        async def rk(*args: str) -> dict:
            return await call("execute_command", {**common, "command": "rkdeveloptool", "args": list(args)})

        db = await rk("db", "loader.bin")
        assert db["exit_code"] == 0 and "Downloading bootloader succeeded." in db["stdout"], db
        w = await call("wait_for_device", {"match": {"id": U1, "mode": "loader"}, "state": "attached", "timeout_secs": 30})
        assert w["satisfied"] is True, w
        wl = await rk("wl", "0x40", "shell.img")
        assert wl["exit_code"] == 0, wl

        # A loader runs at the port: to: shell power-cycles and waits for the login prompt.
        r = await client.call_tool("boot_board", {**common, "to": "shell", "timeout_secs": 60})
        assert r.is_error is not True, text(r)
        b = r.structured_content
        assert b["state"] == "shell" and b["steps"] == ["power_off", "power_on", "await_shell"], b
        boot = await call("console_read", {"board": "vb1", "cursor": b["console_cursor"], "max_bytes": 65536})
        assert f"sha256={sha256(IMAGE)}" in boot["text"], boot["text"]

        r = await call("board_run", {**common, "command": "uname -a"})
        assert r["exit_code"] == 0 and r["logged_in"] is True, r
        assert r["output"] == "Linux vb1 6.1.0-vboard #1 SMP PREEMPT Tue Dec  1 00:00:00 UTC 2026 aarch64 GNU/Linux\n", r
        r = await call("board_run", {**common, "command": "cat /etc/hostname"})
        assert (r["output"], r["exit_code"], r["logged_in"]) == ("vb1\n", 0, False), r
        r = await call("board_run", {**common, "command": "cat /nope"}, ok=False)
        assert (r["exit_code"], r["output"]) == (1, "cat: /nope: No such file or directory\n"), r
        r = await call("board_run", {**common, "command": "nosuch"}, ok=False)
        assert r["exit_code"] == 127, r

        # Issue 50: the same checks as a test plan, to a verdict and a JUnit report.
        plan = {
            "name": "vb1 smoke",
            "steps": [
                {"name": "kernel", "run": "uname -a", "expect": "^Linux vb1 6\\.1\\.0-vboard "},
                {"name": "hostname", "run": "cat /etc/hostname", "expect": "^vb1$"},
                {"name": "missing file", "run": "cat /nope", "expect_exit": 1, "expect": "No such file"},
            ],
        }
        p = await call("run_test_plan", {**common, "plan": plan})
        assert p["verdict"] == "pass" and p["state"] == "succeeded", p
        assert [s["verdict"] for s in p["steps"]] == ["pass", "pass", "pass"], p
        assert 'tests="3" failures="0" errors="0" skipped="0"' in p["junit"], p["junit"]

        # Another client is kept off the console while vm-a holds the board.
        async with connect(bench.url, TOKEN_B, "legacy") as other:
            r = await other.call_tool("board_run", {"board": "vb1", "command": "uname -a"})
            assert r.is_error is True and r.structured_content["refusal"]["reason"] == "device_busy", text(r)

        b = await call("boot_board", {**common, "to": "off"})
        assert b["state"] == "off", b
        await call("unlock_device", {"lease": lease})
