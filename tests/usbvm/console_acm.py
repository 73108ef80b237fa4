#!/usr/bin/env python3
"""Host side of tests/hardware/console_usbvm.rs: a CDC-ACM gadget as a board's serial adapter.

usage: console_acm.py USBVM_DIR GUEST_BINARY GUEST_TEST   (prints PASS and exits 0 on success)

GUEST_TEST is the guest side's whole libtest name (`module::usbvm_guest_side`).
"""
import os
import sys
import time

usbvm, guest, guest_test = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, usbvm)
from vmctl import VmRun  # noqa: E402

os.environ["USBVM_EXTRA_MODULES"] = "usb_f_acm cdc_acm"


def step(vm, pattern, timeout=60):
    m = vm.wait_log(pattern, timeout=timeout)
    if not m:
        print(vm.log())
        sys.exit(f"FAIL: no {pattern!r} in the guest console")
    print(f"[{time.monotonic() - t0:6.2f}s] {m.group(0)}")
    return m


def ex(vm, cmd):
    rc, out = vm.ctl.exec(cmd)
    if rc != 0:
        sys.exit(f"FAIL: {cmd!r} -> rc {rc}: {out}")
    return out


t0 = time.monotonic()
args = ["--ignored", "--exact", guest_test, "--nocapture", "--test-threads", "1"]
with VmRun(guest, args, timeout=240, hold=True) as vm:
    plugged = vm.ctl.plug("board", 0x1d6b, 0x0104, 0x0200, function="acm")
    print("plugged", plugged)
    # The board's UART: raw, no echo (a Ctrl-C must arrive as a byte, not a signal).
    ex(vm, "stty -F /dev/ttyGS0 raw -echo")
    vm.ctl.start()
    step(vm, r"GUEST open1.*")
    # Listen on the board side before the guest writes Ctrl-C.
    ex(vm, "(timeout 30 cat /dev/ttyGS0 > /tmp/gs0.out &) ; sleep 0.2")
    ex(vm, r"printf 'U-Boot 2024.01\r\n\033[33mHit any key to stop autoboot:  3 \033[0m' > /dev/ttyGS0")
    step(vm, r"GUEST matched1 .*")
    step(vm, r"GUEST wrote")
    time.sleep(0.5)
    out = ex(vm, "od -An -tx1 /tmp/gs0.out")
    print("board side received:", out)
    if "03" not in " ".join(out).split():
        sys.exit(f"FAIL: Ctrl-C did not reach ttyGS0: {out}")
    # Re-enumeration on the same port: ttyACM goes away and comes back.
    print("replug", vm.ctl.replug("board", None, 300))
    step(vm, r"GUEST absent.*")
    step(vm, r"GUEST open2.*")
    ex(vm, "stty -F /dev/ttyGS0 raw -echo")
    ex(vm, r"printf 'second boot\r\n' > /dev/ttyGS0")
    step(vm, r"GUEST matched2 .*")
    step(vm, r"GUEST done")
    step(vm, r"test result: ok.*", timeout=30)
print("PASS")
# Its logs are only wanted when a step fails (sys.exit above leaves them for a look).
vm.cleanup()
