"""gatecmd driven by the official MCP Python SDK (mcp 2.3.x) over Streamable HTTP, in both
protocol eras: `legacy` (2025-11-25: initialize, session) and `auto` (2026-07-28: discover,
stateless). Each test starts from the real cargo-built binary (conftest.py)."""

from __future__ import annotations

import os
import time
import warnings

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp.shared.exceptions import MCPError

from conftest import SYS_1_2, TOKEN_A, TOKEN_B, connect

pytestmark = pytest.mark.anyio

MODES = ["legacy", "auto"]
VERSION = {"legacy": "2025-11-25", "auto": "2026-07-28"}


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def pgid_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        fields = stat.rsplit(") ", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


async def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        await anyio.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.parametrize("mode", MODES)
async def test_connect_and_list_tools(server, mode):
    async with connect(server.url, TOKEN_A, mode) as client:
        assert client.protocol_version == VERSION[mode]
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {"list_commands", "execute_command", "list_devices", "lock_device", "unlock_device"} <= tools.keys()
        assert tools["execute_command"].output_schema is not None
        commands = (await client.call_tool("list_commands", {})).structured_content
        assert {c["name"] for c in commands["commands"]} == {"echo", "flash", "flash-slow"}


async def test_wrong_token_is_refused(server):
    # The SDK reports the refused handshake only as a generic error; the HTTP answer says 401.
    with pytest.raises(Exception):
        async with connect(server.url, "not-a-token-at-all-000000", "legacy"):
            pass
    async with httpx2.AsyncClient() as http:
        r = await http.post(
            server.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": "Bearer not-a-token-at-all-000000"},
        )
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("mode", MODES)
async def test_execute_command_structured_result(server, mode):
    async with connect(server.url, TOKEN_A, mode) as client:
        r = await client.call_tool("execute_command", {"command": "echo", "args": ["hello", "world"]})
        assert r.is_error is not True, text(r)
        s = r.structured_content
        assert s["argv"] == ["/usr/bin/echo", "hello", "world"]
        assert s["stdout"] == "hello world\n"
        assert s["exit_code"] == 0
        assert s["timed_out"] is False and s["cancelled"] is False
        assert "hello world" in text(r)


@pytest.mark.parametrize("mode", MODES)
async def test_forbidden_character_is_refused(server, mode):
    async with connect(server.url, TOKEN_A, mode) as client:
        r = await client.call_tool("execute_command", {"command": "echo", "args": ["hello", "wo;rld"]})
        assert r.is_error is True
        msg = text(r)
        assert "contains the forbidden character ';'" in msg, msg
        assert '"wo;rld"' in msg, msg


@pytest.mark.parametrize("mode", MODES)
async def test_progress_notifications(server, mode):
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with connect(server.url, TOKEN_A, mode) as client:
        r = await client.call_tool(
            "execute_command", {"command": "flash", "args": ["wl", "64"]}, progress_callback=on_progress
        )
        assert r.is_error is not True, text(r)
        assert r.structured_content["exit_code"] == 0
        assert "Write LBA from file OK." in r.structured_content["stdout"]
    percents = [p for p, _, _ in seen]
    assert len(percents) >= 3, seen
    assert all(a < b for a, b in zip(percents, percents[1:])), f"not increasing: {percents}"
    assert all(t == 100 for _, t, _ in seen), seen
    assert percents[-1] == 100, percents
    assert all("Write LBA from file" in (m or "") for _, _, m in seen), seen


@pytest.mark.parametrize("mode", MODES)
async def test_cancel_kills_the_process_group(server, mode):
    pidfile = server.dir / "child.pid"
    pidfile.unlink(missing_ok=True)
    async with connect(server.url, TOKEN_A, mode) as client:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await client.call_tool("execute_command", {"command": "flash-slow", "args": ["wl", "1"]})

            tg.start_soon(call)
            grandchild = int(await wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, "the tool to start"))
            pgid = os.getpgid(grandchild)
            assert pgid != os.getpgid(0)
            assert len(pgid_members(pgid)) >= 2  # the tool and its TERM-ignoring grandchild
            tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled
        # SIGTERM, then SIGKILL after kill_grace_secs (1 s) for the grandchild that ignores TERM.
        await wait_for(lambda: not pgid_members(pgid), 10, f"process group {pgid} to be gone")
        # The session still works afterwards.
        r = await client.call_tool("execute_command", {"command": "echo", "args": ["still", "here"]})
        assert r.structured_content["stdout"] == "still here\n"


@pytest.mark.parametrize("mode", MODES)
async def test_two_clients_contend_for_a_lease(server, mode):
    key = "usb:2207:350b"
    async with connect(server.url, TOKEN_A, mode) as a, connect(server.url, TOKEN_B, mode) as b:
        got = await a.call_tool("lock_device", {"key": key, "note": "flashing from python"})
        assert got.is_error is not True, text(got)
        lease = got.structured_content["lease_id"]
        assert got.structured_content["holder"] == "vm-a"

        refused = await b.call_tool("lock_device", {"key": key})
        assert refused.is_error is True
        assert "vm-a" in text(refused) and "flashing from python" in text(refused), text(refused)

        stolen = await b.call_tool("unlock_device", {"lease": lease})
        assert stolen.is_error is True
        assert 'belongs to client "vm-a", not "vm-b"' in text(stolen), text(stolen)

        released = await a.call_tool("unlock_device", {"lease": lease})
        assert released.is_error is not True and released.structured_content["released"] is True

        mine = await b.call_tool("lock_device", {"key": key})
        assert mine.is_error is not True and mine.structured_content["holder"] == "vm-b"
        await b.call_tool("unlock_device", {"lease": mine.structured_content["lease_id"]})


@pytest.mark.parametrize("mode", MODES)
async def test_unknown_device_resource_carries_uri(server, mode):
    async with connect(server.url, TOKEN_A, mode) as client:
        with pytest.raises(MCPError) as err:
            await client.read_resource("gatecmd://devices/9-9")
        # -32002 in 2025-11-25; 2026-07-28 (SEP-2164) uses -32602 Invalid Params. Both carry data.uri.
        assert err.value.error.code == {"legacy": -32002, "auto": -32602}[mode]
        assert err.value.error.data["uri"] == "gatecmd://devices/9-9"


async def test_hotplug_reaches_a_legacy_subscriber(device_server, testbed):
    heard: list[types.ServerNotification] = []
    changed = anyio.Event()

    async def on_message(message) -> None:
        if isinstance(message, (types.ResourceUpdatedNotification, types.ResourceListChangedNotification)):
            heard.append(message)
            changed.set()

    async with connect(device_server.url, TOKEN_A, "legacy", message_handler=on_message) as client:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resources/subscribe is the 2025-11-25 way, on purpose
            await client.subscribe_resource("gatecmd://devices")
        assert (await client.call_tool("list_devices", {})).structured_content["devices"] == []

        testbed.add("rk3588-maskrom-1-2.umockdev")
        with anyio.fail_after(5):
            while not any(
                isinstance(n, types.ResourceUpdatedNotification) and n.params.uri == "gatecmd://devices" for n in heard
            ):
                changed = anyio.Event()
                await changed.wait()
        devices = (await client.call_tool("list_devices", {})).structured_content["devices"]
        assert [(d["id"], d["vid"], d["pid"], d["mode"]) for d in devices] == [("1-2", "2207", "350b", "maskrom")]

        heard.clear()
        testbed.unplug(SYS_1_2)
        with anyio.fail_after(5):
            while not heard:
                changed = anyio.Event()
                await changed.wait()
        assert (await client.call_tool("list_devices", {})).structured_content["devices"] == []


async def test_hotplug_reaches_a_listen_stream(device_server, testbed):
    async with connect(device_server.url, TOKEN_B, "auto") as client:
        assert client.protocol_version == "2026-07-28"
        async with client.listen(
            resources_list_changed=True, resource_subscriptions=["gatecmd://devices", "gatecmd://devices/1-2"]
        ) as sub:
            testbed.add("rk3588-maskrom-1-2.umockdev")
            events = set()
            with anyio.fail_after(5):
                async for event in sub:
                    events.add(event)
                    if {ResourcesListChanged(), ResourceUpdated("gatecmd://devices/1-2")} <= events:
                        break
            read = await client.read_resource("gatecmd://devices/1-2", cache_mode="bypass")
            assert read.contents[0].mime_type == "application/json"
            assert '"soc":"RK3588"' in read.contents[0].text.replace(" ", "")

            testbed.unplug(SYS_1_2)
            with anyio.fail_after(5):
                async for event in sub:
                    if event == ResourcesListChanged():
                        break
        devices = (await client.call_tool("list_devices", {})).structured_content["devices"]
        assert devices == []
