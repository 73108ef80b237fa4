"""What an agent meets, read with the official MCP Python SDK (issue 47): board_run at a
login prompt nobody configured (told both ways in, then logged in with its own user),
console_read's newest bytes without a cursor, list_boards' flashing policy, a loader the
operator did not allow refused before anything runs, and a command that fails on a board
in the wrong mode told the step that gets there. A umockdev RK3588 in MaskROM at port 1-2;
the board's console is a pseudo-terminal this test plays (a login with a password, then a
tiny shell that answers board_run's status line)."""

from __future__ import annotations

import os
import re
import stat
import threading
import time

import pytest

from conftest import TOKEN_A, Server, connect, settled_text

PASSWORD = "pw-4711"


def play_board(master: int, stop: threading.Event) -> None:
    """A login, then a shell: echoes what is typed (not the password), answers lines."""
    state = "login"
    line = b""
    os.write(master, b"\r\nb1 login: ")
    while not stop.is_set():
        try:
            data = os.read(master, 4096)
        except OSError:
            return
        for byte in data:
            ch = bytes([byte])
            if ch in (b"\r", b"\n"):
                text = line.decode(errors="replace")
                line = b""
                out = "\r\n"
                if state == "login":
                    if text == "root":
                        state, out = "password", out + "Password: "
                    elif text:
                        out += "Login incorrect\r\nb1 login: "
                    else:
                        out += "b1 login: "
                elif state == "password":
                    if text == PASSWORD:
                        state, out = "shell", out + "root@b1:~# "
                    else:
                        state, out = "login", out + "Login incorrect\r\nb1 login: "
                else:
                    m = re.fullmatch(r"echo '(\w+)''(\w+)':\$\?", text)
                    if m:
                        out += f"{m.group(1)}{m.group(2)}:0\r\n"
                    elif text.startswith("echo "):
                        out += text[5:] + "\r\n"
                    out += "root@b1:~# "
                os.write(master, out.encode())
            else:
                line += ch
                if state != "password":
                    os.write(master, ch)


@pytest.fixture
def bench(tmp_path, testbed):
    testbed.add("usb1-root-hub.umockdev")
    testbed.add("rk3588-maskrom-1-2.umockdev")
    master, slave = os.openpty()
    images = tmp_path / "images"
    (images / "loaders").mkdir(parents=True)
    (images / "loaders" / "rk3588_loader.bin").write_bytes(b"loader")
    (images / "evil.bin").write_bytes(b"evil")
    (images / "disk.img").write_bytes(b"image")
    tool = tmp_path / "rk.sh"
    tool.write_text("#!/bin/sh\nif [ \"$1\" = wl ]; then echo 'Write LBA failed!'; exit 1; fi\n")
    tool.chmod(stat.S_IRWXU)
    text = f"""
clients:
  - name: vm-a
    token: {TOKEN_A}
file_roots: [{images}]
devices:
  - name: rockusb
    match: {{vid: "2207"}}
flash:
  enabled: true
  loaders: [{images}/loaders]
commands:
  - name: rkdeveloptool
    binary: {tool}
    device: rockusb
    destructive: true
    params: {{lba: "[0-9]+"}}
    allowed_args:
      - pattern: db {{loader}}
        file_args: [loader]
        loader_args: [loader]
        modes: [maskrom]
      - pattern: wl {{lba}} {{image}}
        file_args: [image]
        modes: [loader]
boards:
  - name: b1
    usb: "1-2"
    console: {{path: {os.ttyname(slave)}, baud: 115200}}
"""
    stop = threading.Event()
    player = threading.Thread(target=play_board, args=(master, stop), daemon=True)
    player.start()
    s = Server(tmp_path, config=text, env=testbed.server_env())
    yield s, images
    stop.set()
    s.stop()
    os.close(master)
    os.close(slave)


async def call(c, tool: str, **args):
    r = await c.call_tool(tool, args)
    return r, r.structured_content or {}


@pytest.mark.anyio
async def test_an_agent_acts_on_what_gatecmd_knows(bench):
    s, images = bench
    async with connect(s.url, TOKEN_A, "legacy") as c:
        _, lease = await call(c, "lock_board", board="b1")
        lease_id = lease["lease_id"]
        deadline = time.monotonic() + 10
        while True:
            _, boards = await call(c, "list_boards")
            board = boards["boards"][0]
            if board["console"].get("state") == "open":
                break
            assert time.monotonic() < deadline, boards
            time.sleep(0.05)
        # list_boards: flashing on, and the loader files by name.
        assert board["flash"] == {
            "enabled": True,
            "loaders": [str(images / "loaders" / "rk3588_loader.bin")],
        }, board

        # A login prompt nobody configured: a reason of its own, naming console_write.
        r, v = await call(c, "board_run", board="b1", command="echo hi", lease=lease_id)
        assert r.is_error and v["refusal"]["reason"] == "login_needed", v
        assert 'console_write {board: "b1", text: "root\\n"}' in v["refusal"]["message"], v
        # The agent's own user and password log it in.
        r, v = await call(
            c,
            "board_run",
            board="b1",
            command="echo hello agent",
            lease=lease_id,
            login={"user": "root", "password": PASSWORD},
        )
        assert not r.is_error, v
        assert (v["logged_in"], v["exit_code"], v["output"]) == (True, 0, "hello agent\n"), v

        # console_read {max_bytes} without a cursor: the newest bytes, ending at the end.
        _, all_text = await call(c, "console_read", board="b1", max_bytes=1 << 16)
        _, tail = await call(c, "console_read", board="b1", max_bytes=12)
        assert tail["next_cursor"] == all_text["next_cursor"], (tail, all_text)
        assert tail["cursor"] == all_text["next_cursor"] - 12, tail
        assert all_text["text"].endswith(tail["text"]), (tail, all_text)

        # list_commands tells the modes and the loader slots before anything runs.
        _, cmds = await call(c, "list_commands")
        pats = {p["pattern"]: p for p in cmds["commands"][0]["patterns"]}
        assert pats["wl {lba} {image}"]["modes"] == ["loader"], pats
        assert pats["db {loader}"]["modes"] == ["maskrom"], pats
        assert pats["db {loader}"]["loader_args"] == ["loader"], pats
        assert "loader_args" not in pats["wl {lba} {image}"], pats

        # A loader the operator did not allow: refused, nothing ran, the allowed named.
        r, v = await call(
            c, "execute_command", command="rkdeveloptool", args=["db", "evil.bin"], board="b1", lease=lease_id
        )
        assert r.is_error and v["refusal"]["reason"] == "not_permitted", v
        assert "loaders/rk3588_loader.bin" in v["refusal"]["message"], v

        # wl in MaskROM fails; the answer names the mode and the step.
        r, v = await call(
            c, "execute_command", command="rkdeveloptool", args=["wl", "0", "disk.img"], board="b1", lease=lease_id
        )
        assert r.is_error and v["exit_code"] == 1, v
        assert "maskrom" in v["mode_hint"], v
        assert 'args: ["db", "{loader}"]' in v["mode_hint"] and "flash_board" in v["mode_hint"], v

        audit = settled_text(s.dir / "state" / "audit.log")
        assert PASSWORD not in audit, "the agent's password reached the audit log"
        assert PASSWORD not in "\n".join(s.log), "the agent's password reached the log"


@pytest.mark.anyio
async def test_a_board_goes_off_when_the_session_holding_it_ends(tmp_path):
    """on_release: off, and the lease ends with the 2025-11-25 session that took it (the SDK
    ends it when its `async with` block exits): the board is switched off, audited."""
    power = tmp_path / "power.sh"
    power.write_text(f'#!/bin/sh\necho "$1" >> {tmp_path}/power.log\n')
    power.chmod(stat.S_IRWXU)
    text = f"""
clients:
  - name: vm-a
    token: {TOKEN_A}
commands:
  - name: power
    binary: {power}
    allowed_args:
      - pattern: "on"
      - pattern: "off"
boards:
  - name: b1
    usb: "1-2"
    on_release: "off"
    power: {{on: {{command: power, args: "on"}}, off: {{command: power, args: "off"}}}}
"""
    s = Server(tmp_path, config=text)
    try:
        async with connect(s.url, TOKEN_A, "legacy") as c:
            r, lease = await call(c, "lock_board", board="b1")
            assert not r.is_error, lease
            _, boards = await call(c, "list_boards")
            assert boards["boards"][0]["flash"] == {"enabled": False, "loaders": None}, boards
        log = tmp_path / "power.log"
        deadline = time.monotonic() + 10
        while not (log.exists() and "off" in log.read_text()):
            assert time.monotonic() < deadline, "the board was not switched off"
            time.sleep(0.05)
        # The power command writes its log before it exits; the on_release record is written
        # once its outcome is known, so it may land a moment after the log line.
        audit_path = tmp_path / "state" / "audit.log"
        while '"event":"on_release"' not in (audit := audit_path.read_text()):
            assert time.monotonic() < deadline, f"no on_release record in the audit log:\n{audit}"
            time.sleep(0.05)
        assert '"ended":"session_ended"' in audit, audit
    finally:
        s.stop()
