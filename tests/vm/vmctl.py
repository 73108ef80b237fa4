#!/usr/bin/env python3
"""gatecmd's test VM, host side (Python 3 standard library only; tests/vm/README.md).

A throw-away QEMU (TCG) guest running Debian's kernel with `dummy_hcd`: fake USB devices
are configfs gadgets, plugged over a control channel, so a program in the guest meets the
real kernel USB stack, real uevents (systemd-udevd) and real /dev/bus/usb nodes.

    vmctl.py prepare                       # downloads and unpacks into the cache
    vmctl.py run --bin PATH [options] -- ARGS...   # run.sh is this
    vmctl.py ctl SOCK COMMAND...           # one control command (ping, plug, exec, ...)

From Python: `VmRun` (boots one program, context manager) and `VmCtl` (the control
channel). Everything downloaded or built is cached in $GATECMD_VM_CACHE, else
$XDG_CACHE_HOME/gatecmd-vm, else ~/.cache/gatecmd-vm; nothing is written in the tree.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOST_PACKAGES = ["qemu-system-x86", "busybox-static", "kmod", "xz-utils", "zstd", "cpio"]
BASE_MODULES = ["usb_common", "usbcore", "udc_core", "dummy_hcd", "configfs", "libcomposite", "usb_f_ss_lb", "virtio_net"]


def cache_dir() -> Path:
    if os.environ.get("GATECMD_VM_CACHE"):
        return Path(os.environ["GATECMD_VM_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "gatecmd-vm"


def say(msg: str) -> None:
    print(f"[usbvm-host] {msg}", file=sys.stderr, flush=True)


class VmError(RuntimeError):
    pass


VmCtlError = VmError  # the name the tests catch


# ---------------------------------------------------------------------------------------
# prepare: the kernel and udev from Debian's archive, unpacked into the cache


def _installed(pkg: str) -> bool:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return r.returncode == 0 and "install ok installed" in r.stdout


def _apt_download(pattern_name: str, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    found = sorted(into.glob(f"{pattern_name}_*.deb"))
    if not found:
        say(f"downloading {pattern_name}")
        r = subprocess.run(["apt-get", "download", "-q", pattern_name], cwd=into, capture_output=True, text=True)
        found = sorted(into.glob(f"{pattern_name}_*.deb"))
        if not found:
            raise VmError(f"apt-get download {pattern_name} failed: {r.stderr.strip()}")
    return found[-1]


def _newest_kernel() -> str | None:
    out = subprocess.run(["apt-cache", "search", "--names-only", "^linux-image-[0-9]"], capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        name = line.split(" ", 1)[0]
        m = re.fullmatch(r"linux-image-(\d+\.\d+\.\d+\S*-amd64)", name)
        if m and not re.search(r"-(cloud|rt)-amd64$", name) and "unsigned" not in name:
            names.append(m.group(1))

    def key(v: str):
        return [int(p) if p.isdigit() else p for p in re.split(r"[.+~-]", v)]

    return sorted(names, key=key)[-1] if names else None


def prepare() -> tuple[Path, str]:
    """Idempotent: the cache holds an unpacked kernel and udev afterwards."""
    cache = cache_dir()
    (cache / "debs").mkdir(parents=True, exist_ok=True)
    missing = [p for p in HOST_PACKAGES if not _installed(p)]
    if missing:
        if os.geteuid() != 0:
            raise VmError(f"missing packages {' '.join(missing)}: apt-get install them (scripts/setup.sh --test)")
        say(f"installing {' '.join(missing)}")
        cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]
        if subprocess.run(cmd, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            subprocess.run(cmd, check=True, capture_output=True)
    kernel = os.environ.get("USBVM_KERNEL") or _newest_kernel()
    if not kernel:
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        kernel = _newest_kernel()
    if not kernel:
        raise VmError("apt offers no linux-image-*-amd64 package")
    kdir = cache / f"kernel-{kernel}"
    if not (kdir / ".ok").exists():
        deb = _apt_download(f"linux-image-{kernel}", cache / "debs")
        shutil.rmtree(kdir, ignore_errors=True)
        kdir.mkdir(parents=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(kdir)], check=True)
        # depmod lives in /usr/sbin, which a user's PATH on Debian does not name.
        depmod = shutil.which("depmod") or shutil.which("depmod", path="/usr/sbin:/sbin") or "depmod"
        subprocess.run([depmod, "-b", str(kdir), kernel], check=True)
        if not (kdir / "boot" / f"vmlinuz-{kernel}").exists():
            raise VmError(f"{deb} holds no vmlinuz-{kernel}")
        (kdir / ".ok").touch()
        say(f"kernel {kernel} unpacked in {kdir}")
    udir = cache / "udev"
    if not (udir / ".ok").exists():
        deb = _apt_download("udev", cache / "debs")
        shutil.rmtree(udir, ignore_errors=True)
        udir.mkdir(parents=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(udir)], check=True)
        udevadm = _udevadm(udir)
        # USB names only (ID_VENDOR_FROM_DATABASE and friends), compiled for the guest.
        hw = udir / "hwdb-usb" / "etc" / "udev" / "hwdb.d"
        hw.mkdir(parents=True)
        for src in [udir / "lib/udev/hwdb.d", udir / "usr/lib/udev/hwdb.d"]:
            for name in ["20-usb-vendor-model.hwdb", "20-usb-classes.hwdb"]:
                if (src / name).exists():
                    shutil.copy(src / name, hw / name)
        r = subprocess.run([str(udevadm), "hwdb", "--update", f"--root={udir / 'hwdb-usb'}"], capture_output=True)
        if r.returncode != 0:
            say("hwdb compile failed: the guest runs without hwdb")
        (udir / ".ok").touch()
        say(f"udev unpacked in {udir}")
    (cache / "current-kernel").write_text(kernel + "\n")
    return cache, kernel


def _udevadm(udir: Path) -> Path:
    for p in [udir / "bin/udevadm", udir / "usr/bin/udevadm"]:
        if p.exists():
            return p
    raise VmError(f"no udevadm in {udir}")


# ---------------------------------------------------------------------------------------
# initramfs: a cached base (busybox, udevd, modules, guest scripts) plus one per run


def _libraries(binary: Path) -> list[str]:
    r = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    if "not found" in r.stdout:
        raise VmError(f"{binary} needs libraries this host lacks:\n{r.stdout}")
    return re.findall(r"(/\S+)", r.stdout) if r.returncode == 0 else []


def _put(stage: Path, src: Path, dst: str, mode: int | None = None) -> None:
    target = stage / dst.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
        return
    shutil.copyfile(src, target)
    if mode is not None:
        target.chmod(mode)
    else:
        shutil.copymode(src, target)


def _put_program(stage: Path, src: Path, dst: str) -> None:
    """A program or library, with the shared libraries ldd names for it."""
    _put(stage, src, dst, 0o755)
    for lib in _libraries(src):
        if not (stage / lib.lstrip("/")).exists():
            _put(stage, Path(os.path.realpath(lib)), lib, 0o755)


def _is_elf(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _cpio(stage: Path, out: Path) -> None:
    names = subprocess.run(["find", "."], cwd=stage, capture_output=True, check=True).stdout
    with open(out, "wb") as f:
        cp = subprocess.Popen(["cpio", "-o", "-H", "newc", "--quiet"], cwd=stage, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        gz = subprocess.Popen(["gzip", "-1"], stdin=cp.stdout, stdout=f)
        assert cp.stdout is not None and cp.stdin is not None
        cp.stdout.close()
        cp.stdin.write(names)
        cp.stdin.close()
        if cp.wait() != 0 or gz.wait() != 0:
            raise VmError(f"packing {stage} failed")


def _module_order(moddir: Path, wanted: list[str]) -> list[tuple[str, Path]]:
    def norm(p: str) -> str:
        return Path(p).name.split(".ko")[0].replace("-", "_")

    deps: dict[str, tuple[str, list[str]]] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[norm(path)] = (path, [norm(d) for d in rest.split()])
    builtin = {norm(l) for l in (moddir / "modules.builtin").read_text().split()}
    order: list[tuple[str, Path]] = []
    seen: set[str] = set()

    def visit(m: str) -> None:
        if m in seen:
            return
        seen.add(m)
        if m in builtin:
            return
        if m not in deps:
            raise VmError(f"module {m} is not in {moddir}/modules.dep")
        for d in deps[m][1]:
            visit(d)
        order.append((m, moddir / deps[m][0]))

    for m in wanted:
        visit(m.replace("-", "_"))
    return order


def _decompressed(path: Path) -> bytes:
    name = path.name
    tool = {".xz": ["xz", "-dc"], ".zst": ["zstd", "-qdc"], ".gz": ["gzip", "-dc"]}.get(path.suffix)
    if tool is None or not name.endswith(".ko" + path.suffix):
        return path.read_bytes()
    return subprocess.run([*tool, str(path)], capture_output=True, check=True).stdout


def base_initramfs(cache: Path, kernel: str, udcs: int) -> Path:
    extra = os.environ.get("USBVM_EXTRA_MODULES", "").split()
    modules = BASE_MODULES + extra
    udir = cache / "udev"
    udevadm = _udevadm(udir)
    h = hashlib.sha256()
    h.update(f"{kernel} {' '.join(modules)} {udcs} base-2".encode())
    for f in [HERE / "guest/init", HERE / "guest/ctl.sh", Path("/bin/busybox"), udevadm]:
        h.update(f.read_bytes())
    out = cache / f"base-{h.hexdigest()[:16]}.cpio.gz"
    if out.exists():
        return out
    moddir = cache / f"kernel-{kernel}" / "lib/modules" / kernel
    with tempfile.TemporaryDirectory(dir=cache, prefix="stage.") as tmp:
        s = Path(tmp)
        for d in ["bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "proc", "sys", "dev", "run", "tmp", "root", "etc/udev", "lib/systemd", "lib/udev/rules.d", "vm/modules"]:
            (s / d).mkdir(parents=True, exist_ok=True)
        _put_program(s, Path("/bin/busybox"), "/bin/busybox")
        _put_program(s, udevadm, "/bin/udevadm")
        (s / "lib/systemd/systemd-udevd").symlink_to("/bin/udevadm")
        for rules in [udir / "lib/udev/rules.d", udir / "usr/lib/udev/rules.d"]:
            if (rules / "50-udev-default.rules").exists():
                shutil.copy(rules / "50-udev-default.rules", s / "lib/udev/rules.d/")
        hwdb = udir / "hwdb-usb/etc/udev/hwdb.bin"
        if hwdb.exists():
            shutil.copy(hwdb, s / "etc/udev/hwdb.bin")
        (s / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        groups = "root tty disk lp kmem dialout cdrom floppy tape audio video plugdev input kvm render sgx users".split()
        (s / "etc/group").write_text("".join(f"{g}:x:{i}:\n" for i, g in enumerate(groups)))
        (s / "etc/hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
        (s / "etc/hostname").write_text("usbvm\n")
        lines = []
        order = _module_order(moddir, modules)
        for name, path in order:
            (s / "vm/modules" / f"{name}.ko").write_bytes(_decompressed(path))
            lines.append(f"{name}.ko {'num=%d' % udcs if name == 'dummy_hcd' else ''}".rstrip())
        (s / "vm/modules.list").write_text("\n".join(lines) + "\n")
        _put(s, HERE / "guest/init", "/init", 0o755)
        _put(s, HERE / "guest/ctl.sh", "/vm/ctl.sh", 0o755)
        part = out.with_suffix(f".tmp{os.getpid()}")
        _cpio(s, part)
        part.rename(out)
    say(f"built {out.name} (modules: {' '.join(n for n, _ in order)})")
    return out


# ---------------------------------------------------------------------------------------
# run: one program in one VM


def _hostfwd(spec: str) -> str:
    """`N`, `HOST:GUEST` or `ADDR:HOST:GUEST` (ADDR: the host address to listen on,
    127.0.0.1 unless given) as QEMU's hostfwd text `ADDR:HOST-:GUEST`."""
    parts = spec.split(":")
    if len(parts) == 1:
        parts = ["127.0.0.1", parts[0], parts[0]]
    elif len(parts) == 2:
        parts = ["127.0.0.1", *parts]
    return f"{parts[0]}:{parts[1]}-:{parts[2]}"


def run(opts: argparse.Namespace) -> int:
    t0 = time.monotonic()
    binary = Path(opts.bin if "/" in opts.bin else (shutil.which(opts.bin) or opts.bin))
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        say(f"{opts.bin} is not an executable file")
        return 2
    cache = cache_dir()
    kernel = os.environ.get("USBVM_KERNEL") or (
        (cache / "current-kernel").read_text().strip() if (cache / "current-kernel").exists() else ""
    )
    if not kernel or not (cache / f"kernel-{kernel}/.ok").exists() or not (cache / "udev/.ok").exists():
        cache, kernel = prepare()
    vmlinuz = cache / f"kernel-{kernel}/boot/vmlinuz-{kernel}"
    work = Path(opts.workdir or tempfile.mkdtemp(prefix="gatecmd-vm."))
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()
    ctl = Path(opts.ctl) if opts.ctl else work / "ctl.sock"
    log = work / "console.log"
    for stale in [ctl, log, work / "qemu.pid", *work.glob("t_*")]:
        stale.unlink(missing_ok=True)
    try:
        base = base_initramfs(cache, kernel, opts.udcs)
        initrd = work / "initrd.img"
        with tempfile.TemporaryDirectory(dir=work, prefix="stage.") as tmp:
            s = Path(tmp)
            guest_bin = f"/usr/local/bin/{binary.name}"
            _put_program(s, binary, guest_bin)
            for spec in opts.file:
                src, sep, dst = spec.partition(":")
                dst = dst if sep else os.path.realpath(src)
                if Path(src).is_file() and _is_elf(Path(src)):
                    _put_program(s, Path(src), dst)
                else:
                    _put(s, Path(src), dst)
            env = ["export USBVM=1"] + [f"export {k}={shlex.quote(v)}" for k, _, v in (e.partition("=") for e in opts.env)]
            (s / "vm").mkdir(exist_ok=True)
            (s / "vm/prog.sh").write_text("\n".join(env) + "\nexec " + shlex.join([guest_bin, *opts.args]) + "\n")
            (s / "vm/cmdline").write_text(" ".join([guest_bin, *opts.args]) + "\n")
            (s / "vm/run.conf").write_text(f"TIMEOUT={opts.timeout}\nHOLD={1 if opts.hold else 0}\n")
            _cpio(s, work / "prog.cpio.gz")
        with open(initrd, "wb") as f:
            for part in [base, work / "prog.cpio.gz"]:
                with open(part, "rb") as p:
                    shutil.copyfileobj(p, f)
        (work / "prog.cpio.gz").unlink()
    except (VmError, OSError, subprocess.CalledProcessError) as e:
        say(f"could not build the guest: {e}")
        return 125
    net = "user,id=n0" + "".join(f",hostfwd=tcp:{_hostfwd(p)}" for p in opts.port)
    qemu = [
        "qemu-system-x86_64", "-nodefaults", "-no-user-config", "-nographic", "-machine", "pc",
        "-accel", "tcg", "-m", str(opts.mem), "-smp", str(opts.smp), "-no-reboot",
        "-kernel", str(vmlinuz), "-initrd", str(initrd),
        "-append", f"console=ttyS0 panic=-1 quiet loglevel=4 8250.nr_uarts=2 {os.environ.get('USBVM_APPEND', '')}".strip(),
        "-chardev", f"file,id=con,path={log}", "-serial", "chardev:con",
        "-chardev", f"socket,id=ctl,path={ctl},server=on,wait=off", "-serial", "chardev:ctl",
        "-netdev", net, "-device", "virtio-net-pci,netdev=n0,romfile=",
        "-fw_cfg", "name=etc/sercon-port,string=0", "-monitor", "none",
    ]
    log.write_bytes(b"")
    host_timeout = opts.host_timeout or opts.timeout + 120
    launched = time.monotonic()
    with open(work / "qemu.stderr", "wb") as err:
        q = subprocess.Popen(qemu, stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT)
    (work / "qemu.pid").write_text(f"{q.pid}\n")
    say(f"kernel {kernel}; qemu pid {q.pid}; workdir {work}; control socket {ctl}; ports {' '.join(opts.port) or 'none'}")

    def kill_qemu(*_):
        if q.poll() is None:
            q.terminate()
            try:
                q.wait(2)
            except subprocess.TimeoutExpired:
                q.kill()

    def on_signal(signum, _frame):
        kill_qemu()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    marks = {"control channel ready": "t_ctl_ready", "program start:": "t_program_start", "program exit rc=": "t_program_exit"}
    timed_out = False
    try:
        with open(log, "rb") as console:
            pending = b""
            while True:
                chunk = console.read(65536)
                if chunk:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for raw in lines:
                        line = raw.decode("utf-8", "replace").rstrip("\r")
                        if not opts.quiet:
                            print(line, flush=True)
                        if "[usbvm] " in line:
                            for text, name in marks.items():
                                if text in line:
                                    (work / name).write_text(f"{time.monotonic() - launched:.2f}\n")
                    continue
                if q.poll() is not None:
                    if pending and not opts.quiet:
                        print(pending.decode("utf-8", "replace"), flush=True)
                    break
                if time.monotonic() - launched > host_timeout:
                    say(f"host timeout {host_timeout}s: killing qemu pid {q.pid}")
                    timed_out = True
                    kill_qemu()
                    break
                time.sleep(0.1)
    finally:
        kill_qemu()
        initrd.unlink(missing_ok=True)
        ctl.unlink(missing_ok=True)
    text = log.read_text(errors="replace").replace("\r", "")
    codes = re.findall(r"\[usbvm\] .*program exit rc=(\d+)", text)
    uptime = lambda what: (re.findall(rf"\[usbvm\] T\+([0-9.]+)s {what}", text) or ["-"])[0]
    got = lambda n: (work / n).read_text().strip() if (work / n).exists() else "-"
    say(
        f"timings (s): host: ctl ready {got('t_ctl_ready')}, program start {got('t_program_start')}, "
        f"program exit {got('t_program_exit')}, total {time.monotonic() - t0:.2f}; "
        f"guest uptime: init {uptime('init started')}, program start {uptime('program start')}"
    )
    if codes:
        rc = int(codes[-1])
    else:
        rc = 124 if timed_out else 125
        say(f"no program exit status in the log (qemu rc={q.returncode}); qemu stderr:")
        sys.stderr.write((work / "qemu.stderr").read_text(errors="replace"))
    say(f"exit {rc}; log {log}")
    return rc


# ---------------------------------------------------------------------------------------
# the control channel


class Reply:
    def __init__(self, ok: bool, verb: str, text: str, data: list[str], seconds: float):
        self.ok, self.verb, self.text, self.data, self.seconds = ok, verb, text, data, seconds
        self.fields = dict(kv.split("=", 1) for kv in text.split() if "=" in kv)

    def __repr__(self) -> str:
        return f"Reply({'ok' if self.ok else 'err'} {self.verb} {self.text!r}, {len(self.data)} lines)"


class VmCtl:
    """One client of the guest's control loop (guest/ctl.sh)."""

    def __init__(self, path, connect_timeout: float = 60.0, alive=None):
        self.path = str(path)
        self._buf = b""
        self._tokens = itertools.count(1)
        deadline = time.monotonic() + connect_timeout
        while True:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.path)
                self.sock = s
                break
            except OSError:
                s.close()
                if time.monotonic() > deadline or (alive is not None and not alive()):
                    raise VmError(f"cannot connect to {self.path}")
                time.sleep(0.05)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def _line(self, deadline: float) -> str | None:
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return None
            if not chunk:
                raise VmError("control channel closed (VM gone?)")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode("utf-8", "replace").rstrip("\r")

    def _await(self, verb: str, deadline: float, token: str | None = None) -> Reply | None:
        start = time.monotonic()
        data: list[str] = []
        while (line := self._line(deadline)) is not None:
            if line.startswith("| "):
                data.append(line[2:])
                continue
            status, _, rest = line.partition(" ")
            v, _, text = rest.partition(" ")
            if status in ("ok", "err") and v == verb and (token is None or text == token):
                return Reply(status == "ok", v, text, data, time.monotonic() - start)
            if status in ("ok", "err"):
                data = []  # an answer to an earlier command (a late pong)
        return None

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Pings until the guest answers this ping: bytes sent before it opened its port
        are lost, and pings queued meanwhile are answered late."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            token = f"t{next(self._tokens)}"
            self.sock.sendall(f"ping {token}\n".encode())
            if self._await("pong", min(deadline, time.monotonic() + 0.5), token):
                return
        raise VmError(f"guest control loop did not answer within {timeout}s")

    def command(self, line: str, timeout: float = 60.0, check: bool = True) -> Reply:
        verb = line.split(" ", 1)[0]
        self.sock.sendall((line + "\n").encode())
        rep = self._await(verb, time.monotonic() + timeout)
        if rep is None:
            raise VmError(f"no answer to {line!r} within {timeout}s")
        if check and not rep.ok:
            raise VmError(f"{line!r}: err {verb} {rep.text}")
        return rep

    def ping(self, token: str = "") -> Reply:
        return self.command(f"ping {token}".strip())

    def plug(self, name, vid, pid, bcdusb=0x0200, serial=None, manufacturer=None, product=None, bcddevice=None, function=None, timeout=60.0) -> dict:
        words = ["plug", name, f"0x{vid:04x}", f"0x{pid:04x}", f"0x{bcdusb:04x}"]
        for k, v in (("serial", serial), ("manufacturer", manufacturer), ("product", product), ("function", function)):
            if v is not None:
                words.append(f"{k}={v}")
        if bcddevice is not None:
            words.append(f"bcddevice=0x{bcddevice:04x}")
        rep = self.command(" ".join(words), timeout)
        return {**rep.fields, "seconds": round(rep.seconds, 3)}

    def unplug(self, name, timeout=60.0) -> float:
        return self.command(f"unplug {name}", timeout).seconds

    def replug(self, name, bcdusb=None, gap_ms=0, timeout=60.0) -> dict:
        bcd = "-" if bcdusb is None else f"0x{bcdusb:04x}"
        rep = self.command(f"replug {name} {bcd} {int(gap_ms)}", timeout)
        return {**rep.fields, "seconds": round(rep.seconds, 3)}

    def list(self) -> list[str]:
        return self.command("list").data

    def exec(self, cmd: str, timeout: float = 60.0) -> tuple[int, list[str]]:
        rep = self.command(f"exec {cmd}", timeout)
        return int(rep.fields.get("rc", "-1")), rep.data

    def start(self) -> Reply:
        return self.command("start")

    def poweroff(self) -> None:
        try:
            self.command("poweroff", timeout=10)
        except (VmError, OSError):
            pass


class VmRun:
    """One program in one VM: `run.sh` in a child process, its control channel connected."""

    def __init__(self, bin, args=(), port=None, ports=(), timeout=120, workdir=None, hold=False,
                 env=None, files=(), udcs=4, ready_timeout=120.0, extra=()):
        self.bin, self.args = str(bin), [str(a) for a in args]
        self.ports = [str(p) for p in ports] + ([str(port)] if port is not None else [])
        self.timeout, self.hold, self.env, self.files = timeout, hold, dict(env or {}), list(files)
        self.udcs, self.ready_timeout, self.extra = udcs, ready_timeout, list(extra)
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="gatecmd-vm."))
        self.ctl_path = self.workdir / "ctl.sock"
        self.proc = self.ctl = self.returncode = None
        self.t_launch = self.ready_after = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self) -> None:
        cmd = [str(HERE / "run.sh"), "--bin", self.bin, "--workdir", str(self.workdir), "--ctl", str(self.ctl_path),
               "--timeout", str(self.timeout), "--udcs", str(self.udcs)]
        for p in self.ports:
            cmd += ["--port", p]
        for k, v in self.env.items():
            cmd += ["--env", f"{k}={v}"]
        for f in self.files:
            cmd += ["--file", str(f)]
        if self.hold:
            cmd.append("--hold")
        cmd += [*self.extra, "--", *self.args]
        self.t_launch = time.monotonic()
        self._out = open(self.workdir / "run.out", "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self.ctl = VmCtl(self.ctl_path, connect_timeout=self.ready_timeout, alive=lambda: self.proc.poll() is None)
            self.ctl.wait_ready(self.ready_timeout)
        except (VmError, OSError) as e:
            self.stop(grace=5)
            raise VmError(f"VM did not come up ({e}):\n{self.log()[-3000:]}\n{self.run_output()[-3000:]}") from None
        self.ready_after = time.monotonic() - self.t_launch

    def log(self) -> str:
        try:
            return (self.workdir / "console.log").read_text(errors="replace").replace("\r", "")
        except OSError:
            return ""

    def run_output(self) -> str:
        try:
            return (self.workdir / "run.out").read_text(errors="replace")
        except OSError:
            return ""

    def wait_log(self, pattern: str, timeout: float = 30.0):
        rx = re.compile(pattern, re.M)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.log())
            if m or time.monotonic() > deadline or (self.proc is not None and self.proc.poll() is not None):
                return m or rx.search(self.log())
            time.sleep(0.1)

    def timings(self) -> dict:
        out = {"ready_after": self.ready_after}
        for name in ["t_ctl_ready", "t_program_start", "t_program_exit"]:
            p = self.workdir / name
            out[name[2:]] = float(p.read_text()) if p.exists() else None
        return out

    def wait(self, timeout=None) -> int:
        self.returncode = self.proc.wait(timeout)
        return self.returncode

    def stop(self, grace: float = 30) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None and self.ctl is not None:
            self.ctl.poweroff()
        try:
            self.returncode = self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.terminate()  # run.sh kills QEMU by its pid
            try:
                self.returncode = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.returncode = self.proc.wait()
        if self.ctl is not None:
            self.ctl.close()
        self.returncode = self.proc.returncode

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


# ---------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    if argv and argv[0] == "prepare":
        try:
            cache, kernel = prepare()
        except (VmError, subprocess.CalledProcessError) as e:
            say(str(e))
            return 1
        say(f"ready: kernel {kernel}, cache {cache}")
        return 0
    if argv and argv[0] == "run":
        p = argparse.ArgumentParser(prog="run.sh", description="run one program in a test VM")
        p.add_argument("--bin", required=True)
        p.add_argument("--port", action="append", default=[])
        p.add_argument("--timeout", type=int, default=60)
        p.add_argument("--ctl")
        p.add_argument("--workdir")
        p.add_argument("--hold", action="store_true")
        p.add_argument("--env", action="append", default=[])
        p.add_argument("--file", action="append", default=[])
        p.add_argument("--udcs", type=int, default=4)
        p.add_argument("--mem", type=int, default=1024)
        p.add_argument("--smp", type=int, default=1)
        p.add_argument("--host-timeout", type=int, default=0)
        p.add_argument("--quiet", action="store_true")
        rest = argv[1:]
        args = []
        if "--" in rest:
            i = rest.index("--")
            rest, args = rest[:i], rest[i + 1:]
        opts = p.parse_args(rest)
        opts.args = args
        return run(opts)
    if len(argv) >= 2 and argv[0] == "ctl":
        c = VmCtl(argv[1])
        words = argv[2:]
        if words == ["wait"]:
            c.wait_ready()
            print("ready")
            return 0
        rep = c.command(" ".join(words), check=False, timeout=120)
        for d in rep.data:
            print(d)
        print(("ok " if rep.ok else "err ") + rep.verb + " " + rep.text)
        return 0 if rep.ok else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
