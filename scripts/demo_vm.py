#!/usr/bin/env python3
"""`make demo` where this host cannot hold USB gadgets itself (a container, no root, no
dummy_hcd): the project's own test VM (tests/vm: Debian's kernel with dummy_hcd under QEMU
TCG, no KVM, no root) runs scripts/demo.sh inside, which there finds what it needs and runs
the two virtual boards and gatecmd exactly as on a host; gatecmd's port is forwarded to
this host's GATECMD_DEMO_BIND (127.0.0.1:9222). scripts/demo.sh runs this after its checks,
with these set:

    GATECMD_DEMO_BIN_DIR   gatecmd and gatecmd-vboard (built for this host)
    GATECMD_DEMO_DIR       the demo's directory here: images/ (the files the VM gets),
                           state/token (the VM's gatecmd reads the same token), vm/ (the
                           VM's work directory: console.log holds every guest log)
    GATECMD_DEMO_BIND      ADDR:PORT on this host

It shows the boot's progress, prints demo/banner.txt with this host's URL and paths once
gatecmd answers through the forward, and runs until SIGINT or SIGTERM, which stop
gatecmd, the boards and the VM. Python 3 standard library only.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests/vm"))
import vmctl  # noqa: E402  the harness's host side

GUEST_DIR = "/var/lib/gatecmd-demo"
GUEST_PORT = 9222
# The modules the boards need beyond the harness's own (FunctionFS, the ACM gadget function
# and the host's ACM driver), as tests/python/vbench.py boots them.
EXTRA_MODULES = "usb_f_fs usb_f_acm cdc_acm"
# Host programs the guest runs (the harness brings their libraries): the config's tools,
# and coreutils' libstdbuf, without which rkdeveloptool's progress arrives only at the end
# (docs/DECISIONS.md, "Live progress").
HOST_FILES = ["/usr/bin/rkdeveloptool", "/usr/bin/lsusb", "/usr/libexec/coreutils/libstdbuf.so"]
# The guest's one program runs until Ctrl-C; the harness's own kill-switch is a year away.
FOREVER_SECS = 365 * 24 * 3600
BOOT_SECS = 240  # the boot to gatecmd answering, at most (about 30 s here, docs/PERFORMANCE.md)
TICK_SECS = 5  # the longest silence while the VM boots


def say(msg: str) -> None:
    print(f"make demo: {msg}", file=sys.stderr, flush=True)


class Refusal(Exception):
    """Why the demo cannot go on: one line."""


def bind_address() -> tuple[str, int]:
    text = os.environ.get("GATECMD_DEMO_BIND", "127.0.0.1:9222")
    host, sep, port = text.rpartition(":")
    try:
        ipaddress.IPv4Address(host)
        number = int(port)
        if not sep or not 0 < number < 65536:
            raise ValueError
    except ValueError:
        raise Refusal(f"GATECMD_DEMO_BIND={text} is not IPV4:PORT (QEMU forwards IPv4 only)") from None
    return host, number


def check_port_free(host: str, port: int) -> None:
    """Fails only where QEMU's forward would: another listener. SO_REUSEADDR, as QEMU's
    own listener has, lets the port's TIME_WAIT connections of a demo just stopped by."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen()
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise Refusal(
                    f"{host}:{port} is in use (another make demo or gatecmd?): stop it, or set GATECMD_DEMO_BIND=127.0.0.1:PORT"
                ) from None
            raise Refusal(f"cannot listen on {host}:{port}: {e.strerror}") from None


def stripped(src: Path, into: Path) -> Path:
    """A copy without debug info: it goes into the VM's initramfs."""
    dst = into / src.name
    shutil.copy(src, dst)
    subprocess.run(["strip", str(dst)], check=True)
    return dst


class Progress(threading.Thread):
    """Says what the boot is doing, from the VM's console, until the banner: the harness's
    init steps, this script's own `make demo:` lines from inside, and every TICK_SECS a
    line with the time so far when nothing else happened."""

    STEPS = [
        (re.compile(r"\[usbvm\] T\+([0-9.]+)s init started"), "the VM's kernel is up (guest time {0} s); loading the USB modules"),
        (re.compile(r"\[usbvm\] T\+[0-9.]+s udevd up; UDCs: (.*)"), "the VM's USB stack is up (UDCs: {0})"),
        (re.compile(r"\[usbvm\] T\+[0-9.]+s program start"), "running scripts/demo.sh in the VM"),
        (re.compile(r"^make demo: (.*)"), "in the VM: {0}"),
    ]

    def __init__(self, console: Path, t0: float):
        super().__init__(daemon=True)
        self.console, self.t0 = console, t0
        self.done = threading.Event()

    def run(self) -> None:
        offset, pending, last, phase = 0, b"", time.monotonic(), "booting"
        while not self.done.wait(0.2):
            try:
                with open(self.console, "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            except OSError:
                chunk = b""
            offset += len(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace").strip("\r")
                for rx, text in self.STEPS:
                    m = rx.search(line)
                    if m:
                        phase = "starting" if "program start" in line or line.startswith("make demo:") else phase
                        say(f"[{time.monotonic() - self.t0:4.0f} s] " + text.format(*(g.strip() for g in m.groups())))
                        last = time.monotonic()
            if time.monotonic() - last >= TICK_SECS and not self.done.is_set():
                say(f"[{time.monotonic() - self.t0:4.0f} s] still {phase} (software emulation: 15-40 s in all here)")
                last = time.monotonic()


class DemoVm:
    def __init__(self) -> None:
        self.bin = Path(os.environ["GATECMD_DEMO_BIN_DIR"])
        self.dir = Path(os.environ["GATECMD_DEMO_DIR"]).resolve()
        self.host, self.port = bind_address()
        self.work = self.dir / "vm"
        self.vm: vmctl.VmRun | None = None
        self.t0 = time.monotonic()

    def prepare(self) -> list[str]:
        # One demo per directory: a second one would clear the first's VM work directory.
        # The lock lives as long as this process (its descriptor is not inherited).
        self.lock = open(self.dir / ".vm.lock", "w")
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refusal(f"another make demo runs in {self.dir}: stop it, or set GATECMD_DEMO_DIR") from None
        check_port_free(self.host, self.port)
        cache = vmctl.cache_dir()
        if not (cache / "current-kernel").exists():
            say(f"first run: fetching Debian's kernel and udev for the VM with apt-get download (about 110 MB, once; cached in {cache})")
        try:
            cache, kernel = vmctl.prepare()
        except (vmctl.VmError, subprocess.CalledProcessError, OSError) as e:
            raise Refusal(
                f"the demo VM's kernel (tests/vm/prepare.sh): {e} (the VM boots Debian's kernel, fetched with apt-get download: Debian's archive must be in apt's sources)"
            ) from None
        say(f"the VM's kernel: Debian's {kernel} (cached in {cache})")
        shutil.rmtree(self.work, ignore_errors=True)
        (self.work / "bin").mkdir(parents=True)
        gatecmd = stripped(self.bin / "gatecmd", self.work / "bin")
        vboard = stripped(self.bin / "gatecmd-vboard", self.work / "bin")
        files = [
            f"{gatecmd}:/usr/local/bin/gatecmd",
            f"{vboard}:/usr/local/bin/gatecmd-vboard",
            # scripts/demo.sh runs as /usr/local/bin/demo.sh: its templates are in ../demo.
            f"{REPO / 'demo'}:/usr/local/demo",
            f"{self.dir / 'images'}:{GUEST_DIR}/images",
            f"{self.dir / 'state/token'}:{GUEST_DIR}/state/token",
        ]
        for f in HOST_FILES:
            if not Path(f).exists():
                raise Refusal(f"{f} is missing (scripts/setup.sh --demo installs it)")
            files.append(f)
        return files

    def boot(self, files: list[str]) -> None:
        os.environ["USBVM_EXTRA_MODULES"] = EXTRA_MODULES  # read by run.sh, which VmRun starts
        env = {
            "GATECMD_DEMO_BIN_DIR": "/usr/local/bin",
            "GATECMD_DEMO_DIR": GUEST_DIR,
            "GATECMD_DEMO_BIND": f"0.0.0.0:{GUEST_PORT}",
            "NO_COLOR": "1",
        }
        say(f"booting the demo VM (QEMU, software emulation, no KVM); its console: {self.work / 'console.log'}")
        for attempt in (1, 2):
            self.vm = vmctl.VmRun(
                REPO / "scripts/demo.sh",
                port=f"{self.host}:{self.port}:{GUEST_PORT}",
                timeout=FOREVER_SECS,
                workdir=self.work,
                env=env,
                files=files,
                udcs=4,
                ready_timeout=BOOT_SECS,
                extra=["--mem", "1536", "--quiet"],
            )
            progress = Progress(self.work / "console.log", self.t0)
            progress.start()
            try:
                self.vm.start()
                self.wait_for_gatecmd()
                return
            except vmctl.VmError as e:
                # Debian's kernel under TCG on a loaded host panics now and then in early
                # boot ("IO-APIC + timer doesn't work"): that boot ran nothing; boot again.
                if attempt == 2 or "Kernel panic" not in str(e):
                    raise Refusal(f"the demo VM did not come up: {last_line(str(e))} (console: {self.work / 'console.log'})") from None
                say("the VM's kernel panicked while booting (it happens under emulation); booting again")
            finally:
                progress.done.set()
                progress.join()

    def wait_for_gatecmd(self) -> None:
        """The guest's banner on its console, then gatecmd answering through the forward."""
        assert self.vm is not None
        deadline = time.monotonic() + BOOT_SECS
        while not re.search(r"^  MCP endpoint ", self.vm.log(), re.M):
            if self.vm.proc.poll() is not None:
                refused = re.findall(r"^make demo: cannot run here: (.*)$", self.vm.log(), re.M)
                raise Refusal(f"in the VM: {refused[-1]}" if refused else f"the VM stopped before gatecmd started (console: {self.work / 'console.log'})")
            if time.monotonic() > deadline:
                raise Refusal(f"gatecmd did not start in the VM within {BOOT_SECS} s (console: {self.work / 'console.log'})")
            time.sleep(0.2)
        # A connect before the guest listens is reset: retry until /health answers.
        health = f"http://{self.connect_host()}:{self.port}/health"
        while True:
            try:
                with urllib.request.urlopen(health, timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline or self.vm.proc.poll() is not None:
                raise Refusal(f"gatecmd in the VM does not answer at {health} (console: {self.work / 'console.log'})")
            time.sleep(0.2)

    def connect_host(self) -> str:
        return "127.0.0.1" if self.host == "0.0.0.0" else self.host

    def banner(self) -> str:
        url = f"http://{self.connect_host()}:{self.port}/mcp"
        values = {
            "@URL@": url,
            "@PAGE@": url.removesuffix("mcp"),
            "@TOKEN@": str(self.dir / "state/token"),
            "@IMAGES@": str(self.dir / "images"),
            "@WHERE@": ", in a QEMU VM",
            "@STOP@": " and the VM",
            "@LOGS@": f"{self.work / 'console.log'} (the VM's console: gatecmd's and the boards' logs)",
        }
        text = (REPO / "demo/banner.txt").read_text()
        for k, v in values.items():
            text = text.replace(k, v)
        return text + f"(Ready in {time.monotonic() - self.t0:.0f} s.)\n"

    def serve(self) -> int:
        assert self.vm is not None
        rc = self.vm.proc.wait()
        if rc == 128 + signal.SIGINT:
            # A terminal's Ctrl-C reached run.sh (same process group) before this process
            # turned its own into KeyboardInterrupt.
            return 130
        say(f"the VM stopped by itself (rc {rc}): see {self.work / 'console.log'}")
        return 1

    def stop(self) -> None:
        if self.vm is None or self.vm.proc is None:
            return
        t = time.monotonic()
        # poweroff: SIGTERM to scripts/demo.sh in the guest, which stops gatecmd and the
        # boards; the guest then powers off and run.sh ends. After a terminal's Ctrl-C,
        # QEMU and run.sh got the SIGINT too and are already going. Without the control
        # channel (stopped while booting), run.sh is told at once: it kills QEMU.
        self.vm.stop(grace=20 if self.vm.ctl is not None else 0)
        say(f"stopped gatecmd, the boards and the VM ({time.monotonic() - t:.1f} s)")


def last_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1].strip() if lines else text


def on_term(signum, _frame):
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, on_term)
    demo = DemoVm()
    try:
        files = demo.prepare()
        demo.boot(files)
        print(demo.banner(), flush=True)
        return demo.serve()
    except Refusal as e:
        print(f"make demo: cannot run here: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        # Ctrl-C during the stop itself must not leave QEMU behind: ignore it meanwhile.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        demo.stop()


if __name__ == "__main__":
    sys.exit(main())
