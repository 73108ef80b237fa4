"""The virtual flashing bench of vbench.py for a test in another language (the TypeScript
SDK's, tests/ts/flash_board.test.mjs): starts the VM with `flash_board` on and the
vboard's flash slowed to WRITE_SPEED, makes IMAGE_MIB of random bytes in the guest as
/srv/images/slow.img, prints one JSON line {"url", "token", "image"} (or {"unavailable":
reason}, exit 77), and stops the VM when its stdin closes.

  GATECMD_BIN, GATECMD_VBOARD_BIN   the binaries
  WRITE_SPEED (default 1M), IMAGE_MIB (default 80)
"""

from __future__ import annotations

import json
import os
import sys

import vbench


def main() -> int:
    try:
        gatecmd = vbench.binary("GATECMD_BIN")
        vboard = vbench.binary("GATECMD_VBOARD_BIN")
        vbench.check_prerequisites()
    except vbench.Unavailable as e:
        print(json.dumps({"unavailable": str(e)}), flush=True)
        return 77
    mib = int(os.environ.get("IMAGE_MIB", "80"))
    bench = vbench.Bench(
        gatecmd,
        vboard,
        flash_size="256M",
        write_speed=os.environ.get("WRITE_SPEED", "1M"),
        flash=f"  enabled: true\n  loaders: [{vbench.IMAGES}]\n  loaders_writable: true\n",
        timeout=900,
    )
    try:
        rc, lines = bench.guest(f"head -c {mib * 1048576} /dev/urandom > {vbench.IMAGES}/slow.img", timeout=120)
        if rc != 0:
            raise RuntimeError(f"making the image: {lines}")
        print(json.dumps({"url": bench.url, "token": vbench.TOKEN_A, "image": "slow.img", "mib": mib}), flush=True)
        sys.stdin.read()
    finally:
        bench.stop()
        bench.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
