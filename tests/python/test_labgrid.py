"""gatecmd in a labgrid lab (issue 25, docs/LAB.md): the real labgrid 26 from PyPI — its
coordinator on a loopback port and `labgrid-client` run as a person runs it — against the
real gatecmd exporting two boards (a pty as rock5b-1's console, a script as its power).
An agent is the official MCP Python SDK."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import mcp_types as types
import pexpect
import pytest

from conftest import TOKEN_A, Server, connect, settled_text
from conftest import Testbed as UmockdevBed

pytestmark = pytest.mark.anyio

VENV_BIN = Path(sys.executable).parent
# A person at a desk: labgrid names them HOST/USER. USER is this test's own account, and
# the config names that person with that account (`labgrid.people`): the console and power
# ports serve only a listed person's place, from one of their listed accounts (issue 37),
# and labgrid-client connects to them from this process's user.
USER = getpass.getuser()
PERSON = {"LG_HOSTNAME": "desk", "LG_USERNAME": USER}
PEOPLE = f"""
  people:
    - name: {USER}
      accounts: [{USER}]
"""
HOLD_SECS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


class Coordinator:
    """`labgrid-coordinator -l 127.0.0.1:PORT`, its places file in `directory`."""

    def __init__(self, directory: Path, port: int | None = None):
        self.dir = directory
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.start()

    def start(self) -> None:
        exe = VENV_BIN / "labgrid-coordinator"
        if not exe.exists():
            pytest.fail(f"{exe} missing: labgrid==26.0.1 belongs in tests/python/requirements.txt")
        self.log = open(self.dir / "coordinator.log", "a")
        self.proc = subprocess.Popen(
            [str(exe), "-l", self.address], cwd=self.dir, stdout=self.log, stderr=subprocess.STDOUT
        )

        def up():
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return True
            except OSError:
                return False

        wait_until(up, 20, "the coordinator's port")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def client(
        self, *args: str, check: bool = True, place: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        argv = [str(VENV_BIN / "labgrid-client"), "-x", self.address]
        if place:
            argv += ["-p", place]
        r = subprocess.run(
            argv + list(args), capture_output=True, text=True, timeout=30, env={**os.environ, **PERSON, **(env or {})}
        )
        if check and r.returncode != 0:
            pytest.fail(f"labgrid-client {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r


def config(coordinator: Coordinator, name: str, tty: str, boards: str = "", people: str = PEOPLE) -> str:
    return f"""
clients:
  - name: vm-a
    token: {TOKEN_A}
commands:
  - name: power
    binary: $DIR/power.sh
    allowed_args:
      - pattern: "on"
      - pattern: "off"
boards:
  - name: rock5b-1
    tags: {{soc: rk3588}}
    usb: "1-2"
    console: {{path: {tty}, baud: 115200}}
    power: {{on: {{command: power, args: "on"}}, off: {{command: power, args: "off"}}}}
{boards}
labgrid:
  coordinator: "{coordinator.address}"
  name: {name}
  proxy_required: false
  hold_secs: {HOLD_SECS}
{people}"""


class Bench:
    """gatecmd exporting rock5b-1 (a pty console, a power script) to the coordinator."""

    def __init__(
        self,
        directory: Path,
        coordinator: Coordinator,
        testbed: UmockdevBed,
        name: str = "bench-1",
        people: str = PEOPLE,
    ):
        self.dir = directory
        self.people = people
        self.env = testbed.server_env()
        self.coordinator = coordinator
        self.name = name
        self.master, slave = os.openpty()
        self.tty = os.ttyname(slave)
        self._slave = slave
        power = directory / "power.sh"
        power.write_text(f"#!/bin/sh\necho \"$1\" >> {directory}/power.log\n")
        power.chmod(0o755)
        self.start()

    def start(self) -> None:
        self.server = Server(self.dir, config(self.coordinator, self.name, self.tty, people=self.people), env=self.env)
        self.wait_registered(1)

    def registrations(self) -> int:
        return sum(1 for line in self.server.log if f"labgrid exporter {self.name} registered" in line)

    def wait_registered(self, n: int, timeout: float = 15) -> None:
        wait_until(lambda: self.registrations() >= n, timeout, f"registration #{n}:\n" + "\n".join(self.server.log))

    def audit(self) -> list[dict]:
        path = self.dir / "state" / "audit.log"
        return [json.loads(line) for line in settled_text(path).splitlines() if line.strip()]

    def stop(self) -> None:
        self.server.stop()

    def close(self) -> None:
        self.stop()
        os.close(self.master)
        os.close(self._slave)


@pytest.fixture
def lab(tmp_path, testbed):
    """A coordinator, and gatecmd seeing an RK3588 in MaskROM at rock5b-1's port 1-2."""
    testbed.add("usb1-root-hub.umockdev")
    testbed.add("rk3588-maskrom-1-2.umockdev")
    (tmp_path / "coord").mkdir()
    (tmp_path / "bench").mkdir()
    c = Coordinator(tmp_path / "coord")
    b = Bench(tmp_path / "bench", c, testbed)
    yield c, b
    b.close()
    c.stop()


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def lock_board(url: str, **args) -> types.CallToolResult:
    async with connect(url, TOKEN_A, "auto") as agent:
        return await agent.call_tool("lock_board", {"board": "rock5b-1", **args})


async def unlock(url: str, lease: str) -> None:
    async with connect(url, TOKEN_A, "auto") as agent:
        r = await agent.call_tool("unlock_device", {"lease": lease})
        assert not r.is_error, text(r)


def make_place(
    c: Coordinator, place: str, exporter: str = "bench-1", board: str = "rock5b-1", tags: dict | None = None
) -> None:
    """What `labgrid-client -p PLACE create` and `add-match` do, through labgrid's own gRPC
    stub: the same two calls in-process, without a client start-up (1 s each) per step."""
    import grpc
    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb
    from labgrid.remote.generated.labgrid_coordinator_pb2_grpc import CoordinatorStub

    with grpc.insecure_channel(c.address) as ch:
        stub = CoordinatorStub(ch)
        try:
            stub.AddPlace(pb.AddPlaceRequest(name=place), timeout=5)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise
        try:
            stub.AddPlaceMatch(pb.AddPlaceMatchRequest(placename=place, pattern=f"{exporter}/{board}/*"), timeout=5)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise
        if tags:
            stub.SetPlaceTags(pb.SetPlaceTagsRequest(placename=place, tags=tags), timeout=5)


def acquired_by(c: Coordinator, place: str) -> str:
    """Who the coordinator says holds `place` (`None` when free), from `labgrid-client show`."""
    out = c.client("show", place=place).stdout
    return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("acquired:"))


def resources(c: Coordinator) -> str:
    return c.client("-v", "resources").stdout


async def test_boards_appear_as_labgrid_resources(lab):
    c, b = lab
    out = wait_until(lambda: "rock5b-1" in (r := resources(c)) and r, 10, "the resources")
    for cls in ["NetworkRKUSBLoader", "NetworkSerialPort", "NetworkPowerPort"]:
        assert f"bench-1/rock5b-1/{cls}" in out, out
    assert "'model': 'rest'" in out and "'protocol': 'raw'" in out, out
    # The flashing USB as labgrid's exporter shows a local RKUSBLoader (2207:350b = 8711:13579).
    assert "'path': '1-2'" in out and "'vendor_id': 8711" in out and "'model_id': 13579" in out, out


async def test_one_lock_for_people_and_agents(lab):
    c, b = lab
    make_place(c, "p1")
    c.client("acquire", place="p1")
    # The person holds it: the agent is refused, and told the place and the person.
    r = await lock_board(b.server.url)
    assert r.is_error and "labgrid:p1" in text(r), text(r)
    deadline = time.monotonic() + 5
    while f"desk/{USER}" not in text(r) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
        r = await lock_board(b.server.url)
    assert f"desk/{USER}" in text(r), text(r)
    # Released: the agent gets it.
    c.client("release", place="p1")
    r = await lock_board(b.server.url)
    assert not r.is_error, text(r)
    lease = r.structured_content["lease_id"]
    # gatecmd mirrors the agent's lease as the place acquired under its name; the person's
    # acquire fails naming gatecmd and the agent, and the resources say why.
    wait_until(lambda: acquired_by(c, "p1") == "bench-1/gatecmd:vm-a", 10, "the mirror acquisition")
    failed = c.client("acquire", place="p1", check=False)
    assert failed.returncode != 0, failed.stdout
    assert "already acquired by bench-1/gatecmd:vm-a" in failed.stderr, failed.stderr
    shown = c.client("show", place="p1").stdout
    assert "'held_by': 'gatecmd: board rock5b-1 is leased by MCP" in shown, shown
    assert "'client vm-a since" in shown and "'avail': False" in shown, shown
    # The agent lets go: gatecmd releases the place, and the person acquires it.
    await unlock(b.server.url, lease)
    wait_until(lambda: acquired_by(c, "p1") == "None", 10, "the mirror release")
    c.client("acquire", place="p1")
    events = [e for e in b.audit() if e.get("event", "").startswith("labgrid_mirror_")]
    assert [(e["event"], e["place"], e["as"], e["ok"]) for e in events] == [
        ("labgrid_mirror_acquire", "p1", "bench-1/gatecmd:vm-a", True),
        ("labgrid_mirror_release", "p1", "bench-1/gatecmd:vm-a", True),
    ], events


async def test_console_and_power_through_gatecmd(lab):
    c, b = lab
    make_place(c, "p1")
    c.client("acquire", place="p1")
    # labgrid-client console runs microcom on gatecmd's console port; the board speaks.
    if shutil.which("microcom") is None:
        pytest.fail("microcom missing: scripts/setup.sh --test installs it")
    con = pexpect.spawn(
        str(VENV_BIN / "labgrid-client"),
        ["-x", c.address, "-p", "p1", "console"],
        env=dict(os.environ, **PERSON),
        timeout=10,
    )
    try:
        con.expect("connecting to")
        # The port streams what the board says from the moment microcom is connected:
        # the board repeats itself until the person's console shows it.
        deadline = time.monotonic() + 10
        while True:
            os.write(b.master, b"U-Boot 2024.01 on rock5b-1\r\n")
            try:
                con.expect("U-Boot 2024.01 on rock5b-1", timeout=0.5)
                break
            except pexpect.TIMEOUT:
                if time.monotonic() > deadline:
                    raise
        # And what the person types reaches the board.
        con.send("hi\r")
        got = b""
        deadline = time.monotonic() + 5
        while b"hi" not in got and time.monotonic() < deadline:
            got += os.read(b.master, 100)
        assert b"hi" in got, got
    finally:
        con.terminate(force=True)
    # labgrid-client power cycle: off, labgrid's 2 s delay, on, through the board's commands.
    c.client("power", "cycle", place="p1")
    assert (b.dir / "power.log").read_text().split() == ["off", "on"]
    url = next(line for line in resources(c).splitlines() if "/power/{index}/value" in line)
    url = url.split("'")[3].replace("{index}", "0")
    # The holder reads the state (what labgrid's rest model GETs).
    assert urllib.request.urlopen(url, timeout=5).read() == b"1"
    c.client("release", place="p1")
    # Released: the power port neither switches nor answers (what labgrid's rest model would PUT).
    for req in [urllib.request.Request(url, data=b"0", method="PUT"), urllib.request.Request(url)]:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=5)
        assert refused.value.code == 409 and b"not held through labgrid" in refused.value.read()
    power = [e for e in b.audit() if e.get("event") == "labgrid_power"]
    assert [e["ok"] for e in power] == [True, True], power
    assert [e["reason"] for e in b.audit() if e.get("event") == "labgrid_power_refused"] == [
        "gatecmd: board rock5b-1 is not held through labgrid: acquire its place first (labgrid-client -p PLACE acquire); only a place acquired by a person named in labgrid.people holds a board"
    ]
    assert (b.dir / "power.log").read_text().split() == ["off", "on"]


async def test_coordinator_restart_reregisters_and_leaves_nothing_held(lab):
    c, b = lab
    make_place(c, "p1")
    c.client("acquire", place="p1")
    assert (await lock_board(b.server.url)).is_error
    c.stop()
    stopped = time.monotonic()
    c.start()  # same port; the restarted coordinator keeps places, not acquisitions
    b.wait_registered(2)
    # On a loaded machine the restart can outlast labgrid.hold_secs: gatecmd then released the
    # hold as the lost coordinator's (the case of the test below) before it could re-read
    # the places; either way nothing stays held.
    slow_restart = time.monotonic() - stopped >= HOLD_SECS - 0.5
    # The place is no longer acquired there, so gatecmd released the board: an agent gets it.
    r = await lock_board(b.server.url, wait_secs=5)
    assert not r.is_error, text(r)
    await unlock(b.server.url, r.structured_content["lease_id"])
    wait_until(lambda: "bench-1/rock5b-1/NetworkPowerPort" in resources(c), 10, "resources again")
    # (The coordinator writes its places file every 15 s: a fresh one may not have it.)
    make_place(c, "p1")
    c.client("acquire", place="p1")
    assert (await lock_board(b.server.url)).is_error
    released = [e for e in b.audit() if e.get("event") == "labgrid_hold_released"]
    reasons = ("not list the place as acquired",) + (("unreachable",) if slow_restart else ())
    assert released and any(r in released[0]["why"] for r in reasons), (slow_restart, released)


async def test_gatecmd_restart_reregisters_and_leaves_nothing_held(lab):
    c, b = lab
    make_place(c, "p1")
    c.client("acquire", place="p1")
    b.stop()
    c.client("release", place="p1")  # while gatecmd is away
    b.start()
    wait_until(lambda: "bench-1/rock5b-1/NetworkPowerPort" in resources(c), 10, "resources again")
    r = await lock_board(b.server.url)
    assert not r.is_error, text(r)
    await unlock(b.server.url, r.structured_content["lease_id"])
    c.client("acquire", place="p1")


async def test_mirrors_survive_a_coordinator_restart_and_not_a_gatecmd_restart(lab):
    c, b = lab
    make_place(c, "p1")
    r = await lock_board(b.server.url)
    assert not r.is_error, text(r)
    wait_until(lambda: acquired_by(c, "p1") == "bench-1/gatecmd:vm-a", 10, "the mirror acquisition")
    # A restarted coordinator forgets acquisitions: gatecmd acquires the place again.
    c.stop()
    c.start()
    b.wait_registered(2)
    make_place(c, "p1")  # (unless its places file had it)
    wait_until(lambda: acquired_by(c, "p1") == "bench-1/gatecmd:vm-a", 10, "the mirror again")
    # gatecmd restarts without leases: the place it left acquired is released on register.
    b.stop()
    assert acquired_by(c, "p1") == "bench-1/gatecmd:vm-a"
    b.start()
    wait_until(lambda: acquired_by(c, "p1") == "None", 10, "the stale mirror's release")
    c.client("acquire", place="p1")
    released = [e for e in b.audit() if e.get("event") == "labgrid_mirror_release"]
    assert released[-1]["why"] == "no agent holds the board any more" and released[-1]["ok"], released


async def test_a_lost_coordinator_releases_labgrid_holds_after_hold_secs(lab):
    c, b = lab
    make_place(c, "p1")
    c.client("acquire", place="p1")
    c.stop()
    lost = time.monotonic()
    # Held while the coordinator may come back...
    r = await lock_board(b.server.url)
    assert r.is_error and "labgrid:p1" in text(r), text(r)
    # ...released after labgrid.hold_secs; local leases work throughout.
    r = await lock_board(b.server.url, wait_secs=HOLD_SECS + 3)
    assert not r.is_error, text(r)
    assert time.monotonic() - lost >= HOLD_SECS - 0.5
    released = [e for e in b.audit() if e.get("event") == "labgrid_hold_released"]
    assert "unreachable" in released[-1]["why"], released
    await unlock(b.server.url, r.structured_content["lease_id"])


async def test_a_reservation_goes_to_the_host_whose_board_no_agent_holds(tmp_path, testbed):
    """Two gatecmd "hosts" with an RK3588 each: an agent holds host 1's, so labgrid's
    scheduler (which looks only at places) allocates host 2's place to a person."""
    testbed.add("usb1-root-hub.umockdev")
    testbed.add("rk3588-maskrom-1-2.umockdev")
    for d in ["coord", "bench1", "bench2"]:
        (tmp_path / d).mkdir()
    c = Coordinator(tmp_path / "coord")
    b1 = Bench(tmp_path / "bench1", c, testbed, name="bench-1")
    b2 = Bench(tmp_path / "bench2", c, testbed, name="bench-2")
    try:
        make_place(c, "p1", exporter="bench-1", tags={"soc": "rk3588"})
        make_place(c, "p2", exporter="bench-2", tags={"soc": "rk3588"})
        r = await lock_board(b1.server.url)
        assert not r.is_error, text(r)
        wait_until(lambda: acquired_by(c, "p1") == "bench-1/gatecmd:vm-a", 10, "the mirror acquisition")
        out = c.client("reserve", "--wait", "--shell", "soc=rk3588").stdout
        token = out.strip().removeprefix("export LG_TOKEN=")
        shown = c.client("show", place="+", env={"LG_TOKEN": token}).stdout
        assert "Place 'p2'" in shown, shown
        c.client("acquire", place="+", env={"LG_TOKEN": token})
        assert acquired_by(c, "p2") == f"desk/{USER}"
        # And host 2's board is the person's: its agent is refused naming the place.
        r = await lock_board(b2.server.url)
        assert r.is_error and "labgrid:p2" in text(r), text(r)
    finally:
        b1.close()
        b2.close()
        c.stop()


def reserve(c: Coordinator, *filters: str, env: dict[str, str] | None = None) -> str:
    """`labgrid-client reserve --shell FILTER…` as a person runs it; its token."""
    out = c.client("reserve", "--shell", *filters, env=env).stdout
    return out.strip().removeprefix("export LG_TOKEN=")


async def refused_for_the_reservation(b: Bench, wants: str, timeout: float = 10) -> str:
    """The agent's `lock_board`, repeated until it is refused `device_busy` with `wants` in
    its message (the reservation's owner is looked up in one round trip; a lease taken
    meanwhile is let go and the hold follows): the message."""
    deadline = time.monotonic() + timeout
    while True:
        r = await lock_board(b.server.url)
        if not r.is_error:
            await unlock(b.server.url, r.structured_content["lease_id"])
        elif wants in text(r):
            assert r.structured_content["refusal"]["reason"] == "device_busy", r.structured_content
            return text(r)
        if time.monotonic() > deadline:
            pytest.fail(f"the agent was not refused for the reservation within {timeout} s: {text(r)}")
        await anyio.sleep(0.1)


async def test_a_listed_persons_reservation_blocks_agents_until_it_ends(lab):
    c, b = lab
    make_place(c, "p1")
    token = reserve(c, "name=p1")
    # Allocated, not acquired: the board is the place's already, and the agent is told
    # whose reservation it is, what frees it and what to call.
    reserved = f"labgrid place p1 reserved for desk/{USER} (reservation {token})"
    msg = await refused_for_the_reservation(b, reserved)
    assert "labgrid:p1" in msg and "frees when the reservation is cancelled or expires" in msg, msg
    assert 'lock_board {board: "rock5b-1", wait_secs: …}' in msg, msg
    # The person acquires the reserved place: the same hold, now theirs.
    c.client("acquire", place="p1")
    assert acquired_by(c, "p1") == f"desk/{USER}"
    await refused_for_the_reservation(b, f"acquired by desk/{USER} (reservation {token})")
    # Released while the reservation stands: the board stays the reservation's.
    c.client("release", place="p1")
    await refused_for_the_reservation(b, reserved)
    listed = c.client("reservations").stdout
    assert f"Reservation '{token}'" in listed and "state: allocated" in listed, listed
    # Cancelled: the board frees, and a waiting agent gets it.
    c.client("cancel-reservation", token)
    r = await lock_board(b.server.url, wait_secs=10)
    assert not r.is_error, text(r)
    await unlock(b.server.url, r.structured_content["lease_id"])
    events = [e for e in b.audit() if e.get("event", "").startswith("labgrid_reservation_")]
    assert [(e["event"], e["place"], e["token"], e["owner"]) for e in events] == [
        ("labgrid_reservation_hold", "p1", token, f"desk/{USER}"),
        ("labgrid_reservation_ended", "p1", token, f"desk/{USER}"),
    ], events
    assert "cancelled or expired" in events[-1]["why"], events


async def test_an_unlisted_owners_reservation_does_not_block_agents(lab):
    c, b = lab
    make_place(c, "p1", tags={"soc": "rk3588"})
    token = reserve(c, "soc=rk3588", env={"LG_USERNAME": "mallory"})

    def refusal():
        return [e for e in b.audit() if e.get("event") == "labgrid_reservation_refused"]

    # gatecmd saw the reservation and its owner, and took nothing for it.
    seen = wait_until(refusal, 10, "the reservation's refusal in the audit")
    assert [(e["place"], e["token"], e["owner"], e["retrying"]) for e in seen] == [
        ("p1", token, "desk/mallory", False)
    ], seen
    assert "not named in labgrid.people" in seen[0]["why"], seen
    r = await lock_board(b.server.url)
    assert not r.is_error, text(r)
    await unlock(b.server.url, r.structured_content["lease_id"])
    c.client("cancel-reservation", token, env={"LG_USERNAME": "mallory"})


async def test_a_reservation_takes_the_board_once_the_agent_holding_it_lets_go(lab):
    """A reservation allocated while an agent holds the board (its place was not mirrored:
    here the person released the place to a queued agent, and labgrid allocated the place
    to the waiting reservation in the same step) takes the board once the agent lets go."""
    c, b = lab
    make_place(c, "p1")
    c.client("acquire", place="p1")
    async with anyio.create_task_group() as tg:
        got = {}

        async def queued():
            got["r"] = await lock_board(b.server.url, wait_secs=20)

        tg.start_soon(queued)
        await anyio.sleep(0.5)
        token = reserve(c, "name=p1")  # waiting: the place is acquired
        c.client("release", place="p1")
    r = got["r"]
    assert not r.is_error, text(r)

    def refusal():
        return [e for e in b.audit() if e.get("event") == "labgrid_reservation_refused"]

    seen = wait_until(refusal, 10, "the reservation's refusal while the agent holds the board")
    assert [(e["token"], e["retrying"]) for e in seen] == [(token, True)], seen
    assert "leased by MCP client vm-a" in seen[0]["why"], seen
    await unlock(b.server.url, r.structured_content["lease_id"])
    await refused_for_the_reservation(b, f"reserved for desk/{USER} (reservation {token})", timeout=5)
    assert [e["event"] for e in b.audit() if e.get("event", "").startswith("labgrid_reservation_")] == [
        "labgrid_reservation_refused",
        "labgrid_reservation_hold",
    ]
    c.client("cancel-reservation", token)


async def test_a_reservation_hold_is_taken_again_after_a_gatecmd_restart_and_ends_with_the_coordinator(lab):
    c, b = lab
    make_place(c, "p1")
    token = reserve(c, "name=p1")
    reserved = f"reserved for desk/{USER} (reservation {token})"
    await refused_for_the_reservation(b, reserved)
    # gatecmd restarts without leases: its first listing shows the place reserved.
    b.stop()
    b.start()
    await refused_for_the_reservation(b, reserved)
    # The coordinator lost: held for labgrid.hold_secs, then released like any hold.
    c.stop()
    lost = time.monotonic()
    r = await lock_board(b.server.url, wait_secs=HOLD_SECS + 5)
    assert not r.is_error, text(r)
    assert time.monotonic() - lost >= HOLD_SECS - 0.5
    ended = [e for e in b.audit() if e.get("event") == "labgrid_reservation_ended"]
    assert [(e["token"], "unreachable" in e["why"]) for e in ended] == [(token, True)], ended
    await unlock(b.server.url, r.structured_content["lease_id"])
