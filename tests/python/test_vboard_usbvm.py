"""The main job end to end on a real kernel: Debian's own `rkdeveloptool` flashes virtual
RK3588 boards (gatecmd-vboard, docs/VBOARD.md) through gatecmd, driven by the official MCP
Python SDK from the host. One VM (tests/python/vbench.py) serves every test of this file:
gatecmd, gatecmd-vboard (two boards, 4 MiB flash each) and rkdeveloptool in the guest.

The tests run in file order and share the boards; each takes its boards with lock_board and
brings them to the state it needs (power), so a failed test leaves the next ones a board
they can reset. Without the usbvm harness or QEMU the file is skipped with the reason; under
CI=true (where scripts/setup.sh --test installs them) that is a failure instead.
"""

from __future__ import annotations

import os
import re
import time
import base64

import anyio
import mcp_types as types
import pytest

import vbench
from conftest import connect
from vbench import TOKEN_A, TOKEN_B, sha256

pytestmark = pytest.mark.anyio

MIB = 1 << 20
FLASH = 32 * MIB
# Images: written at LBA 0x40 (32 KiB in), bootable (RKNS first).
IMAGE_A = vbench.bootable_image(256 * 1024, b"client a")
IMAGE_B = vbench.bootable_image(192 * 1024, b"client b")
# Made in the guest (the VM's initramfs stays small): slow.img, 16 MiB of random bytes, big
# enough that a power-off lands in the middle of its write; huge.img, larger than the flash.
SLOW_MIB = 16
WRITE_MIB_PER_S = 4
HUGE_MIB = 33
GARBAGE = bytes(range(256)) * 64  # 16 KiB, no boot-file header

USB = {name: usb for name, (usb, _) in vbench.PORTS.items()}


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


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
    b = vbench.Bench(
        gatecmd,
        vboard,
        files={"garbage.bin": GARBAGE},
        flash_size=f"{FLASH // MIB}M",
        # A flash slower than USB under TCG, so a write's length does not depend on how
        # loaded the host is: slow.img's 16 MiB take 4 s or more, and a power cut 1 s in
        # lands mid-write.
        write_speed=f"{WRITE_MIB_PER_S}M",
        # The harness's kill-switch, not a test bound: this file's tests share the VM for
        # 2 to 6 minutes, depending on how loaded the host is.
        timeout=1200,
    )
    rc, lines = b.guest(
        f"head -c {SLOW_MIB * MIB} /dev/urandom > {vbench.IMAGES}/slow.img && "
        f"dd if=/dev/zero of={vbench.IMAGES}/huge.img bs=1M count={HUGE_MIB} 2>/dev/null",
        timeout=120,
    )
    assert rc == 0, lines
    yield b
    b.stop()
    if os.environ.get("KEEP_VBENCH"):
        print(f"vbench work dir kept: {b.work}")
    else:
        b.cleanup()


@pytest.fixture(autouse=True)
def vboard_log_on_failure(bench):
    """Prints the end of the VM's console after each test (gatecmd-vboard's stderr, "vbK:"
    lines, and gatecmd's log): pytest shows it when the test failed, so a failed flash can
    be read against what the board saw."""
    start = len(bench.log())
    yield
    lines = bench.log()[start:].splitlines()
    print("--- the VM's console during this test (last 120 lines) ---")
    print("\n".join(lines[-120:]))


class Agent:
    """One MCP client's view of one board: calls with the lease, asserts success."""

    def __init__(self, client, board: str, lease: str):
        self.client, self.board, self.lease = client, board, lease

    async def call(self, tool: str, args: dict, ok: bool = True, **kw) -> dict:
        r = await self.client.call_tool(tool, args, **kw)
        if ok:
            assert r.is_error is not True, f"{tool} {args}: {text(r)}"
        return r

    async def rk(self, *args: str, ok: bool = True, **kw) -> dict:
        r = await self.call(
            "execute_command",
            {"command": "rkdeveloptool", "args": list(args), "board": self.board, "lease": self.lease},
            ok=ok,
            **kw,
        )
        return r.structured_content

    async def power(self, action: str, **extra) -> dict:
        r = await self.call("power_board", {"board": self.board, "action": action, "lease": self.lease, **extra})
        return r.structured_content

    async def wait_mode(self, mode: str, timeout: int = 30) -> dict:
        r = await self.call(
            "wait_for_device",
            {"match": {"id": USB[self.board], "mode": mode}, "state": "attached", "timeout_secs": timeout},
        )
        assert r.structured_content["satisfied"] is True, text(r)
        return r.structured_content["device"]

    async def mode_now(self) -> str | None:
        r = await self.call("list_devices", {"id": USB[self.board]})
        devices = r.structured_content["devices"]
        return devices[0].get("mode") if devices else None

    async def stage(self, path: str, data: bytes) -> str:
        """Uploads `data` into the file root with write_file (2 MiB chunks); the path."""
        chunk = 1 << 20
        offset = 0
        digest = sha256(data)
        while True:
            piece = data[offset : offset + chunk]
            last = offset + len(piece) >= len(data)
            args = {"path": path, "content_base64": base64.b64encode(piece).decode(), "offset": offset}
            if last:
                args["sha256"] = digest
            r = await self.call("write_file", args)
            offset = r.structured_content["next_offset"]
            if last:
                assert r.structured_content["complete"] is True
                return r.structured_content["path"]

    async def file_sha(self, path: str) -> str:
        return (await self.call("stat_file", {"path": path})).structured_content["sha256"]

    async def cursor(self) -> int:
        # Without a cursor: the last 4 KiB, so next_cursor is the end now.
        r = await self.call("console_read", {"board": self.board})
        return r.structured_content["next_cursor"]

    async def to_loader(self) -> None:
        """MaskROM (power on, MaskROM held on vb1; a blank vb2 falls back to it) → db → Loader."""
        await self.power("off")
        await self.power("on")
        await self.wait_mode("maskrom")
        out = await self.rk("db", "loader.bin")
        assert "Downloading bootloader succeeded" in out["stdout"], out
        await self.wait_mode("loader")


async def take(client, **match) -> Agent:
    r = await client.call_tool("lock_board", {"match": {"soc": "rk3588", **match}, "wait_secs": 30, "ttl_secs": 600})
    assert r.is_error is not True, text(r)
    s = r.structured_content
    return Agent(client, s["board"], s["lease_id"])


async def test_flash_loop_through_gatecmd(bench):
    """lock_board → power on with MaskROM held → ld → db → Loader → wl with progress → rl
    equals the image → rd → the console's boot log names the image's SHA-256 → unlock."""
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    async with connect(bench.url, TOKEN_A, "legacy") as client:
        a = await take(client)
        assert a.board == "vb1", "the first free rk3588 board in config order"
        image = await a.stage("a.img", IMAGE_A)
        p = await a.power("on")
        assert p["state"] == "on" and p["exit_code"] == 0, p
        assert p["argv"][0][1:] == ["power", "vb1", "on", "--maskrom"], p
        device = await a.wait_mode("maskrom")
        assert device["soc"] == "RK3588", device
        ld = await a.rk("ld")
        assert re.search(r"Vid=0x2207,Pid=0x350b,LocationID=\d+\s+Maskrom", ld["stdout"]), ld
        assert "board:vb1" in ld["lock_keys"], ld
        db = await a.rk("db", "loader.bin")
        assert db["exit_code"] == 0 and "Downloading bootloader succeeded." in db["stdout"], db
        await a.wait_mode("loader")
        wl = await a.rk("wl", "0x40", image, progress_callback=on_progress)
        assert wl["exit_code"] == 0, wl
        assert "Write LBA from file (100%)" in wl["stdout"], wl
        # Progress notifications come from rkdeveloptool's own lines.
        assert progress, "no progress notification"
        assert all(t == 100 for _, t, _ in progress), progress
        assert all("Write LBA from file" in (m or "") for _, _, m in progress), progress
        assert [p for p, _, _ in progress] == sorted({p for p, _, _ in progress}), progress
        assert progress[-1][0] == 100, progress
        print(f"wl progress notifications: {[p for p, _, _ in progress]}")
        sectors = len(IMAGE_A) // 512
        rl = await a.rk("rl", "0x40", str(sectors), "readback-a.img")
        assert rl["exit_code"] == 0, rl
        assert await a.file_sha("readback-a.img") == sha256(IMAGE_A)
        cursor = await a.cursor()
        rd = await a.rk("rd")
        assert rd["exit_code"] == 0, rd
        r = await a.call(
            "console_read", {"board": "vb1", "cursor": cursor, "wait_for": "login:", "timeout_secs": 60, "max_bytes": 65536}
        )
        boot = r.structured_content
        assert boot["matched"] is True, boot
        assert f"sha256={sha256(IMAGE_A)}" in boot["text"], boot["text"]
        assert f"lba=0x40 sectors={sectors} bytes={len(IMAGE_A)}" in boot["text"], boot["text"]
        assert "\x1b" not in boot["text"], "ANSI sequences are cleaned"
        u = await a.call("unlock_device", {"lease": a.lease})
        assert u.structured_content["released"] is True


async def test_two_clients_two_boards_isolated(bench):
    """Two clients at once, one board each; upstream rkdeveloptool (no device selector)
    writes each client's image onto that client's board and never the other."""
    images = {TOKEN_A: ("a2.img", IMAGE_A), TOKEN_B: ("b2.img", IMAGE_B)}
    done: dict[str, dict] = {}
    windows: dict[str, tuple[float, float]] = {}

    async def flash(token: str) -> None:
        name, data = images[token]
        async with connect(bench.url, token, "legacy") as client:
            a = await take(client)
            path = await a.stage(name, data)
            await a.to_loader()
            t0 = time.monotonic()
            wl = await a.rk("wl", "0x40", path)
            windows[a.board] = (t0, time.monotonic())
            assert wl["exit_code"] == 0 and wl["isolated_view"]["device"] == USB[a.board], wl
            assert wl["isolated_view"]["sysfs_entries"][0] == USB[a.board], wl
            sectors = (len(data) + 511) // 512
            rl = await a.rk("rl", "0x40", str(sectors), f"readback-{a.board}.img")
            assert rl["exit_code"] == 0, rl
            done[a.board] = {"token": token, "sha": await a.file_sha(f"readback-{a.board}.img"), "image": sha256(data)}
            # Reading the other board's region as this client's board: what lies there is
            # this client's image, whichever board the other client has.
            await client.call_tool("unlock_device", {"lease": a.lease})

    async with anyio.create_task_group() as tg:
        tg.start_soon(flash, TOKEN_A)
        tg.start_soon(flash, TOKEN_B)
    assert set(done) == {"vb1", "vb2"}, done
    for board, d in done.items():
        assert d["sha"] == d["image"], f"{board} holds another image than its client wrote: {done}"
    assert done["vb1"]["sha"] != done["vb2"]["sha"]
    print(f"wl windows (monotonic s): {windows}")


async def test_garbage_loader_keeps_maskrom(bench):
    async with connect(bench.url, TOKEN_A, "legacy") as client:
        a = await take(client)
        try:
            await a.power("off")
            await a.power("on")
            await a.wait_mode("maskrom")
            db = await a.rk("db", "garbage.bin", ok=False)
            assert db["exit_code"] not in (0, None), db
            assert "Opening loader failed, exiting download boot!" in db["stdout"] + db["stderr"], db
            # rkdeveloptool never sent a byte: the board is still in MaskROM, same device.
            await anyio.sleep(1.0)
            assert await a.mode_now() == "maskrom"
            # A well-formed boot file whose payload no ROM would run: sent, "succeeded", and
            # the board stays in MaskROM all the same (docs/VBOARD.md, --bad-payload).
            bad = await a.rk("db", "bad-payload.bin", ok=False)
            assert "Downloading bootloader succeeded." in bad["stdout"], bad
            await anyio.sleep(1.0)
            assert await a.mode_now() == "maskrom"
        finally:
            await client.call_tool("unlock_device", {"lease": a.lease})


async def test_wl_in_maskrom_fails(bench):
    async with connect(bench.url, TOKEN_A, "legacy") as client:
        a = await take(client)
        try:
            await a.power("off")
            await a.power("on")
            await a.wait_mode("maskrom")
            path = await a.stage("m.img", IMAGE_B)
            wl = await a.rk("wl", "0x40", path, ok=False)
            assert wl["exit_code"] not in (0, None), wl
            assert "Write LBA failed!" in wl["stdout"] + wl["stderr"], wl
        finally:
            await client.call_tool("unlock_device", {"lease": a.lease})


async def test_image_larger_than_the_flash_fails(bench):
    async with connect(bench.url, TOKEN_A, "legacy") as client:
        a = await take(client)
        try:
            await a.to_loader()
            wl = await a.rk("wl", "0x40", "huge.img", ok=False)
            assert wl["exit_code"] not in (0, None), wl
            assert "Write LBA failed!" in wl["stdout"] + wl["stderr"], wl
            # Some of it was written before the end of the flash: the last percentage
            # rkdeveloptool printed is below 100.
            assert "Write LBA from file (100%)" not in wl["stdout"], wl
        finally:
            await client.call_tool("unlock_device", {"lease": a.lease})


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_flash_longer_than_the_clients_patience_finishes_as_a_job(bench, mode):
    """The real rkdeveloptool's wl outlives the call: the client gives up after 1.5 s (as
    the TypeScript SDK does after 60 s by default) and abandons the request (legacy:
    notifications/cancelled; 2026-07-28: the POST is closed); gatecmd detaches the write
    (destructive commands default to cancel: detach) instead of killing it, the next call
    finds it in list_jobs, wait_job follows it to exit 0, and rl reads the image back."""
    async with connect(bench.url, TOKEN_A, mode) as client:
        a = await take(client)
        try:
            await a.to_loader()
            rc, out = await anyio.to_thread.run_sync(bench.guest, f"sha256sum {vbench.IMAGES}/slow.img")
            slow_sha = out[0].split()[0]
            t0 = time.monotonic()
            with pytest.raises(Exception):
                # 16 MiB at the bench's 4 MiB/s: 4 s or more.
                await a.rk("wl", "0x40", "slow.img", read_timeout_seconds=1.5)
            gave_up = time.monotonic() - t0
            assert gave_up < 4, f"the call took {gave_up:.1f} s before it gave up"
            jobs = []
            for _ in range(50):
                listed = (await a.call("list_jobs", {})).structured_content["jobs"]
                jobs = [j for j in listed if j["command"] == "rkdeveloptool" and j["state"] == "running"]
                if jobs and jobs[0]["origin"] == "detached":
                    break
                await anyio.sleep(0.1)
            assert jobs and jobs[0]["origin"] == "detached", listed
            job = jobs[0]["job"]
            assert jobs[0]["board"] == a.board, jobs[0]
            stdout, cursor = "", None
            for _ in range(20):
                args = {"job": job, "timeout_secs": 30}
                if cursor is not None:
                    args["output_cursor"] = cursor
                w = (await a.call("wait_job", args)).structured_content
                stdout += w["stdout"]
                cursor = w["output_cursor"]
                if w["state"] != "running" and not w["more_output"]:
                    break
            assert w["state"] == "succeeded" and w["exit_code"] == 0, w
            assert "Write LBA from file (100%)" in stdout, stdout[-500:]
            rl = await a.rk("rl", "0x40", str(SLOW_MIB * MIB // 512), f"readback-job-{mode}.img")
            assert rl["exit_code"] == 0, rl
            rc, out = await anyio.to_thread.run_sync(bench.guest, f"sha256sum {vbench.IMAGES}/readback-job-{mode}.img")
            assert out[0].split()[0] == slow_sha
        finally:
            await client.call_tool("unlock_device", {"lease": a.lease})


async def test_power_off_mid_wl_then_retry(bench):
    """Someone switches the board off at the bench while wl runs: the result says the
    device went away, the lease survives, and the same lease's retry succeeds."""
    async with connect(bench.url, TOKEN_A, "legacy") as client:
        a = await take(client)
        await a.to_loader()
        pulled = anyio.Event()

        # Hashed in the guest by busybox: stat_file's hash of 16 MiB in a debug build under
        # TCG takes half a minute.
        rc, out = await anyio.to_thread.run_sync(bench.guest, f"sha256sum {vbench.IMAGES}/slow.img")
        slow_sha = out[0].split()[0]
        cut: dict[str, float] = {}

        async def pull_the_plug() -> None:
            # As a person at the bench would: in the guest, not through gatecmd (the lease
            # holder is busy writing).
            await anyio.to_thread.run_sync(bench.vboard_power, a.board, "off")
            pulled.set()

        async with anyio.create_task_group() as tg:

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                # rkdeveloptool's stdout is a pipe, so its lines come in 4 KiB bursts: the
                # first one below 100 % says the write is under way.
                if p < 100 and "p" not in cut:
                    cut["p"] = p
                    tg.start_soon(pull_the_plug)

            async def pull_after_a_while() -> None:
                # The bursts may all arrive at the end (the pipe's buffer holds most of a
                # write's progress lines): the flash takes 16 MiB in 4 s or more, so a cut
                # 1 s after the call started lands mid-write whichever comes first.
                await anyio.sleep(1.0)
                if "p" not in cut:
                    cut["p"] = -1
                    await pull_the_plug()

            tg.start_soon(pull_after_a_while)

            r = await a.call(
                "execute_command",
                {"command": "rkdeveloptool", "args": ["wl", "0x40", "slow.img"], "board": a.board, "lease": a.lease},
                ok=False,
                progress_callback=on_progress,
            )
        assert pulled.is_set(), "the write ended before the board could be switched off"
        wl = r.structured_content
        print(f"wl took {wl['duration_ms']} ms; power cut at {cut.get('p')} %")
        assert r.is_error is True and wl["exit_code"] != 0, wl
        assert "Write LBA failed!" in wl["stdout"] + wl["stderr"], wl
        left = wl.get("device_left")
        assert left is not None and left["device"] == USB[a.board] and left["attached_now"] is False, wl
        assert "went away" in text(r), text(r)
        # The lease survived: the holder powers the board on again and writes it whole.
        locks = (await a.call("list_locks", {})).structured_content["locks"]
        assert any(l["key"] == f"board:{a.board}" and l.get("lease_id") == a.lease for l in locks), locks
        await a.to_loader()
        wl2 = await a.rk("wl", "0x40", "slow.img")
        assert wl2["exit_code"] == 0 and "device_left" not in wl2, wl2
        rl = await a.rk("rl", "0x40", str(SLOW_MIB * MIB // 512), "readback-slow.img")
        assert rl["exit_code"] == 0
        rc, out = await anyio.to_thread.run_sync(bench.guest, f"sha256sum {vbench.IMAGES}/readback-slow.img")
        assert out[0].split()[0] == slow_sha
        # The same cut under a background job: wait_job's answer says the device went away.
        h = (await a.call(
            "execute_command",
            {"command": "rkdeveloptool", "args": ["wl", "0x40", "slow.img"], "board": a.board, "lease": a.lease, "background": True},
        )).structured_content
        await anyio.sleep(1.0)
        await anyio.to_thread.run_sync(bench.vboard_power, a.board, "off")
        w = (await a.call("wait_job", {"job": h["job"], "timeout_secs": 60})).structured_content
        assert w["state"] == "failed", w
        left = w.get("device_left")
        assert left is not None and left["device"] == USB[a.board] and left["attached_now"] is False, w
        await client.call_tool("unlock_device", {"lease": a.lease})
