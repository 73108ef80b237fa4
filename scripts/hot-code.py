#!/usr/bin/env python3
"""Writes link/hot-code.order: the functions a serving gatecmd runs, hottest phase first.

Run by `make hot-code` (valgrind needed: `apt install valgrind`). It builds the release
binary exactly as `make build` and the Debian package do (the symbol names depend on the
profile, the toolchain and the dependencies' versions), serves the bundled config under
callgrind, and records which of the binary's functions run:

1. from `after_start` (src/cli/trim.rs, where start-up's code pages are dropped): the rest
   of start-up, `GET /health` and 1.5 s of idling (the idle server's timers and tasks);
2. then the common MCP requests, with the official Python SDK in both its modes.

build.rs hands the file to the linker, which places these functions first, in this order
(docs/PERFORMANCE.md, "Idle RSS beside the peer"). Regenerate after a toolchain or dependency
update, or when the idle figure grows: stale names are skipped, never an error.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "link" / "hot-code.order"
PORT = 47491


def die(msg: str) -> None:
    print(f"hot-code: {msg}", file=sys.stderr)
    sys.exit(1)


def binary() -> Path:
    subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    target = re.search(r'"target_directory":"([^"]+)"', meta)
    if not target:
        die("cargo metadata named no target directory")
    return Path(target.group(1)) / "release" / "gatecmd"


def function_symbols(path: Path) -> set[str]:
    out = subprocess.run(["nm", str(path)], check=True, capture_output=True, text=True).stdout
    names = {p[2] for p in (line.split() for line in out.splitlines()) if len(p) == 3 and p[1] in "tT"}
    if not names:
        die(f"{path} has no symbol table: [profile.release] must keep it (strip = \"debuginfo\")")
    return names


def executed(dump: Path, exe: str) -> list[str]:
    """The functions of `exe` that have cost in one callgrind dump, in file order."""
    names: dict[str, str] = {}
    objects: dict[str, str] = {}
    current = None
    found: list[str] = []
    for line in dump.read_text(errors="replace").splitlines():
        m = re.match(r"^(c?ob)=\((\d+)\)(?: (.*))?$", line)
        if m:
            if m.group(3):
                objects[m.group(2)] = m.group(3)
            if m.group(1) == "ob":
                current = objects.get(m.group(2))
                current = os.path.realpath(current) if current else None
            continue
        m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
        if m:
            if m.group(3):
                names[m.group(2)] = m.group(3)
            if m.group(1) == "fn" and current == exe and m.group(2) in names:
                found.append(re.sub(r"'\d+$", "", names[m.group(2)]))
    return found


def mcp_calls(url: str) -> None:
    python = ROOT / ".venv" / "bin" / "python"
    code = """
import anyio, sys
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
async def main(url):
    for mode in ["legacy", "auto"]:
        async with create_mcp_http_client(timeout=300) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=mode) as c:
                await c.list_tools()
                await c.list_resources()
                for tool, args in [("list_devices", {}), ("list_commands", {}), ("list_locks", {}),
                                   ("execute_command", {"command": "lsusb", "args": []})]:
                    await c.call_tool(tool, args)
anyio.run(main, sys.argv[1])
"""
    subprocess.run([str(python), "-c", code, url], check=True, timeout=900)


def main() -> None:
    for tool in ("valgrind", "callgrind_control", "nm"):
        if not shutil.which(tool):
            die(f"{tool} is not installed (apt install valgrind binutils)")
    subprocess.run([str(ROOT / "scripts" / "venv.sh")], check=True)
    exe = binary()
    symbols = function_symbols(exe)
    with tempfile.TemporaryDirectory(prefix="gatecmd-hot-code.") as tmp:
        work = Path(tmp)
        env = dict(os.environ, GATECMD_LOG="warn", XDG_STATE_HOME=str(work / "state"))
        log = open(work / "server.log", "w+")
        server = subprocess.Popen(
            # Costs start from zero when `after_start` (src/cli/trim.rs) is entered: what runs
            # from there on is the serving server's; start-up's pages were just dropped.
            ["valgrind", "--tool=callgrind", "--demangle=no", "--zero-before=*after_start*",
             f"--callgrind-out-file={work}/callgrind.out",
             str(exe), "serve", "--config", str(ROOT / "allowed_commands.yaml"),
             "--bind", f"127.0.0.1:{PORT}", "--no-auth"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 300
            while "listening on" not in (work / "server.log").read_text(errors="replace"):
                if server.poll() is not None or time.monotonic() > deadline:
                    die("the server did not start under valgrind:\n" + (work / "server.log").read_text())
                time.sleep(0.2)
            control = ["callgrind_control"]
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=120).read()
            time.sleep(1.5)
            subprocess.run(control + ["-d", "idle", str(server.pid)], check=True, capture_output=True)
            mcp_calls(f"http://127.0.0.1:{PORT}/mcp")
            subprocess.run(control + ["-d", "requests", str(server.pid)], check=True, capture_output=True)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(60)
        dumps = sorted(work.glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:]))
        if len(dumps) < 2:
            die(f"expected two callgrind dumps, found {[d.name for d in dumps]}")
        order: list[str] = []
        seen: set[str] = set()
        counts = []
        for dump in dumps[:2]:
            for name in executed(dump, os.path.realpath(exe)):
                if name in symbols and name not in seen:
                    seen.add(name)
                    order.append(name)
            counts.append(len(order))
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    header = [
        "# The functions a serving gatecmd runs, placed first in the release binary's code",
        "# (build.rs; docs/PERFORMANCE.md, \"Idle RSS beside the peer\"). Written by scripts/hot-code.py",
        "# (`make hot-code`); do not edit. Regenerate after a toolchain or dependency update:",
        "# names the build no longer has are skipped, which costs idle memory, not correctness.",
        f"# {rustc}; idle: {counts[0]} functions, then the MCP requests: {counts[1] - counts[0]}.",
    ]
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text("\n".join(header + order) + "\n")
    print(f"hot-code: {OUT.relative_to(ROOT)}: {counts[0]} idle functions, {counts[1]} in all")


if __name__ == "__main__":
    main()
