"""RS high availability with real processes (section 5 "fault tests"): two
``rootservice serve`` processes on one PostgreSQL database, ``observer-agent`` processes
that know both, and the faults: two RS started at once, kill -9 of the leader, SIGSTOP of
the leader for longer than the lease, PostgreSQL restarted under load, and an acknowledged
DELETE SERVER followed at once by kill -9 of the leader. Plus SQLite's single-RS rule.

Every wait is bounded; nothing asserts on speed. Take-office times and rejected-write counts
are recorded as test properties (``record_property``), the longer ``make chaos`` run prints
them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pymysql
import pytest
import sqlalchemy as sa

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import CA_CERT, Role, cert_file, key_file
from sql.client import execute, result_rows
from tests.support import pki
from tests.support.cluster import Proc, ProcSet, agent_cmd, rs_cmd, wait_until
from tests.support.pgserver import PgServer
from tests.support.ports import free_port
from tests.support.timescale import scaled

pytestmark = pytest.mark.integration

LEASE = "2s"
LEASE_S = 2.0
RS_FLAGS: dict[str, Any] = {
    "lease_time": LEASE,
    "heartbeat_interval": "500ms",
    "empty_server_check_interval": "1s",
    "allow_short_timings": True,
    "rpc_timeout": "1s",
}
AGENT_FLAGS = {"heartbeat_interval": "500ms", "rpc_timeout": "1s", "disk_probe_interval": "200ms"}
LEADER_STATES = ("WAIT_BOOTSTRAP", "BOOTSTRAPPING", "IN_SERVICE", "FULL_SERVICE")


def metrics(addr: str, timeout_s: float = 1.0) -> dict[str, Any] | None:
    """``GetMetrics`` of the RS at ``addr``, or None when it does not answer in time."""
    try:
        with pki.channel(addr) as ch:
            resp = obrpc_pb2_grpc.AdminServiceStub(ch).GetMetrics(
                obrpc_pb2.MetricsRequest(), timeout=timeout_s
            )
    except grpc.RpcError:
        return None
    return json.loads(resp.json)  # type: ignore[no-any-return]


def execute_on(addr: str, statement: str, timeout_s: float = 10.0) -> obrpc_pb2.SqlResponse:
    """One ``ExecuteSql`` on exactly this RS (no hint following, unlike obadmin)."""
    with pki.channel(addr) as ch:
        return obrpc_pb2_grpc.AdminServiceStub(ch).ExecuteSql(  # type: ignore[no-any-return]
            obrpc_pb2.SqlRequest(statement=statement), timeout=timeout_s
        )


class HaCluster:
    """Several RS processes on one database and agents that know all of them."""

    def __init__(self, procs: ProcSet, tmp: Path, db_url: str, n_rs: int = 2) -> None:
        self.procs = procs
        self.tmp = tmp
        self.db_url = db_url
        self.rs_addrs = [f"127.0.0.1:{free_port()}" for _ in range(n_rs)]
        self.rs: dict[str, Proc] = {}
        self.agents: dict[str, Proc] = {}
        self.engine = sa.create_engine(db_url, pool_pre_ping=True)
        self._starts: dict[str, int] = {}

    def close(self) -> None:
        self.engine.dispose()

    # --- processes -----------------------------------------------------------------------

    def spawn_rs(self, addr: str, **flags: Any) -> Proc:
        n = self._starts[addr] = self._starts.get(addr, 0) + 1
        port = addr.rsplit(":", 1)[1]
        opts = dict(RS_FLAGS) | flags
        p = self.procs.start(
            rs_cmd(self.db_url, addr, self.tmp / f"rs-{port}", **opts), f"rs-{port}-{n}"
        )
        self.rs[addr] = p
        return p

    def start_all_rs(self, **flags: Any) -> None:
        # Spawned back to back, then waited for: as close to "the same instant" as two
        # processes get.
        for addr in self.rs_addrs:
            self.spawn_rs(addr, **flags)
        for addr in self.rs_addrs:
            self.rs[addr].wait_healthy(addr, timeout_s=30)

    def start_agent(self, zone: str, addr: str | None = None) -> str:
        addr = addr or f"127.0.0.1:{free_port()}"
        name = f"agent-{addr.rsplit(':', 1)[1]}"
        p = self.procs.start(
            agent_cmd(self.rs_addrs, addr, free_port(), zone, self.tmp / name, **AGENT_FLAGS),
            name,
        )
        p.wait_healthy(addr, timeout_s=30)
        self.agents[addr] = p
        return addr

    # --- who leads -----------------------------------------------------------------------

    def states(self, addrs: list[str] | None = None) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for a in addrs or self.rs_addrs:
            m = metrics(a, timeout_s=0.5) if self.rs[a].alive else None
            out[a] = m["state"] if m else None
        return out

    def wait_leader(self, among: list[str] | None = None, timeout_s: float = 30) -> str:
        """The one RS of ``among`` (default: all) in a leader state, waited for."""
        addrs = among or self.rs_addrs

        def one() -> str | None:
            leaders = [a for a, st in self.states(addrs).items() if st in LEADER_STATES]
            return leaders[0] if len(leaders) == 1 else None

        return wait_until(one, timeout_s, 0.1, message=f"exactly one leader among {addrs}")

    def wait_state(self, addr: str, state: str, timeout_s: float = 30) -> None:
        wait_until(
            lambda: self.states([addr])[addr] == state,
            timeout_s,
            0.05,
            message=f"{addr} in {state}",
        )

    def wait_full_service(self, addr: str, timeout_s: float = 30) -> None:
        self.wait_state(addr, "FULL_SERVICE", timeout_s)

    # --- statements and tables -----------------------------------------------------------

    def ok(self, statement: str, addrs: list[str] | None = None) -> list[list[Any]]:
        resp = execute(
            addrs or self.rs_addrs, statement, timeout_s=scaled(30), credentials=pki.credentials()
        )
        assert resp.error.code == 0, f"{statement}: {resp.error.name} {resp.error.message}"
        return result_rows(resp)

    def db(self, query: str, **params: Any) -> list[tuple[Any, ...]]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(query), params)]

    def statuses(self) -> dict[str, str]:
        return {
            f"{ip}:{port}": st
            for ip, port, st in self.db("SELECT svr_ip, svr_port, status FROM __all_server")
        }

    def lease(self) -> tuple[int, str]:
        (epoch, ip, port), *_ = self.db(
            "SELECT value, svr_ip, svr_port FROM __all_service_epoch "
            "WHERE name = 'rootservice_epoch'"
        )
        return int(epoch), f"{ip}:{port}"

    def bootstrap(self, n: int) -> list[str]:
        addrs = [self.start_agent(f"z{i}") for i in range(1, n + 1)]
        items = ", ".join(f"ZONE 'z{i}' SERVER '{a}'" for i, a in enumerate(addrs, start=1))
        self.ok(f"ALTER SYSTEM BOOTSTRAP REGION 'r1' {items}")
        wait_until(
            lambda: all(self.statuses().get(a) == "ACTIVE" for a in addrs),
            20,
            message="bootstrap servers ACTIVE",
        )
        return addrs


@pytest.fixture
def ha(procs: ProcSet, tmp_path: Path, pg_server: PgServer) -> Iterator[HaCluster]:
    name = f"ha_{free_port()}"
    pg_server.create_database(name)
    c = HaCluster(procs, tmp_path, pg_server.url(name))
    try:
        yield c
    finally:
        c.close()
        procs.stop_all()
        pg_server.drop_database(name)


class StatusWatch:
    """Polls ``__all_server`` in a thread and records every (server, status) ever seen that
    is not in ``allowed`` for that server, and any server missing from the table."""

    def __init__(self, c: HaCluster, allowed: dict[str, set[str]], interval_s: float = 0.05):
        self.c = c
        self.allowed = allowed
        self.bad: list[tuple[float, str, str]] = []
        self.polls = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(interval_s,), daemon=True)

    def _run(self, interval_s: float) -> None:
        t0 = time.monotonic()
        # Bounded: at most two minutes of polling, whatever the test does.
        for _ in range(int(120 / interval_s)):
            if self._stop.is_set():
                return
            try:
                seen = self.c.statuses()
            except sa.exc.SQLAlchemyError:
                seen = None
            if seen is not None:
                self.polls += 1
                for server, ok in self.allowed.items():
                    st = seen.get(server, "<missing>")
                    if st not in ok:
                        self.bad.append((round(time.monotonic() - t0, 3), server, st))
            self._stop.wait(interval_s)

    def __enter__(self) -> StatusWatch:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(10)


def wait_past_take_office_grace(addr: str, watch: StatusWatch, timeout_s: float = 30.0) -> None:
    """Wait until the take-office grace of the leader at ``addr`` is over and judged: its end
    (``take_office_grace_until_us`` of GetMetrics, wall-clock microseconds of this same host)
    has passed, the lease checker ticked twice since (``checker_tick_us`` count), the persist
    queue is empty and ``watch`` polled ``__all_server`` again. A lease the grace held that
    had run out would have been expired and written by then, so ``watch.bad`` shows it.
    Raises ``AssertionError`` (:func:`wait_until`) when any step takes over ``timeout_s``."""

    def reading() -> dict[str, Any] | None:
        m = metrics(addr)
        return m if m and m.get("take_office_grace_until_us") else None

    until_us = wait_until(reading, timeout_s, message=f"{addr} has a take-office grace")[
        "take_office_grace_until_us"
    ]
    wait_until(lambda: time.time() * 1e6 > until_us, timeout_s, 0.05, message="grace over")
    # The checker does not tick during the grace (so the window may not exist yet).
    ticks = wait_until(reading, timeout_s).get("checker_tick_us", {}).get("count", 0)
    wait_until(
        lambda: (
            (m := reading()) is not None
            and m.get("checker_tick_us", {}).get("count", 0) >= ticks + 2
            and m["persist_queue_depth"] == 0
        ),
        timeout_s,
        0.05,
        message="two lease-checker ticks after the grace, persist queue empty",
    )
    polls = watch.polls
    wait_until(lambda: watch.polls >= polls + 2, timeout_s, 0.05, message="the watch polled")


# --- two RS at the same instant ---------------------------------------------------------------


def test_two_rs_started_together_elect_exactly_one(
    ha: HaCluster, pg_server: PgServer, procs: ProcSet, tmp_path: Path
) -> None:
    c = ha
    c.start_all_rs()
    leader = c.wait_leader()
    standby = next(a for a in c.rs_addrs if a != leader)
    c.wait_state(standby, "NOT_MASTER", 10)
    assert c.lease() == (1, leader)
    assert "standing by: the leader is " + leader in c.rs[standby].log_text()

    # The standby forwards admin statements to the leader, which refuses this one
    # before BOOTSTRAP (not in service); it refuses leases, naming the leader...
    resp = execute_on(standby, "ALTER SYSTEM ADD ZONE 'z9'")
    assert resp.error.name == "OB_RS_NOT_MASTER" and resp.leader_hint == leader
    with pki.channel(standby, Role.NODE, "127.0.0.1:1") as ch:
        lease = obrpc_pb2_grpc.RootServiceStub(ch).LeaseStream(
            iter([obrpc_pb2.LeaseRequest(server="127.0.0.1:1", zone="z1", sql_port=1, seq=7)]),
            timeout=5,
        )
        (answer,) = list(lease)
    assert answer.error.name == "OB_RS_NOT_MASTER" and answer.leader_hint == leader
    # ...and obadmin, given only the standby, follows the hint (CLI and library).
    cli = subprocess.run(
        [sys.executable, "-m", "sql.obadmin", *pki.obadmin_flags(), "--rs", standby, "--format", "json", "-e",
         "SHOW PARAMETERS LIKE 'lease_time'"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)[0]["value"] == LEASE
    c.ok("ALTER SYSTEM SET server_check_interval = '20s'", [standby])
    assert c.db("SELECT value FROM __all_sys_parameter WHERE name = 'server_check_interval'") == [
        ("20s",)
    ]

    # A second trial on a fresh database, the other way round in spawn order.
    name = f"ha2_{free_port()}"
    pg_server.create_database(name)
    try:
        c2 = HaCluster(procs, tmp_path / "second", pg_server.url(name))
        c2.rs_addrs.reverse()
        c2.start_all_rs()
        leader2 = c2.wait_leader()
        assert c2.lease() == (1, leader2)
        for p in c2.rs.values():
            p.stop()
        c2.close()
    finally:
        pg_server.drop_database(name)


# --- any RS answers ---------------------------------------------------------


def obadmin_on(addr: str, statement: str) -> subprocess.CompletedProcess[str]:
    """obadmin given only ``addr`` (no other RS to follow a hint to)."""
    return subprocess.run(
        [sys.executable, "-m", "sql.obadmin", *pki.obadmin_flags(), "--rs", addr, "-e", statement],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_obadmin_pointed_at_the_standby_gets_the_leaders_answer(ha: HaCluster) -> None:
    c = ha
    mysql_ports = {a: free_port() for a in c.rs_addrs}
    for a in c.rs_addrs:
        c.spawn_rs(a, mysql_addr=f"127.0.0.1:{mysql_ports[a]}")
    for a in c.rs_addrs:
        c.rs[a].wait_healthy(a, timeout_s=30)
    leader = c.wait_leader()
    standby = next(a for a in c.rs_addrs if a != leader)
    c.wait_state(standby, "NOT_MASTER", 10)
    c.bootstrap(1)
    c.wait_full_service(leader)
    agent = c.start_agent("z1")
    before = metrics(standby)
    assert before is not None
    forwarded_before = before.get("statements_forwarded_total", 0)

    added = obadmin_on(standby, f"ALTER SYSTEM ADD SERVER '{agent}' ZONE 'z1'")
    assert added.returncode == 0, added.stderr
    assert agent in c.statuses()
    # A refusal by the leader reaches the client through the standby with its number.
    # (The same server again: refused before the leader contacts any agent.)
    refused = obadmin_on(standby, f"ALTER SYSTEM ADD SERVER '{agent}' ZONE 'z1'")
    assert refused.returncode == 1
    assert refused.stderr.startswith("ERROR 4017 (HY000): OB_ENTRY_EXIST"), refused.stderr
    # The standby answered both (it forwarded them; obadmin had no hint to follow)...
    m = metrics(standby)
    assert m is not None and m["statements_forwarded_total"] == forwarded_before + 2
    # ...and the leader audited them with the client and the forwarding RS.
    rows = c.db(
        "SELECT value2, value3, value5, rs_svr_port FROM __all_rootservice_event_history "
        "WHERE module = 'audit' AND name5 = 'forwarded_by' AND value4 LIKE '%ADD SERVER%' "
        "ORDER BY id"
    )
    assert [(r[1], r[2], int(r[3])) for r in rows] == [
        ("OK", standby, int(leader.rsplit(":", 1)[1])),
        ("OB_ENTRY_EXIST", standby, int(leader.rsplit(":", 1)[1])),
    ]
    assert all(r[0].startswith("127.0.0.1:") for r in rows)

    # A MySQL client (PyMySQL, root's client certificate) pointed at the standby only: the
    # leader runs its statement, the refusal keeps its number, and reads come from any RS.
    d = pki.client_certs()
    conn = pymysql.connect(
        host="127.0.0.1",
        port=mysql_ports[standby],
        user="root",
        password="",
        ssl={
            "ca": str(d / CA_CERT),
            "cert": str(d / cert_file(Role.CLIENT, "root")),
            "key": str(d / key_file(Role.CLIENT, "root")),
        },
        connect_timeout=10,
    )
    try:
        with conn.cursor() as cur:
            second = c.start_agent("z1")
            assert cur.execute(f"ALTER SYSTEM ADD SERVER '{second}' ZONE 'z1'") == 1
            assert second in c.statuses()
            with pytest.raises(pymysql.MySQLError) as e:
                cur.execute(f"ALTER SYSTEM ADD SERVER '{second}' ZONE 'z1'")
            assert e.value.args[0] == 4017  # OB_ENTRY_EXIST, from the leader
            cur.execute("SELECT count(*) FROM __all_server")
            assert cur.fetchall() == ((3,),)
    finally:
        conn.close()
    m = metrics(standby)
    assert m is not None and m["statements_forwarded_total"] == forwarded_before + 4


# --- kill -9 of the leader ----------------------------------------------------------------------


def test_kill_9_of_the_leader_standby_takes_office(
    ha: HaCluster, record_property: Callable[[str, object], None]
) -> None:
    c = ha
    agent_addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    # Each RS is co-located with an observer: with_rootserver follows the leader.
    for rs, server in zip(c.rs_addrs, agent_addrs, strict=False):
        c.spawn_rs(rs, self_server=server)
    for rs in c.rs_addrs:
        c.rs[rs].wait_healthy(rs, timeout_s=30)
    old = c.wait_leader()
    new = next(a for a in c.rs_addrs if a != old)
    for i, a in enumerate(agent_addrs, start=1):
        c.start_agent(f"z{i}", a)
    items = ", ".join(f"ZONE 'z{i}' SERVER '{a}'" for i, a in enumerate(agent_addrs, start=1))
    c.ok(f"ALTER SYSTEM BOOTSTRAP REGION 'r1' {items}")
    wait_until(lambda: set(c.statuses().values()) == {"ACTIVE"} and len(c.statuses()) == 3, 20)
    extra = c.start_agent("z1")
    c.ok(f"ALTER SYSTEM ADD SERVER '{extra}' ZONE 'z1'")
    servers = [*agent_addrs, extra]
    wait_until(lambda: all(c.statuses().get(s) == "ACTIVE" for s in servers), 20)
    with_rs = dict(c.db("SELECT svr_port, with_rootserver FROM __all_server"))
    assert with_rs[int(agent_addrs[c.rs_addrs.index(old)].rsplit(":", 1)[1])] == 1

    with StatusWatch(c, {s: {"ACTIVE"} for s in servers}) as watch:
        t0 = time.monotonic()
        c.rs[old].kill()
        c.wait_full_service(new)
        took = time.monotonic() - t0
        # Through the take-office grace and its judgement: nobody INACTIVE, nobody lost.
        wait_past_take_office_grace(new, watch)
    record_property("take_office_s", round(took, 3))
    assert watch.polls > 10 and watch.bad == [], watch.bad[:10]
    # Epoch 2 unless the new leader stepped down and took office again (a loaded machine).
    epoch, holder = c.lease()
    assert holder == new and epoch >= 2
    m = metrics(new)
    assert m is not None and m["servers"] == 4 and m["alive"] == 4 and m["epoch"] == epoch
    wait_until(
        lambda: (
            dict(c.db("SELECT svr_port, with_rootserver FROM __all_server"))
            == {
                int(s.rsplit(":", 1)[1]): int(s == agent_addrs[c.rs_addrs.index(new)])
                for s in servers
            }
        ),
        10,
        message="with_rootserver moved to the new leader's server",
    )
    events = c.db(
        "SELECT value1, value2 FROM __all_rootservice_event_history "
        "WHERE event = 'rs_take_office' ORDER BY id"
    )
    assert events[-1] == (str(epoch), new)
    rs_list = c.db("SELECT value FROM __all_sys_parameter WHERE name = 'rootservice_list'")
    assert rs_list == [(f"{old};{new}",)]
    # Statements go to the new leader (obadmin skips the dead address).
    c.ok(f"ALTER SYSTEM STOP SERVER '{extra}'")
    # The agents took the new epoch: their logs show leases granted by the new leader.
    wait_until(lambda: all("rs_epoch 2" in c.agents[s].log_text() for s in servers), 10)


# --- SIGSTOP of the leader longer than the lease ------------------------------------------------


def test_paused_leader_is_deposed_and_commits_nothing_after_resuming(
    ha: HaCluster, record_property: Callable[[str, object], None]
) -> None:
    c = ha
    c.start_all_rs()
    old = c.wait_leader()
    new = next(a for a in c.rs_addrs if a != old)
    a1, a2, _ = c.bootstrap(3)
    old_port = int(old.rsplit(":", 1)[1])

    c.rs[old].pause()
    try:
        c.wait_full_service(new, timeout_s=30)
        assert c.lease()[1] == new
        (bump_id,) = c.db(
            "SELECT max(id) FROM __all_rootservice_event_history WHERE event = 'rs_take_office'"
        )[0]
        # The new leader changes state while the old one is still frozen.
        c.ok(f"ALTER SYSTEM STOP SERVER '{a1}'", [new])
        # Long enough for everything the old leader believes to be stale: every lease it
        # granted has run out.
        time.sleep(2 * LEASE_S)
    finally:
        c.rs[old].resume()

    def deposed() -> dict[str, Any] | None:
        m = metrics(old)
        return m if m and m["state"] == "NOT_MASTER" and m["epoch"] == 0 else None

    m_old = wait_until(deposed, 15, message="the resumed leader stepped down")
    # Let whatever the resumed process had in flight run its course.
    time.sleep(LEASE_S)
    m_old = metrics(old) or m_old
    record_property("writes_rejected", m_old.get("writes_rejected_total", 0))
    record_property("step_downs", m_old.get("rs_step_down_total", 0))
    assert m_old.get("rs_step_down_total", 0) >= 1
    assert "stepping down from epoch" in c.rs[old].log_text()

    # Nothing the old leader did after the bump reached the tables.
    late = c.db(
        "SELECT event, rs_svr_port FROM __all_rootservice_event_history WHERE id > :b",
        b=bump_id,
    )
    assert late and all(port != old_port for _, port in late), late
    stop_time = c.db(
        "SELECT stop_time FROM __all_server WHERE svr_port = :p", p=int(a1.rsplit(":", 1)[1])
    )
    assert stop_time[0][0] > 0
    assert c.lease()[1] == new
    wait_until(lambda: set(c.statuses().values()) == {"ACTIVE"}, 20, message="all ACTIVE")
    # The old leader now acts as a standby: it runs nothing itself and forwards a statement
    # that needs the leader to the new one, which runs and audits it.
    forwarded = (metrics(old) or {}).get("statements_forwarded_total", 0)
    resp = execute_on(old, f"ALTER SYSTEM START SERVER '{a2}'")
    assert resp.error.name == "", resp.error
    assert (metrics(old) or {}).get("statements_forwarded_total", 0) == forwarded + 1
    ran = c.db(
        "SELECT rs_svr_port FROM __all_rootservice_event_history WHERE module = 'audit' "
        "AND value4 LIKE '%START SERVER%' ORDER BY id DESC LIMIT 1"
    )
    assert ran and int(ran[0][0]) == int(new.rsplit(":", 1)[1]), ran
    assert c.states() == {old: "NOT_MASTER", new: "FULL_SERVICE"}


# --- acknowledged DELETE SERVER, then kill -9 ---------------------------------------------------


def test_acknowledged_delete_then_kill_9_of_the_leader(ha: HaCluster) -> None:
    c = ha
    c.start_all_rs(empty_server_check_interval="1h")
    c.wait_leader()
    c.bootstrap(1)
    extra = [c.start_agent("z1") for _ in range(3)]
    for a in extra:
        c.ok(f"ALTER SYSTEM ADD SERVER '{a}' ZONE 'z1'")
    deleted: list[str] = []
    for a in extra:
        leader = c.wait_leader()
        c.ok(f"ALTER SYSTEM DELETE SERVER '{a}'", [leader])
        deleted.append(a)
        c.rs[leader].kill()  # right after the acknowledgement
        survivor = next(x for x in c.rs_addrs if x != leader)
        with StatusWatch(c, {d: {"DELETING", "<missing>"} for d in deleted}) as watch:
            c.wait_full_service(survivor)
            wait_past_take_office_grace(survivor, watch)
        assert watch.bad == [], watch.bad[:10]
        if a != extra[-1]:
            c.spawn_rs(leader, empty_server_check_interval="1h").wait_healthy(leader, 30)
            c.wait_state(leader, "NOT_MASTER", 10)
    assert all(c.statuses().get(a, "DELETING") == "DELETING" for a in extra)
    jobs = c.db("SELECT job_status FROM __all_rootservice_job WHERE job_type = 'DELETE_SERVER'")
    # Still running, or finished because the empty server was removed: never CANCELED.
    assert len(jobs) == 3 and {j for (j,) in jobs} <= {"INPROGRESS", "SUCCESS"}


# --- PostgreSQL restarted under load ------------------------------------------------------------


def test_postgresql_restart_under_load(
    procs: ProcSet, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """A private server (the session's shared one is never restarted). Statements keep coming
    while it restarts; the leader steps down (or survives), one RS takes office, nothing
    acknowledged is lost and the table converges."""
    pg = PgServer()
    try:
        pg.create_database("restart")
        c = HaCluster(procs, tmp_path, pg.url("restart"))
        try:
            c.start_all_rs()
            c.wait_leader()
            a1, *_ = c.bootstrap(3)
            c.ok(f"ALTER SYSTEM STOP SERVER '{a1}'")
            acked: list[int] = []
            tried: list[int] = []
            stop = threading.Event()

            def load() -> None:
                # Bounded: at most 600 statements.
                for n in range(30, 630):
                    if stop.is_set():
                        return
                    tried.append(n)
                    try:
                        resp = execute(
                            c.rs_addrs,
                            f"ALTER SYSTEM SET server_check_interval = '{n}s'",
                            5,
                            credentials=pki.credentials(),
                        )
                    except Exception:
                        continue
                    if resp.error.code == 0:
                        acked.append(n)
                    time.sleep(0.05)

            t = threading.Thread(target=load, daemon=True)
            t.start()
            try:
                wait_until(lambda: len(acked) >= 3, 20, message="statements flowing")
                before = len(acked)
                pg.restart()
                wait_until(lambda: len(acked) >= before + 3, 60, message="statements flowing again")
            finally:
                stop.set()
                t.join(30)
            leader = c.wait_leader()
            epoch, holder = c.lease()
            assert holder == leader
            record_property("epoch_after_restart", epoch)
            wait_until(lambda: set(c.statuses().values()) == {"ACTIVE"}, 30, message="converged")
            (value,) = c.db(
                "SELECT value FROM __all_sys_parameter WHERE name = 'server_check_interval'"
            )[0]
            stored = int(str(value).removesuffix("s"))
            # The last acknowledged value, or a later attempt whose answer was lost.
            assert stored in tried and stored >= acked[-1], (stored, acked[-3:])
            port = int(a1.rsplit(":", 1)[1])
            assert c.db("SELECT stop_time FROM __all_server WHERE svr_port = :p", p=port)[0][0] > 0
            assert sum(st in LEADER_STATES for st in c.states().values()) == 1
        finally:
            c.close()
    finally:
        pg.stop()


# --- SQLite: one RS only ------------------------------------------------------------------------


def test_sqlite_mode_is_single_rs(procs: ProcSet, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/rs.db"
    first_addr = f"127.0.0.1:{free_port()}"
    first = procs.start(rs_cmd(url, first_addr, tmp_path / "a", **RS_FLAGS), "rs-first")
    first.wait_healthy(first_addr, timeout_s=30)
    assert "SQLite mode: this is the only root service" in first.log_text()
    second = subprocess.run(
        rs_cmd(url, f"127.0.0.1:{free_port()}", tmp_path / "b", **RS_FLAGS),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 1
    assert "SQLite mode runs one root service only" in second.stderr
    m = metrics(first_addr)
    assert m is not None and m["state"] == "WAIT_BOOTSTRAP" and m["epoch"] == 1
