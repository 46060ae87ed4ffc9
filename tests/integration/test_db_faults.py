"""Faults between a root service and its PostgreSQL, with real RS and agent
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
    AGENT_FLAGS,
    LEADER_STATES,
    RS_FLAGS,
    HaCluster,
    StatusWatch,
    execute_on,
    metrics,
    wait_past_take_office_grace,
)
from tests.support import pki
from tests.support.cluster import Proc, ProcSet, agent_cmd, rs_cmd, wait_until
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
        self.agent_info: dict[str, tuple[str, int]] = {}

    def rs_url(self, addr: str) -> str:
        return f"postgresql+psycopg://postgres@{self.proxies[addr].address}/{self.dbname}"

    def spawn_rs(self, addr: str, **flags: Any) -> Proc:
        n = self._starts[addr] = self._starts.get(addr, 0) + 1
        port = addr.rsplit(":", 1)[1]
        opts = dict(RS_FLAGS) | flags
        p = self.procs.start(
            rs_cmd(self.rs_url(addr), addr, self.tmp / f"rs-{port}", **opts), f"rs-{port}-{n}"
        )
        self.rs[addr] = p
        return p

    def start_agent(self, zone: str, addr: str | None = None) -> str:
        """As :meth:`HaCluster.start_agent`, remembering each agent's zone and SQL port (the
        lease probes of :func:`lease_p99_ms` must look like the agent's own requests)."""
        addr = addr or f"127.0.0.1:{free_port()}"
        name = f"agent-{addr.rsplit(':', 1)[1]}"
        sql_port = free_port()
        p = self.procs.start(
            agent_cmd(self.rs_addrs, addr, sql_port, zone, self.tmp / name, **AGENT_FLAGS), name
        )
        p.wait_healthy(addr, timeout_s=30)
        self.agents[addr] = p
        self.agent_info[addr] = (zone, sql_port)
        return addr

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


def lease_p99_ms(c: ProxiedCluster, rs: str, server: str, n: int = 40) -> tuple[float, list[str]]:
    """``n`` RenewLease calls to ``rs`` as the agent ``server`` (its node certificate, zone
    and SQL port): p99 latency in ms and the OceanBase error names of the refusals (a gRPC
    status name when the call failed without one). The probe carries no cluster id, so a
    leader in service refuses it with OB_INVALID_ARGUMENT after its in-memory checks (past
    the leader gate, on the heartbeat's memory path) and a standby with OB_RS_NOT_MASTER;
    it never changes the server's state."""
    zone, sql_port = c.agent_info[server]
    took: list[float] = []
    errors: list[str] = []
    with pki.channel(rs, Role.NODE, server) as ch:
        stub = obrpc_pb2_grpc.RootServiceStub(ch)
        for seq in range(n):
            t0 = time.perf_counter()
            try:
                resp = stub.RenewLease(
                    obrpc_pb2.LeaseRequest(server=server, zone=zone, sql_port=sql_port, seq=seq),
                    timeout=5,
                )
                if resp.error.name:
                    errors.append(resp.error.name)
            except grpc.RpcError as e:
                details = e.details() or ""
                name = details.split(":", 1)[0] if details.startswith("OB_") else ""
                errors.append(name or str(e.code()))
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
    c.start_all_rs()
    old = c.wait_leader()
    new = next(a for a in c.rs_addrs if a != old)
    c.wait_state(new, "NOT_MASTER", 10)
    servers = c.bootstrap(1)
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
        wait_past_take_office_grace(new, watch)
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


def test_single_rs_cut_from_database_then_healed(
    make_cluster: Callable[[int], ProxiedCluster], record_property: Callable[[str, object], None]
) -> None:
    """One RS on PostgreSQL (SQLite cannot be partitioned from its RS): while cut it stops
    acting (its lease is not safely held), refuses heartbeats and statements with clear
    errors, and once healed takes office again (the lease row is its own) and reloads from
    the tables; nothing acknowledged is lost, no server is shown INACTIVE."""
    c = make_cluster(1)
    (rs,) = c.rs_addrs
    c.start_all_rs()
    c.wait_leader()
    servers = c.bootstrap(2)
    c.ok("ALTER SYSTEM SET server_check_interval = '41s'")
    with StatusWatch(c, {s: {"ACTIVE"} for s in servers}) as watch:
        t0 = time.monotonic()
        c.proxies[rs].cut("reset")
        wait_until(lambda: c.states()[rs] not in LEADER_STATES, 20, 0.05, message="stepped down")
        step_down_s = time.monotonic() - t0
        p99, errors = lease_p99_ms(c, rs, servers[0], n=10)
        stmt = timed_statement(rs, "ALTER SYSTEM SET server_check_interval = '42s'")
        stmt.join(30)
        time.sleep(1.0)
        c.proxies[rs].heal()
        t1 = time.monotonic()
        c.wait_full_service(rs, 30)
        back_s = time.monotonic() - t1
        m = wait_until(
            lambda: (x := metrics(rs)) is not None and x["alive"] == len(servers) and x,
            20,
            message="every agent alive again",
        )
        wait_past_take_office_grace(rs, watch)
    figures = {
        "step_down_s": round(step_down_s, 2),
        "lease_answers_while_cut": sorted(set(errors)),
        "lease_p99_ms_while_cut": round(p99, 1),
        "statement_while_cut": f"{stmt.result[0]} after {stmt.result[1]:.2f}s",
        "back_in_service_after_heal_s": round(back_s, 2),
    }
    for k, v in figures.items():
        record_property(k, v)
    print(f"[single] {figures}")
    assert set(errors) <= {"OB_RS_NOT_MASTER"} and errors, errors
    assert stmt.result[0] in ("OB_RS_NOT_MASTER", "OB_ERR_SYS"), stmt.result
    assert watch.bad == [], watch.bad[:10]
    assert isinstance(m, dict) and m["servers"] == len(servers)
    assert c.db("SELECT value FROM __all_sys_parameter WHERE name = 'server_check_interval'") == [
        ("41s",)
    ]
    c.ok("ALTER SYSTEM SET server_check_interval = '43s'")
    # Not a loop of tracebacks: a few (statements whose audit row could not be written,
    # failed flushes) during the ~3 s cut, not one per round.
    assert c.rs[rs].log_text().count("Traceback") <= 12


# --- (b) a database that answers each statement 1 s late ---------------------------------------


def handled(m: dict[str, Any]) -> int:
    """Lease requests the RS handled (accepted and refused) by its GetMetrics ``m``."""
    return int(m.get("heartbeats_total", 0)) + int(m.get("heartbeats_refused_total", 0))


def test_slow_database_one_second_per_statement(
    make_cluster: Callable[[int], ProxiedCluster], record_property: Callable[[str, object], None]
) -> None:
    """Every client -> PostgreSQL chunk held 1 s (one statement's round trip, for psycopg)
    with the default 10 s lease: heartbeats stay a memory path - the RS handles more of them
    (the agents' and the probes') than the proxy carries chunks to the database, where one
    database round trip per heartbeat would make it at least as many (p99 recorded) - admin
    statements complete slowly or fail with a clear error, no false INACTIVE, no crash; the
    leader keeps its lease or steps down cleanly (recorded)."""
    c = make_cluster(1)
    (rs,) = c.rs_addrs
    c.start_all_rs(lease_time="10s")
    c.wait_leader()
    servers = c.bootstrap(2)
    base = metrics(rs) or {}
    with StatusWatch(c, {s: {"ACTIVE"} for s in servers}) as watch:
        c.proxies[rs].delay(1.0)
        t0 = time.monotonic()
        stmt = timed_statement(rs, "ALTER SYSTEM SET server_check_interval = '42s'", 25)
        samples: list[float] = []
        answers: list[str] = []
        # A burst of probes at once, while the leader still holds its lease (it may step down
        # later, unable to renew): each passes the leader gate and is refused by the
        # heartbeat's in-memory checks.
        m0, chunks0 = metrics(rs) or {}, c.proxies[rs].counters["delayed_chunks"]
        burst: list[str] = []
        for s in servers:
            burst += lease_p99_ms(c, rs, s, n=30)[1]
        m1, chunks1 = metrics(rs) or {}, c.proxies[rs].counters["delayed_chunks"]
        # About 10 s of slowness (more than one lease - margin), probing leases meanwhile.
        for _ in range(3):
            for s in servers:
                p99, errors = lease_p99_ms(c, rs, s, n=10)
                samples.append(p99)
                answers += errors
            time.sleep(2.5)
        stmt.join(30)
        slow_s = time.monotonic() - t0
        state = c.states()[rs]
        m = metrics(rs) or {}
        chunks = c.proxies[rs].counters["delayed_chunks"]
        c.proxies[rs].heal()
        c.wait_full_service(rs, 40)
    figures = {
        "lease_p99_ms_worst_probe": round(max(samples), 1),
        "lease_refusals": sorted(set(answers)),
        "statement": f"{stmt.result[0]} after {stmt.result[1]:.2f}s",
        "state_after_slow_s": f"{state} after {slow_s:.1f}s",
        "step_downs": m.get("rs_step_down_total", 0) - base.get("rs_step_down_total", 0),
        "renewals": m.get("rs_lease_renewals_total", 0) - base.get("rs_lease_renewals_total", 0),
        "delayed_chunks": chunks,
        "burst_answers": sorted(set(burst)),
        "burst_state_after": m1.get("state"),
        "burst_heartbeats_handled": handled(m1) - handled(m0),
        "burst_delayed_chunks": chunks1 - chunks0,
        "rs_hb_handle_us": m.get("hb_handle_us"),
    }
    for k, v in figures.items():
        record_property(k, v)
    print(f"[slow] {figures}")
    assert c.rs[rs].alive
    assert stmt.result[0] in ("OK", "OB_ERR_SYS", "OB_RS_NOT_MASTER"), stmt.result
    assert watch.bad == [], watch.bad[:10]
    assert set(answers) <= {"OB_RS_NOT_MASTER", "OB_INVALID_ARGUMENT"}, answers
    # Off the database: during the burst the leader stayed in office and handled more
    # heartbeats (60 probes and the agents' renewals) than chunks went to the database - a
    # heartbeat needing a database round trip would make at least one chunk each, on top of
    # the RS's own (lease renewal, the statement), and 60 of them at 1 s each would outlast
    # the leader's lease.
    assert burst == ["OB_INVALID_ARGUMENT"] * 60, figures
    assert m1.get("state") in LEADER_STATES, figures
    assert figures["burst_heartbeats_handled"] > figures["burst_delayed_chunks"], figures
    c.ok("ALTER SYSTEM SET server_check_interval = '43s'")


# --- (c) PostgreSQL out of connections -----------------------------------------------------------


def test_database_out_of_connections(
    procs: ProcSet, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """A private PostgreSQL with max_connections = 20 (the session's is shared), filled up
    by the test: a starting RS exits once with a clear error (no loop of tracebacks); the
    leader keeps answering heartbeats from memory and its pooled connections; freed
    connections let the second RS start as a standby."""
    import psycopg

    pg = PgServer(max_connections=20)
    held: list[psycopg.Connection[Any]] = []
    try:
        pg.create_database("exhaust")
        c = ProxiedCluster(procs, tmp_path, pg, "exhaust", 2)
        try:
            first, second = c.rs_addrs
            c.spawn_rs(first).wait_healthy(first, 30)
            c.wait_leader([first])
            servers = c.bootstrap(1)
            c.engine.dispose()
            refusal = ""
            for _ in range(40):  # bounded: max_connections is 20
                try:
                    held.append(pg.connect("exhaust"))
                except psycopg.OperationalError as e:
                    refusal = str(e).strip().splitlines()[-1]
                    break
            assert "too many clients" in refusal, refusal
            # A second RS cannot open the database: one clear error, exit status 1.
            p = c.spawn_rs(second)
            rc = p.wait(60)
            log_text = p.log_text()
            assert rc == 1, log_text[-2000:]
            assert "too many clients" in log_text, log_text[-2000:]
            assert log_text.count("Traceback") <= 1, log_text[-3000:]
            # The leader answers heartbeats from memory and its statements on pooled
            # connections - or, when it needed a connection it could not get (a renewal on a
            # connection PostgreSQL dropped), it stepped down and retries taking office once
            # a lease, with one log line, not a loop of tracebacks.
            e0 = (metrics(first) or {}).get("epoch", 0)
            p99, errors = lease_p99_ms(c, first, servers[0], n=20)
            stmt = timed_statement(first, "ALTER SYSTEM SET server_check_interval = '42s'")
            stmt.join(30)
            time.sleep(3 * 2.0)  # three leases of the exhaustion
            m = metrics(first) or {}
            attempts = c.rs[first].log_text().count("taking office with epoch")
            figures = {
                "refusal": refusal,
                "lease_p99_ms_exhausted": round(p99, 1),
                "lease_answers": sorted(set(errors)),
                "statement_on_leader": f"{stmt.result[0]} after {stmt.result[1]:.2f}s",
                "leader_state_after_6s": m.get("state"),
                "epochs_taken_in_6s": m.get("epoch", 0) - e0,
                "failed_take_office_lines": attempts,
            }
            for k, v in figures.items():
                record_property(k, v)
            print(f"[exhausted] {figures}")
            assert c.rs[first].alive
            assert set(errors) <= {"OB_INVALID_ARGUMENT", "OB_RS_NOT_MASTER"}, errors
            assert stmt.result[0] in ("OK", "OB_ERR_SYS", "OB_RS_NOT_MASTER"), stmt.result
            # At most one take-office attempt per lease (2 s): not one per round (0.4 s).
            assert attempts <= 6, attempts
            # Freed: the second RS starts as a standby, the leader serves statements.
            for conn in held:
                conn.close()
            held.clear()
            c.spawn_rs(second).wait_healthy(second, 30)
            leader = c.wait_leader(timeout_s=30)
            standby = next(a for a in c.rs_addrs if a != leader)
            c.wait_state(standby, "NOT_MASTER", 20)
            c.ok("ALTER SYSTEM SET server_check_interval = '43s'")
        finally:
            procs.stop_all()
            c.close()
    finally:
        for conn in held:
            conn.close()
        pg.stop()
