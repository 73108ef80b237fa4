"""Bench page update latency: event -> DOM change, median and p99 (`make bench`, after the Rust
benchmark; not part of `make test`).

Starts gatecmd (GATECMD_BIN, else the release build, else the debug build), signs in to the
page in Debian's headless Chromium (Playwright from PyPI, executable_path=/usr/bin/chromium;
no browser is downloaded), and takes and releases a lease N times from an MCP client (the
official Python SDK). A MutationObserver in the page stamps when the lease's row appears and
goes (Date.now(): the same CLOCK_REALTIME as Python's time.time()).

- lease: from the grant (the lease's expires_at minus its ttl_secs, stamped by the server)
  to the row on the page;
- unlease: from sending unlock_device (an upper bound: it includes the request's way in) to
  the row gone.

usage: python benches/page_latency.py [N]        (GATECMD_PAGE_EVENTS, default 50 pairs)
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
TOKEN = "page-bench-token-0123456789abcdef"
KEY = "usb:2207:350b"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"]

WATCH_JS = """() => {
  window.__seen = {};
  window.__watch = {};
  const check = () => {
    const now = Date.now();
    for (const [name, w] of Object.entries(window.__watch)) {
      if (name in window.__seen) continue;
      const here = !!document.querySelector(w.sel);
      if (here !== w.gone) window.__seen[name] = now;
    }
  };
  new MutationObserver(check).observe(document.body,
    {subtree: true, childList: true, attributes: true, characterData: true});
}"""


def binary() -> str:
    if os.environ.get("GATECMD_BIN"):
        return os.environ["GATECMD_BIN"]
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=REPO, capture_output=True, text=True
    )
    target = Path(json.loads(meta.stdout)["target_directory"]) if meta.returncode == 0 else REPO / "target"
    for profile in ["release", "debug"]:
        if (target / profile / "gatecmd").exists():
            return str(target / profile / "gatecmd")
    raise SystemExit("no gatecmd binary: build it or set GATECMD_BIN")


def epoch(iso: str) -> float:
    head, _, frac = iso.rstrip("Z").partition(".")
    whole = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.timezone.utc).timestamp()
    return whole + (float("0." + frac) if frac else 0.0)


def start(directory: Path) -> tuple[subprocess.Popen, str]:
    cfg = directory / "config.yaml"
    cfg.write_text(f"clients:\n  - name: bench\n    token: {TOKEN}\n")
    cfg.chmod(stat.S_IRUSR | stat.S_IWUSR)
    env = dict(os.environ, GATECMD_LOG="warn", STATE_DIRECTORY=str(directory / "state"))
    proc = subprocess.Popen(
        [binary(), "serve", "--config", str(cfg), "--bind", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("gatecmd: listening on "):
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, line.strip().removeprefix("gatecmd: listening on ").removesuffix("/mcp")
    raise SystemExit("gatecmd did not start")


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


async def run(base: str, pairs: int) -> tuple[list[float], list[float]]:
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from playwright.async_api import async_playwright

    lease_ms: list[float] = []
    unlease_ms: list[float] = []
    sel = f'tr[data-key="{KEY}"]'
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = await browser.new_page()
        await page.goto(base + "/")
        await page.fill("#token", TOKEN)
        async with page.expect_navigation():
            await page.click("button[type=submit]")
        await page.wait_for_selector("#status.live", timeout=10000)
        await page.evaluate(WATCH_JS)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with create_mcp_http_client(headers=headers) as http:
            async with Client(streamable_http_client(base + "/mcp", http_client=http), mode="auto") as client:
                for i in range(pairs):
                    await page.evaluate(
                        "([i, sel]) => { window.__watch['on' + i] = {sel, gone: false};"
                        " window.__watch['off' + i] = {sel, gone: true}; }",
                        [i, sel],
                    )
                    r = await client.call_tool("lock_device", {"key": KEY, "note": f"bench {i}"})
                    if r.is_error:
                        raise SystemExit(f"lock_device: {r.content}")
                    lease = r.structured_content
                    granted = epoch(lease["expires_at"]) - lease["ttl_secs"]
                    await page.wait_for_function("n => n in window.__seen", arg=f"on{i}", timeout=5000)
                    lease_ms.append((await page.evaluate("n => window.__seen[n]", f"on{i}")) - granted * 1000)
                    sent = time.time()
                    r = await client.call_tool("unlock_device", {"lease": lease["lease_id"]})
                    if r.is_error:
                        raise SystemExit(f"unlock_device: {r.content}")
                    await page.wait_for_function("n => n in window.__seen", arg=f"off{i}", timeout=5000)
                    unlease_ms.append((await page.evaluate("n => window.__seen[n]", f"off{i}")) - sent * 1000)
                    # Apart by more than the stream's minimum gap, so each event is its own.
                    await asyncio.sleep(0.15)
        await browser.close()
    return lease_ms, unlease_ms


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("GATECMD_PAGE_EVENTS", "50"))
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        print("page update latency: SKIP (playwright missing: ./scripts/venv.sh)")
        return
    if not os.access(CHROMIUM, os.X_OK):
        print(f"page update latency: SKIP ({CHROMIUM} missing: ./scripts/setup.sh --test)")
        return
    directory = Path(tempfile.mkdtemp(prefix="gatecmd-page-bench-"))
    proc, base = start(directory)
    try:
        lease_ms, unlease_ms = asyncio.run(run(base, pairs))
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(directory, ignore_errors=True)
    both = lease_ms + unlease_ms
    print(
        f"page update latency (event -> DOM), {len(both)} events: median {statistics.median(both):.1f} ms, "
        f"p99 {pct(both, 0.99):.1f} ms (lease: median {statistics.median(lease_ms):.1f} / p99 "
        f"{pct(lease_ms, 0.99):.1f} ms; unlease from the request: median {statistics.median(unlease_ms):.1f} / "
        f"p99 {pct(unlease_ms, 0.99):.1f} ms)"
    )


if __name__ == "__main__":
    main()
