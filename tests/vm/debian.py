#!/usr/bin/env python3
"""A Debian 12 guest with systemd, for the service lane (tests/vm/README.md, "A Debian
guest with systemd"). Python 3 standard library only.

    debian.py build        # the root file system image, cached (mmdebstrap; minutes, once)
    debian.py boot [--port HOST:GUEST]...   # boots it until Ctrl-C, prints the agent socket

The root file system is built by mmdebstrap from Debian's packages (systemd, udev, kmod,
qemu-guest-agent, libusb, rkdeveloptool, ...) with the cached kernel's modules copied in,
written to an ext4 image in the cache. A boot runs it under QEMU TCG with Debian's kernel
and a small busybox initramfs that loads virtio_blk and ext4 and hands over to systemd;
the image is opened `snapshot=on`, so a boot never changes it. A second disk (`/dev/vdb`,
built per boot from a directory) brings files in. Commands run through the QEMU guest
agent (`Guest.run`); user networking forwards host ports.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vmctl  # noqa: E402

HERE = Path(__file__).resolve().parent
SUITE = "bookworm"
MIRRORS = [
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
]
# What a lab's bench host has, plus the guest agent: systemd and udev, the gatecmd .deb's
# dependencies (libc6, libudev1, libusb-1.0-0), the flashing tool, coreutils' libstdbuf
# (live progress), procps (the lane looks for leftover children).
PACKAGES = [
    "systemd", "systemd-sysv", "udev", "kmod", "qemu-guest-agent", "libusb-1.0-0", "libudev1",
    "rkdeveloptool", "usbutils", "procps", "iproute2", "coreutils", "e2fsprogs",
]
# crc32c_generic: ext4 asks the crypto API for "crc32c", which modules.dep does not name.
BOOT_MODULES = ["virtio_blk", "crc32c_generic", "ext4", "virtio_net", "virtio_console"]
# Units a bench host's boot does not need here, masked so that the guest reaches `running`
# sooner under TCG (each costs seconds on one emulated CPU): debug and hugepage mounts,
# modprobes for device mapper, pstore, fuse and loop, e2scrub, the random seed, timers.
MASKED = [
    "sys-kernel-debug.mount", "sys-kernel-tracing.mount", "sys-fs-fuse-connections.mount",
    "dev-hugepages.mount", "dev-mqueue.mount", "modprobe@dm_mod.service",
    "modprobe@efi_pstore.service", "modprobe@fuse.service", "modprobe@loop.service",
    "e2scrub_reap.service", "e2scrub_all.timer", "systemd-random-seed.service",
    "apt-daily.timer", "apt-daily-upgrade.timer", "fstrim.timer",
]
VERSION = "debian-3"

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r ko params; do [ -n "$ko" ] && insmod "/vm/modules/$ko" $params; done < /vm/modules.list
i=0
until [ -b /dev/vda ]; do i=$((i+1)); [ $i -gt 200 ] && echo "[debvm] no /dev/vda" && poweroff -f; sleep 0.05; done
mkdir -p /newroot
mount -t ext4 -o rw /dev/vda /newroot || { echo "[debvm] cannot mount /dev/vda"; poweroff -f; }
echo "[debvm] switching to systemd"
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /sbin/init
"""

# QEMU's user networking gives the guest 10.0.2.15/24 behind 10.0.2.2, always: set by one
# oneshot unit with ip(8) instead of systemd-networkd's DHCP, which took 13.5 s of the
# boot's critical chain under TCG (systemd-analyze critical-chain).
NETWORK = """[Unit]
Description=The lane guest's network (QEMU user networking, static)
DefaultDependencies=no
Wants=network.target
Before=network.target
BindsTo=sys-subsystem-net-devices-eth0.device
After=sys-subsystem-net-devices-eth0.device

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=ip link set eth0 up
ExecStart=ip addr add 10.0.2.15/24 dev eth0
ExecStart=ip route add default via 10.0.2.2

[Install]
WantedBy=multi-user.target
"""


def _key(kernel: str) -> str:
    h = hashlib.sha256()
    h.update(f"{VERSION} {kernel} {' '.join(PACKAGES)} {' '.join(MIRRORS)} {' '.join(MASKED)} {NETWORK}".encode())
    return h.hexdigest()[:12]


def build() -> tuple[Path, Path, str]:
    """The root file system image and the boot initramfs, built once into the cache."""
    cache, kernel = vmctl.prepare()
    if shutil.which("mmdebstrap") is None:
        if os.geteuid() != 0:
            raise vmctl.VmError("mmdebstrap is not installed: apt-get install mmdebstrap (scripts/setup.sh --test)")
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "mmdebstrap", "e2fsprogs"], check=True)
    key = _key(kernel)
    image = cache / f"debian-{key}.img"
    initrd = cache / f"debian-{key}.initrd"
    if not image.exists():
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(dir=cache, prefix="rootfs.") as tmp:
            root = Path(tmp) / "root"
            kmods = cache / f"kernel-{kernel}" / "lib/modules" / kernel
            hooks = [
                f'--customize-hook=mkdir -p "$1/usr/lib/modules" && cp -a {kmods} "$1/usr/lib/modules/"',
                '--customize-hook=echo gatecmd-lab > "$1/etc/hostname"',
                # No fstab line for /: the initramfs mounts it read-write, and a line would
                # make the boot wait for udev's dev-vda.device (17 s of a 21 s userspace).
                '--customize-hook=printf "# / is mounted by the initramfs (tests/vm/debian.py)\\n" > "$1/etc/fstab"',
                f'--customize-hook=chroot "$1" systemctl mask {" ".join(MASKED)}',
                '--customize-hook=chroot "$1" systemctl enable qemu-guest-agent',
                # The test bench: dummy_hcd with four UDCs, gadget functions, the host's ACM driver.
                '--customize-hook=printf "dummy_hcd\\nlibcomposite\\nusb_f_fs\\nusb_f_acm\\n" > "$1/etc/modules-load.d/vm-bench.conf"',
                '--customize-hook=echo "options dummy_hcd num=4" > "$1/etc/modprobe.d/vm-bench.conf"',
                '--customize-hook=chroot "$1" passwd -d root',
            ]
            net = Path(tmp) / "vm-net.service"
            net.write_text(NETWORK)
            hooks.append(f'--customize-hook=cp {net} "$1/etc/systemd/system/vm-net.service"')
            hooks.append('--customize-hook=chroot "$1" systemctl enable vm-net.service')
            cmd = ["mmdebstrap", "--variant=apt", "--quiet", f"--include={','.join(PACKAGES)}", *hooks, SUITE, str(root), *MIRRORS]
            vmctl.say("building the Debian root file system (mmdebstrap)")
            subprocess.run(cmd, check=True)
            part = image.with_suffix(".part")
            subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "root", "-d", str(root), str(part), "2G"], check=True)
            part.rename(image)
        vmctl.say(f"root file system {image.name} built in {time.monotonic() - t0:.0f} s")
        # An image of another package list or kernel is not booted again: 2 GB each.
        for old in cache.glob("debian-*"):
            if old.suffix in (".img", ".initrd") and not old.name.startswith(f"debian-{key}."):
                old.unlink(missing_ok=True)
    if not initrd.exists():
        moddir = cache / f"kernel-{kernel}" / "lib/modules" / kernel
        with tempfile.TemporaryDirectory(dir=cache, prefix="stage.") as tmp:
            s = Path(tmp)
            for d in ["bin", "proc", "sys", "dev", "newroot", "vm/modules"]:
                (s / d).mkdir(parents=True, exist_ok=True)
            vmctl._put_program(s, Path("/bin/busybox"), "/bin/busybox")
            lines = []
            for name, path in vmctl._module_order(moddir, BOOT_MODULES):
                (s / "vm/modules" / f"{name}.ko").write_bytes(vmctl._decompressed(path))
                lines.append(f"{name}.ko")
            (s / "vm/modules.list").write_text("\n".join(lines) + "\n")
            (s / "init").write_text(INIT)
            (s / "init").chmod(0o755)
            part = initrd.with_suffix(".part")
            vmctl._cpio(s, part)
            part.rename(initrd)
    return image, initrd, kernel


class Guest:
    """One boot of the Debian guest; `run` executes a command through the guest agent."""

    def __init__(self, ports: list[str], files: Path | None = None, mem: int = 1536, work: Path | None = None):
        self.ports, self.files, self.mem = ports, files, mem
        self.work = Path(work or tempfile.mkdtemp(prefix="gatecmd-debvm."))
        self.work.mkdir(parents=True, exist_ok=True)
        self.qga_path = self.work / "qga.sock"
        self.console = self.work / "console.log"
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self._buf = b""
        self.boot_seconds: float | None = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self) -> None:
        image, initrd, kernel = build()
        cache = vmctl.cache_dir()
        vmlinuz = cache / f"kernel-{kernel}/boot/vmlinuz-{kernel}"
        drives = ["-drive", f"file={image},if=virtio,format=raw,snapshot=on"]
        if self.files is not None:
            data = self.work / "files.img"
            size = sum(p.stat().st_size for p in self.files.rglob("*") if p.is_file())
            subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "files", "-d", str(self.files), str(data), f"{size // (1 << 20) + 64}M"], check=True)
            drives += ["-drive", f"file={data},if=virtio,format=raw"]
        net = "user,id=n0" + "".join(f",hostfwd=tcp:127.0.0.1:{p.partition(':')[0]}-:{p.partition(':')[2] or p}" for p in self.ports)
        cmd = [
            "qemu-system-x86_64", "-nodefaults", "-no-user-config", "-nographic", "-machine", "pc", "-accel", "tcg",
            "-m", str(self.mem), "-smp", "1", "-no-reboot",
            "-kernel", str(vmlinuz), "-initrd", str(initrd),
            "-append", "console=ttyS0 panic=-1 quiet loglevel=4 systemd.show_status=0 net.ifnames=0",
            "-chardev", f"file,id=con,path={self.console}", "-serial", "chardev:con",
            *drives,
            "-netdev", net, "-device", "virtio-net-pci,netdev=n0,romfile=",
            "-device", "virtio-serial",
            "-chardev", f"socket,id=qga,path={self.qga_path},server=on,wait=off",
            "-device", "virtserialport,chardev=qga,name=org.qemu.guest_agent.0",
            "-fw_cfg", "name=etc/sercon-port,string=0", "-monitor", "none",
        ]
        t0 = time.monotonic()
        with open(self.work / "qemu.stderr", "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT)
        try:
            self._connect(t0 + 300)
            self.boot_seconds = time.monotonic() - t0
        except Exception:
            self.stop()
            raise

    def _connect(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise vmctl.VmError(f"QEMU exited ({self.proc.returncode}):\n{self.log()[-3000:]}")
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(str(self.qga_path))
            except OSError:
                time.sleep(0.2)
                continue
            self.sock, self._buf = s, b""
            # guest-sync: the agent answers once it runs; until then nothing comes back.
            token = int(time.monotonic() * 1000) % 1000000
            try:
                self.sock.sendall(json.dumps({"execute": "guest-sync", "arguments": {"id": token}}).encode())
                if self._reply(min(deadline, time.monotonic() + 3)) == token:
                    return
            except (OSError, vmctl.VmError):
                pass
            s.close()
            self.sock = None
            time.sleep(0.5)
        raise vmctl.VmError(f"the guest agent did not answer:\n{self.log()[-3000:]}")

    def _reply(self, deadline: float):
        assert self.sock is not None
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                line = line.strip().lstrip(b"\xff")
                if not line:
                    continue
                msg = json.loads(line)
                if "error" in msg:
                    raise vmctl.VmError(f"guest agent: {msg['error']}")
                if "return" in msg:
                    return msg["return"]
            left = deadline - time.monotonic()
            if left <= 0:
                raise vmctl.VmError("no answer from the guest agent")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise vmctl.VmError("no answer from the guest agent") from None
            if not chunk:
                raise vmctl.VmError("the guest agent's channel closed")
            self._buf += chunk

    def _call(self, execute: str, arguments: dict, timeout: float = 30):
        assert self.sock is not None
        self.sock.sendall(json.dumps({"execute": execute, "arguments": arguments}).encode())
        return self._reply(time.monotonic() + timeout)

    def run(self, argv: list[str], timeout: float = 120, stdin: bytes | None = None, env: list[str] | None = None) -> tuple[int, str, str]:
        """Runs argv (no shell) in the guest as root; (exit code, stdout, stderr). `env`:
        K=V entries added to the agent's environment (a secret there stays out of argv)."""
        args: dict = {"path": argv[0], "arg": argv[1:], "capture-output": True}
        if env:
            args["env"] = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *env]
        if stdin is not None:
            args["input-data"] = base64.b64encode(stdin).decode()
        pid = self._call("guest-exec", args)["pid"]
        deadline = time.monotonic() + timeout
        while True:
            st = self._call("guest-exec-status", {"pid": pid})
            if st.get("exited"):
                out = base64.b64decode(st.get("out-data", "")).decode(errors="replace")
                err = base64.b64decode(st.get("err-data", "")).decode(errors="replace")
                return st.get("exitcode", -1), out, err
            if time.monotonic() > deadline:
                raise vmctl.VmError(f"{argv} did not end within {timeout} s")
            time.sleep(0.1)

    def sh(self, script: str, timeout: float = 120) -> tuple[int, str, str]:
        """A shell script run by the guest's /bin/sh (the lane's own steps, not gatecmd's)."""
        return self.run(["/bin/sh", "-c", script], timeout)

    def log(self) -> str:
        try:
            return self.console.read_text(errors="replace").replace("\r", "")
        except OSError:
            return ""

    def stop(self, powerdown: bool = False) -> None:
        """Ends the guest. QEMU is stopped at once by default: the root image is opened
        `snapshot=on` and the files disk is the boot's own, so nothing is kept that a clean
        shutdown would save (it took 30 s under TCG). `powerdown`: systemd's shutdown first."""
        if self.proc is None:
            return
        if powerdown and self.proc.poll() is None and self.sock is not None:
            try:
                self.sock.sendall(json.dumps({"execute": "guest-shutdown", "arguments": {"mode": "powerdown"}}).encode())
            except OSError:
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"]:
        image, initrd, kernel = build()
        print(image)
        return 0
    if argv[:1] == ["boot"]:
        ports = [argv[i + 1] for i, a in enumerate(argv) if a == "--port"]
        with Guest(ports) as g:
            print(f"booted in {g.boot_seconds:.1f} s; console {g.console}; agent {g.qga_path}", flush=True)
            rc, out, _ = g.run(["systemctl", "is-system-running", "--wait"], timeout=300)
            print(out.strip(), flush=True)
            try:
                while g.proc and g.proc.poll() is None:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
