"""Issue 24 on a real kernel: the virtual board of docs/VBOARD.md (gatecmd-vboard in a
usbvm guest, tests/python/vbench.py) driven through gatecmd by the official MCP Python SDK:
boot_board {to: maskrom} → db and wl with Debian's rkdeveloptool → boot_board {to: shell}
→ board_run {command: "uname -a"} over the board's real CDC-ACM console, logging in at
its `login:` prompt, then the same checks as a `run_test_plan` (issue 50). Its own VM (the bench of test_vboard_usbvm.py is that file's).

Then, in the same guest (issue 50, "In the VM"): flash_board → run_test_plan on vb1, and
`gatecmd evidence JOB` of both jobs made where the state directory is (in the guest),
verified there and on the host with only the bundle and the public key; one byte changed
and the host's verify refuses the bundle.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import mcp_types as types
import pytest

import vbench
from conftest import connect
from vbench import TOKEN_A, TOKEN_B, sha256

pytestmark = pytest.mark.anyio

IMAGE = vbench.bootable_image(256 * 1024, b"board_run")
# flash_board writes a whole-disk image from LBA 0: the bootable part at LBA 0x40 (32 KiB).
DISK = bytes(32 * 1024) + vbench.bootable_image(256 * 1024, b"flash_board then a plan")
FLASH_CONFIG = f"""  enabled: true
  loaders: [{vbench.IMAGES}]
  loaders_writable: true  # the test's two agents are trusted with every board
  device_wait_secs: 8
"""
# gatecmd in the guest, its state directory (vbench sets STATE_DIRECTORY) and its public key.
GUEST_GATECMD = "/usr/local/bin/gatecmd"
GUEST_STATE = "/run/gatecmd"
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
        maskrom = "      maskrom: {command: vboard-power, args: [power, vb1, on, --maskrom]}\n"
        assert console in t and off in t, t
        t = t.replace(console, f'console: {{port: "{C1}", baud: 1500000, login: {{user: root}}}}', 1)
        # With a `flash:` section vbench's config names power.maskrom itself.
        if maskrom not in t:
            t = t.replace(off, off + maskrom, 1)
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
        b = vbench.Bench(
            gatecmd,
            vboard,
            files={"shell.img": IMAGE, "disk.img": DISK},
            flash_size="4M",
            power_on_vb1=["power", "vb1", "on"],
            flash=FLASH_CONFIG,
        )
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


async def test_flash_then_plan_and_the_evidence_of_both_verifies(bench):
    try:
        await evidence_scenario(bench)
    except BaseException:
        print("guest log (tail):\n" + bench.log()[-8000:])
        raise


def guest_ok(bench, command: str) -> list[str]:
    rc, lines = bench.guest(command, timeout=120)
    assert rc == 0, f"{command}: rc {rc}: {lines}"
    return lines


def host_verify(bundle: Path, key: Path) -> subprocess.CompletedProcess:
    """`gatecmd evidence verify` on the host: another machine with the bundle and the key."""
    gatecmd = vbench.binary("GATECMD_BIN")
    return subprocess.run(
        [str(gatecmd), "evidence", "verify", str(bundle), "--key", str(key)],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def evidence_scenario(bench) -> None:
    async with connect(bench.url, TOKEN_A, "legacy") as client:

        async def call(tool: str, args: dict) -> dict:
            r = await client.call_tool(tool, args)
            assert r.is_error is not True, f"{tool} {args}: {text(r)}"
            return r.structured_content

        lease = (await call("lock_board", {"board": "vb1", "ttl_secs": 600}))["lease_id"]
        common = {"board": "vb1", "lease": lease}
        await call("power_board", {**common, "action": "off"})
        f = await call(
            "flash_board",
            {**common, "image": "disk.img", "loader": "loader.bin", "wait_for": "login:", "timeout_secs": 300},
        )
        assert f["state"] == "succeeded" and f["verified"] is True, f
        assert f["flashed"]["image"]["sha256"] == sha256(DISK), f["flashed"]["image"]
        plan = {
            "name": "after the flash",
            "steps": [
                {"name": "kernel", "run": "uname -a", "expect": "^Linux vb1 "},
                {"name": "hostname", "run": "cat /etc/hostname", "expect": "^vb1$"},
            ],
        }
        p = await call("run_test_plan", {**common, "plan": plan})
        assert p["verdict"] == "pass", p
        jobs = {"flash": f["job"], "plan": p["job"]}
        assert jobs["flash"] != jobs["plan"], jobs
        await call("unlock_device", {"lease": lease})

    # Where the state directory is: the public key, then each job's bundle made and verified.
    key_hex = guest_ok(bench, f"{GUEST_GATECMD} audit key --state-dir {GUEST_STATE}")[-1].strip()
    assert len(key_hex) == 64, key_hex
    guest_ok(bench, f"{GUEST_GATECMD} audit key --state-dir {GUEST_STATE} > /tmp/host.pub")
    facts = {}
    bundles = {}
    for kind, job in jobs.items():
        out = f"/tmp/evidence-{job}.json"
        guest_ok(bench, f"{GUEST_GATECMD} evidence {job} --state-dir {GUEST_STATE} --out {out}")
        said = guest_ok(bench, f"{GUEST_GATECMD} evidence verify {out} --key /tmp/host.pub")
        assert said and said[0].startswith(f"evidence of job {job}:") and "the trusted key" in said[0], said
        facts[kind] = json.loads("\n".join(said[1:]))
        bundles[kind] = "\n".join(guest_ok(bench, f"cat {out}"))
    assert facts["flash"]["flash"]["image_sha256"] == sha256(DISK), facts["flash"]
    assert facts["flash"]["flash"]["outcome"] == "flashed", facts["flash"]
    assert facts["flash"]["ended"]["state"] == "succeeded", facts["flash"]
    assert facts["plan"]["verdict"]["verdict"] == "pass", facts["plan"]
    assert facts["plan"]["verdict"]["plan"] == "after the flash", facts["plan"]
    assert facts["plan"]["board"] == "vb1", facts["plan"]

    # Elsewhere (the host): only the bundle and the key. Intact it verifies; one byte of
    # the plan's verdict changed, it is refused, saying why.
    with tempfile.TemporaryDirectory() as d:
        key = Path(d) / "host.pub"
        key.write_text(key_hex + "\n")
        for kind, body in bundles.items():
            copy = Path(d) / f"{kind}.json"
            copy.write_text(body + "\n")
            ok = host_verify(copy, key)
            assert ok.returncode == 0, ok.stdout + ok.stderr
            assert f"evidence of job {jobs[kind]}" in ok.stdout, ok.stdout
        copy = Path(d) / "plan.json"
        original = copy.read_bytes()
        at = original.index(b'"verdict":"pass"') + len(b'"verdict":"')
        tampered = original[:at] + b"f" + original[at + 1 :]
        assert len(tampered) == len(original)
        copy.write_bytes(tampered)
        bad = host_verify(copy, key)
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert bad.stderr.startswith("gatecmd evidence verify: ") and "signature" in bad.stderr, bad.stderr
