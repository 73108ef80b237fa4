"""One lab for agents (issue 49) with the official Python SDK: three gatecmd hosts on
loopback, each with its own pty board; the agent of bench-1 lists the lab, leases here
first then on bench-2 and bench-3 through its own host, switches power on a remote board,
and releases; bench-2's own client is refused while the remote agent holds its board."""

from __future__ import annotations

import os
import stat

import anyio

import pytest

from conftest import TOKEN_A, TOKEN_B, Server, connect

MODES = ["legacy", "auto"]
PEER = "py-peer-token-of-bench-1-0123456789"


def board(tmp, name: str, slave: int) -> str:
    power = tmp / "power.sh"
    power.write_text(f"#!/bin/sh\necho \"$1\" >> {tmp}/power.log\n")
    power.chmod(stat.S_IRWXU)
    return f"""
commands:
  - name: power
    binary: {power}
    allowed_args:
      - pattern: "on"
      - pattern: "off"
boards:
  - name: {name}
    usb: "1-2"
    tags: {{soc: rk3588}}
    console: {{path: {os.ttyname(slave)}, baud: 1500000}}
    power: {{on: {{command: power, args: "on"}}, off: {{command: power, args: "off"}}}}
"""


@pytest.fixture
def lab(tmp_path):
    ptys = [os.openpty() for _ in range(3)]
    servers = []
    try:
        for i, name in [(2, "b2"), (3, "b3")]:
            d = tmp_path / f"bench-{i}"
            d.mkdir()
            text = f"clients:\n  - {{name: vm-c, token: {TOKEN_B}}}\n  - {{name: bench-1, token: {PEER}, peer: true}}\n"
            servers.append(Server(d, config=text + board(d, name, ptys[i - 1][1])))
        d = tmp_path / "bench-1"
        d.mkdir()
        token_file = d / "peer.token"
        token_file.write_text(PEER + "\n")
        token_file.chmod(stat.S_IRUSR | stat.S_IWUSR)
        text = (
            f"clients:\n  - {{name: vm-a, token: {TOKEN_A}}}\nlabgrid:\n  peers:\n"
            f"    - {{name: bench-2, url: \"{servers[0].url}\", token_file: {token_file}}}\n"
            f"    - {{name: bench-3, url: \"{servers[1].url}\", token: {PEER}}}\n"
        )
        one = Server(d, config=text + board(d, "b1", ptys[2][1]))
        yield one, servers[0], servers[1]
        one.stop()
    finally:
        for s in servers:
            s.stop()
        for m, s in ptys:
            os.close(m)
            os.close(s)


async def call(c, tool: str, **args):
    r = await c.call_tool(tool, args)
    return r, r.structured_content or {}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_an_agent_leases_here_first_then_on_the_other_hosts(lab, mode):
    one, two, three = lab
    async with connect(one.url, TOKEN_A, mode) as a:
        _, v = await call(a, "list_boards", scope="lab")
        assert [b["name"] for b in v["boards"]] == ["b1", "bench-2/b2", "bench-3/b3"], v
        assert [h["reachable"] for h in v["hosts"]] == [True, True, True], v

        leases = []
        for want, host in [("b1", "local"), ("bench-2/b2", "bench-2"), ("bench-3/b3", "bench-3")]:
            r, v = await call(a, "lock_board", match={"soc": "rk3588"}, scope="lab")
            assert r.is_error is not True, r
            assert (v["board"], v["host"]) == (want, host), v
            leases.append(v["lease_id"])
        r, v = await call(a, "lock_board", match={"soc": "rk3588"}, scope="lab")
        assert v["refusal"]["reason"] == "device_busy", v

        r, v = await call(a, "power_board", board="bench-3/b3", lease=leases[2], action="off")
        assert r.is_error is not True, r
        assert (three.dir / "power.log").read_text().split() == ["off"]

        async with connect(two.url, TOKEN_B, mode) as c:
            _, v = await call(c, "list_boards")
            assert v["boards"][0]["lock"]["holder"] == "bench-1/vm-a", v
            _, v = await call(c, "lock_board", board="b2")
            assert v["refusal"]["reason"] == "device_busy", v

        for lease in leases:
            r, v = await call(a, "unlock_device", lease=lease)
            assert r.is_error is not True, r
        _, v = await call(a, "list_boards", scope="lab")
        assert all(b["lock"].get("holder") is None for b in v["boards"]), v


async def refused_lab_lock(a, timeout: float = 10) -> dict:
    """`lock_board {match: rk3588, scope: "lab"}` until it is refused (a hold being taken
    elsewhere shows within moments; a lease taken before it showed is given back)."""
    deadline = anyio.current_time() + timeout
    while True:
        r, v = await call(a, "lock_board", match={"soc": "rk3588"}, scope="lab")
        if r.is_error or anyio.current_time() > deadline:
            return v
        await call(a, "unlock_device", lease=v["lease_id"])
        await anyio.sleep(0.1)


class PeeredBench:
    """test_labgrid's bench-1 (an exporter of a real labgrid 26 coordinator) with a peer
    client for bench-0, the agent's host."""

    def __new__(cls, directory, coordinator, testbed):
        import test_labgrid as lg

        class Bench(lg.Bench):
            def start(self) -> None:
                text = lg.config(self.coordinator, self.name, self.tty, people=self.people)
                text = text.replace("clients:\n", f"clients:\n  - {{name: bench-0, token: {PEER}, peer: true}}\n", 1)
                self.server = Server(self.dir, text, env=self.env)
                self.wait_registered(1)

        return Bench(directory, coordinator, testbed)


@pytest.mark.anyio
async def test_a_remote_agent_holds_the_labgrid_place_as_host_slash_client(tmp_path, testbed):
    import test_labgrid as lg

    testbed.add("usb1-root-hub.umockdev")
    testbed.add("rk3588-maskrom-1-2.umockdev")
    for d in ["coord", "bench", "bench-0"]:
        (tmp_path / d).mkdir()
    c = lg.Coordinator(tmp_path / "coord")
    b = PeeredBench(tmp_path / "bench", c, testbed)
    zero = Server(
        tmp_path / "bench-0",
        f"clients:\n  - {{name: vm-a, token: {TOKEN_A}}}\nlabgrid:\n  peers:\n"
        f"    - {{name: bench-1, url: \"{b.server.url}\", token: {PEER}}}\n",
    )
    try:
        lg.make_place(c, "p1")
        async with connect(zero.url, TOKEN_A, "auto") as a:
            # A person's labgrid acquisition blocks the agents of every host.
            c.client("acquire", place="p1")
            lg.wait_until(lambda: lg.acquired_by(c, "p1") == f"desk/{lg.USER}", 10, "the person's acquisition")
            v = await refused_lab_lock(a)
            assert v["refusal"]["reason"] == "device_busy", v
            assert f"desk/{lg.USER}" in v["refusal"]["message"], v
            c.client("release", place="p1")
            r, v = await call(a, "lock_board", match={"soc": "rk3588"}, scope="lab")
            assert r.is_error is not True, r
            assert (v["board"], v["holder"]) == ("bench-1/rock5b-1", "bench-0/vm-a"), v
            lg.wait_until(
                lambda: lg.acquired_by(c, "p1") == "bench-1/gatecmd:bench-0:vm-a", 10, "the mirror acquisition"
            )
            # A person's labgrid-client is refused the place while the remote agent holds it,
            # and the place says who, as HOST/CLIENT.
            refused = c.client("acquire", place="p1", check=False)
            assert refused.returncode != 0, refused.stdout
            assert "already acquired by bench-1/gatecmd:bench-0:vm-a" in refused.stderr, refused.stderr
            shown = c.client("show", place="p1").stdout
            assert "'client bench-0/vm-a since" in shown, shown
            r, v = await call(a, "unlock_device", lease=v["lease_id"])
            assert r.is_error is not True, r
            lg.wait_until(lambda: lg.acquired_by(c, "p1") == "None", 10, "the mirror's release")
    finally:
        zero.stop()
        b.close()
        c.stop()


def directory_host(tmp, coordinator, name: str, clients: str, boards: str, peers: str = "") -> Server:
    """A gatecmd host that is an exporter of `coordinator` as `name`, with `boards`."""
    import test_labgrid as lg

    d = tmp / name
    d.mkdir()
    text = (
        f"clients:\n{clients}{boards}"
        f"labgrid:\n  coordinator: \"{coordinator.address}\"\n  name: {name}\n  proxy_required: false\n{lg.PEOPLE}{peers}"
    )
    s = Server(d, config=text)
    lg.wait_until(lambda: any(f"labgrid exporter {name} registered" in line for line in s.log), 15, f"{name} registered")
    return s


async def lab_view(a, pred, what: str, timeout: float = 10):
    """list_boards {scope: "lab"} until `pred` holds of its answer (bounded)."""
    deadline = anyio.current_time() + timeout
    while True:
        _, v = await call(a, "list_boards", scope="lab")
        if pred(v):
            return v
        if anyio.current_time() > deadline:
            pytest.fail(f"timed out waiting for {what}: {v}")
        await anyio.sleep(0.1)


@pytest.mark.anyio
async def test_the_coordinator_is_where_the_labs_boards_are_found(tmp_path):
    """Three exporters of one real coordinator: bench-1 (the agent's, peer of bench-2 only),
    bench-2 and bench-3. The agent finds bench-3's board through the coordinator though its
    host cannot reach it; a person's acquisition, and a person's reservation not yet
    acquired, of bench-2's place block the lab lock of bench-1's agent; with the coordinator
    gone, the lab lock says why it cannot and local allocation goes on."""
    import test_labgrid as lg

    (tmp_path / "coord").mkdir()
    c = lg.Coordinator(tmp_path / "coord")
    pty = os.openpty()
    hosts = []
    try:
        (tmp_path / "power").mkdir()
        peer_client = f"  - {{name: vm-c, token: {TOKEN_B}}}\n  - {{name: bench-1, token: {PEER}, peer: true}}\n"
        two = directory_host(tmp_path, c, "bench-2", peer_client, board(tmp_path / "power", "b2", pty[1]))
        hosts.append(two)
        hosts.append(
            directory_host(
                tmp_path, c, "bench-3", peer_client, "boards:\n  - {name: b3, usb: \"1-7\", tags: {soc: rk3568}}\n"
            )
        )
        one = directory_host(
            tmp_path,
            c,
            "bench-1",
            f"  - {{name: vm-a, token: {TOKEN_A}}}\n",
            "boards:\n  - {name: b1, usb: \"1-9\", tags: {soc: rk3399}}\n",
            f"  peers:\n    - {{name: bench-2, url: \"{two.url}\", token: {PEER}}}\n",
        )
        hosts.append(one)
        lg.make_place(c, "p2", exporter="bench-2", board="b2", tags={"room": "lab-a"})
        async with connect(one.url, TOKEN_A, "auto") as a:
            names = lambda v: {b["name"]: b for b in v["boards"]}  # noqa: E731
            v = await lab_view(
                a,
                lambda v: "bench-3/b3" in names(v) and names(v).get("bench-2/b2", {}).get("labgrid", {}).get("place"),
                "bench-3's board and bench-2's place in the directory",
            )
            assert v["directory"]["up"] is True and v["directory"]["coordinator"] == c.address, v
            b2, b3 = names(v)["bench-2/b2"], names(v)["bench-3/b3"]
            assert b2["in_directory"] is True and b2["reachable"] is True, b2
            assert b2["labgrid"]["place_tags"] == {"room": "lab-a"}, b2
            # bench-3 is listed by the coordinator, with its tags, but bench-1 has no peer entry
            # for it: its board is found, not reachable, and the host's error says why.
            assert (b3["reachable"], b3["tags"]) == (False, {"soc": "rk3568"}), b3
            h3 = next(h for h in v["hosts"] if h["host"] == "bench-3")
            assert h3["reachable"] is False and "no labgrid.peers entry for bench-3" in h3["error"], h3
            # A lab lock for bench-3's tag says which host has one and why it cannot be had.
            r, v = await call(a, "lock_board", match={"soc": "rk3568"}, scope="lab")
            assert v["refusal"]["reason"] == "device_busy", v
            assert "bench-3: no labgrid.peers entry for bench-3" in v["refusal"]["message"], v

            # A person's acquisition of bench-2's place blocks the lab lock.
            c.client("acquire", place="p2")
            lg.wait_until(lambda: lg.acquired_by(c, "p2") == f"desk/{lg.USER}", 10, "the person's acquisition")
            v = await lab_view(
                a,
                lambda v: names(v)["bench-2/b2"].get("labgrid", {}).get("taken", {}).get("by") == "place",
                "the acquisition in the directory",
            )
            assert names(v)["bench-2/b2"]["labgrid"]["taken"]["acquired_by"] == f"desk/{lg.USER}", v
            r, v = await call(a, "lock_board", match={"soc": "rk3588"}, scope="lab")
            assert v["refusal"]["reason"] == "device_busy", v
            c.client("release", place="p2")
            r, v = await call(a, "lock_board", match={"soc": "rk3588"}, scope="lab", wait_secs=10)
            assert r.is_error is not True, r
            assert v["board"] == "bench-2/b2", v
            r, _ = await call(a, "unlock_device", lease=v["lease_id"])
            assert r.is_error is not True, r

            # A person's reservation of bench-2's place, not acquired: the agent of bench-1
            # is refused the board, and the directory says it is reserved; cancelled, it is free.
            token = lg.reserve(c, "name=p2")
            v = await lab_view(
                a,
                lambda v: names(v)["bench-2/b2"].get("labgrid", {}).get("taken", {}).get("by") == "reserved",
                "the reservation in the directory",
            )
            assert names(v)["bench-2/b2"]["labgrid"]["taken"]["reservation"] == token, v
            v = await refused_lab_lock(a)
            assert v["refusal"]["reason"] == "device_busy", v
            assert f"reserved for desk/{lg.USER}" in v["refusal"]["message"], v
            c.client("cancel-reservation", token)
            r, v = await call(a, "lock_board", match={"soc": "rk3588"}, scope="lab", wait_secs=10)
            assert r.is_error is not True and v["board"] == "bench-2/b2", v
            r, _ = await call(a, "unlock_device", lease=v["lease_id"])
            assert r.is_error is not True, r

            # The coordinator goes away: the lab lock says why it cannot, at once; this host's
            # own boards are allocated as ever, and a host named directly still answers.
            c.stop()
            v = await lab_view(a, lambda v: v["directory"]["up"] is False, "the directory marked down")
            assert v["directory"]["error"], v
            assert names(v)["bench-2/b2"]["reachable"] is True, v
            t0 = anyio.current_time()
            r, v = await call(a, "lock_board", match={"soc": "rk3588"}, scope="lab", wait_secs=30)
            assert anyio.current_time() - t0 < 5, "refused at once, not after the wait"
            assert v["refusal"]["reason"] == "coordinator_unreachable", v
            assert c.address in v["refusal"]["message"] and "lock_board {match} without scope" in v["refusal"]["message"], v
            r, v = await call(a, "lock_board", match={"soc": "rk3399"}, scope="lab")
            assert r.is_error is not True and v["board"] == "b1", v
            r, v2 = await call(a, "lock_board", board="bench-2/b2")
            assert r.is_error is not True and v2["board"] == "bench-2/b2", v2
            for lease in [v["lease_id"], v2["lease_id"]]:
                r, _ = await call(a, "unlock_device", lease=lease)
                assert r.is_error is not True, r
    finally:
        for s in hosts:
            s.stop()
        c.stop()
        for fd in pty:
            os.close(fd)
