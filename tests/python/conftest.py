"""Fixtures: the real gatecmd binary on an ephemeral loopback port, driven by the official
MCP Python SDK (`mcp` 2.3.x) over Streamable HTTP with a bearer token.

scripts/pytest.sh sets GATECMD_BIN (the cargo-built binary) and runs pytest in .venv.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

REPO = Path(__file__).resolve().parents[2]
FAKE_RK = REPO / "tests" / "tools" / "fake-rkdeveloptool"
FIXTURES = REPO / "tests" / "fixtures"
TOKEN_A = "py-token-for-vm-a-0123456789"
TOKEN_B = "py-token-for-vm-b-9876543210"
SYS_1_2 = "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-2"

CONFIG = f"""
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
limits:
  kill_grace_secs: 1
devices:
  - name: rockusb
    match: {{vid: "2207", pid: "350b"}}
commands:
  - name: echo
    binary: /usr/bin/echo
    description: Print two words.
    read_only: true
    params: {{a: "[a-z]+", b: "[a-z]+"}}
    allowed_args:
      - pattern: "{{a}} {{b}}"
  - name: flash
    binary: {FAKE_RK}
    description: Fake rkdeveloptool writing an image with progress.
    progress: "\\\\((\\\\d+)%\\\\)"
    env: {{FAKE_RK_STEPS: "5", FAKE_RK_DELAY: "0.2"}}
    params: {{lba: "[0-9]+"}}
    allowed_args:
      - pattern: wl {{lba}}
  - name: flash-slow
    binary: {FAKE_RK}
    description: Fake rkdeveloptool that takes a minute and leaves a TERM-ignoring grandchild.
    progress: "\\\\((\\\\d+)%\\\\)"
    env: {{FAKE_RK_STEPS: "600", FAKE_RK_DELAY: "0.1", FAKE_RK_CHILD: "$DIR/child.pid", FAKE_RK_LOG: "$DIR/rk.log"}}
    params: {{lba: "[0-9]+"}}
    allowed_args:
      - pattern: wl {{lba}}
"""


def gatecmd_bin() -> str:
    path = os.environ.get("GATECMD_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("GATECMD_BIN must name the cargo-built gatecmd binary (scripts/pytest.sh sets it)")
    return path


class Server:
    """A running `gatecmd serve` on 127.0.0.1:0; `url` is its /mcp endpoint."""

    def __init__(
        self, directory: Path, config: str = CONFIG, env: dict[str, str] | None = None, bind: str = "127.0.0.1:0"
    ):
        self.dir = directory
        cfg = directory / "config.yaml"
        cfg.write_text(config.replace("$DIR", str(directory)))
        cfg.chmod(stat.S_IRUSR | stat.S_IWUSR)  # it holds tokens: owner-only, or gatecmd refuses
        full_env = dict(os.environ, GATECMD_LOG="info", STATE_DIRECTORY=str(directory / "state"))
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [gatecmd_bin(), "serve", "--config", str(cfg), "--bind", bind],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=full_env,
            text=True,
        )
        self.log: list[str] = []
        ready = threading.Event()
        self.url = ""

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                line = line.rstrip("\n")
                self.log.append(line)
                if line.startswith("gatecmd: listening on ") and not self.url:
                    self.url = line.removeprefix("gatecmd: listening on ")
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(20) or not self.url:
            self.stop()
            pytest.fail("gatecmd did not start:\n" + "\n".join(self.log))
        self.base = self.url.removesuffix("/mcp")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Testbed:
    """A umockdev testbed owned by tests/python/umockdev_bed.py, a child running under
    LD_PRELOAD=libumockdev-preload.so.0 (pytest itself stays outside the preload)."""

    def __init__(self) -> None:
        env = dict(os.environ, LD_PRELOAD="libumockdev-preload.so.0")
        env.pop("UMOCKDEV_DIR", None)
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("umockdev_bed.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        first = self._line()
        if not first.startswith("root "):
            pytest.fail(f"umockdev helper: {first}")
        self.root = first.removeprefix("root ")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def _cmd(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self._line()
        assert answer == "ok", f"umockdev helper: {line}: {answer}"

    def add(self, fixture: str) -> None:
        self._cmd(f"add {FIXTURES / fixture}")

    def unplug(self, syspath: str) -> None:
        self._cmd(f"unplug {syspath}")

    def server_env(self) -> dict[str, str]:
        return {"LD_PRELOAD": "libumockdev-preload.so.0", "UMOCKDEV_DIR": self.root}

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._cmd("quit")
            except (AssertionError, BrokenPipeError):
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("gatecmd"))
    yield s
    s.stop()


@pytest.fixture
def testbed():
    tb = Testbed()
    yield tb
    tb.close()


@pytest.fixture
def device_server(tmp_path, testbed):
    """gatecmd under the umockdev preload, seeing `testbed` (created before the server)."""
    testbed.add("usb1-root-hub.umockdev")
    s = Server(tmp_path, env=testbed.server_env())
    yield s
    s.stop()


@asynccontextmanager
async def connect(url: str, token: str, mode: str, **kwargs):
    """The connection a user writes (see docs/CLIENTS.md): bearer token on every request."""
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, **kwargs) as client:
            yield client


def settled_text(path: Path, quiet: float = 0.05, within: float = 5.0) -> str:
    """The audit log's text once gatecmd's writer has caught up: it writes each line a
    moment after the call that made it, on its writer thread (docs/AUDIT.md, "Writing"), so
    a reader right after an answer waits until the file stops growing for `quiet` seconds."""
    import time

    def size() -> int | None:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return None

    deadline = time.monotonic() + within
    last = size()
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = size()
        if now is not None and now == last:
            break
        last = now
    return path.read_text()
