"""`make demo` (scripts/demo.sh). Where this host cannot hold USB gadgets itself (this
machine: a container) it runs the two virtual boards and gatecmd in the project's VM
(scripts/demo_vm.py on tests/vm) and forwards gatecmd's port here; where even that cannot
run, it says why in one line and exits 1, before building or starting anything.

The VM path is run for real, once for the whole file (module fixture): `make demo` with the
test's prebuilt binaries (GATECMD_DEMO_BIN_DIR, so nothing is rebuilt) and
GATECMD_DEMO_VM=1 (the VM even on a host that could hold the gadgets: the suite loads
nothing into a host's kernel), in its own process group as a terminal would start it. The
tests then read its banner, drive it from this host with the official MCP Python SDK as an
agent following the banner's first prompt would, and end it as Ctrl-C does (SIGINT to the
group), checking that no process of that group is left. Without the binaries or the VM's
prerequisites the VM tests skip saying why; under CI=true that is a failure instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import urllib.request
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2 as httpx  # the official SDK's HTTP client
import mcp_types as types
import pytest

from conftest import connect
from demo_run import Demo, alive, free_port, group_members

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "demo.sh"
# The boards' rockusb ports in the VM (dummy_hcd's UDCs in order, docs/VBOARD.md).
USB = {"vb1": "1-1", "vb2": "3-1"}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env
    )


def in_container() -> bool:
    return Path("/.dockerenv").exists() or Path("/run/.containerenv").exists()


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def test_make_demo_runs_the_script():
    # --no-print-directory: under `make test` this make is a sub-make (MAKELEVEL is set), which
    # would otherwise wrap its output in "Entering/Leaving directory" lines.
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo"], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "./scripts/demo.sh", out.stdout


def test_check_says_where_the_demo_runs_in_one_line():
    check = run("--check")
    if check.returncode == 1:
        # Neither way works here: one line on stderr.
        lines = check.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("make demo: cannot run here: "), check.stderr
        assert check.stdout == ""
        return
    assert check.returncode == 0, check
    assert check.stderr == ""
    lines = check.stdout.splitlines()
    assert len(lines) == 1, check.stdout
    if in_container():
        # A container cannot hold the gadgets: the VM, saying why not here.
        assert lines[0].startswith("make demo: this host runs the demo in a QEMU VM: this is a container ("), lines
    else:
        assert lines[0].startswith(("make demo: this host can run the demo (", "make demo: this host runs the demo in a QEMU VM: ")), lines


def test_without_qemu_it_says_why_in_one_line(tmp_path):
    """A host that cannot hold the gadgets and has no QEMU, nor apt-get to install it: one
    line naming both, exit 1, nothing built or created; `--check` says the same."""
    if run("--check").stdout.startswith("make demo: this host can run the demo ("):
        pytest.skip("this host holds the gadgets itself: the VM path is not what make demo runs here")
    # A PATH with everything the system offers but QEMU, apt-get and sudo.
    path = tmp_path / "path"
    path.mkdir()
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        for entry in Path(d).iterdir() if Path(d).is_dir() else []:
            if entry.name in ("qemu-system-x86_64", "apt-get", "sudo") or (path / entry.name).exists():
                continue
            (path / entry.name).symlink_to(entry)
    demo_dir = tmp_path / "demo"
    env = dict(os.environ, PATH=str(path), GATECMD_DEMO_DIR=str(demo_dir), GATECMD_DEMO_BIN_DIR=str(tmp_path / "none"))
    check = run("--check", env=env)
    full = run(env=env)
    for r in (check, full):
        assert r.returncode == 1, r
        assert r.stdout == ""
        lines = r.stderr.splitlines()
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith("make demo: cannot run here: "), lines
        assert "the demo VM needs QEMU" in lines[0] and "qemu-system-x86" in lines[0], lines
    assert full.stderr == check.stderr
    assert not demo_dir.exists()


# ---- the VM path, for real --------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    gatecmd, vboard = os.environ.get("GATECMD_BIN"), os.environ.get("GATECMD_VBOARD_BIN")
    check = run("--check", env=dict(os.environ, GATECMD_DEMO_VM="1"))  # the VM path's own checks
    why = None
    if not gatecmd or not vboard:
        why = "GATECMD_BIN and GATECMD_VBOARD_BIN must name the built binaries (scripts/pytest.sh sets them)"
    elif check.returncode != 0:
        why = f"make demo cannot run here: {check.stderr.strip()}"
    elif "it installs" in check.stdout:
        why = f"the demo VM's packages are missing (scripts/setup.sh --demo): {check.stdout.strip()}"
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {why}")
        pytest.skip(why)
    work = tmp_path_factory.mktemp("demo")
    d = Demo(work, gatecmd, vboard)
    print(f"make demo: banner after {d.banner_secs:.1f} s")
    yield d
    if d.proc.poll() is None:
        d.interrupt()
    if os.environ.get("KEEP_DEMO"):
        print(f"demo dir kept: {d.dir}")
    else:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(autouse=True)
def console_on_failure(request):
    """The VM's console during a VM test (gatecmd's and the boards' logs), shown on failure."""
    if "demo" not in request.fixturenames:
        yield
        return
    d = request.getfixturevalue("demo")
    start = len(d.console())
    yield
    print("--- make demo's output ---\n" + d.output()[-3000:])
    print("--- the VM's console during this test (last 120 lines) ---")
    print("\n".join(d.console()[start:].splitlines()[-120:]))


def test_the_banner_names_what_an_agent_needs(demo):
    assert demo.url == f"http://127.0.0.1:{demo.port}/mcp", demo.url
    # The token file is on this host, owner-only, and is the VM's gatecmd's token: /health
    # is open, /mcp is not without it.
    assert stat.S_IMODE(demo.token_file.stat().st_mode) == 0o600
    assert re.fullmatch(r"[0-9a-f]{48}", demo.token), "the token is 24 random bytes in hex"
    with urllib.request.urlopen(demo.url.removesuffix("mcp") + "health", timeout=10) as r:
        assert r.status == 200
    with urllib.request.urlopen(demo.url.removesuffix("mcp"), timeout=10) as r:
        assert r.status == 200 and "text/html" in r.headers["Content-Type"], "the bench page"
    for name in ("loader.bin", "demo.img", "disk.img"):
        assert (demo.files / name).stat().st_size > 0, name
    out = demo.output()
    assert "in a QEMU VM" in out and "A first prompt for an agent" in out, out
    # Progress while it booted: never a silent terminal.
    progress = [l for l in out.splitlines() if l.startswith("make demo: [")]
    assert any("kernel is up" in l for l in progress), out
    assert any("in the VM: starting gatecmd" in l for l in progress), out


@asynccontextmanager
async def page_stream(base: str, token: str):
    """The bench page's event stream (docs/OPERATING.md) as a browser gets it: sign in with
    the token, then `GET /events`; yields an iterator of its snapshots."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as h:
        r = await h.post("/signin", data={"token": token}, headers={"Origin": base})
        assert r.status_code == 303, r
        cookie = r.headers["set-cookie"].split(";", 1)[0]

        async def snapshots():
            async for line in s.aiter_lines():
                if line.startswith("data: "):
                    yield json.loads(line.removeprefix("data: "))

        async with h.stream("GET", "/events", headers={"Cookie": cookie}) as s:
            assert s.status_code == 200, s
            yield snapshots()


def board_in(snapshot: dict, name: str) -> dict:
    return next(b for b in snapshot["boards"] if b["name"] == name)


@pytest.mark.anyio
async def test_an_agent_lists_the_boards_and_runs_ld(demo):
    async with page_stream(demo.url.removesuffix("/mcp"), demo.token) as page, connect(demo.url, demo.token, "legacy") as c:
        first = await anext(page)
        assert board_in(first, "vb1")["lock"]["held"] is False, board_in(first, "vb1")
        r = await c.call_tool("list_boards", {})
        assert r.is_error is not True, text(r)
        boards = {b["name"]: b for b in r.structured_content["boards"]}
        assert sorted(boards) == ["vb1", "vb2"], boards
        assert all(b["tags"]["soc"] == "rk3588" for b in boards.values()), boards
        r = await c.call_tool("lock_board", {"board": "vb1", "ttl_secs": 300})
        assert r.is_error is not True, text(r)
        lease = r.structured_content["lease_id"]
        try:
            r = await c.call_tool("power_board", {"board": "vb1", "action": "on", "lease": lease})
            assert r.is_error is not True, text(r)
            r = await c.call_tool(
                "wait_for_device",
                {"match": {"id": USB["vb1"], "mode": "maskrom"}, "state": "attached", "timeout_secs": 30},
            )
            assert r.structured_content["satisfied"] is True, text(r)
            r = await c.call_tool(
                "execute_command", {"command": "rkdeveloptool", "args": ["ld"], "board": "vb1", "lease": lease}
            )
            assert r.is_error is not True, text(r)
            s = r.structured_content
            # Debian's real rkdeveloptool in the VM, isolated to vb1: exactly one device.
            assert s["exit_code"] == 0, s
            assert re.fullmatch(r"DevNo=1\tVid=0x2207,Pid=0x350b,LocationID=\d+\tMaskrom", s["stdout"].strip()), s
            # The bench page saw it as it happened: a later snapshot of the stream opened
            # before the lease shows vb1 held, on, its rockusb device in MaskROM.
            with anyio.fail_after(20):
                async for snap in page:
                    b = board_in(snap, "vb1")
                    if b["lock"]["held"] and b["power"]["state"] == "on" and b["mode"] == "maskrom":
                        break
        finally:
            await c.call_tool("power_board", {"board": "vb1", "action": "off", "lease": lease})
            await c.call_tool("unlock_device", {"lease": lease})


@pytest.mark.anyio
async def test_the_first_prompt_end_to_end(demo):
    """The banner's first prompt, step by step, as an agent would do it."""

    async def call(tool: str, **args) -> dict:
        r = await c.call_tool(tool, args)
        assert r.is_error is not True, f"{tool} {args}: {text(r)}"
        return r.structured_content

    async def rk(*args: str) -> dict:
        s = await call("execute_command", command="rkdeveloptool", args=list(args), board=board, lease=lease)
        assert s["exit_code"] == 0, s
        return s

    async with connect(demo.url, demo.token, "legacy") as c:
        s = await call("lock_board", match={"soc": "rk3588"}, ttl_secs=600)
        board, lease = s["board"], s["lease_id"]
        try:
            await call("power_board", board=board, action="on", lease=lease)
            await call("wait_for_device", match={"id": USB[board], "mode": "maskrom"}, state="attached", timeout_secs=30)
            assert "Maskrom" in (await rk("ld"))["stdout"]
            assert "Downloading bootloader succeeded" in (await rk("db", "loader.bin"))["stdout"]
            s = await call("wait_for_device", match={"id": USB[board], "mode": "loader"}, state="attached", timeout_secs=30)
            assert s["satisfied"] is True, s
            assert "(100%)" in (await rk("wl", "0x40", "demo.img"))["stdout"]
            cursor = (await call("console_read", board=board))["next_cursor"]
            await rk("rd")
            s = await call("console_read", board=board, cursor=cursor, wait_for="login:", timeout_secs=60)
            assert s["matched"] is True, s
            # The SHA-256 the board prints for the region written is the image's on this host.
            image = (demo.files / "demo.img").read_bytes()
            m = re.search(r"vboard: region lba=0x40 sectors=(\d+) bytes=\d+ sha256=([0-9a-f]{64})", s["text"])
            assert m and m.group(2) == hashlib.sha256(image).hexdigest(), s["text"]
            s = await call("flash_board", board=board, image="disk.img", loader="loader.bin", wait_for="login:", lease=lease)
            assert s["verified"] is True, s
            report = await call("boot_report", board=board)
            assert report["outcome"] == "login", report
            assert report["trigger"]["action"] == "flash_board", report
            assert [st["stage"] for st in report["stages"]][-1] == "login", report
        finally:
            await c.call_tool("power_board", {"board": board, "action": "off", "lease": lease})
            await call("unlock_device", lease=lease)


def test_a_second_demo_beside_it_says_why_in_one_line(demo, tmp_path):
    """Another make demo while this one runs: on the same port, or in the same directory,
    one line and exit 1, and the running demo goes on."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(GATECMD_DEMO_BIN_DIR=str(demo.bin_dir), GATECMD_DEMO_VM="1")
    cases = {
        "is in use (another make demo or gatecmd?)": dict(
            env, GATECMD_DEMO_DIR=str(tmp_path / "other"), GATECMD_DEMO_BIND=f"127.0.0.1:{demo.port}"
        ),
        f"another make demo runs in {demo.dir}": dict(
            env, GATECMD_DEMO_DIR=str(demo.dir), GATECMD_DEMO_BIND=f"127.0.0.1:{free_port()}"
        ),
    }
    for words, e in cases.items():
        r = run(env=e)
        assert r.returncode == 1, r
        refusals = [l for l in r.stderr.splitlines() if l.startswith("make demo: cannot run here: ")]
        assert len(refusals) == 1 and words in refusals[0], r.stderr
        assert r.stdout == ""
    with urllib.request.urlopen(demo.url.removesuffix("mcp") + "health", timeout=10) as h:
        assert h.status == 200


def test_ctrl_c_stops_everything_and_leaves_no_process(demo):
    """Last in the file: SIGINT to make demo's process group (a terminal's Ctrl-C)."""
    qemu = int((demo.dir / "vm/qemu.pid").read_text())
    members = group_members(demo.pgid)
    pids = {p for p, _, _ in members}
    assert qemu in pids and demo.proc.pid in pids, members  # QEMU runs in the group
    t = time.monotonic()
    rc = demo.interrupt(timeout=60)
    print(f"make demo: Ctrl-C to exit {time.monotonic() - t:.1f} s, rc {rc}")
    assert rc != 0  # interrupted
    left = group_members(demo.pgid)
    assert left == [], f"left behind: {left}"
    assert not [m for m in members if alive(m[0], m[2])], "a process of the demo is still there"
    assert "make demo: stopped gatecmd, the boards and the VM" in demo.output(), demo.output()[-2000:]
    # What a second make demo needs: nothing listening on its port any more, as its own
    # check before the boot sees it (past the TIME_WAIT of the connections just closed).
    sys.path.insert(0, str(REPO / "scripts"))
    import demo_vm

    demo_vm.check_port_free("127.0.0.1", demo.port)
