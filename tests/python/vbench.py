"""A virtual flashing bench in a VM: the repository's harness (tests/vm) boots Debian's kernel (dummy_hcd,
configfs, FunctionFS) under QEMU and runs tests/python/vm/bench-start, which starts
`gatecmd-vboard serve` (virtual RK3588 boards: rockusb over FunctionFS, a CDC-ACM console,
a power CLI; docs/VBOARD.md) and then becomes `gatecmd serve` with the config below. Debian's
real `/usr/bin/rkdeveloptool` is copied in. The host reaches gatecmd through a QEMU hostfwd
port and drives it with the official MCP Python SDK.

Used by tests/python/test_vboard_usbvm.py, benches/vboard.py and benches/vboard_page.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
START = Path(__file__).with_name("vm") / "bench-start"
RKDEVELOPTOOL = Path("/usr/bin/rkdeveloptool")
TOKEN_A = "vboard-token-for-vm-a-0123456789"
TOKEN_B = "vboard-token-for-vm-b-9876543210"
GUEST_PORT = 8080
IMAGES = "/srv/images"
# docs/VBOARD.md: board vbK takes the (2K-2)-th and (2K-1)-th free UDC; usbvm's gadget on
# dummy_udc.N is host port (N+1)-1.
PORTS = {"vb1": ("1-1", "2-1"), "vb2": ("3-1", "4-1")}
# The modules the vboard needs beyond usbvm's own (FunctionFS, the ACM gadget function and
# the host's ACM driver).
EXTRA_MODULES = "usb_f_fs usb_f_acm cdc_acm"


class Unavailable(Exception):
    """A prerequisite is missing: the test says which (and fails under CI=true)."""


def usbvm_dir() -> Path:
    """The harness: the repository's own (tests/vm), or GATECMD_VM_DIR when set, as
    tests/usbvm/mod.rs and scripts/setup.sh find it."""
    candidates = [os.environ.get("GATECMD_VM_DIR"), REPO / "tests/vm"]
    for c in candidates:
        if c and (Path(c) / "run.sh").exists():
            return Path(c).resolve()
    raise Unavailable("no test VM harness (tests/vm in the repository, or GATECMD_VM_DIR)")


def check_prerequisites() -> Path:
    d = usbvm_dir()
    for program in ("qemu-system-x86_64", "strip"):
        if shutil.which(program) is None:
            raise Unavailable(f"{program} is not installed (scripts/setup.sh --test installs it)")
    if not RKDEVELOPTOOL.exists():
        raise Unavailable(f"{RKDEVELOPTOOL} is missing (Debian package rkdeveloptool; scripts/setup.sh installs it)")
    return d


def binary(var: str) -> Path:
    path = os.environ.get(var)
    if not path or not os.access(path, os.X_OK):
        raise Unavailable(f"{var} must name a built binary (scripts/pytest.sh sets it)")
    return Path(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bootable_image(size: int, seed: bytes) -> bytes:
    """`size` bytes the virtual board boots when written at LBA 0x40: the idbloader magic
    RKNS first (docs/VBOARD.md, "Bootable"), then bytes derived from `seed`."""
    out = bytearray(b"RKNS")
    block = hashlib.sha256(seed).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block * 64
    return bytes(out[:size])


def config(
    power_on_vb1: list[str],
    power_on_vb2: list[str],
    vboard: str = "/usr/local/bin/gatecmd-vboard",
    flash: str | None = None,
) -> str:
    """gatecmd's configuration in the guest: two boards whose power switches are the
    vboard's CLI, their consoles its ACM gadgets, and rkdeveloptool isolated per board.
    `flash`: a `flash:` section (YAML, indented by two) that turns `flash_board` on; the
    boards then get a `power.maskrom` action too (`power vbK on --maskrom`)."""

    def args(a: list[str]) -> str:
        return "[" + ", ".join(a) + "]"

    (u1, c1), (u2, c2) = PORTS["vb1"], PORTS["vb2"]
    m1 = m2 = flash_section = ""
    if flash is not None:
        m1 = "\n      maskrom: {command: vboard-power, args: [power, vb1, on, --maskrom]}"
        m2 = "\n      maskrom: {command: vboard-power, args: [power, vb2, on, --maskrom]}"
        flash_section = "flash:\n" + flash
    return flash_section + f"""
bind: 0.0.0.0:{GUEST_PORT}
clients:
  - name: vm-a
    token: {TOKEN_A}
    commands: [rkdeveloptool]
    write_roots: [{IMAGES}]
  - name: vm-b
    token: {TOKEN_B}
    commands: [rkdeveloptool]
    write_roots: [{IMAGES}]
file_roots: [{IMAGES}]
limits:
  kill_grace_secs: 1
devices:
  - name: rockusb
    match: {{vid: "2207"}}
boards:
  - name: vb1
    tags: {{soc: rk3588}}
    usb: "{u1}"
    console: {{port: "{c1}", baud: 1500000}}
    power:
      on: {{command: vboard-power, args: {args(power_on_vb1)}}}
      off: {{command: vboard-power, args: [power, vb1, off]}}{m1}
  - name: vb2
    tags: {{soc: rk3588}}
    usb: "{u2}"
    console: {{port: "{c2}", baud: 1500000}}
    power:
      on: {{command: vboard-power, args: {args(power_on_vb2)}}}
      off: {{command: vboard-power, args: [power, vb2, off]}}{m2}
commands:
  - name: rkdeveloptool
    binary: /usr/bin/rkdeveloptool
    description: Rockchip USB flashing tool, one board per call.
    device: rockusb
    isolate: true
    destructive: true
    timeout_secs: 600
    progress: "\\\\((\\\\d+)%\\\\)"
    params:
      lba: "0x[0-9a-fA-F]{{1,8}}|[0-9]{{1,10}}"
      count: "[0-9]{{1,10}}"
    allowed_args:
      - pattern: ld
        timeout_secs: 20
      - pattern: rid
        timeout_secs: 20
      - pattern: rfi
        timeout_secs: 20
      - pattern: db {{loader}}
        file_args: [loader]
        timeout_secs: 60
        cancel: never
      - pattern: wl {{lba}} {{image}}
        file_args: [image]
      - pattern: rl {{lba}} {{count}} {{out}}
        output_args: [out]
      - pattern: rd
        timeout_secs: 30
  - name: vboard-power
    binary: {vboard}
    description: The virtual boards' power switch (power_board runs it).
    timeout_secs: 20
    params: {{board: "vb[0-9]"}}
    allowed_args:
      - pattern: power {{board}} on
      - pattern: power {{board}} on --maskrom
      - pattern: power {{board}} off
"""


class Bench:
    """One VM: gatecmd-vboard with two boards, gatecmd serving them on `url`."""

    def __init__(
        self,
        gatecmd: Path,
        vboard: Path,
        files: dict[str, bytes] | None = None,
        flash_size: str = "4M",
        write_speed: str | None = None,
        power_on_vb1: list[str] | None = None,
        power_on_vb2: list[str] | None = None,
        timeout: int = 300,
        log_level: str = "info",
        boards: str = "2",
        config_text: str | None = None,
        ports: dict[str, tuple[str, str]] | None = None,
        extra_files: list[str] | None = None,
        vboard_args: str = "",
        udcs: int = 4,
        flash: str | None = None,
    ):
        """`boards`, `config_text`, `ports`, `extra_files` and `vboard_args` make another
        bench than the two Rockchip boards: families by name (bench-start's BOARDS), the
        gatecmd configuration, each board's (usb, console) ports, more `host:guest` files,
        options for gatecmd-vboard serve."""
        self.usbvm = check_prerequisites()
        sys.path.insert(0, str(self.usbvm))
        from vmctl import VmRun  # the harness's own host side (stdlib only)

        self.work = Path(tempfile.mkdtemp(prefix="gatecmd-vbench."))
        stage = self.work / "stage"
        images = stage / "images"
        images.mkdir(parents=True)
        self.gatecmd = self._stripped(gatecmd)
        self.vboard = self._stripped(vboard)
        # Loaders are made on the host by the vboard's own packer (docs/VBOARD.md).
        for name, flag in (("loader.bin", []), ("bad-payload.bin", ["--bad-payload"])):
            subprocess.run([str(self.vboard), "make-loader", "--out", str(images / name), *flag], check=True, capture_output=True)
        for name, data in (files or {}).items():
            (images / name).write_bytes(data)
        cfg = stage / "gatecmd.yaml"
        cfg.write_text(
            config_text
            or config(
                power_on_vb1 or ["power", "vb1", "on", "--maskrom"],
                power_on_vb2 or ["power", "vb2", "on"],
                flash=flash,
            )
        )
        self.ports = ports or PORTS
        cfg.chmod(stat.S_IRUSR | stat.S_IWUSR)  # it holds tokens
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        os.environ["USBVM_EXTRA_MODULES"] = EXTRA_MODULES  # read by run.sh, which VmRun starts
        env = {"GATECMD_LOG": log_level, "NO_COLOR": "1", "STATE_DIRECTORY": "/run/gatecmd"}
        if vboard_args:
            env["VBOARD_ARGS"] = vboard_args
        self.vm = VmRun(
            START,
            [boards, flash_size, write_speed or "-", "serve", "--config", "/etc/gatecmd/vm.yaml"],
            port=f"{self.port}:{GUEST_PORT}",
            timeout=timeout,
            workdir=self._mkdir(self.work / "vm"),
            env=env,
            files=[
                f"{self.gatecmd}:/usr/local/bin/gatecmd",
                f"{self.vboard}:/usr/local/bin/gatecmd-vboard",
                str(RKDEVELOPTOOL),
                f"{cfg}:/etc/gatecmd/vm.yaml",
                f"{images}:{IMAGES}",
                *(extra_files or []),
            ],
            udcs=udcs,
        )
        self.t0 = time.monotonic()
        try:
            self.vm.start()
        except Exception as e:
            # Debian's kernel under TCG on a loaded host panics now and then in early boot
            # ("IO-APIC + timer doesn't work"): that boot never ran anything; boot once more.
            if "Kernel panic" not in str(e):
                raise
            print(f"vbench: the VM's kernel panicked while booting; booting again:\n{str(e)[-600:]}", file=sys.stderr)
            self.vm.workdir = self._mkdir(self.work / "vm2")
            self.vm.ctl_path = self.vm.workdir / "ctl.sock"
            self.vm.start()
        try:
            if not self.vm.wait_log(r"^gatecmd: listening on ", timeout=120):
                raise RuntimeError("gatecmd did not start in the VM:\n" + self.vm.log()[-4000:])
            self.ready_secs = time.monotonic() - self.t0
            self._check_ports()
        except Exception:
            self.stop()
            raise

    @staticmethod
    def _mkdir(p: Path) -> Path:
        p.mkdir(parents=True, exist_ok=True)
        return p

    def _stripped(self, path: Path) -> Path:
        """A stripped copy: debug info would make the VM's initramfs huge."""
        copy = self.work / path.name
        shutil.copy(path, copy)
        subprocess.run(["strip", str(copy)], check=True)
        return copy

    def _check_ports(self) -> None:
        # The vboard's own ready lines (the console interleaves other output with them).
        rc, lines = self.guest("cat /run/vboard.out")
        log = "\n".join(f"[vboard] {l}" for l in lines)
        for board, (usb, console) in self.ports.items():
            m = re.search(rf"\[vboard\] board {board} \w+=\S+ port=(\S+) console=\S+ port=(\S+)", log)
            if not m or (m.group(1), m.group(2)) != (usb, console):
                raise RuntimeError(
                    f"gatecmd-vboard's ports for {board} are not {usb}/{console} as the config says:\n{log[-3000:]}"
                )

    def guest(self, command: str, timeout: float = 60.0) -> tuple[int, list[str]]:
        """Runs `command` in the guest (sh -c) over the harness's control channel."""
        return self.vm.ctl.exec(command, timeout=timeout)

    def vboard_power(self, board: str, action: str) -> None:
        """Switches a board at the bench itself, as a person at the desk would (not
        through gatecmd): `gatecmd-vboard power BOARD on|off` in the guest."""
        rc, lines = self.guest(f"/usr/local/bin/gatecmd-vboard power {board} {action}")
        if rc != 0:
            raise RuntimeError(f"gatecmd-vboard power {board} {action}: rc {rc}: {lines}")

    def log(self) -> str:
        return self.vm.log()

    def stop(self) -> None:
        self.vm.stop()
        os.environ.pop("USBVM_EXTRA_MODULES", None)

    def cleanup(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
