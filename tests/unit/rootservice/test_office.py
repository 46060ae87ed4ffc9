"""Office built from its collaborators, without a RootService (docs/design/ha.md#taking-office;
rootservice.office): taking office before and after BOOTSTRAP, do_restart, stepping down."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import sqlalchemy as sa

from rootservice.db import event_repo, param_repo
from rootservice.ha.term import RsState
from rootservice.office import Office
from rootservice.parameters import Parameters
from rootservice.servers.ports import inline
from rootservice.servers.status import HeartbeatStatus
from rootservice.tasks import FnTask
from rootservice.timers import Schedule, Timers
from tests.support.harness import SEEDED
from tests.support.server_parts import Parts, make_parts, seed

S = 1_000_000


class Requests:
    def __init__(self) -> None:
        self.asked: list[list[str]] = []
        self.unless: Callable[[str], bool] | None = None

    def request_heartbeats(
        self, servers: Iterable[str], *, unless: Callable[[str], bool] | None = None
    ) -> int:
        self.asked.append(sorted(servers))
        self.unless = unless
        return 0


class Tasks:
    def leader_tasks(self) -> Schedule:
        return [(FnTask("t1", lambda: None), S), (FnTask("t2", lambda: None), 2 * S)]


class Listener:
    def parameters_changed(self, names: set[str]) -> None:
        pass


def make_office(p: Parts, forgot: list[str]) -> tuple[Office, Timers, Requests]:
    timers = Timers(p.clock, p.metrics, enabled=True)
    timers.scheduler.start(paused=True)  # registered, never run
    requests = Requests()
    parameters = Parameters(p.settings, set(), p.term, p.store, p.clock, Listener())
    office = Office(
        term=p.term,
        store=p.store,
        clock=p.clock,
        metrics=p.metrics,
        parameters=parameters,
        identity=p.identity,
        loader=p.loader,
        whitelist=p.whitelist,
        zones=p.zones,
        persist=p.persist,
        grace=p.grace,
        heartbeats=requests,
        background=inline,
        timers=timers,
        tasks=Tasks(),
        forget=[lambda: forgot.append("reports")],
        address=lambda: "127.0.0.1:2881",
    )
    return office, timers, requests


def test_not_bootstrapped_waits_for_bootstrap(engine: sa.Engine, tmp_path: Path) -> None:
    p = make_parts(engine, tmp_path)
    office, timers, requests = make_office(p, [])
    try:
        office.take_office(p.term.epoch)
        assert p.term.state is RsState.WAIT_BOOTSTRAP and not p.identity.bootstrapped
        assert timers.registered() == set() and requests.asked == []
    finally:
        timers.shutdown()


def test_take_office_loads_starts_timers_asks_heartbeats(engine: sa.Engine, tmp_path: Path) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    with p.store.txn() as conn:
        param_repo.set_param(conn, param_repo.PARAM_BOOTSTRAP_TIME, "1", 1)
        param_repo.set_param(conn, param_repo.PARAM_RS_LIST, "10.0.0.9:2882", 1)
        param_repo.set_param(conn, "lease_time", "12s", 1)
    p.whitelist.clear()
    forgot: list[str] = []
    office, timers, requests = make_office(p, forgot)
    try:
        office.take_office(p.term.epoch)
        assert p.term.state is RsState.FULL_SERVICE and p.term.in_service
        assert p.settings.lease_time == 12 * S  # parameters re-read on taking office
        assert p.identity.rs_list == ["10.0.0.9:2882", "127.0.0.1:2881"]
        assert p.whitelist.counts()["servers"] == len(SEEDED)
        assert p.grace.no_expire_until == p.clock.now_us() + 12 * S
        assert timers.registered() == {"t1", "t2"}
        assert requests.asked == [sorted(s for s, _ in SEEDED)]
        # "Not alive" is judged again at each server's turn: one back by then is not asked.
        assert requests.unless is not None
        first = sorted(s for s, _ in SEEDED)[0]
        assert not requests.unless(first)
        p.whitelist.records[first].hb_status = HeartbeatStatus.ALIVE  # its heartbeat came
        assert requests.unless(first)
        with engine.connect() as conn:
            assert (
                param_repo.load_params(conn)["rootservice_list"] == "10.0.0.9:2882;127.0.0.1:2881"
            )
            taken = (
                conn.execute(
                    sa.text(
                        "SELECT value1 FROM __all_rootservice_event_history WHERE event = 'rs_take_office'"
                    )
                )
                .scalars()
                .all()
            )
        assert taken == [str(p.term.epoch)]

        p.persist.add_event(event_repo.Event(p.clock.now_us(), "test", "queued"))
        assert p.term.request_step_down("test")
        office.step_down("test")
        assert p.term.state is RsState.NOT_MASTER and not p.term.in_service
        assert timers.registered() == set() and forgot == ["reports"]
        assert p.whitelist.counts()["servers"] == 0 and p.zones.all() == []
        assert p.persist.depth() == 0
    finally:
        timers.shutdown()
