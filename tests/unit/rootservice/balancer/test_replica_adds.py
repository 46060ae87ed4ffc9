"""Adding the replicas a log stream lost with its servers (RECOVER LS, FORCE DELETE SERVER):
the shortages found from the layout and the reports, their copy rows through CopyTasks,
and the ADD_REPLICA jobs and waiting events, on both databases."""

from __future__ import annotations

import json

import sqlalchemy as sa

from obcommon.clock import FakeClock
from rootservice.balancer.copy_tasks import CopyTasks
from rootservice.balancer.replica_adds import (
    JOB_TYPE,
    REASON_ADD,
    ReplicaAdds,
    copy_rows,
)
from rootservice.config import RsSettings
from rootservice.db import job_repo
from rootservice.metrics import Metrics
from rootservice.tenants.topology import LsPlan
from tests.unit.rootservice.balancer.fakes import (
    FakeEvents,
    FakeLs,
    FakeStore,
    FakeWhitelist,
    NoDbStore,
    info,
    server,
)

# A1, A2: the lost servers of z1 / z2 (buried: DELETING, not alive); S: the survivor in z3;
# N1, N2: new servers of z1 / z2.
A1, A2, S, N1, N2 = (f"127.0.0.1:310{i}" for i in range(1, 6))
KEY = (1002, 1001)
NO_ROOM = "no server in zone with room"


def three_zones(z1: str, z2: str) -> LsPlan:
    """The LS's units: ``z1`` in z1 (unit 1), ``z2`` in z2 (unit 2), S in z3 (unit 3)."""
    return LsPlan(KEY, {z1: ("z1", 1), z2: ("z2", 2), S: ("z3", 3)}, {"z1": 0}, "z1")


class World:
    """The survivor S leads KEY alone; A1 and A2 are buried; N1 and N2 may be added."""

    def __init__(self, store: object = None) -> None:
        self.clock = FakeClock()
        self.events = FakeEvents()
        self.ls = FakeLs()
        self.servers = FakeWhitelist(
            server(A1, "z1", alive=False, deleting=True),
            server(A2, "z2", alive=False, deleting=True),
            server(S, "z3"),
        )
        self.ls.plans[KEY] = three_zones(A1, A2)
        self.ls.report_table[S] = {KEY: info(KEY, [S], leader=S)}
        self.ls.leaders[KEY] = S
        self.unplaced = {1: NO_ROOM, 2: NO_ROOM}
        self.adds = ReplicaAdds(
            servers=self.servers,
            ls=self.ls,
            unplaced=lambda: self.unplaced,
            store=store or NoDbStore(),  # type: ignore[arg-type]
            events=self.events,
            clock=self.clock,
        )

    def add_servers(self) -> None:
        """N1 and N2 added and the units moved to them."""
        self.servers.servers[N1] = server(N1, "z1")
        self.servers.servers[N2] = server(N2, "z2")
        self.ls.plans[KEY] = three_zones(N1, N2)
        self.unplaced = {}


def test_a_survivor_alone_waits_for_servers_and_says_why_by_zone() -> None:
    w = World()
    [short], undecided = w.adds.shortages()
    assert undecided == set()
    assert (short.key, short.members, short.wanted, dict(short.adds)) == (KEY, (S,), 3, {})
    assert set(short.waiting) == {"z1", "z2"}
    assert A1 in short.waiting["z1"] and NO_ROOM in short.waiting["z1"]
    assert "being deleted" in short.waiting["z2"]
    assert copy_rows([short]) == []


def test_once_the_units_moved_a_copy_row_goes_to_each_new_server() -> None:
    w = World()
    w.add_servers()
    [short], _ = w.adds.shortages()
    assert dict(short.adds) == {"z1": N1, "z2": N2} and not short.waiting
    rows = copy_rows([short])
    assert [(r["dest_svr_port"], r["src_svr_port"], r["old_svr_ip"]) for r in rows] == [
        (3104, 3103, ""),
        (3105, 3103, ""),
    ]
    assert {r["reason"] for r in rows} == {REASON_ADD}


def test_no_shortage_when_every_zone_has_a_member_or_the_ls_has_no_leader() -> None:
    w = World()
    w.add_servers()
    # A migration in flight (A1 still a member in z1, N1 its unit's server): not an add.
    w.servers.servers[A1] = server(A1, "z1")
    w.ls.report_table[S] = {KEY: info(KEY, [A1, A2, S], leader=S)}
    w.servers.servers[A2] = server(A2, "z2")
    assert w.adds.shortages() == ([], set())
    # Leaderless: not judged, undecided (its job, if any, stays open).
    w.ls.report_table[S] = {KEY: info(KEY, [S])}
    w.ls.leaders.clear()
    assert w.adds.shortages() == ([], {KEY})


def test_a_stopped_unit_server_waits_with_its_reason() -> None:
    w = World()
    w.add_servers()
    w.servers.servers[N2].stop_time = 1
    [short], _ = w.adds.shortages()
    assert dict(short.adds) == {"z1": N1}
    assert short.waiting == {"z2": f"the unit's server {N2} is stopped"}


def test_the_copy_engine_hands_out_an_add_and_ends_it_when_the_replica_joined() -> None:
    w = World()
    w.add_servers()
    copies = CopyTasks(
        servers=w.servers,
        ls=w.ls,
        events=w.events,
        store=NoDbStore(),
        clock=w.clock,
        settings=RsSettings(migration_concurrency_per_server=2, rpc_timeout="200ms"),
        metrics=Metrics(),
    )
    short, _ = w.adds.shortages()
    assert copies.hand_out(copy_rows(short)) == 2
    assert sorted(srv for srv, _ in w.ls.applied) == [N1, N2]
    assert [spec.copy_from for _, [spec] in w.ls.applied] == [S, S]
    added = w.events.named("add_replica")
    assert sorted(dict(e.values)["to"] for e in added) == [N1, N2]
    assert w.events.named("migrate_replica") == []
    # Not over while the copies build (the old replica "" is never a member).
    for n in (N1, N2):
        w.ls.report_table[n] = {KEY: info(KEY, [S], in_service=False, copy_from=S)}
    assert copies.hand_out(copy_rows(w.adds.shortages()[0])) == 0 and len(copies) == 2
    # Built and made members: the tasks end.
    for n in (S, N1, N2):
        w.ls.report_table[n] = {KEY: info(KEY, [S, N1, N2], leader=S)}
    assert w.adds.shortages() == ([], set())
    assert copies.hand_out([]) == 0 and len(copies) == 0


def _jobs(engine: sa.Engine) -> list[tuple[str, int | None, dict[str, object]]]:
    t = sa.table(
        "__all_rootservice_job",
        sa.column("job_status"),
        sa.column("tenant_id"),
        sa.column("extra_info"),
        sa.column("job_type"),
        sa.column("job_id"),
    )
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(t.c.job_status, t.c.tenant_id, t.c.extra_info)
            .where(t.c.job_type == JOB_TYPE)
            .order_by(t.c.job_id)
        ).all()
    return [(r[0], r[1], json.loads(r[2])) for r in rows]


def test_one_job_per_short_ls_one_event_per_reason_and_success_when_whole(
    engine: sa.Engine,
) -> None:
    w = World(FakeStore(engine))
    short, undecided = w.adds.shortages()
    assert w.adds.record(short, undecided) == 1
    [(status, tenant, extra)] = _jobs(engine)
    assert (status, tenant, extra["ls_id"], extra["replicas"], extra["wanted"]) == (
        "INPROGRESS",
        1002,
        1001,
        1,
        3,
    )
    assert "zone z1" in str(extra["waiting"]) and NO_ROOM in str(extra["waiting"])
    [said] = w.events.named("add_replica_waiting")
    assert dict(said.values)["ls"] == "1002.1001"
    # The same shortage again: nothing written, nothing said.
    assert w.adds.record(*w.adds.shortages()) == 0
    assert len(w.events.named("add_replica_waiting")) == 1
    # A new leader reads the open job back: no second job, no second event for it.
    again = World(FakeStore(engine))
    assert again.adds.has_open()
    assert again.adds.record(*again.adds.shortages()) == 0
    assert len(_jobs(engine)) == 1
    # Copies under way: the job says so; leaderless for a while: it stays open.
    w.add_servers()
    assert w.adds.record(*w.adds.shortages()) == 1
    assert _jobs(engine)[0][2]["copying_to"] == {"z1": N1, "z2": N2}
    assert _jobs(engine)[0][2]["waiting"] == ""
    w.ls.leaders.clear()
    w.ls.report_table[S] = {KEY: info(KEY, [S])}
    assert w.adds.record(*w.adds.shortages()) == 0
    assert _jobs(engine)[0][0] == "INPROGRESS"
    # Whole again: SUCCESS, and nothing open any more.
    w.ls.leaders[KEY] = S
    for n in (S, N1, N2):
        w.ls.report_table[n] = {KEY: info(KEY, [S, N1, N2], leader=S)}
    assert w.adds.record(*w.adds.shortages()) == 1
    assert [j[0] for j in _jobs(engine)] == ["SUCCESS"]
    assert not w.adds.has_open()
    with engine.connect() as conn:
        assert job_repo.inprogress_jobs(conn, JOB_TYPE) == []
