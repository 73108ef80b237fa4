"""The service lane (issue 38): what a lab installs, run as a lab runs it. A Debian 12 guest
with systemd (tests/vm/debian.py: mmdebstrap's root file system from Debian's packages,
Debian's kernel under QEMU TCG) gets the .deb built from the binary under test
(scripts/deb.sh), the virtual boards under their own unit (gatecmd-vboard, docs/VBOARD.md),
an edited /etc/gatecmd/allowed_commands.yaml, and `systemctl enable --now gatecmd`. The
host drives the packaged service over a forwarded port with the official MCP Python SDK.

One guest serves the whole file (the tests run in file order and build on each other:
install, start, power, consoles, isolated commands, boot_board, rkdeveloptool's flash,
flash_board verified, reload, an approval, audit log, stop with commands running, an
upgrade to the same tree as revision 2, purge). Without QEMU or mmdebstrap
the file is skipped with the reason; under CI=true that is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import pytest

import vbench
from conftest import connect
from vbench import TOKEN_A, TOKEN_B

sys.path.insert(0, str(vbench.REPO / "tests/vm"))
import debian  # noqa: E402

pytestmark = pytest.mark.anyio

CONF = "/etc/gatecmd/allowed_commands.yaml"
IMAGES = "/var/lib/gatecmd/images"
FLASH_CONFIG = f"""  enabled: true
  loaders: [{IMAGES}]
  loaders_writable: true
  device_wait_secs: 8
"""
IMAGE = vbench.bootable_image(256 * 1024, b"service lane")
# The same bytes as a whole-disk image, as flash_board writes it (from LBA 0): the boot
# ROM reads the loader at LBA 0x40.
DISK_IMAGE = bytes(0x40 * 512) + IMAGE
APPROVALS = """
approvals:
  - tool: power_board
    action: "off"
    board: vb2
    approve: {by: [vm-b]}
"""
SLEEPS = """  - name: sleep
    binary: /usr/bin/sleep
    description: Runs until its time is up or it is stopped (the lane's stop check).
    timeout_secs: 600
    params: {secs: "[0-9]{1,3}"}
    allowed_args:
      - pattern: "{secs}"
  - name: sleep-isolated
    binary: /usr/bin/sleep
    description: The same in an isolated view of one board (a user and a mount namespace).
    device: rockusb
    isolate: true
    timeout_secs: 600
    params: {secs: "[0-9]{1,3}"}
    allowed_args:
      - pattern: "{secs}"
"""
VBOARD_UNIT = """[Unit]
Description=gatecmd-vboard: two virtual RK3588 boards (the lane's bench)
Before=gatecmd.service

[Service]
ExecStart=/usr/local/bin/gatecmd-vboard serve --boards 2 --flash-size 8M

[Install]
WantedBy=multi-user.target
"""


def text(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


class Lane:
    def __init__(self, guest: debian.Guest, url: str, deb_name: str):
        self.guest, self.url, self.deb = guest, url, deb_name
        self.figures: dict[str, float] = {}

    def run(self, *argv: str, ok: bool = True, timeout: float = 120) -> str:
        rc, out, err = self.guest.run(list(argv), timeout=timeout)
        if ok:
            assert rc == 0, f"{argv}: rc {rc}\n{out}\n{err}"
        return out + err

    def journal(self) -> str:
        return self.run("journalctl", "-u", "gatecmd", "--no-pager", "-o", "cat")


def _fail_or_skip(why: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def lane():
    t0 = time.monotonic()
    try:
        gatecmd = vbench.binary("GATECMD_BIN")
        vboard = vbench.binary("GATECMD_VBOARD_BIN")
    except vbench.Unavailable as e:
        _fail_or_skip(str(e))
    for program in ("qemu-system-x86_64", "strip", "cargo-deb"):
        if shutil.which(program) is None:
            _fail_or_skip(f"{program} is not installed (scripts/setup.sh --test installs it)")
    if shutil.which("mmdebstrap") is None and os.geteuid() != 0:
        _fail_or_skip("mmdebstrap is not installed (scripts/setup.sh --test installs it)")
    work = Path(tempfile.mkdtemp(prefix="gatecmd-lane."))
    files = work / "files"
    files.mkdir()
    # The package, and the same tree again as revision 2: the upgrade the lane installs.
    for revision, name in (("1", "gatecmd.deb"), ("2", "gatecmd-upgrade.deb")):
        built = subprocess.run(
            [
                str(vbench.REPO / "scripts/deb.sh"),
                *("--binary", str(gatecmd), "--fast", "--gzip", "--revision", revision),
                *("--output", str(work / f"deb-{revision}")),
            ],
            capture_output=True,
            text=True,
        )
        assert built.returncode == 0, built.stderr[-3000:]
        deb = Path(built.stdout.strip().splitlines()[-1])
        shutil.copy(deb, files / name)
    shutil.copy(vboard, files / "gatecmd-vboard")
    subprocess.run(["strip", str(files / "gatecmd-vboard")], check=True)
    (files / "gatecmd-vboard.service").write_text(VBOARD_UNIT)
    # vbench's two boards (power on boots from flash; a blank one falls back to MaskROM),
    # with flash_board on (and so power.maskrom, for boot_board) and
    # vb1's console login for board_run.
    cfg = vbench.config(["power", "vb1", "on"], ["power", "vb2", "on"], flash=FLASH_CONFIG)
    console = f'console: {{port: "{vbench.PORTS["vb1"][1]}", baud: 1500000}}'
    assert console in cfg
    cfg = cfg.replace(console, console[:-1] + ", login: {user: root}}", 1).replace(vbench.IMAGES, IMAGES)
    # Commands that run until stopped, plain and isolated (the stop check).
    assert "commands: [rkdeveloptool]" in cfg
    cfg = cfg.replace("commands: [rkdeveloptool]", "commands: [rkdeveloptool, sleep, sleep-isolated]", 1) + SLEEPS
    (files / "allowed_commands.yaml").write_text(cfg)
    (files / "images").mkdir()
    subprocess.run([str(vboard), "make-loader", "--out", str(files / "images/loader.bin")], check=True, capture_output=True)
    (files / "images/lane.img").write_bytes(IMAGE)
    (files / "images/lane-disk.img").write_bytes(DISK_IMAGE)
    figures = {"deb_build_s": time.monotonic() - t0}
    port = vbench.free_port()
    guest = debian.Guest([f"{port}:{vbench.GUEST_PORT}"], files=files, work=work / "vm")
    t_boot = time.monotonic()
    guest.start()
    try:
        lane = Lane(guest, f"http://127.0.0.1:{port}/mcp", deb.name)
        lane.figures.update(figures)
        lane.run("systemctl", "is-system-running", "--wait", timeout=300)
        lane.figures["boot_to_running_s"] = time.monotonic() - t_boot
        # systemd's own account of the boot, printed with the figures.
        lane.boot_line = lane.run("systemd-analyze").splitlines()[0]
        lane.run("mount", "-o", "ro", "/dev/vdb", "/mnt")
        yield lane
    finally:
        guest.stop()
        print(f"service lane figures: {({k: round(v, 1) for k, v in lane.figures.items()})}; total {time.monotonic() - t0:.0f} s")
        print(f"guest: {getattr(lane, 'boot_line', '?')}")
        print("--- the guest's console (last 60 lines) ---")
        print("\n".join(guest.log().splitlines()[-60:]))
        if not os.environ.get("KEEP_LANE"):
            shutil.rmtree(work, ignore_errors=True)


def test_the_package_installs_and_the_unit_starts(lane):
    t = time.monotonic()
    lane.run("dpkg", "-i", "/mnt/gatecmd.deb", timeout=180)
    lane.figures["dpkg_install_s"] = time.monotonic() - t
    # The bench: the virtual boards under their own unit; their power switch (a control
    # socket, root's 0600) is given to the group gatecmd, as a udev rule gives a relay.
    lane.run("install", "-m", "0755", "/mnt/gatecmd-vboard", "/usr/local/bin/gatecmd-vboard")
    lane.run("install", "-m", "0644", "/mnt/gatecmd-vboard.service", "/etc/systemd/system/")
    lane.run("systemctl", "daemon-reload")
    lane.run("systemctl", "start", "gatecmd-vboard")
    for _ in range(300):
        if lane.guest.run(["test", "-S", "/run/gatecmd-vboard/control.sock"])[0] == 0:
            break
        time.sleep(0.2)
    lane.run("chgrp", "gatecmd", "/run/gatecmd-vboard", "/run/gatecmd-vboard/control.sock")
    lane.run("chmod", "g+x", "/run/gatecmd-vboard")
    lane.run("chmod", "g+rw", "/run/gatecmd-vboard/control.sock")
    # The images the flash uses, in the state directory's file root.
    lane.run("install", "-d", "-o", "gatecmd", "-g", "gatecmd", "-m", "0750", "/var/lib/gatecmd", IMAGES)
    for name in ("loader.bin", "lane.img", "lane-disk.img"):
        lane.run("install", "-m", "0600", "-o", "gatecmd", "-g", "gatecmd", f"/mnt/images/{name}", IMAGES)
    # The operator edits the conffile, then enables the unit.
    lane.run("install", "-m", "0600", "-o", "gatecmd", "-g", "gatecmd", "/mnt/allowed_commands.yaml", CONF)
    lane.run("gatecmd", "check", "--config", CONF)
    t = time.monotonic()
    lane.run("systemctl", "enable", "--now", "gatecmd")
    for _ in range(600):
        if "listening on" in lane.journal():
            break
        time.sleep(0.2)
    lane.figures["enable_to_listening_s"] = time.monotonic() - t
    assert lane.run("systemctl", "is-active", "gatecmd").strip() == "active"
    journal = lane.journal()
    assert re.search(r"gatecmd: listening on http://0\.0\.0\.0:\d+/mcp", journal), journal[-3000:]
    # Issue 38 (a): $STATE_DIRECTORY holds two paths; one start, no restart loop.
    assert lane.run("systemctl", "show", "-p", "NRestarts", "--value", "gatecmd").strip() == "0", journal[-3000:]


async def test_boards_power_console_and_isolated_commands_under_the_unit(lane):
    async with connect(lane.url, TOKEN_A, "legacy") as client:
        r = await client.call_tool("list_devices", {})
        assert r.is_error is not True, text(r)
        r = await client.call_tool("lock_board", {"match": {"soc": "rk3588"}, "wait_secs": 30, "ttl_secs": 600})
        assert r.is_error is not True, text(r)
        board, lease = r.structured_content["board"], r.structured_content["lease_id"]
        assert board == "vb1"
        # power_board: the vboard's switch run as the user gatecmd.
        for action in ("off", "on"):
            r = await client.call_tool("power_board", {"board": board, "action": action, "lease": lease})
            assert r.is_error is not True, f"power {action}: {text(r)}\n{lane.journal()[-2000:]}"
        r = await client.call_tool(
            "wait_for_device",
            {"match": {"id": vbench.PORTS["vb1"][0], "mode": "maskrom"}, "state": "attached", "timeout_secs": 60},
        )
        assert r.structured_content["satisfied"] is True, text(r)
        # Issue 38 (b): the console's /dev/ttyACM* opens under DevicePolicy=closed (the
        # capture opens it in the background: give it a few seconds).
        state = None
        for _ in range(50):
            r = await client.call_tool("console_read", {"board": board})
            assert r.is_error is not True, f"console_read: {text(r)}"
            state = r.structured_content["state"]
            if state == "open":
                break
            await anyio.sleep(0.2)
        assert state == "open", f"the console is {state}:\n{lane.journal()[-2000:]}"
        # Issue 38 (c): an isolated command (user + mount namespace) under the unit.
        r = await client.call_tool(
            "execute_command", {"command": "rkdeveloptool", "args": ["ld"], "board": board, "lease": lease}
        )
        assert r.is_error is not True, f"rkdeveloptool ld: {text(r)}"
        assert re.search(r"Vid=0x2207,Pid=0x350b,LocationID=\d+\s+Maskrom", r.structured_content["stdout"]), r.structured_content
        await client.call_tool("unlock_device", {"lease": lease})


async def test_two_identical_boards_isolated_at_once(lane):
    outs: dict[str, str] = {}

    async def ld(token: str) -> None:
        async with connect(lane.url, token, "legacy") as client:
            r = await client.call_tool("lock_board", {"match": {"soc": "rk3588"}, "wait_secs": 60, "ttl_secs": 600})
            assert r.is_error is not True, text(r)
            board, lease = r.structured_content["board"], r.structured_content["lease_id"]
            r = await client.call_tool("power_board", {"board": board, "action": "on", "lease": lease})
            assert r.is_error is not True, text(r)
            await client.call_tool(
                "wait_for_device",
                {"match": {"id": vbench.PORTS[board][0]}, "state": "attached", "timeout_secs": 60},
            )
            r = await client.call_tool(
                "execute_command", {"command": "rkdeveloptool", "args": ["ld"], "board": board, "lease": lease}
            )
            assert r.is_error is not True, text(r)
            outs[board] = r.structured_content["stdout"]
            await client.call_tool("unlock_device", {"lease": lease})

    async with anyio.create_task_group() as tg:
        tg.start_soon(ld, TOKEN_A)
        tg.start_soon(ld, TOKEN_B)
    assert sorted(outs) == ["vb1", "vb2"], outs
    for board, out in outs.items():
        # Each call saw exactly one board: its own.
        assert len(re.findall(r"DevNo=", out)) == 1, (board, out)


async def test_boot_to_maskrom_flash_with_rkdeveloptool_and_board_run(lane):
    """boot_board {to: maskrom}; Debian's rkdeveloptool (isolated) downloads the loader and
    writes the image; boot_board {to: shell}; board_run "uname -a" over the console."""
    try:
        with anyio.fail_after(300):
            await _flash_and_run(lane)
    except TimeoutError:
        audit = lane.guest.run(["tail", "-n", "30", "/var/lib/gatecmd/audit.log"])[1]
        pytest.fail(f"no answer in 300 s; the journal:\n{lane.journal()[-3000:]}\naudit:\n{audit}")


async def _flash_and_run(lane):
    async with connect(lane.url, TOKEN_A, "legacy") as client:
        r = await client.call_tool("lock_board", {"board": "vb1", "ttl_secs": 600, "wait_secs": 30})
        assert r.is_error is not True, text(r)
        lease = r.structured_content["lease_id"]
        common = {"board": "vb1", "lease": lease}

        async def call(tool: str, args: dict) -> dict:
            # wait_for_device names no board; console_read takes no lease.
            extra = {} if tool == "wait_for_device" else {"board": "vb1"} if tool == "console_read" else common
            r = await client.call_tool(tool, {**extra, **args})
            assert r.is_error is not True, f"{tool} {args}: {text(r)}\n{lane.journal()[-2000:]}"
            return r.structured_content

        b = await call("boot_board", {"to": "maskrom", "timeout_secs": 60})
        assert b["state"] == "maskrom", b
        db = await call("execute_command", {"command": "rkdeveloptool", "args": ["db", "loader.bin"]})
        assert db["exit_code"] == 0 and "Downloading bootloader succeeded." in db["stdout"], db
        w = await call("wait_for_device", {"match": {"id": vbench.PORTS["vb1"][0], "mode": "loader"}, "state": "attached", "timeout_secs": 30})
        assert w["satisfied"] is True, w
        wl = await call("execute_command", {"command": "rkdeveloptool", "args": ["wl", "0x40", "lane.img"]})
        assert wl["exit_code"] == 0, wl
        b = await call("boot_board", {"to": "shell", "timeout_secs": 90})
        assert b["state"] == "shell", b
        boot = await call("console_read", {"cursor": b["console_cursor"], "max_bytes": 65536})
        assert f"sha256={vbench.sha256(IMAGE)}" in boot["text"], boot["text"][-2000:]
        r = await call("board_run", {"command": "uname -a"})
        assert r["exit_code"] == 0 and r["output"].startswith("Linux vb1 "), r
        await client.call_tool("unlock_device", {"lease": lease})


async def _flash(lane, client, lease: str, image: str, timeout_secs: int) -> tuple[dict, str, float]:
    """flash_board as a background job followed with wait_job: the result, the job's
    lines (its steps as they happened) and the seconds it took."""
    t = time.monotonic()
    r = await client.call_tool(
        "flash_board",
        {
            "board": "vb1",
            "lease": lease,
            "image": image,
            "loader": "loader.bin",
            "wait_for": "login:",
            "timeout_secs": timeout_secs,
            "background": True,
        },
    )
    assert r.is_error is not True, text(r)
    job, lines, s, cursor = r.structured_content["job"], "", {}, None
    # The job's own time limit ends it; this bound only keeps a broken server from
    # holding the lane.
    while time.monotonic() - t < timeout_secs + 30:
        r = await client.call_tool("wait_job", {"job": job, "timeout_secs": 20, **({"output_cursor": cursor} if cursor else {})})
        s = r.structured_content
        lines += s.get("stdout", "")
        cursor = s.get("output_cursor")
        if s["state"] != "running":
            break
    return s, lines, time.monotonic() - t


async def test_flash_board_verified_under_the_unit(lane):
    """flash_board from power off: power.maskrom, the loader, the image written and read
    back by gatecmd's own engine (libusb, as the user gatecmd under the unit), the reset,
    and the board's login prompt on its console; the board names the bytes it booted."""
    async with connect(lane.url, TOKEN_A, "legacy") as client:
        r = await client.call_tool("lock_board", {"board": "vb1", "ttl_secs": 600, "wait_secs": 30})
        assert r.is_error is not True, text(r)
        lease = r.structured_content["lease_id"]
        r = await client.call_tool("power_board", {"board": "vb1", "action": "off", "lease": lease})
        assert r.is_error is not True, text(r)
        s, lines, secs = await _flash(lane, client, lease, "lane-disk.img", 240)
        lane.figures["flash_board_s"] = secs
        assert s["state"] == "succeeded", f"{s}\n{lines}\n{lane.journal()[-3000:]}"
        res = s["result"]
        names = [st["step"] for st in res["steps"]]
        order = ["maskrom", "download_boot", "write", "verify", "reset", "await_console"]
        assert [n for n in names if n in order] == order, res["steps"]
        assert res["verified"] is True and res["flashed"]["board_state"] == "booted", res
        boot_log = res["flashed"]["boot_log"]
        assert f"sha256={vbench.sha256(DISK_IMAGE)}" in boot_log, boot_log[-2000:]
        await client.call_tool("unlock_device", {"lease": lease})


async def test_flash_board_of_an_image_the_board_cannot_boot_says_so_at_once(lane):
    """The image written and verified, the board reset, and its boot ROM finds nothing to
    boot (the image's loader is at byte 0, not at LBA 0x40): the board comes back in
    MaskROM. flash_board says so as soon as the board is back, not after its time limit
    waiting for a login prompt that cannot come (what the first lane run saw as a hang)."""
    async with connect(lane.url, TOKEN_A, "legacy") as client:
        r = await client.call_tool("lock_board", {"board": "vb1", "ttl_secs": 600, "wait_secs": 30})
        assert r.is_error is not True, text(r)
        lease = r.structured_content["lease_id"]
        s, lines, secs = await _flash(lane, client, lease, "lane.img", 180)
        assert s["state"] == "failed", f"{s}\n{lines}"
        f = s["result"]["failure"]
        assert f["step"] == "await_console", f
        assert "MaskROM" in f["message"] and "LBA 0x40" in f["message"], f
        assert f["board_state"] == "maskrom", f
        assert secs < 60, f"the failure came after {secs:.0f} s:\n{lines}"
        await client.call_tool("unlock_device", {"lease": lease})


def test_reload_applies_a_change(lane):
    # An approvals rule, in force after `systemctl reload` (used by the next test).
    rc, out, err = lane.guest.run(["tee", "-a", CONF], stdin=APPROVALS.encode())
    assert rc == 0, err
    lane.run("sed", "-i", "s/kill_grace_secs: 1/kill_grace_secs: 2/", CONF)
    lane.run("systemctl", "reload", "gatecmd")
    for _ in range(100):
        if "reloaded" in lane.journal().lower():
            break
        time.sleep(0.2)
    assert "reloaded" in lane.journal().lower(), lane.journal()[-2000:]
    assert lane.run("systemctl", "is-active", "gatecmd").strip() == "active"


async def test_an_approval_decided_with_gatecmd_approve_in_the_guest(lane):
    """The reloaded rule holds vm-a's power_board off on vb2 until vm-b says yes with the
    CLI on the bench host (its token in the environment, not in argv)."""
    result = {}
    async with connect(lane.url, TOKEN_A, "legacy") as a, connect(lane.url, TOKEN_B, "legacy") as b:
        r = await a.call_tool("lock_board", {"board": "vb2", "ttl_secs": 600, "wait_secs": 30})
        assert r.is_error is not True, text(r)
        lease = r.structured_content["lease_id"]

        async def off() -> None:
            result["r"] = await a.call_tool("power_board", {"board": "vb2", "action": "off", "lease": lease})

        async with anyio.create_task_group() as tg:
            tg.start_soon(off)
            ids: list[str] = []
            for _ in range(150):
                res = await b.read_resource("gatecmd://approvals")
                ids = re.findall(r"apr-\d+", str(res))
                if ids:
                    break
                await anyio.sleep(0.2)
            assert ids, "no approval request appeared"
            assert "r" not in result, "the held call answered before the yes"
            rc, out, err = await anyio.to_thread.run_sync(
                lambda: lane.guest.run(
                    ["gatecmd", "approve", ids[0], "--note", "service lane", "--url", f"http://127.0.0.1:{vbench.GUEST_PORT}/mcp"],
                    env=[f"GATECMD_TOKEN={TOKEN_B}"],
                )
            )
            assert rc == 0, f"gatecmd approve: {out}{err}"
        r = result["r"]
        assert r.is_error is not True, text(r)
        assert r.structured_content["state"] == "off", r.structured_content
        await a.call_tool("unlock_device", {"lease": lease})


def test_the_audit_log_is_the_services_and_owner_only(lane):
    out = lane.run("stat", "-c", "%U %G %a", "/var/lib/gatecmd/audit.log").strip()
    assert out == "gatecmd gatecmd 600", out


def _listening(lane, count: int) -> None:
    """Waits for the journal's `count`-th listening line (one per start)."""
    for _ in range(600):
        if lane.journal().count("gatecmd: listening on") >= count:
            return
        time.sleep(0.2)
    raise AssertionError(lane.journal()[-3000:])


async def test_stop_leaves_no_child_of_a_running_command(lane):
    """`systemctl stop` while two commands run as background jobs, one isolated on a board
    (its own user and mount namespace): nothing of the user gatecmd is left, within the
    unit's TimeoutStopSec, and the stop is clean."""
    async with connect(lane.url, TOKEN_A, "legacy") as client:
        r = await client.call_tool("lock_board", {"board": "vb1", "ttl_secs": 600, "wait_secs": 30})
        assert r.is_error is not True, text(r)
        lease = r.structured_content["lease_id"]
        # The isolated command needs the board on USB: MaskROM.
        r = await client.call_tool("boot_board", {"board": "vb1", "lease": lease, "to": "maskrom", "timeout_secs": 60})
        assert r.is_error is not True, text(r)
        for command, extra in (("sleep-isolated", {"board": "vb1", "lease": lease}), ("sleep", {})):
            r = await client.call_tool("execute_command", {"command": command, "args": ["300"], "background": True, **extra})
            assert r.is_error is not True, f"{command}: {text(r)}"
    out = ""
    for _ in range(100):
        rc, out, _ = lane.guest.run(["pgrep", "-u", "gatecmd", "-a", "-x", "sleep"])
        if len(out.splitlines()) == 2:
            break
        time.sleep(0.2)
    assert len(out.splitlines()) == 2, out
    starts = lane.journal().count("gatecmd: listening on")
    t = time.monotonic()
    lane.run("systemctl", "stop", "gatecmd", timeout=60)
    lane.figures["stop_s"] = time.monotonic() - t
    rc, out, _ = lane.guest.run(["pgrep", "-u", "gatecmd", "-a"])
    assert rc == 1 and out == "", out
    rc, out, _ = lane.guest.run(["pgrep", "-a", "-x", "sleep"])
    assert rc == 1 and out == "", out
    assert lane.figures["stop_s"] < 15, lane.journal()[-3000:]
    assert lane.run("systemctl", "show", "-p", "Result", "--value", "gatecmd").strip() == "success", lane.journal()[-3000:]
    lane.run("systemctl", "start", "gatecmd")
    _listening(lane, starts + 1)


def test_an_upgrade_keeps_the_edited_config(lane):
    """dpkg -i of the same tree as a higher revision: the edited conffile is kept as it
    is (content, owner, mode), and the running service is restarted on the new package."""
    before = lane.run("sha256sum", CONF)
    pid = lane.run("systemctl", "show", "-p", "MainPID", "--value", "gatecmd").strip()
    old = lane.run("dpkg-query", "-W", "-f=${Version}", "gatecmd")
    starts = lane.journal().count("gatecmd: listening on")
    t = time.monotonic()
    lane.run("dpkg", "-i", "/mnt/gatecmd-upgrade.deb", timeout=180)
    lane.figures["dpkg_upgrade_s"] = time.monotonic() - t
    new = lane.run("dpkg-query", "-W", "-f=${Version}", "gatecmd")
    lane.run("dpkg", "--compare-versions", new, "gt", old)
    assert lane.run("sha256sum", CONF) == before
    assert "kill_grace_secs: 2" in lane.run("cat", CONF)
    assert lane.run("stat", "-c", "%U %a", CONF).strip() == "gatecmd 600"
    assert not lane.guest.run(["test", "-e", CONF + ".dpkg-dist"])[0] == 0
    _listening(lane, starts + 1)
    lane.figures["upgrade_to_listening_s"] = time.monotonic() - t
    assert lane.run("systemctl", "is-active", "gatecmd").strip() == "active"
    assert lane.run("systemctl", "show", "-p", "MainPID", "--value", "gatecmd").strip() != pid


def test_purge_leaves_nothing(lane):
    lane.run("dpkg", "--purge", "gatecmd", timeout=180)
    for path in ("/etc/gatecmd", "/var/lib/gatecmd", "/usr/bin/gatecmd", "/usr/lib/systemd/system/gatecmd.service"):
        rc, _, _ = lane.guest.run(["test", "-e", path])
        assert rc != 0, f"{path} is still there after the purge"
    rc, out, _ = lane.guest.run(["pgrep", "-u", "gatecmd", "-a"])
    assert rc == 1, out
