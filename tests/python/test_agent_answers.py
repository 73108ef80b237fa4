"""Answers an agent can act on (issue 47), with the official MCP Python SDK and its default
options: a tool list it can afford, answers that validate against the lean output schemas,
and refusals whose next step is a call that exists, in the caller's own family of tools."""

from __future__ import annotations

import json
import re

import jsonschema
import mcp_types as types
import pytest

from conftest import TOKEN_A, TOKEN_B, Server, connect

pytestmark = pytest.mark.anyio

LIST_BYTES = 64 * 1024
TOOL_BYTES = 8 * 1024

CONFIG = f"""
clients:
  - name: vm-a
    token: {TOKEN_A}
  - name: vm-b
    token: {TOKEN_B}
file_roots: [$DIR/images]
commands:
  - name: echo
    binary: /usr/bin/echo
    params: {{a: "[a-z]+"}}
    allowed_args:
      - pattern: "{{a}}"
  - name: relay
    binary: /bin/true
    allowed_args:
      - pattern: "on"
      - pattern: "off"
  - name: rk
    binary: /bin/true
    params: {{w: "[a-z.]+"}}
    allowed_args:
      - pattern: "db {{w}}"
      - pattern: "wl {{w}}"
boards:
  - name: vb1
    usb: "1-30"
    tags: {{model: bench}}
    power: {{on: {{command: relay, args: "on"}}, off: {{command: relay, args: "off"}}}}
"""


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    d = tmp_path_factory.mktemp("answers")
    (d / "images").mkdir()
    s = Server(d, config=CONFIG)
    yield s
    s.stop()


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


# Verbs a tool name starts with: a word that starts so and is no tool is a wrong name.
TOOL_VERBS = ("lock_", "unlock_", "list_", "execute_", "flash_", "power_", "wait_for_", "wait_job",
              "cancel_", "write_file", "stat_", "remove_", "boot_board", "boot_report", "board_run",
              "uboot_", "console_read", "console_write")
FIELDS = {"lease_id", "lock_keys", "shared_lock_keys", "power_state"}


def hint_errors(tools: dict[str, types.Tool], caller: str, message: str) -> list[str]:
    """What is wrong with the calls a refusal's message names (the Rust twin is
    tests/harness/hints.rs)."""
    args = {n: set((t.input_schema or {}).get("properties", {})) for n, t in tools.items()}
    bad = []
    named = [caller]
    for m in re.finditer(r"(?:^|[^.\w])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b(?!\.\w)", message):
        w = m.group(1)
        if w in tools:
            named.append(w)
        elif w.startswith(TOOL_VERBS) and w not in FIELDS:
            bad.append(f"names {w!r}, which is no tool")
    for m in re.finditer(r"\b([a-z][a-z0-9_]*) \{([^{}]*)\}", message):
        if m.group(1) in tools:
            for k in re.findall(r"(?:^|[,{]\s*)([a-z_]+):", m.group(2)):
                if k not in args[m.group(1)]:
                    bad.append(f"{m.group(1)} takes no argument {k!r}")
    # `pass ARG`, `pass ARG: …`, `retry with ARG`, `pass VALUE as ARG` (VALUE an answer field).
    asked = r"(?i)\b(?:pass|retry with|retry without) (?:its |the returned )?([a-z][a-z_]*)\b(:?)(?: as `?([a-z][a-z_]*))?"
    for m in re.finditer(asked, message):
        arg = m.group(3) or m.group(1)
        if not m.group(3) and "_" not in arg and not m.group(2):
            continue
        if arg in tools or arg in FIELDS:
            continue
        if not any(arg in args.get(t, ()) for t in named):
            bad.append(f"asks to pass {arg!r}, which neither {caller} nor a tool it names takes")
    if "board" in args.get(caller, ()) and "device" not in args.get(caller, ()) and re.search(r"(^|[^a-z_])lock_device\b", message):
        bad.append(f"sends {caller}'s caller to lock_device")
    return bad


async def refused(client, tools, tool: str, arguments: dict, reason: str) -> str:
    """Calls `tool`, checks the refusal's reason, that it validates against the tool's
    output schema, and that its message names calls that exist; returns the message."""
    r = await client.call_tool(tool, arguments)
    assert r.is_error is True, (tool, arguments, text(r))
    refusal = r.structured_content["refusal"]
    assert refusal["reason"] == reason, (tool, arguments, refusal)
    jsonschema.validate(r.structured_content, tools[tool].output_schema)
    assert hint_errors(tools, tool, refusal["message"]) == [], refusal["message"]
    return refusal["message"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_tool_list_fits_an_agents_budget(bench, mode):
    async with connect(bench.url, TOKEN_A, mode) as c:
        tools = (await c.list_tools()).tools
    # Measured as the wire carries JSON: compact (the Rust test reads the wire itself).
    def size(v) -> int:
        return len(json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode())

    entries = {t.name: size(t.model_dump(by_alias=True, exclude_none=True)) for t in tools}
    total = size({"tools": [t.model_dump(by_alias=True, exclude_none=True) for t in tools]})
    assert total <= LIST_BYTES, (total, sorted(entries.items(), key=lambda e: -e[1])[:5])
    assert max(entries.values()) <= TOOL_BYTES, entries
    for t in tools:
        # Lean, not empty: a description that says what comes back, and named answer fields.
        assert len(t.description or "") > 40, t.name
        assert t.output_schema and t.output_schema.get("properties"), t.name
        # Every schema compiles, and the refusal shape is admitted wherever a tool can refuse.
        jsonschema.Draft202012Validator.check_schema(t.output_schema)
        if "refusal" in t.output_schema["properties"]:
            jsonschema.validate({"refusal": {"reason": "limit", "message": "m"}}, t.output_schema)


async def test_answers_validate_against_the_lean_schemas(bench):
    """The SDK validates each structured result against its tool's output schema (after
    list_tools); each is also checked here explicitly."""
    async with connect(bench.url, TOKEN_A, "auto") as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        calls = [
            ("list_boards", {}), ("list_commands", {}), ("list_devices", {}), ("list_locks", {}),
            ("list_files", {}), ("list_jobs", {}),
            ("execute_command", {"command": "echo", "args": ["hi"]}),
            ("execute_command", {"command": "echo", "args": ["hi"], "dry_run": True}),
            ("execute_command", {"command": "echo", "args": ["hi"], "background": True}),
        ]
        for name, arguments in calls:
            r = await c.call_tool(name, arguments)
            assert not r.is_error, (name, text(r))
            jsonschema.validate(r.structured_content, tools[name].output_schema)
        job = r.structured_content["job"]
        r = await c.call_tool("wait_job", {"job": job})
        jsonschema.validate(r.structured_content, tools["wait_job"].output_schema)
        r = await c.call_tool("lock_board", {"board": "vb1"})
        jsonschema.validate(r.structured_content, tools["lock_board"].output_schema)
        lease = r.structured_content["lease_id"]
        r = await c.call_tool("power_board", {"board": "vb1", "action": "on", "lease": lease})
        assert not r.is_error, text(r)
        jsonschema.validate(r.structured_content, tools["power_board"].output_schema)
        r = await c.call_tool("list_boards", {})
        jsonschema.validate(r.structured_content, tools["list_boards"].output_schema)
        r = await c.call_tool("unlock_device", {"lease": lease})
        jsonschema.validate(r.structured_content, tools["unlock_device"].output_schema)


async def test_board_refusals_name_calls_in_the_callers_family(bench):
    async with connect(bench.url, TOKEN_A, "auto") as a, connect(bench.url, TOKEN_B, "auto") as b:
        tools = {t.name: t for t in (await a.list_tools()).tools}
        await b.list_tools()
        on = {"board": "vb1", "action": "on"}
        # No lease: its own reason, naming lock_board.
        msg = await refused(a, tools, "power_board", on, "lease_missing")
        assert 'lock_board {board: "vb1"}' in msg, msg
        # flash_board is not offered a wait_secs it does not take.
        msg = await refused(a, tools, "flash_board", {"board": "vb1", "image": "x.img"}, "not_configured")
        assert "wait_secs" not in msg and "wait_secs" not in tools["flash_board"].input_schema["properties"]

        r = await a.call_tool("lock_board", {"board": "vb1"})
        lease = r.structured_content["lease_id"]
        msg = await refused(a, tools, "power_board", on, "lease_missing")
        assert f'pass lease: "{lease}"' in msg, msg
        # Held by another client: queue with lock_board, which has wait_secs.
        msg = await refused(b, tools, "power_board", on, "device_busy")
        assert 'lock_board {board: "vb1", wait_secs: …}' in msg, msg
        # A match that finds every board busy does not count the caller in the queue.
        msg = await refused(b, tools, "lock_board", {"match": {"model": "bench"}, "wait_secs": 1}, "device_busy")
        assert "; 0 other match request(s) queued" in msg, msg

        await a.call_tool("unlock_device", {"lease": lease})
        # A lease that ended: lease_invalid, naming lock_board (the tool that took it).
        msg = await refused(a, tools, "power_board", {**on, "lease": lease}, "lease_invalid")
        assert 'take a new lease with lock_board {board: "vb1"}' in msg, msg
        assert "lock_device" not in msg
        msg = await refused(a, tools, "unlock_device", {"lease": lease}, "lease_invalid")
        assert "lock_board for a board, lock_device for a device" in msg, msg

        # An argument refused on its first word names the first words that exist.
        msg = await refused(a, tools, "execute_command", {"command": "rk", "args": ["ul", "x"]},
                            "no_pattern_matched")
        assert msg.startswith('rk may not run "ul" here: its allowed first words are "db", "wl"'), msg
        assert "Closest" not in msg


async def test_descriptions_match_the_calls(bench):
    async with connect(bench.url, TOKEN_A, "auto") as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert "lock_board" in tools["unlock_device"].description
    assert "lock_board" in tools["unlock_device"].input_schema["properties"]["lease"]["description"]
    # console_write takes no lease, and its description does not ask for one.
    assert "lease" not in tools["console_write"].input_schema["properties"]
    assert "no lease argument" in tools["console_write"].description
    assert "pass it as lease" not in tools["console_write"].description
    # flash_board says each fact once: steps, board and verified are the answer's own.
    flashed = tools["flash_board"].output_schema["$defs"]["Flashed"]["properties"]
    assert not {"steps", "board", "verified"} & set(flashed), sorted(flashed)
    assert {"steps", "board", "verified", "flashed"} <= set(tools["flash_board"].output_schema["properties"])
    # Every tool and argument a description names exists.
    for t in tools.values():
        assert hint_errors(tools, t.name, t.description) == [], (t.name, t.description)


async def test_the_hint_check_can_fail(bench):
    async with connect(bench.url, TOKEN_A, "auto") as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert hint_errors(tools, "flash_board", "board busy. Retry with wait_secs to queue for it")
    assert hint_errors(tools, "power_board", "lease has ended; take a new lease with lock_device.")
    assert hint_errors(tools, "board_run", 'call lock_board {name: "vb1"} first')
    assert hint_errors(tools, "board_run", "call lock_boards first")
    assert not hint_errors(tools, "execute_command", "Retry with wait_secs to queue for it, or try later.")
