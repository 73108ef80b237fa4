"""The bench page in a real browser: Debian's Chromium (/usr/bin/chromium) driven headless by
Playwright (`playwright` from PyPI; its own browsers are never downloaded), against the real
gatecmd under the umockdev preload, with the official MCP Python SDK as the agent.

Sign in; see the umockdev boards; plug a board, take a lease from an MCP client, run a
command with progress, and see the changes appear on the page within 250 ms (median; any
one within 1 s on a loaded machine), without a reload; a wrong token is refused; nothing
of the bench shows before sign-in; a cross-origin POST is refused. Saves a screenshot to tests/python/artifacts/bench-page.png.

Latency is measured from the event to the DOM change on one clock (CLOCK_REALTIME, read by
Python's time.time(), the browser's Date.now() and the flasher's `date`): a MutationObserver
in the page stamps the moment a watched element appears.
"""

from __future__ import annotations

import datetime
import http.server
import os
import statistics
import threading
import time
from pathlib import Path

import anyio
import pytest

from conftest import TOKEN_A, TOKEN_B, Server, connect

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
LIMIT_MS = 250
# The most any one change may take (see the end of test_bench_page_live_in_chromium).
OUTLIER_MS = 1000

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
boards:
  - name: rock5b-1
    tags: {{soc: rk3588}}
    usb: "1-2"
  - name: rock5b-2
    tags: {{soc: rk3588}}
    usb: "1-3"
commands:
  - name: flash
    binary: $DIR/flasher
    description: A flasher that prints rkdeveloptool-style progress and logs when it printed each step.
    device: rockusb
    progress: "\\\\((\\\\d+)%\\\\)"
    env: {{STEP_LOG: "$DIR/steps.log"}}
    params: {{lba: "[0-9]+"}}
    allowed_args:
      - pattern: wl {{lba}}
"""

# Prints 0..100 % in steps of 10, 0.3 s apart, and logs "PERCENT EPOCH" with the time read
# just before each line (so the latency measured includes the line's way out of the child).
FLASHER = """#!/bin/sh
i=0
while [ "$i" -le 100 ]; do
  t=$(date +%s.%N)
  printf '\\033[1A\\033[2KWrite LBA from file (%d%%)\\n' "$i"
  echo "$i $t" >> "$STEP_LOG"
  i=$((i + 10))
  sleep 0.3
done
printf 'Write LBA from file OK.\\n'
"""

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"]

# Stamps, for each registered selector, the first moment (Date.now()) it matches the DOM.
WATCH_JS = """() => {
  window.__seen = {};
  window.__watch = {};
  window.__loads = (window.__loads || 0) + 1;
  const check = () => {
    const now = Date.now();
    for (const [name, sel] of Object.entries(window.__watch)) {
      if (!(name in window.__seen) && document.querySelector(sel)) window.__seen[name] = now;
    }
  };
  new MutationObserver(check).observe(document.body,
    {subtree: true, childList: true, attributes: true, characterData: true});
}"""


def playwright_or_skip():
    why = None
    if not os.access(CHROMIUM, os.X_OK):
        why = f"{CHROMIUM} is not installed (apt-get install chromium; scripts/setup.sh --test)"
    else:
        try:
            import playwright.async_api  # noqa: F401
        except ImportError:
            why = "the playwright package is missing (scripts/venv.sh installs it)"
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"SKIP is not allowed in CI: {why}")
        pytest.skip(f"SKIP: {why}")


class OtherOrigin:
    """A page on another loopback port (another origin, same site) with forms that POST to
    gatecmd: what a malicious page open in the operator's browser would do."""

    def __init__(self, target: str) -> None:
        html = f"""<!doctype html><html><body>
<form id="signin" method="post" action="{target}/signin"><input name="token" value="{TOKEN_A}">
<button id="go-signin" type="submit">sign in</button></form>
<form id="signout" method="post" action="{target}/signout"><input name="csrf" value="guess">
<button id="go-signout" type="submit">sign out</button></form>
</body></html>""".encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(html)))
                self.end_headers()
                self.wfile.write(html)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


def epoch(iso: str) -> float:
    """Seconds since the epoch of an RFC 3339 UTC time with up to nanoseconds."""
    head, _, frac = iso.rstrip("Z").partition(".")
    whole = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.timezone.utc).timestamp()
    return whole + (float("0." + frac) if frac else 0.0)


async def seen_at(page, name: str, timeout_ms: int = 5000) -> float:
    """The epoch time (s) at which watch `name` first matched."""
    await page.wait_for_function("n => n in window.__seen", arg=name, timeout=timeout_ms)
    return await page.evaluate("n => window.__seen[n]", name) / 1000.0


async def watch(page, name: str, selector: str) -> None:
    await page.evaluate("([n, s]) => { window.__watch[n] = s; }", [name, selector])


@pytest.fixture
def bench(tmp_path, testbed):
    testbed.add("usb1-root-hub.umockdev")
    testbed.add("rk3588-maskrom-1-2.umockdev")
    flasher = tmp_path / "flasher"
    flasher.write_text(FLASHER)
    flasher.chmod(0o755)
    s = Server(tmp_path, config=CONFIG, env=testbed.server_env())
    yield s
    s.stop()


@pytest.mark.anyio
async def test_bench_page_live_in_chromium(bench, testbed):
    playwright_or_skip()
    from playwright.async_api import async_playwright

    base = bench.base
    other = OtherOrigin(base)
    latencies: dict[str, float] = {}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            ctx = await browser.new_context(viewport={"width": 1440, "height": 1000})
            page = await ctx.new_page()

            # Before sign-in: the form, nothing of the bench.
            resp = await page.goto(base + "/")
            assert resp is not None and resp.status == 200
            body = await page.content()
            assert 'action="/signin"' in body
            for bench_word in ["rock5b", "1-2", "2207", "Locks and leases", "vm-a"]:
                assert bench_word not in body, f"{bench_word!r} shown before sign-in"
            assert (await page.request.get(base + "/state")).status == 401
            assert (await page.request.get(base + "/events")).status == 401

            # A cross-origin POST (another port on loopback: same site, other origin) with a
            # right token is refused, and sets no cookie.
            await page.goto(other.url)
            async with page.expect_navigation() as nav:
                await page.click("#go-signin")
            assert (await nav.value).status == 403
            assert "cross-origin POST refused" in await page.content()
            assert await ctx.cookies() == []

            # A wrong token: refused, still the form.
            await page.goto(base + "/")
            await page.fill("#token", "not-the-token")
            async with page.expect_navigation() as nav:
                await page.click("button[type=submit]")
            assert (await nav.value).status == 401
            assert "not valid" in await page.content()
            assert await ctx.cookies() == []

            # Sign in.
            await page.fill("#token", TOKEN_A)
            async with page.expect_navigation():
                await page.click("button[type=submit]")
            cookie = next(c for c in await ctx.cookies() if c["name"] == "gatecmd_page")
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            assert TOKEN_A not in cookie["value"]
            await page.wait_for_selector("#status.live", timeout=5000)

            # The umockdev boards: rock5b-1 attached in MaskROM, rock5b-2 absent.
            await page.wait_for_selector('tr[data-board="rock5b-1"][data-attached="yes"]', timeout=5000)
            await page.wait_for_selector('tr[data-board="rock5b-2"][data-attached="no"]', timeout=5000)
            await page.wait_for_selector('tr[data-device="1-2"][data-mode="maskrom"][data-family="rockusb"]', timeout=5000)
            await page.evaluate(WATCH_JS)

            # Plug the second board.
            await watch(page, "plug", 'tr[data-device="1-3"]')
            await watch(page, "plug-board", 'tr[data-board="rock5b-2"][data-attached="yes"]')
            testbed.add("rk3588-maskrom-1-3.umockdev")
            plugged = time.time()
            latencies["plug"] = (await seen_at(page, "plug") - plugged) * 1000
            await seen_at(page, "plug-board")

            # A lease from an MCP client (the official Python SDK), then a command with progress.
            await watch(page, "lease", 'tr[data-key="board:rock5b-2"][data-holder="vm-b"]')
            steps = list(range(0, 101, 10))
            for p in steps:
                await watch(page, f"p{p}", f'tr[data-run][data-progress="{p}"]')
            await watch(page, "run-row", 'tr[data-run][data-command="flash"]')
            async with connect(bench.url, TOKEN_B, "auto") as client:
                res = await client.call_tool("lock_board", {"board": "rock5b-2", "note": "flashing u-boot"})
                assert not res.is_error, res
                lease_id = res.structured_content["lease_id"]
                # From the grant (the lease's own timestamp; the SDK's answer may come later
                # than the page's update) to the DOM.
                state = await (await page.request.get(base + "/state")).json()
                granted = next(k["since"] for k in state["locks"] if k["key"] == "board:rock5b-2")
                latencies["lease"] = (await seen_at(page, "lease") - epoch(granted)) * 1000

                shot: dict = {}
                ran: dict = {}

                async def flash() -> None:
                    ran["result"] = await client.call_tool(
                        "execute_command",
                        {"command": "flash", "args": ["wl", "64"], "board": "rock5b-2", "lease": lease_id},
                    )

                async def wait_in_queue() -> None:
                    # Another VM queues for the board while the flash runs; it gives up after
                    # a few seconds (the lease is not released here): a refusal on the page.
                    async with connect(bench.url, TOKEN_A, "auto") as other_vm:
                        await other_vm.call_tool("lock_board", {"board": "rock5b-2", "wait_secs": 4})

                await watch(page, "queue", 'tr[data-key][data-queue="1"]')
                async with anyio.create_task_group() as tg:
                    tg.start_soon(flash)
                    await seen_at(page, "p10")
                    tg.start_soon(wait_in_queue)
                    await seen_at(page, "queue")
                    await seen_at(page, "p50")
                    ARTIFACTS.mkdir(exist_ok=True)
                    shot["path"] = ARTIFACTS / "bench-page.png"
                    await page.screenshot(path=str(shot["path"]), full_page=True)
                run = ran["result"]
                assert not run.is_error, run
                assert shot.get("path") and shot["path"].stat().st_size > 10_000

            # Each progress step: from the line the flasher printed to the page showing it.
            printed = {}
            for line in (bench.dir / "steps.log").read_text().split("\n"):
                if line.strip():
                    pct, at = line.split()
                    printed[int(pct)] = float(at)
            progress = []
            for p in steps:
                progress.append((await seen_at(page, f"p{p}") - printed[p]) * 1000)
            run_row = (await seen_at(page, "run-row") - printed[0]) * 1000
            # The page was never reloaded: the watcher installed once is still there.
            assert await page.evaluate("window.__loads") == 1

            # Signed in, a cross-origin POST to sign out is refused; the session stays.
            probe = await ctx.new_page()
            await probe.goto(other.url)
            async with probe.expect_navigation() as nav:
                await probe.click("#go-signout")
            assert (await nav.value).status == 403
            assert (await page.request.get(base + "/state")).status == 200
        finally:
            await browser.close()
            other.close()

    progress.sort()
    p99 = progress[min(len(progress) - 1, int(len(progress) * 0.99))]
    print(
        f"\npage latency (event -> DOM): plug {latencies['plug']:.0f} ms, lease {latencies['lease']:.0f} ms, "
        f"run row {run_row:.0f} ms, progress median {statistics.median(progress):.0f} ms / max {p99:.0f} ms "
        f"over {len(progress)} steps; screenshot {shot['path']}"
    )
    # Live means pushed: the typical change shows within LIMIT_MS, as the page's own stream
    # delivers it. A single late one (a loaded CI machine: pytest runs two files at once
    # beside VM guests) is allowed up to OUTLIER_MS, still well under what a page that
    # polled or reloaded once a second would show as its median.
    for name, ms in [("plug", latencies["plug"]), ("lease", latencies["lease"]), ("run row", run_row)]:
        assert ms <= OUTLIER_MS, f"{name}: {ms:.0f} ms from event to DOM (limit {OUTLIER_MS})"
    singles = sorted([latencies["plug"], latencies["lease"], run_row])
    assert singles[1] <= LIMIT_MS, f"plug, lease, run row: {singles} ms (median limit {LIMIT_MS})"
    assert statistics.median(progress) <= LIMIT_MS, f"progress steps: {progress} ms (median limit {LIMIT_MS})"
    assert max(progress) <= OUTLIER_MS, f"progress steps: {progress} ms (limit {OUTLIER_MS} for any one)"


@pytest.mark.anyio
async def test_the_page_reconnects_after_a_server_restart(tmp_path):
    """Stop the server under an open page and start it again on the same address: the page
    says it is reconnecting, then is live again without a reload and without a new sign-in
    (sessions are saved in the state directory)."""
    playwright_or_skip()
    from playwright.async_api import async_playwright

    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = f"clients:\n  - name: vm-a\n    token: {TOKEN_A}\n"
    server = Server(tmp_path, config=config, bind=f"127.0.0.1:{port}")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            await page.goto(server.base + "/")
            await page.fill("#token", TOKEN_A)
            async with page.expect_navigation():
                await page.click("button[type=submit]")
            await page.wait_for_selector("#status.live", timeout=5000)
            await page.evaluate("() => { window.__sameLoad = true; }")
            server.stop()
            await page.wait_for_selector("#status.reconnecting", timeout=5000)
            server = Server(tmp_path, config=config, bind=f"127.0.0.1:{port}")
            restarted = time.time()
            await page.wait_for_selector("#status.live", timeout=10000)
            print(f"\npage live again {time.time() - restarted:.2f} s after the server was back")
            assert await page.evaluate("() => window.__sameLoad === true"), "the page was reloaded"
        finally:
            await browser.close()
            server.stop()
