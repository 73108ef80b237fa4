"""A screenshot of the bench page during a real flash of a virtual board
(`make screenshot-vboard`; not part of `make test`): the VM of tests/python/vbench.py,
an agent (the official MCP Python SDK) takes vb1, brings it to Loader mode and writes a
64 MiB image with Debian's rkdeveloptool; headless Chromium (Debian's /usr/bin/chromium,
driven by Playwright; no browser download) signs in to `GET /` and takes the picture while
the run's progress bar is between 1 and 99 %.

  GATECMD_BIN, GATECMD_VBOARD_BIN   binaries (default target/release/...)
  VBOARD_SHOT                       where to save it (default docs/img/vboard-flash.png)
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "benches"))

import vbench  # noqa: E402
from vboard import Caller, release  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

SHOT = Path(os.environ.get("VBOARD_SHOT") or REPO / "docs" / "img" / "vboard-flash.png")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"]


async def main() -> None:
    from playwright.async_api import async_playwright

    bench = vbench.Bench(
        release("GATECMD_BIN", "gatecmd"), release("GATECMD_VBOARD_BIN", "gatecmd-vboard"),
        flash_size="128M", timeout=900, log_level="warn",
    )
    try:
        rc, lines = bench.guest(
            f"{{ printf RKNS; head -c $((64 * 1024 * 1024 - 4)) /dev/urandom; }} > {vbench.IMAGES}/rock5b-debian.img",
            timeout=120,
        )
        assert rc == 0, lines
        base = bench.url.removesuffix("/mcp")
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {vbench.TOKEN_B}"}) as http:
            async with Client(streamable_http_client(bench.url, http_client=http), mode="legacy") as client:
                # The other board, leased by another client, sits in MaskROM: two rows.
                async with create_mcp_http_client(headers={"Authorization": f"Bearer {vbench.TOKEN_A}"}) as http_a:
                    async with Client(streamable_http_client(bench.url, http_client=http_a), mode="legacy") as other:
                        r = await other.call_tool("lock_board", {"board": "vb2", "note": "waiting for a loader"})
                        o = Caller(other, "vb2", r.structured_content["lease_id"])
                        await o.power("on")
                        r = await client.call_tool("lock_board", {"match": {"soc": "rk3588"}, "note": "flashing debian"})
                        a = Caller(client, r.structured_content["board"], r.structured_content["lease_id"])
                        await a.to_loader()
                        async with async_playwright() as pw:
                            browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
                            page = await (await browser.new_context(viewport={"width": 1440, "height": 900})).new_page()
                            await page.goto(base + "/")
                            await page.fill("#token", vbench.TOKEN_B)
                            async with page.expect_navigation():
                                await page.click("button[type=submit]")
                            await page.wait_for_selector("#status.live", timeout=10000)
                            flash = asyncio.create_task(a.rk("wl", "0x40", "rock5b-debian.img", progress_callback=lambda *_: asyncio.sleep(0)))
                            taken = None
                            deadline = time.monotonic() + 600
                            while time.monotonic() < deadline and not flash.done():
                                p = await page.evaluate(
                                    "() => { const r = document.querySelector('tr[data-run][data-progress]');"
                                    " return r ? Number(r.dataset.progress) : null; }"
                                )
                                if p is not None and 20 <= p <= 80:
                                    SHOT.parent.mkdir(parents=True, exist_ok=True)
                                    await page.screenshot(path=str(SHOT), full_page=True)
                                    taken = p
                                    break
                                await asyncio.sleep(0.1)
                            out = await flash
                            await browser.close()
                        print(f"wl: exit {out['exit_code']} in {out['duration_ms']} ms; screenshot at {taken} %: {SHOT}")
                        if taken is None:
                            sys.exit("the page never showed the run between 20 and 80 %")
    finally:
        bench.stop()
        bench.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
