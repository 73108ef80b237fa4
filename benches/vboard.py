"""Flashing benchmarks on virtual boards in a VM (`make bench-vboard`; not part of `make test`).

The VM of tests/python/vbench.py (usbvm: Debian's kernel under QEMU TCG, gatecmd-vboard,
Debian's rkdeveloptool, gatecmd) with release binaries and 128 MiB of flash per board:

1. `wl 0x40` of a 64 MiB image, alternately through gatecmd (the official MCP Python SDK on
   the host, with a progress token, as an agent calls it; timed on the host from the call to
   the result) and the same rkdeveloptool run directly in the same guest (timed in the guest
   around the run). Same board, same image, same run; ratio of the medians.
2. Power on → `login:`: power_board on (vb2, a plain power on that boots its flash), then
   console_read {wait_for: "login:"} from the cursor before it; timed on the host, median of 5.

  GATECMD_BIN, GATECMD_VBOARD_BIN   release binaries (default target/release/...)
  VBOARD_BENCH_RUNS                 flashes per side (default 3)
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

import vbench  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

MIB = 1 << 20
IMAGE_MIB = 64
RUNS = int(os.environ.get("VBOARD_BENCH_RUNS", "3"))
LOGINS = 5


def release(var: str, name: str) -> Path:
    p = Path(os.environ.get(var) or REPO / "target" / "release" / name)
    if not os.access(p, os.X_OK):
        sys.exit(f"bench-vboard: {p} is missing: cargo build --release --locked --bin gatecmd -p gatecmd-vboard")
    return p


class Caller:
    def __init__(self, client, board: str, lease: str):
        self.c, self.board, self.lease = client, board, lease

    async def call(self, tool: str, args: dict, **kw) -> dict:
        r = await self.c.call_tool(tool, args, **kw)
        if r.is_error:
            raise RuntimeError(f"{tool} {args}: {r.content}")
        return r.structured_content

    async def rk(self, *args: str, **kw) -> dict:
        return await self.call(
            "execute_command",
            {"command": "rkdeveloptool", "args": list(args), "board": self.board, "lease": self.lease},
            **kw,
        )

    async def power(self, action: str) -> dict:
        return await self.call("power_board", {"board": self.board, "action": action, "lease": self.lease})

    async def wait(self, mode: str) -> None:
        usb = vbench.PORTS[self.board][0]
        await self.call("wait_for_device", {"match": {"id": usb, "mode": mode}, "state": "attached", "timeout_secs": 60})

    async def to_loader(self) -> None:
        await self.power("off")
        await self.power("on")
        await self.wait("maskrom")
        await self.rk("db", "loader.bin")
        await self.wait("loader")


def guest_seconds(bench: vbench.Bench, command: str) -> float:
    """Runs `command` in the guest and returns how long it took, read in the guest from
    /proc/uptime around it (10 ms resolution; the runs take seconds)."""
    rc, lines = bench.guest(
        "a=$(cut -d' ' -f1 /proc/uptime); " + command + " >/tmp/direct.out 2>&1; rc=$?; "
        "b=$(cut -d' ' -f1 /proc/uptime); echo \"rc=$rc a=$a b=$b\"; tail -n 2 /tmp/direct.out",
        timeout=600,
    )
    text = "\n".join(lines)
    m = re.search(r"rc=(\d+) a=([\d.]+) b=([\d.]+)", text)
    if rc != 0 or not m or m.group(1) != "0":
        raise RuntimeError(f"direct run failed: {text}")
    return float(m.group(3)) - float(m.group(2))


async def main() -> None:
    gatecmd = release("GATECMD_BIN", "gatecmd")
    vboard = release("GATECMD_VBOARD_BIN", "gatecmd-vboard")
    t0 = time.monotonic()
    bench = vbench.Bench(gatecmd, vboard, flash_size="128M", timeout=1800, log_level="warn")
    print(f"VM up, gatecmd listening, after {bench.ready_secs:.1f} s", flush=True)
    try:
        # The image is made in the guest (a 64 MiB initramfs would slow every boot).
        rc, lines = bench.guest(
            f"{{ printf RKNS; head -c $(({IMAGE_MIB} * 1024 * 1024 - 4)) /dev/urandom; }} > {vbench.IMAGES}/big.img && ls -l {vbench.IMAGES}/big.img",
            timeout=120,
        )
        if rc != 0:
            raise RuntimeError(f"making the image: {lines}")
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {vbench.TOKEN_A}"}) as http:
            async with Client(streamable_http_client(bench.url, http_client=http), mode="legacy") as client:
                r = await client.call_tool("lock_board", {"board": "vb1", "ttl_secs": 3600})
                a = Caller(client, "vb1", r.structured_content["lease_id"])
                await a.to_loader()
                via, via_child, direct = [], [], []
                progress_counts = []
                for i in range(RUNS):
                    direct.append(guest_seconds(bench, f"/usr/bin/rkdeveloptool wl 0x40 {vbench.IMAGES}/big.img"))
                    seen = []

                    async def on_progress(p, total, message, seen=seen):
                        seen.append(p)

                    s = time.monotonic()
                    out = await a.rk("wl", "0x40", "big.img", progress_callback=on_progress)
                    via.append(time.monotonic() - s)
                    via_child.append(out["duration_ms"] / 1000)
                    progress_counts.append(len(seen))
                    print(
                        f"run {i + 1}: direct {direct[-1]:.2f} s, through gatecmd {via[-1]:.2f} s "
                        f"(child {via_child[-1]:.2f} s, {len(seen)} progress notifications)",
                        flush=True,
                    )
                await client.call_tool("unlock_device", {"lease": a.lease})

                # Power on -> login: on vb2, whose plain power on boots its flash.
                r = await client.call_tool("lock_board", {"board": "vb2", "ttl_secs": 3600})
                b = Caller(client, "vb2", r.structured_content["lease_id"])
                await b.to_loader()
                rc, lines = bench.guest(
                    f"{{ printf RKNS; head -c 262140 /dev/urandom; }} > {vbench.IMAGES}/boot.img", timeout=60
                )
                await b.rk("wl", "0x40", "boot.img")
                logins = []
                for i in range(LOGINS):
                    await b.power("off")
                    cur = (await b.call("console_read", {"board": "vb2", "max_bytes": 1}))["next_cursor"]
                    s = time.monotonic()
                    await b.power("on")
                    got = await b.call(
                        "console_read", {"board": "vb2", "cursor": cur, "wait_for": "login:", "timeout_secs": 60}
                    )
                    logins.append(time.monotonic() - s)
                    if not got["matched"]:
                        raise RuntimeError(f"no login: prompt: {got}")
                    print(f"power on -> login: {logins[-1]:.2f} s", flush=True)
                await client.call_tool("unlock_device", {"lease": b.lease})
    finally:
        bench.stop()
    md, mv, mc = statistics.median(direct), statistics.median(via), statistics.median(via_child)
    print()
    print(f"| wl {IMAGE_MIB} MiB directly in the guest (median of {RUNS}) | {md:.2f} s |")
    print(f"| wl {IMAGE_MIB} MiB through gatecmd, MCP call to result (median of {RUNS}) | {mv:.2f} s (child {mc:.2f} s) |")
    print(f"| ratio through gatecmd / direct | {mv / md:.3f} (goal <= 1.05) |")
    print(f"| progress notifications per wl | {statistics.median(progress_counts):.0f} |")
    print(f"| power on -> login: matched by console_read (median of {LOGINS}) | {statistics.median(logins):.2f} s (min {min(logins):.2f}, max {max(logins):.2f}) |")
    print(f"total {time.monotonic() - t0:.0f} s")
    bench.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
