"""flash_board against rkdeveloptool on virtual boards in a VM (`make bench-flash`; not part
of `make test`; docs/PERFORMANCE.md, "flash_board").

The VM of tests/python/vbench.py (usbvm: Debian's kernel under QEMU TCG, gatecmd-vboard,
Debian's rkdeveloptool, gatecmd) with release binaries, 512 MiB of flash per board, and the
official MCP Python SDK on the host as the agent. Interleaved rounds on vb1, the board put
in Loader mode (power on into MaskROM, rkdeveloptool db) before each measured flash:

1. Dense 64 MiB: `rkdeveloptool wl 0` through gatecmd (execute_command; the child's time)
   against flash_board's write phase (`written.write_ms`) of another 64 MiB image (each
   round its own random image: the resume journal would skip an image already written).
   At the default 64 KiB transfers, then again at 4 MiB (`flash.transfer_kib: 4096`,
   applied by a reload).
2. A 256 MiB image with a bmap mapping 25 % (four 16 MiB ranges; made by bmaptool on the
   host): flash_board end to end, the CALL from the request to the job's result as the host
   sees it, against `rkdeveloptool wl 0` of its raw expansion (the same file, holes read as
   zeros), at both transfer sizes; and the steps' sum against the call's `took_ms`.
3. Verification on its own row (`verify_ms` of the dense flashes).
4. vb2 acts as the stock RK3588 loader (`--read-back vb2=rk3588`: 0xCC past 32 MiB) and
   stalls on transfers above 1 MiB (`--stall-above vb2=1M`): a 64 MiB flash from power
   off at 4 MiB transfers stalls, is recovered (`recover`, its time), goes on at 64 KiB and
   is verified as far as the reads are sound (32 MiB), all in one call.

  GATECMD_BIN, GATECMD_VBOARD_BIN   release binaries (default target/release/...)
  FLASH_BENCH_RUNS                  rounds per row (default 3)
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

import vbench  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

MIB = 1 << 20
RUNS = int(os.environ.get("FLASH_BENCH_RUNS", "3"))
IMAGES = vbench.IMAGES
BMAP_SIZE = 256 * MIB
BMAP_RANGES = [(0, 16 * MIB), (64 * MIB, 16 * MIB), (130 * MIB, 16 * MIB), (232 * MIB, 16 * MIB)]


def release(var: str, name: str) -> Path:
    p = Path(os.environ.get(var) or REPO / "target" / "release" / name)
    if not os.access(p, os.X_OK):
        sys.exit(f"{p} is not built: cargo build --release --locked --bin gatecmd -p gatecmd-vboard")
    return p


def bmap_images(work: Path) -> dict[str, bytes]:
    """2 × RUNS bmap'd images (a round each, at both transfer sizes): each one's mapped
    ranges (random bytes) and bmaptool's bmap."""
    files = {}
    for i in range(2 * RUNS):
        img = work / f"b{i}.img"
        pieces = []
        with open(img, "wb") as f:
            f.truncate(BMAP_SIZE)
            for off, length in BMAP_RANGES:
                data = os.urandom(length)
                f.seek(off)
                f.write(data)
                pieces.append(data)
        subprocess.run(["bmaptool", "create", "-o", str(work / f"b{i}.bmap"), str(img)], check=True, capture_output=True)
        files[f"b{i}.bmap"] = (work / f"b{i}.bmap").read_bytes()
        files[f"b{i}.pieces"] = b"".join(pieces)
        img.unlink()
    return files


def assemble(i: int) -> str:
    cmds = [f"dd of={IMAGES}/b{i}.img bs=1048576 seek={BMAP_SIZE // MIB} count=0 2>/dev/null"]
    at = 0
    for off, length in BMAP_RANGES:
        cmds.append(
            f"dd if={IMAGES}/b{i}.pieces of={IMAGES}/b{i}.img bs=1048576 skip={at // MIB} "
            f"seek={off // MIB} count={length // MIB} conv=notrunc 2>/dev/null"
        )
        at += length
    return " && ".join(cmds + [f"rm {IMAGES}/b{i}.pieces"])


class Caller:
    def __init__(self, client, board: str, lease: str):
        self.client, self.board, self.lease = client, board, lease

    async def call(self, tool: str, args: dict, ok: bool = True) -> dict:
        r = await self.client.call_tool(tool, args)
        if ok and r.is_error:
            raise RuntimeError(f"{tool} {args}: {r.content}")
        return r.structured_content

    async def rk(self, *args: str) -> dict:
        return await self.call(
            "execute_command", {"command": "rkdeveloptool", "args": list(args), "board": self.board, "lease": self.lease}
        )

    async def to_loader(self) -> None:
        await self.call("power_board", {"board": self.board, "action": "off", "lease": self.lease})
        await self.call("power_board", {"board": self.board, "action": "on", "lease": self.lease})
        r = await self.call(
            "wait_for_device",
            {"match": {"id": vbench.PORTS[self.board][0], "mode": "maskrom"}, "state": "attached", "timeout_secs": 30},
        )
        assert r["satisfied"], r
        await self.rk("db", "loader.bin")
        r = await self.call(
            "wait_for_device",
            {"match": {"id": vbench.PORTS[self.board][0], "mode": "loader"}, "state": "attached", "timeout_secs": 30},
        )
        assert r["satisfied"], r

    async def flash(self, image: str, verified: bool = True, **extra) -> tuple[dict, float]:
        s = time.monotonic()
        r = await self.call("flash_board", {"board": self.board, "image": image, "lease": self.lease, **extra})
        took = time.monotonic() - s
        assert r["verified"] is verified, r
        return r["flashed"], took


def step_ms(f: dict, *names: str) -> float:
    return sum(s["ms"] for s in f["steps"] if s["step"] in names) / 1000


async def main() -> None:
    gatecmd = release("GATECMD_BIN", "gatecmd")
    vboard = release("GATECMD_VBOARD_BIN", "gatecmd-vboard")
    if shutil.which("bmaptool") is None:
        sys.exit("bmaptool is not installed (Debian: bmap-tools)")
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="gatecmd-flash-bench."))
    files = bmap_images(work)
    bench = vbench.Bench(
        gatecmd,
        vboard,
        files=files,
        flash_size="512M",
        timeout=3000,
        log_level="warn",
        flash=f"  enabled: true\n  loaders: [{IMAGES}]\n  loaders_writable: true\n  transfer_kib: 64\n",
        vboard_args="--read-back vb2=rk3588 --stall-above vb2=1M",
    )
    print(f"VM up, gatecmd listening, after {bench.ready_secs:.1f} s", flush=True)
    rows = []
    try:
        for i in range(2 * RUNS):
            rc, lines = bench.guest(assemble(i), timeout=120)
            assert rc == 0, lines
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {vbench.TOKEN_A}"}) as http:
            async with Client(streamable_http_client(bench.url, http_client=http), mode="legacy") as client:
                r = await client.call_tool("lock_board", {"board": "vb1", "ttl_secs": 3600})
                a = Caller(client, "vb1", r.structured_content["lease_id"])
                n = 0
                for label, kib in (("64 KiB", 64), ("4 MiB", 4096)):
                    if kib != 64:
                        rc, lines = bench.guest(
                            "sed -i 's/transfer_kib: 64$/transfer_kib: 4096/' /etc/gatecmd/vm.yaml && "
                            "kill -HUP $(pidof gatecmd) && sleep 2 && grep -c 'transfer_kib: 4096' /etc/gatecmd/vm.yaml"
                        )
                        assert rc == 0 and lines and lines[-1].strip() == "1", lines
                    rk, engine, verify = [], [], []
                    for i in range(RUNS):
                        n += 1
                        rc, lines = bench.guest(
                            f"head -c {64 * MIB} /dev/urandom > {IMAGES}/d{n}.img", timeout=120
                        )
                        assert rc == 0, lines
                        await a.to_loader()
                        out = await a.rk("wl", "0", f"d{n}.img")
                        rk.append(out["duration_ms"] / 1000)
                        n += 1
                        bench.guest(f"rm {IMAGES}/d{n - 1}.img; head -c {64 * MIB} /dev/urandom > {IMAGES}/d{n}.img", timeout=120)
                        await a.to_loader()
                        f, _ = await a.flash(f"d{n}.img")
                        engine.append(f["written"]["write_ms"] / 1000)
                        verify.append(f["verify_ms"] / 1000)
                        bench.guest(f"rm {IMAGES}/d{n}.img")
                        print(
                            f"{label} round {i + 1}: rkdeveloptool wl {rk[-1]:.2f} s, flash_board write {engine[-1]:.2f} s "
                            f"({f['written']['rate_mb_s']} MB/s, transfers of {f['written']['transfer_bytes']} bytes), verify {verify[-1]:.2f} s",
                            flush=True,
                        )
                    mr, me, mv = statistics.median(rk), statistics.median(engine), statistics.median(verify)
                    # The link's measured rate: the faster of the dense write and read-back.
                    link = max(64 * MIB / me, 64 * MIB / mv)
                    rows.append(f"| the link, {label} transfers: the faster of the dense write and its read-back | {link / 1e6:.1f} MB/s | |")
                    rows.append(f"| dense 64 MiB: `rkdeveloptool wl` through gatecmd (child) | {mr:.2f} s | 1 |")
                    rows.append(f"| dense 64 MiB: flash_board write phase, {label} transfers | {me:.2f} s | {me / mr:.2f}× (target ≤ 1.05×) |")
                    rows.append(f"| flash_board verification of the 64 MiB ({label} transfers run) | {mv:.2f} s | |")
                    # 2. bmap end to end, at this transfer size (each round its own image
                    # per size: the journal would skip one already written).
                    rk_raw, e2e, call = [], [], []
                    for i in range(RUNS) if kib == 64 else range(RUNS, 2 * RUNS):
                        await a.to_loader()
                        out = await a.rk("wl", "0", f"b{i}.img")
                        rk_raw.append(out["duration_ms"] / 1000)
                        await a.to_loader()
                        f, took = await a.flash(f"b{i}.img", bmap=f"b{i}.bmap")
                        e2e.append(sum(s["ms"] for s in f["steps"]) / 1000)
                        call.append(took)
                        print(
                            f"{label} bmap round {i % RUNS + 1}: rkdeveloptool wl of the raw expansion {rk_raw[-1]:.2f} s, "
                            f"flash_board call {took:.2f} s (took_ms {f['took_ms'] / 1000:.2f}, steps sum {e2e[-1]:.2f}), "
                            f"verify {f['verify_ms'] / 1000:.2f} s; "
                            + ", ".join(f"{s['step']} {s['ms'] / 1000:.2f}" for s in f["steps"]),
                            flush=True,
                        )
                    mr, me, mc = statistics.median(rk_raw), statistics.median(e2e), statistics.median(call)
                    # The floor: the bytes this flash must move (its 64 MiB written and read
                    # back) at the link's rate, against wl's whole expansion at the same rate.
                    rows.append(
                        f"| floor at {label}: 128 MiB moved (written + read back) ÷ the link | {128 * MIB / link:.2f} s | wl's 256 MiB ÷ the link: {256 * MIB / link:.2f} s |"
                    )
                    rows.append(f"| 256 MiB image's raw expansion: `rkdeveloptool wl` through gatecmd (child) | {mr:.2f} s | 1 |")
                    rows.append(
                        f"| its bmap (25 % mapped): flash_board end to end (the call), {label} transfers (steps sum {me:.2f} s) | {mc:.2f} s | {mr / mc:.2f}× faster (target ≥ 3×) |"
                    )
                # 4. vb2: the stock RK3588 loader's reads, a stall above 1 MiB, 4 MiB tried.
                r = await client.call_tool("lock_board", {"board": "vb2", "ttl_secs": 3600})
                b2 = Caller(client, "vb2", r.structured_content["lease_id"])
                bench.guest(f"head -c {64 * MIB} /dev/urandom > {IMAGES}/rk.img", timeout=120)
                await b2.call("power_board", {"board": "vb2", "action": "off", "lease": b2.lease})
                f, took = await b2.flash("rk.img", verified=False, loader="loader.bin")
                names = [s["step"] for s in f["steps"]]
                rec = step_ms(f, "recover")
                print(
                    f"vb2 (rk3588 reads, stall above 1 MiB): call {took:.2f} s, recover {rec:.2f} s, "
                    f"verification {f['verification']} {f['verified_bytes']} of {f['verified_bytes'] + f['unverified_bytes']} bytes, "
                    f"transfer {f['written']['transfer_bytes']}; " + ", ".join(f"{s['step']} {s['ms'] / 1000:.2f}" for s in f["steps"]),
                    flush=True,
                )
                assert "recover" in names, names
                rows.append(f"| stalled 4 MiB transfer on vb2: `recover` (power.maskrom, loader again, on at 64 KiB) | {rec:.2f} s | |")
                rows.append(
                    f"| 64 MiB on vb2 as the stock RK3588 loader, from power off, stall and recovery included: the call | {took:.2f} s | verification {f['verification']}, {f['verified_bytes'] // MIB} MiB verified |"
                )
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"| figure (median of {RUNS}) | time | vs rkdeveloptool |")
    print("|---|---|---|")
    print("\n".join(rows))
    print(f"total {time.monotonic() - t0:.0f} s")
    bench.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
