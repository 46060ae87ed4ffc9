"""Integration tests: real ``rootservice`` and ``observer-agent`` processes on 127.0.0.1
with short lease times, statements sent the way ``obadmin`` sends them, on SQLite and on
PostgreSQL (docs/design/; issue "Root service core")."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from sql.client import execute, result_rows
from tests.support import pki
from tests.support.cluster import Proc, ProcSet, agent_cmd, rs_cmd, wait_until
from tests.support.ports import free_port
from tests.support.timescale import scaled

pytestmark = pytest.mark.integration

LEASE = "2s"
AGENT_FLAGS = {"heartbeat_interval": "500ms", "rpc_timeout": "1s", "disk_probe_interval": "200ms"}


class Cluster:
    """One RS and its agents, started through the ``procs`` fixture."""

    def __init__(self, procs: ProcSet, tmp: Path, db_url: str) -> None:
        self.procs = procs
        self.tmp = tmp
        self.db_url = db_url
        self.rs_addr = f"127.0.0.1:{free_port()}"
        self.rs: Proc | None = None
        self.agents: dict[str, Proc] = {}
        self.zones: dict[str, str] = {}

    def start_rs(self, **flags: Any) -> Proc:
        opts: dict[str, Any] = {
            "lease_time": LEASE,
            # Scaled like lease_time (10s -> 2s): the product's 30s would hold leaders and
            # copies off an agent restarted past its lease for most of a test.
            "server_suspect_time": "6s",
            "heartbeat_interval": "500ms",
            "empty_server_check_interval": "1s",
            "allow_short_timings": True,
            "rpc_timeout": "1s",
        }
        opts.update(flags)
        self.rs = self.procs.start(rs_cmd(self.db_url, self.rs_addr, self.tmp / "rs", **opts), "rs")
        self.rs.wait_healthy(self.rs_addr, timeout_s=30)
        return self.rs

    def start_agent(self, zone: str, addr: str | None = None, name: str | None = None) -> str:
        addr = addr or f"127.0.0.1:{free_port()}"
        self.zones[addr] = zone
        name = name or f"agent-{addr.rsplit(':', 1)[1]}"
        data = self.tmp / name
        p = self.procs.start(
            agent_cmd(self.rs_addr, addr, free_port(), zone, data, **AGENT_FLAGS), name
        )
        p.wait_healthy(addr, timeout_s=30)
        self.agents[addr] = p
        return addr

    def data_dir(self, addr: str) -> Path:
        return self.tmp / f"agent-{addr.rsplit(':', 1)[1]}"

    def sql(self, statement: str) -> obrpc_pb2.SqlResponse:
        return execute(
            [self.rs_addr], statement, timeout_s=scaled(60), credentials=pki.credentials()
        )

    def ok(self, statement: str) -> list[list[Any]]:
        resp = self.sql(statement)
        assert resp.error.code == 0, f"{statement}: {resp.error.name} {resp.error.message}"
        return result_rows(resp)

    def error(self, statement: str) -> str:
        resp = self.sql(statement)
        assert resp.error.code != 0, f"{statement} was accepted"
        return resp.error.name

    def statuses(self) -> dict[str, str]:
        return {
            f"{ip}:{port}": st
            for ip, port, st in self.ok("SELECT svr_ip, svr_port, status FROM __all_server")
        }

    def metrics(self) -> dict[str, Any]:
        with pki.proven_channel(self.rs_addr) as ch:
            resp = obrpc_pb2_grpc.AdminServiceStub(ch).GetMetrics(
                obrpc_pb2.MetricsRequest(), timeout=scaled(5)
            )
        return json.loads(resp.json)  # type: ignore[no-any-return]

    def bootstrap(self, n: int = 3) -> list[str]:
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
def cluster(procs: ProcSet, tmp_path: Path, db_url: str) -> Cluster:
    return Cluster(procs, tmp_path, db_url)


def test_bootstrap_add_expire_recover_delete(cluster: Cluster) -> None:
    c = cluster
    c.start_rs()
    assert c.error("ALTER SYSTEM ADD SERVER '127.0.0.1:1' ZONE 'z1'") == "OB_RS_NOT_MASTER"
    a1, a2, a3 = c.bootstrap()
    assert c.error(f"ALTER SYSTEM BOOTSTRAP ZONE 'z1' SERVER '{a1}'") == "OB_INIT_TWICE"
    rows = c.ok(
        "SELECT id, zone, status, with_rootserver FROM oceanbase.DBA_OB_SERVERS ORDER BY id"
    )
    assert rows == [[1, "z1", "ACTIVE", "NO"], [2, "z2", "ACTIVE", "NO"], [3, "z3", "ACTIVE", "NO"]]
    assert c.ok("SELECT zone, status, region FROM DBA_OB_ZONES") == [
        ["z1", "ACTIVE", "r1"],
        ["z2", "ACTIVE", "r1"],
        ["z3", "ACTIVE", "r1"],
    ]

    # ADD SERVER: a fourth agent in z1, refused when the zone is wrong, then added.
    a4 = c.start_agent("z1")
    assert c.error(f"ALTER SYSTEM ADD SERVER '{a4}' ZONE 'z2'") == "OB_SERVER_ZONE_NOT_MATCH"
    # The agent's own zone is checked before the statement's zone exists (OceanBase 4.3.3,
    # docs/ZONES.md), so an unknown zone is a mismatch too for an agent started in z1.
    assert c.error(f"ALTER SYSTEM ADD SERVER '{a4}' ZONE 'nozone'") == "OB_SERVER_ZONE_NOT_MATCH"
    c.ok(f"ALTER SYSTEM ADD SERVER '{a4}' ZONE 'z1'")
    assert c.error(f"ALTER SYSTEM ADD SERVER '{a4}' ZONE 'z1'") == "OB_ENTRY_EXIST"
    wait_until(lambda: c.statuses().get(a4) == "ACTIVE", 15, message="added server ACTIVE")
    assert c.ok(f"SELECT id FROM __all_server WHERE svr_port = {a4.rsplit(':', 1)[1]}") == [[4]]

    # STOP / START / ISOLATE.
    c.ok(f"ALTER SYSTEM STOP SERVER '{a1}'")
    stop = c.ok(f"SELECT stop_time FROM __all_server WHERE svr_port = {a1.rsplit(':', 1)[1]}")[0][0]
    assert stop > 0
    assert c.error(f"ALTER SYSTEM STOP SERVER '{a2}'") == "OB_STOP_SERVER_IN_MULTIPLE_ZONES"
    c.ok(f"ALTER SYSTEM START SERVER '{a1}'")
    c.ok(f"ALTER SYSTEM ISOLATE SERVER '{a2}'")
    c.ok(f"ALTER SYSTEM START SERVER '{a2}'")
    assert all(r[0] == 0 for r in c.ok("SELECT stop_time FROM __all_server"))

    # Kill an agent: INACTIVE after the lease; restart it: ACTIVE again.
    c.agents[a3].kill()
    wait_until(lambda: c.statuses().get(a3) == "INACTIVE", 15, message="killed agent INACTIVE")
    assert (
        c.ok(f"SELECT last_offline_time FROM __all_server WHERE svr_port = {a3.rsplit(':', 1)[1]}")[
            0
        ][0]
        > 0
    )
    p = c.procs.start(
        agent_cmd(c.rs_addr, a3, free_port(), "z3", c.data_dir(a3), **AGENT_FLAGS), "agent-3-again"
    )
    p.wait_healthy(a3, timeout_s=30)
    wait_until(lambda: c.statuses().get(a3) == "ACTIVE", 15, message="restarted agent ACTIVE")

    # DELETE SERVER: no units yet, so the empty-server checker removes it at once.
    c.ok(f"ALTER SYSTEM DELETE SERVER '{a4}'")
    wait_until(lambda: a4 not in c.statuses(), 15, message="deleted server gone")
    assert c.ok("SELECT job_type, job_status FROM __all_rootservice_job") == [
        ["DELETE_SERVER", "SUCCESS"]
    ]
    # Its agent is refused from now on and cannot come back with its old identity...
    wait_until(
        lambda: "OB_SERVER_NOT_IN_WHITE_LIST" in c.agents[a4].log_text(),
        10,
        message="deleted agent refused",
    )
    assert c.error(f"ALTER SYSTEM ADD SERVER '{a4}' ZONE 'z1'") == "OB_OP_NOT_ALLOW"
    # ...until its data directory is wiped: then it joins with a new id (ids are never reused).
    c.agents[a4].stop()
    shutil.rmtree(c.data_dir(a4))
    p4 = c.procs.start(
        agent_cmd(c.rs_addr, a4, free_port(), "z1", c.data_dir(a4), **AGENT_FLAGS), "agent-4-wiped"
    )
    p4.wait_healthy(a4, timeout_s=30)
    c.ok(f"ALTER SYSTEM ADD SERVER '{a4}' ZONE 'z1'")
    wait_until(lambda: c.statuses().get(a4) == "ACTIVE", 15, message="re-added server ACTIVE")
    assert c.ok(f"SELECT id FROM __all_server WHERE svr_port = {a4.rsplit(':', 1)[1]}") == [[5]]

    events = [
        r[0]
        for r in c.ok("SELECT event FROM __all_rootservice_event_history WHERE module = 'server'")
    ]
    for e in (
        "add_server",
        "online",
        "stop_server",
        "start_server",
        "isolate_server",
        "lease_expire",
        "delete_server",
        "finish_delete_server",
    ):
        assert e in events, e


# One database: the refusal is the lease path's, in memory; what the whitelist writes is
# checked on both by tests/unit/rootservice/servers (the suite's time).
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_non_whitelisted_agent_is_refused_and_never_added(cluster: Cluster) -> None:
    c = cluster
    c.start_rs()
    c.bootstrap(1)
    before = c.metrics()["heartbeats_refused_total"]  # the first agent's pre-BOOTSTRAP ones
    stranger = c.start_agent("z1")
    # The agent logs a refusal after the RS counted it: wait for the line, then for a
    # second refusal of the stranger.
    wait_until(
        lambda: "OB_SERVER_NOT_IN_WHITE_LIST" in c.agents[stranger].log_text(),
        15,
        message="stranger's refusal logged",
    )
    wait_until(
        lambda: c.metrics()["heartbeats_refused_total"] >= before + 2,
        15,
        message="stranger refused twice",
    )
    # Refused again and again (backing off) but logged once a minute.
    assert c.agents[stranger].log_text().count("OB_SERVER_NOT_IN_WHITE_LIST") == 1
    assert stranger not in c.statuses()
    assert c.metrics()["servers"] == 1
    assert c.agents[stranger].alive  # it keeps trying


def test_the_rs_runs_with_its_collector_and_lock_switch_settings(cluster: Cluster) -> None:
    # rootservice.cli.tune_gc / tune_switch_interval, as the started process reports them.
    rs = cluster.start_rs()
    line = "interpreter: young collections every 50000 allocations, lock switch interval 1 ms"
    wait_until(lambda: line in rs.log_text(), 10, message="the interpreter settings logged")


def test_rs_restart_reloads_whitelist_and_needs_heartbeats(cluster: Cluster) -> None:
    c = cluster
    c.start_rs()
    a1, a2, a3 = c.bootstrap()
    c.agents[a3].kill()
    assert c.rs is not None
    c.rs.kill()
    c.start_rs()
    # Nobody is alive on load; the two live agents come back through heartbeats, the dead
    # one never does.
    wait_until(lambda: c.metrics()["alive"] == 2, 20, message="two servers alive after restart")
    m = c.metrics()
    assert m["servers"] == 3 and m["state"] == "FULL_SERVICE"
    wait_until(
        lambda: c.statuses() == {a1: "ACTIVE", a2: "ACTIVE", a3: "INACTIVE"},
        20,
        message="table converged",
    )


def test_acknowledged_delete_survives_kill_9(cluster: Cluster) -> None:
    c = cluster
    c.start_rs(empty_server_check_interval="1h")
    c.bootstrap(1)
    extra = [c.start_agent("z1") for _ in range(3)]
    for a in extra:
        c.ok(f"ALTER SYSTEM ADD SERVER '{a}' ZONE 'z1'")
    for a in extra:
        c.ok(f"ALTER SYSTEM DELETE SERVER '{a}'")
        assert c.rs is not None
        c.rs.kill()  # right after the acknowledgement
        c.start_rs(empty_server_check_interval="1h")
        assert c.statuses().get(a, "DELETING") == "DELETING", (
            f"{a} came back after an acknowledged DELETE"
        )
    # Removed or still DELETING, never NORMAL, also once the RS has settled.
    wait_until(lambda: c.metrics()["state"] == "FULL_SERVICE", 10)
    assert all(c.statuses().get(a, "DELETING") == "DELETING" for a in extra)


def test_data_disk_error_stops_the_server_and_recovery_starts_it(cluster: Cluster) -> None:
    c = cluster
    c.start_rs()
    a1, _, _ = c.bootstrap()
    port = a1.rsplit(":", 1)[1]
    flag = c.data_dir(a1) / "FAULT_DATA_DISK_ERROR"
    flag.write_text("test\n")
    wait_until(
        lambda: c.ok(f"SELECT stop_time FROM __all_server WHERE svr_port = {port}")[0][0] > 0,
        15,
        message="auto stop",
    )
    # The event comes through the persistence queue (heartbeat path) while the stop is
    # write-through, so the event may land one flush later.
    wait_until(
        lambda: c.ok(
            "SELECT event FROM __all_rootservice_event_history WHERE event = 'data_disk_error'"
        ),
        5,
        message="data_disk_error event",
    )
    flag.unlink()
    wait_until(
        lambda: c.ok(f"SELECT stop_time FROM __all_server WHERE svr_port = {port}")[0][0] == 0,
        15,
        message="auto start",
    )


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a command line to completion (60 s at most), capturing its text output."""
    return subprocess.run(args, capture_output=True, text=True, timeout=scaled(60))


def obadmin(rs_addr: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "sql.obadmin", *pki.obadmin_flags(), "--rs", rs_addr, *args])


# One database, the embedded default: obadmin sees the RS's answers, not its database.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_obadmin_cli_against_a_real_rs(cluster: Cluster) -> None:
    c = cluster
    c.start_rs()
    c.bootstrap(1)
    ok = obadmin(c.rs_addr, "--format", "json", "-e", "SELECT id, zone, status FROM DBA_OB_SERVERS")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == [{"id": 1, "zone": "z1", "status": "ACTIVE"}]
    bad = obadmin(c.rs_addr, "-e", "ALTER SYSTEM DELETE SERVER '10.0.0.1:2882'")
    assert bad.returncode == 1
    assert bad.stderr.startswith("ERROR 4630 (HY000): OB_SERVER_NOT_IN_WHITE_LIST")
    syntax = obadmin(c.rs_addr, "-e", "ALTER SYSTEM FROB SERVER 'x'")
    assert syntax.returncode == 1
    # FROB reads as a parameter name (ALTER SYSTEM [SET] name = value): the error is at SERVER.
    assert "ERROR 1064 (42000)" in syntax.stderr and "near 'SERVER 'x''" in syntax.stderr


def test_unreachable_database_at_start_exits_nonzero(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing"
    r = run(rs_cmd(url, f"127.0.0.1:{free_port()}", tmp_path))
    assert r.returncode == 1
    assert "cannot open the system-table database" in r.stderr and "nothing" in r.stderr


def test_invalid_settings_exit_2(tmp_path: Path) -> None:
    r = run(
        rs_cmd(f"sqlite:///{tmp_path}/x.db", f"127.0.0.1:{free_port()}", tmp_path, lease_time="1s")
    )
    assert r.returncode == 2
    assert "lease_time (1s) must be greater than heartbeat_interval (2s)" in r.stderr


def test_database_outage_steps_the_leader_down_until_it_takes_office_again(
    procs: ProcSet, tmp_path: Path
) -> None:
    """PostgreSQL stops under a running RS (a private server, so the session's shared one is
    never stopped). The RS holds its leadership as a lease in the database: its renewals
    fail, and once the lease is no longer trusted (``lease_time - margin`` after the last
    good one) it steps down, so it writes nothing, drops its memory and refuses statements
    and heartbeats (OB_RS_NOT_MASTER; OB_ERR_SYS for a statement
    caught before the renewal). Once the database is back it takes office again with a new
    epoch and a fresh load: what was acknowledged before the outage is kept, the server that
    died meanwhile becomes INACTIVE after the take-office grace (event ``lease_expire``), the
    live one is ACTIVE, and statements work again."""
    from tests.support.pgserver import PgServer

    pg = PgServer()
    try:
        pg.create_database("outage")
        c = Cluster(procs, tmp_path, pg.url("outage"))
        c.start_rs()
        a1, a2 = c.bootstrap(2)
        c.ok(f"ALTER SYSTEM STOP SERVER '{a1}'")
        epoch = c.metrics()["epoch"]
        pg.outage()
        resp = c.sql(f"ALTER SYSTEM START SERVER '{a1}'")
        assert resp.error.name in ("OB_ERR_SYS", "OB_RS_NOT_MASTER"), resp.error.message
        c.agents[a2].kill()
        wait_until(
            lambda: c.metrics()["state"] == "NOT_MASTER",
            15,
            message="the leader stepped down once its failed renewals used up its lease",
        )
        m = c.metrics()
        assert m["servers"] == 0 and m["rs_step_down_total"] >= 1
        assert c.error(f"ALTER SYSTEM START SERVER '{a1}'") == "OB_RS_NOT_MASTER"
        pg.recover()
        wait_until(lambda: c.metrics()["state"] == "FULL_SERVICE", 30, message="in office again")
        assert c.metrics()["epoch"] > epoch
        wait_until(
            lambda: c.statuses() == {a1: "ACTIVE", a2: "INACTIVE"}, 30, message="table caught up"
        )
        port1 = a1.rsplit(":", 1)[1]
        assert c.ok(f"SELECT stop_time FROM __all_server WHERE svr_port = {port1}")[0][0] > 0
        events = [
            r[0]
            for r in c.ok(
                "SELECT event FROM __all_rootservice_event_history WHERE module = 'server'"
            )
        ]
        assert "lease_expire" in events
        c.ok(f"ALTER SYSTEM START SERVER '{a1}'")  # admin statements work again
        assert c.ok(f"SELECT stop_time FROM __all_server WHERE svr_port = {port1}") == [[0]]
    finally:
        pg.stop()


def test_a_database_restart_shorter_than_the_lease_costs_no_step_down(
    procs: ProcSet, tmp_path: Path
) -> None:
    """PostgreSQL restarted under a running leader (a private server) whose lease outlasts
    the restart (``lease_time`` 30 s: trusted for 24 s after each renewal). Its renewals
    fail while the database is down, each counted, and the first one after the restart
    succeeds: the same epoch, no step-down, no take-office, and statements work again."""
    from tests.support.pgserver import PgServer

    pg = PgServer()
    try:
        pg.create_database("restart")
        c = Cluster(procs, tmp_path, pg.url("restart"))
        c.start_rs(lease_time="30s")
        c.bootstrap(1)
        before = c.metrics()
        assert before["state"] == "FULL_SERVICE"
        pg.outage()
        wait_until(
            lambda: c.metrics().get("rs_lease_renewal_failures_total", 0) >= 1,
            20,
            message="a renewal failed while the database was down",
        )
        pg.recover()
        renewed = c.metrics().get("rs_lease_renewals_total", 0)
        wait_until(
            lambda: c.metrics().get("rs_lease_renewals_total", 0) > renewed,
            30,
            message="a renewal after the restart",
        )
        m = c.metrics()
        assert m["state"] == "FULL_SERVICE" and m["epoch"] == before["epoch"]
        assert m.get("rs_step_down_total", 0) == before.get("rs_step_down_total", 0)
        assert m.get("rs_take_office_total") == before.get("rs_take_office_total")
        c.ok("ALTER SYSTEM SET server_check_interval = '42s'")
    finally:
        pg.stop()


# One database: both refusals come before the statement reaches it.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_one_megabyte_statement_is_refused_cleanly(cluster: Cluster) -> None:
    c = cluster
    c.start_rs()
    c.bootstrap(1)
    assert (
        c.error("ALTER SYSTEM ADD SERVER '" + "x" * 1_000_000 + "' ZONE 'z1'")
        == "OB_INVALID_ARGUMENT"
    )
    assert (
        c.error("SELECT * FROM __all_server WHERE zone = '" + "z" * 5_000_000 + "'")
        == "ER_NET_PACKET_TOO_LARGE"
    )
    # Beyond what gRPC accepts at all: still a clean refusal, not a crash.
    assert c.error("SELECT '" + "z" * 7_000_000 + "'") == "ER_NET_PACKET_TOO_LARGE"
    assert c.metrics()["servers"] == 1


def test_bootstrap_times_out_when_a_server_never_serves(cluster: Cluster, procs: ProcSet) -> None:
    """The agent answers the RS (empty check, heartbeat request) but its own lease loop
    talks to another address, so it never starts service: BOOTSTRAP gives up with
    OB_WAIT_ALL_RS_ONLINE_TIMEOUT and keeps nothing; it then succeeds once the agent can
    reach the RS."""
    c = cluster
    c.start_rs(bootstrap_timeout="3s", bootstrap_in_service_timeout="2s")
    addr = f"127.0.0.1:{free_port()}"
    nowhere = f"127.0.0.1:{free_port()}"
    lost = procs.start(
        agent_cmd(nowhere, addr, free_port(), "z1", c.tmp / "lost", **AGENT_FLAGS), "lost-agent"
    )
    lost.wait_healthy(addr, timeout_s=30)
    resp = c.sql(f"ALTER SYSTEM BOOTSTRAP ZONE 'z1' SERVER '{addr}'")
    assert resp.error.name == "OB_WAIT_ALL_RS_ONLINE_TIMEOUT", resp.error.message
    assert c.ok("SELECT * FROM __all_server") == [] and c.ok("SELECT * FROM __all_zone") == []
    assert c.metrics()["state"] == "WAIT_BOOTSTRAP"
    lost.stop()
    c.agents[addr] = procs.start(
        agent_cmd(c.rs_addr, addr, free_port(), "z1", c.tmp / "lost", **AGENT_FLAGS), "found-agent"
    )
    c.agents[addr].wait_healthy(addr, timeout_s=30)
    c.ok(f"ALTER SYSTEM BOOTSTRAP ZONE 'z1' SERVER '{addr}'")
    wait_until(lambda: c.statuses() == {addr: "ACTIVE"}, 15, message="bootstrapped after the retry")
