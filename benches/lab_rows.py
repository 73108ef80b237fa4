"""labgrid rows (issue 25, docs/LAB.md; not part of `make test`): the real labgrid 26
coordinator on loopback and gatecmd exporting one board (no device attached, a pty
console, a script as power).

- acquire → refusal: from the start of a person's AcquirePlace (labgrid's own gRPC stub,
  on a connection with a client session, as labgrid-client makes it) until an agent
  (official MCP Python SDK) sees the board held by `labgrid:<place>` in `list_locks`; a
  `lock_board` right after is checked to be refused. Also the AcquirePlace call itself.
- lock → mirror: from the start of an agent's `lock_board` until the coordinator shows the
  place acquired by `bench-1/gatecmd:vm-a` (GetPlaces polled); and from the start of its
  `unlock_device` until the place is free again.
- reconnect: the coordinator stopped and started again on the same port; from the
  restarted coordinator's port accepting to gatecmd's "registered" line, and from the stop.

Uses GATECMD_BIN, else the release build, else the debug build.

usage: .venv/bin/python benches/lab_rows.py [ROUNDS]    (default 20 acquire rounds, 3 restarts)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

import grpc  # noqa: E402
from labgrid.remote.generated import labgrid_coordinator_pb2 as pb  # noqa: E402
from labgrid.remote.generated.labgrid_coordinator_pb2_grpc import CoordinatorStub  # noqa: E402

import conftest  # noqa: E402
from conftest import TOKEN_A, Server, connect  # noqa: E402
from test_labgrid import USER, Coordinator, config, make_place, wait_until  # noqa: E402


def binary() -> str:
    if os.environ.get("GATECMD_BIN"):
        return os.environ["GATECMD_BIN"]
    for kind in ["release", "debug"]:
        p = REPO / "target" / kind / "gatecmd"
        if p.exists():
            return str(p)
    sys.exit("build gatecmd first (cargo build --release)")


class Person:
    """A labgrid client session (startup on ClientStream, then unary calls on the same
    connection: the coordinator knows the caller by its connection)."""

    def __init__(self, address: str):
        self.address = address

    async def __aenter__(self):
        self.channel = grpc.aio.insecure_channel(self.address)
        self.stub = CoordinatorStub(self.channel)
        self.queue: asyncio.Queue = asyncio.Queue()

        async def messages():
            while True:
                yield await self.queue.get()

        self.stream = self.stub.ClientStream(messages())
        m = pb.ClientInMessage()
        m.startup.version = "bench"
        # A person the config names (test_labgrid.PEOPLE): only their place takes a board.
        m.startup.name = f"desk/{USER}"
        await self.queue.put(m)
        s = pb.ClientInMessage()
        s.sync.id = 1
        await self.queue.put(s)
        async for out in self.stream:  # the answer to the sync: the session exists
            if out.HasField("sync") and out.sync.id == 1:
                break
        return self

    async def __aexit__(self, *exc):
        self.stream.cancel()
        await self.channel.close()


def held_by(result) -> str | None:
    for k in (result.structured_content or {}).get("locks", []):
        if k.get("key") == "board:rock5b-1" and k.get("held_by") == "lease":
            return k.get("holder")
    return None


async def acquire_rows(c: Coordinator, s: Server, rounds: int) -> tuple[list[float], list[float]]:
    seen, calls = [], []
    async with Person(c.address) as person, connect(s.url, TOKEN_A, "auto") as agent:
        for _ in range(rounds):
            t0 = time.perf_counter()
            acquire = asyncio.ensure_future(person.stub.AcquirePlace(pb.AcquirePlaceRequest(placename="p1")))
            while held_by(await agent.call_tool("list_locks", {})) != "labgrid:p1":
                pass
            seen.append((time.perf_counter() - t0) * 1000)
            await acquire
            calls.append((time.perf_counter() - t0) * 1000)
            r = await agent.call_tool("lock_board", {"board": "rock5b-1"})
            assert r.is_error, r
            await person.stub.ReleasePlace(pb.ReleasePlaceRequest(placename="p1"))
            while held_by(await agent.call_tool("list_locks", {})) is not None:
                await asyncio.sleep(0.005)
    return seen, calls


async def mirror_rows(c: Coordinator, s: Server, rounds: int) -> tuple[list[float], list[float]]:
    async def acquirer() -> str:
        places = (await person.stub.GetPlaces(pb.GetPlacesRequest())).places
        return next(p.acquired for p in places if p.name == "p1")

    locked, unlocked = [], []
    async with Person(c.address) as person, connect(s.url, TOKEN_A, "auto") as agent:
        for _ in range(rounds):
            t0 = time.perf_counter()
            r = await agent.call_tool("lock_board", {"board": "rock5b-1"})
            assert not r.is_error, r
            while await acquirer() != "bench-1/gatecmd:vm-a":
                pass
            locked.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            u = await agent.call_tool("unlock_device", {"lease": r.structured_content["lease_id"]})
            assert not u.is_error, u
            while await acquirer():
                pass
            unlocked.append((time.perf_counter() - t0) * 1000)
    return locked, unlocked


def reconnect_rows(c: Coordinator, s: Server, name: str, rounds: int) -> tuple[list[float], list[float]]:
    from_ready, from_stop = [], []
    for i in range(rounds):
        before = sum(1 for line in s.log if f"labgrid exporter {name} registered" in line)
        t_stop = time.perf_counter()
        c.stop()
        c.start()  # returns once the port accepts
        t_ready = time.perf_counter()
        wait_until(
            lambda: sum(1 for line in s.log if f"labgrid exporter {name} registered" in line) > before,
            30,
            "re-registration",
        )
        t = time.perf_counter()
        from_ready.append((t - t_ready) * 1000)
        from_stop.append((t - t_stop) * 1000)
        time.sleep(11)  # a session this long resets the backoff (src/lab/mod.rs STABLE)
    return from_ready, from_stop


def row(name: str, xs: list[float]) -> None:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(len(xs) * 0.95))]
    print(f"| {name} | {len(xs)} | {statistics.median(xs):.1f} | {p95:.1f} | {xs[-1]:.1f} |")


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    os.environ["GATECMD_BIN"] = binary()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "coord").mkdir()
        (tmp / "bench").mkdir()
        c = Coordinator(tmp / "coord")
        master, slave = os.openpty()
        power = tmp / "bench" / "power.sh"
        power.write_text("#!/bin/sh\nexit 0\n")
        power.chmod(0o755)
        # conftest's Server reports start-up failures through pytest.fail; outside pytest
        # that is an exception with the log, which is what a bench wants too.
        s = Server(tmp / "bench", config(c, "bench-1", os.ttyname(slave)))
        try:
            wait_until(lambda: any("labgrid exporter bench-1 registered" in x for x in s.log), 15, "registration")
            make_place(c, "p1")
            seen, calls = asyncio.run(acquire_rows(c, s, rounds))
            locked, unlocked = asyncio.run(mirror_rows(c, s, rounds))
            ready, stop = reconnect_rows(c, s, "bench-1", 3)
        finally:
            s.stop()
            c.stop()
            os.close(master)
            os.close(slave)
    print(f"gatecmd: {os.environ['GATECMD_BIN']}")
    print("| row | n | median ms | p95 ms | max ms |")
    print("|---|---|---|---|---|")
    row("person's AcquirePlace start -> agent sees labgrid:p1 (list_locks)", seen)
    row("person's AcquirePlace call (3 resources, each a set-acquired round trip)", calls)
    row("agent's lock_board start -> place acquired by bench-1/gatecmd:vm-a (GetPlaces)", locked)
    row("agent's unlock_device start -> place free at the coordinator", unlocked)
    row("coordinator restarted (port accepting) -> gatecmd re-registered", ready)
    row("coordinator stopped -> gatecmd re-registered (includes the restart)", stop)


if __name__ == "__main__":
    _ = conftest
    main()
