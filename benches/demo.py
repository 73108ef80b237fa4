"""`make demo` in the VM, timed (`make bench-demo`; not part of `make test`).

Runs `make demo` DEMO_BENCH_RUNS times (default 5) as a newcomer's terminal runs it (its
own process group, GATECMD_DEMO_VM=1 so the VM path is measured on any host), with the
binaries of GATECMD_DEMO_BIN_DIR (default target/release: what `make demo` builds), and
prints one table: start → banner (timed here, from the command to the banner's last line),
one MCP call through the forward (list_boards with the banner's token, the official Python
SDK), Ctrl-C (SIGINT to the group) → every process of the group gone. The kernel is the
cached one (tests/vm/prepare.sh ran before): the first run on a machine also downloads it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

from demo_run import Demo, group_members  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

RUNS = int(os.environ.get("DEMO_BENCH_RUNS", "5"))


async def list_boards(url: str, token: str) -> float:
    t = time.monotonic()
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
            r = await c.call_tool("list_boards", {})
            names = sorted(b["name"] for b in r.structured_content["boards"])
            if names != ["vb1", "vb2"]:
                raise RuntimeError(f"list_boards: {names}")
    return time.monotonic() - t


def row(name: str, xs: list[float]) -> str:
    return f"| {name} | {statistics.median(xs):.1f} s | {min(xs):.1f}–{max(xs):.1f} s |"


def main() -> int:
    bin_dir = Path(os.environ.get("GATECMD_DEMO_BIN_DIR") or REPO / "target" / "release")
    for b in ("gatecmd", "gatecmd-vboard"):
        if not os.access(bin_dir / b, os.X_OK):
            sys.exit(f"bench-demo: {bin_dir / b} is missing: cargo build --release --locked --bin gatecmd -p gatecmd-vboard")
    banner, call, stop = [], [], []
    for i in range(RUNS):
        work = Path(tempfile.mkdtemp(prefix="gatecmd-bench-demo."))
        try:
            d = Demo(work, str(bin_dir / "gatecmd"), str(bin_dir / "gatecmd-vboard"))
            banner.append(d.banner_secs)
            call.append(asyncio.run(list_boards(d.url, d.token)))
            t = time.monotonic()
            d.interrupt()
            while group_members(d.pgid) and time.monotonic() - t < 60:
                time.sleep(0.05)
            stop.append(time.monotonic() - t)
            print(f"run {i + 1}: banner {banner[-1]:.1f} s, list_boards {call[-1]:.2f} s, Ctrl-C → none left {stop[-1]:.1f} s", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    print(f"\nmake demo in the VM, {RUNS} runs, {bin_dir}; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print("| figure | median | range |\n|---|---|---|")
    print(row("make demo → banner", banner))
    print(row("first MCP call (list_boards, new session)", call))
    print(row("Ctrl-C → no process of the group left", stop))
    return 0


if __name__ == "__main__":
    sys.exit(main())
