"""`make demo` started as a terminal starts it (its own process group), its banner parsed,
and ended as Ctrl-C ends it; what is left of its process group read from /proc. Used by
tests/python/test_demo.py and benches/demo.py. Standard library only.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BANNER_SECS = 300  # a kill-switch for the boot to the banner (16-40 s here)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_stat(pid: int | str) -> tuple[str, list[str]] | None:
    """(comm, [state, ppid, pgrp, …]) of a process from /proc/PID/stat, None when gone."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # pid (comm) state ppid pgrp …: comm may hold spaces and parentheses.
    return line[line.index("(") + 1 : line.rindex(")")], line[line.rindex(")") + 2 :].split()


def group_members(pgid: int) -> list[tuple[int, str, str]]:
    """Every live process whose process group is `pgid` (not matched by name): pid, comm
    and start time (field 22), which tells a process from a later one given its pid."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (st := proc_stat(d.name)) and int(st[1][2]) == pgid and st[1][0] != "Z":
            out.append((int(d.name), st[0], st[1][19]))
    return out


def alive(pid: int, start: str) -> bool:
    st = proc_stat(pid)
    return st is not None and st[1][19] == start and st[1][0] != "Z"


class Demo:
    """`make demo` running in its own process group; its banner parsed."""

    def __init__(self, work: Path, gatecmd: str, vboard: str):
        self.dir = work / "demo"
        self.bin_dir = bin_dir = work / "bin"
        bin_dir.mkdir()
        (bin_dir / "gatecmd").symlink_to(gatecmd)
        (bin_dir / "gatecmd-vboard").symlink_to(vboard)
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        env.update(
            GATECMD_DEMO_BIN_DIR=str(bin_dir),
            GATECMD_DEMO_DIR=str(self.dir),
            GATECMD_DEMO_BIND=f"127.0.0.1:{self.port}",
            GATECMD_DEMO_VM="1",
        )
        self.lines: list[str] = []
        self.banner_seen = threading.Event()
        self.t0 = time.monotonic()
        # A new session: the process group a terminal gives a command, Ctrl-C's target.
        self.proc = subprocess.Popen(
            ["make", "--no-print-directory", "demo"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.pgid = self.proc.pid
        threading.Thread(target=self._read, daemon=True).start()
        if not self.banner_seen.wait(BANNER_SECS) or self.proc.poll() is not None:
            self.interrupt()
            raise AssertionError(f"make demo did not reach its banner:\n{self.output()[-4000:]}")
        self.banner_secs = time.monotonic() - self.t0
        out = self.output()
        self.url = re.search(r"^  MCP endpoint   (\S+)$", out, re.M).group(1)
        self.token_file = Path(re.search(r"^  token file     (\S+)", out, re.M).group(1))
        self.files = Path(re.search(r"^  files          (\S+)", out, re.M).group(1))
        self.token = self.token_file.read_text().strip()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("Ctrl-C stops gatecmd"):
                self.banner_seen.set()
        self.banner_seen.set()

    def output(self) -> str:
        return "\n".join(self.lines)

    def interrupt(self, timeout: float = 60) -> int:
        """Ctrl-C: SIGINT to the whole process group, then its exit status."""
        if self.proc.poll() is None:
            os.killpg(self.pgid, signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.pgid, signal.SIGKILL)
            self.proc.wait()
            raise

    def console(self) -> str:
        try:
            return (self.dir / "vm/console.log").read_text(errors="replace").replace("\r", "")
        except OSError:
            return ""
