"""Faults between a root service and its PostgreSQL (issue 14 item 7), with real RS and agent
processes and the session's real PostgreSQL reached through tests/support/tcp_proxy.py (one
proxy per RS, so one RS's link can be cut while the others keep theirs):

- a partition between the leader and the database only (blackhole and reset): the leader
  stops acting, the standby takes office, the agents follow, nothing acknowledged is lost, and
  the old leader rejoins as a standby once healed; a single RS cut and healed;
- a database that answers each statement 1 s late;
- a database whose connections are exhausted (a private server: the session's is shared).

Nothing asserts on speed: the figures (step-down, take-office, heartbeat p99) are recorded as
test properties (``record_property``) and quoted in NOTES-dbfaults.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from tests.integration.test_ha import (
    LEADER_STATES,
    HaCluster,
    StatusWatch,
    execute_on,
    metrics,
)
from tests.support import pki
from tests.support.cluster import Proc, ProcSet, rs_cmd, wait_until
from tests.support.pgserver import PgServer
from tests.support.ports import free_port
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


class ProxiedCluster(HaCluster):
    """:class:`HaCluster` whose every RS reaches the database through a proxy of its own;
    the harness's own engine (assertions) goes straight to PostgreSQL."""

    def __init__(self, procs: ProcSet, tmp: Path, pg: PgServer, dbname: str, n_rs: int) -> None:
        super().__init__(procs, tmp, pg.url(dbname), n_rs)
        self.proxies = {a: TcpProxy(("127.0.0.1", pg.port)) for a in self.rs_addrs}
        self.dbname = dbname

    def rs_url(self, addr: str) -> str:
        return f"postgresql+psycopg://postgres@{self.proxies[addr].address}/{self.dbname}"

    def spawn_rs(self, addr: str, **flags: Any) -> Proc:
        n = self._starts[addr] = self._starts.get(addr, 0) + 1
        port = addr.rsplit(":", 1)[1]
        from tests.integration.test_ha import RS_FLAGS

        opts = dict(RS_FLAGS) | flags
        p = self.procs.start(
            rs_cmd(self.rs_url(addr), addr, self.tmp / f"rs-{port}", **opts), f"rs-{port}-{n}"
        )
        self.rs[addr] = p
        return p

    def close(self) -> None:
        for p in self.proxies.values():
            p.close()
        super().close()


@pytest.fixture
def make_cluster(
    procs: ProcSet, tmp_path: Path, pg_server: PgServer
) -> Iterator[Callable[[int], ProxiedCluster]]:
    made: list[tuple[ProxiedCluster, str]] = []

    def make(n_rs: int) -> ProxiedCluster:
        name = f"dbf_{free_port()}"
        pg_server.create_database(name)
        c = ProxiedCluster(procs, tmp_path / name, pg_server, name, n_rs)
        made.append((c, name))
        return c

    try:
        yield make
    finally:
        procs.stop_all()
        for c, name in made:
            c.close()
            pg_server.drop_database(name)


def lease_p99_ms(rs: str, server: str, zone: str, n: int = 40) -> tuple[float, list[str]]:
    """``n`` RenewLease calls to ``rs`` as ``server`` (node certificate): p99 latency in ms
    and the error names answered."""
    took: list[float] = []
    errors: list[str] = []
    with pki.channel(rs, Role.NODE, server) as ch:
        stub = obrpc_pb2_grpc.RootServiceStub(ch)
        for seq in range(n):
            t0 = time.perf_counter()
            try:
                resp = stub.RenewLease(
                    obrpc_pb2.LeaseRequest(server=server, zone=zone, sql_port=1, seq=seq),
                    timeout=5,
                )
                if resp.error.name:
                    errors.append(resp.error.name)
            except grpc.RpcError as e:
                errors.append(str(e.code()))
            took.append((time.perf_counter() - t0) * 1000)
    took.sort()
    return took[min(len(took) - 1, int(len(took) * 0.99))], errors


class timed_statement(threading.Thread):  # noqa: N801 - used like a function
    """Run one ``ExecuteSql`` on exactly ``addr`` in a thread; ``result`` is ``(error name or
    "OK" or "rpc <code>", seconds)`` once joined."""

    def __init__(self, addr: str, statement: str, timeout_s: float = 25.0) -> None:
        super().__init__(daemon=True)
        self.addr, self.statement, self.timeout_s = addr, statement, timeout_s
        self.result: tuple[str, float] = ("not answered", -1.0)
        self.start()

    def run(self) -> None:
        t0 = time.monotonic()
        try:
            resp = execute_on(self.addr, self.statement, self.timeout_s)
            answer = resp.error.name or "OK"
        except grpc.RpcError as e:
            answer = f"rpc {e.code()}"
        self.result = (answer, time.monotonic() - t0)


# --- (a) a partition between the leader and the database only ----------------------------------


@pytest.mark.parametrize("how", ["blackhole", "reset"])
def test_leader_cut_from_database_standby_takes_office(
    make_cluster: Callable[[int], ProxiedCluster],
    how: str,
    record_property: Callable[[str, object], None],
) -> None:
    c = make_cluster(2)
    first, second = c.rs_addrs
    c.spawn_rs(first).wait_healthy(first, 30)
    c.wait_leader([first])
    c.spawn_rs(second).wait_healthy(second, 30)
    c.wait_state(second, "NOT_MASTER", 10)
    old, new = first, second
    servers = c.bootstrap(2)
    extra = c.start_agent("z1")
    c.ok(f"ALTER SYSTEM ADD SERVER '{extra}' ZONE 'z1'", [old])
    c.ok("ALTER SYSTEM SET server_check_interval = '41s'", [old])
    servers.append(extra)
    wait_until(lambda: all(c.statuses().get(s) == "ACTIVE" for s in servers), 20)

    with StatusWatch(c, {s: {"ACTIVE"} for s in servers}) as watch:
        t0 = time.monotonic()
        c.proxies[old].cut(how)  # type: ignore[arg-type]
        # A statement on the cut leader, answered (with an error) within the client's
        # timeout, not a hang; in a thread so the step-down is timed on its own.
        stmt = timed_statement(old, "ALTER SYSTEM SET server_check_interval = '42s'")
        wait_until(
            lambda: c.states([old])[old] not in LEADER_STATES,
            30,
            0.05,
            message="the cut leader stepped down",
        )
        step_down_s = time.monotonic() - t0
        c.wait_full_service(new, 30)
        take_office_s = time.monotonic() - t0
        m = wait_until(
            lambda: (x := metrics(new)) is not None and x["alive"] == len(servers) and x,
            20,
            message="every agent alive on the new leader",
        )
        alive_s = time.monotonic() - t0
        stmt.join(30)
        time.sleep(2.5)  # through the take-office grace (one lease)
    answer, stmt_s = stmt.result
    figures = {
        "statement_on_cut_leader": f"{answer} after {stmt_s:.2f}s",
        "step_down_s": round(step_down_s, 2),
        "take_office_s": round(take_office_s, 2),
        "all_alive_s": round(alive_s, 2),
    }
    for k, v in figures.items():
        record_property(k, v)
    print(f"[{how}] {figures}")
    assert watch.polls > 10 and watch.bad == [], watch.bad[:10]
    assert isinstance(m, dict) and m["servers"] == len(servers)
    assert answer in ("OB_ERR_SYS", "OB_RS_NOT_MASTER", "OK"), answer
    # Nothing acknowledged before the cut is lost (the statement during it either happened
    # or was refused).
    (value,) = c.db("SELECT value FROM __all_sys_parameter WHERE name = 'server_check_interval'")[0]
    assert value == ("42s" if answer == "OK" else "41s")
    assert set(c.statuses()) == set(servers)
    assert c.lease()[1] == new

    # Heal: the old leader rejoins as a standby: it learns the leader and forwards to it.
    c.proxies[old].heal()
    t1 = time.monotonic()
    wait_until(
        lambda: (
            (x := metrics(old)) is not None and x["state"] == "NOT_MASTER" and x["leader"] == new
        ),
        20,
        message="the old leader stands by behind the new one",
    )
    record_property("rejoin_s", round(time.monotonic() - t1, 2))
    resp = execute_on(old, f"ALTER SYSTEM STOP SERVER '{extra}'", 15)
    assert resp.error.name == "", resp.error
    assert c.lease()[1] == new
    assert c.states() == {old: "NOT_MASTER", new: "FULL_SERVICE"}
