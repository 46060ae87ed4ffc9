"""The rolling upgrade's checker (tests/support/mixed_version.py): fed the samples it exists
to judge, without processes. A server INACTIVE outside the zone being upgraded is counted;
one of the zone under upgrade is not, also when that zone's upgrade ends while the sample's
queries are on their way (the race a clean-clone run reported as "INACTIVE while upgrading
None")."""

from __future__ import annotations

import threading
from collections.abc import Callable

from obcommon.proto import obrpc_pb2
from tests.support.mixed_version import Checker, Counts

Z1 = "127.0.0.1:3001"
Z3 = "127.0.0.1:3003"


def _rows(*rows: tuple[object, ...]) -> obrpc_pb2.SqlResponse:
    def cell(v: object) -> obrpc_pb2.Cell:
        return (
            obrpc_pb2.Cell(int_value=v)
            if isinstance(v, int)
            else obrpc_pb2.Cell(string_value=str(v))
        )

    return obrpc_pb2.SqlResponse(rows=[obrpc_pb2.Row(cells=[cell(v) for v in r]) for r in rows])


class FakeCluster:
    """What :class:`Checker` reads of a MixedCluster: ``sql`` answers from ``statuses``
    (server -> (zone, status)), with every log stream led by Z1; ``on_query`` runs after the
    first query (the upgrade moving on meanwhile)."""

    def __init__(self, statuses: dict[str, tuple[str, str]]) -> None:
        self.statuses = statuses
        self.counts = Counts()
        self._lock = threading.Lock()
        self.current_stage = "zone z3 to the current release"
        self.primary_zone = "z1"
        self.on_query: Callable[[], None] = lambda: None

    def sql(self, statement: str, timeout_s: float = 60.0) -> obrpc_pb2.SqlResponse:
        if "__all_server" in statement:
            resp = _rows(*[(*a.split(":"), z, st) for a, (z, st) in self.statuses.items()])
            self.on_query()
            return resp
        ip, port = Z1.split(":")
        return _rows((1001, 1, ip, int(port), "LEADER"))


def test_inactive_outside_the_upgraded_zone_is_counted() -> None:
    c = FakeCluster({Z1: ("z1", "ACTIVE"), Z3: ("z3", "INACTIVE")})
    checker = Checker(c)  # type: ignore[arg-type]
    checker.zone = "z2"
    checker.sample()
    assert c.counts.samples == 1 and c.counts.inactive == 1
    assert c.counts.inactive_what[0].startswith(f"{Z3} (z3) INACTIVE while upgrading z2 at ")
    assert "in stage 'zone z3 to the current release'" in c.counts.inactive_what[0]


def test_inactive_in_the_upgraded_zone_is_not_counted() -> None:
    c = FakeCluster({Z1: ("z1", "ACTIVE"), Z3: ("z3", "INACTIVE")})
    checker = Checker(c)  # type: ignore[arg-type]
    checker.zone = "z3"
    checker.sample()
    assert (c.counts.samples, c.counts.inactive) == (1, 0)


def test_a_zone_finishing_during_the_sample_is_not_counted_against_the_others() -> None:
    # The statuses were read while z3 was upgrading; the upgrade then saw its servers
    # ACTIVE and reset the zone before the checker looked at it.
    c = FakeCluster({Z1: ("z1", "ACTIVE"), Z3: ("z3", "INACTIVE")})
    checker = Checker(c)  # type: ignore[arg-type]
    checker.zone = "z3"

    def finished() -> None:
        checker.zone = None

    c.on_query = finished
    checker.sample()
    assert (c.counts.samples, c.counts.inactive) == (1, 0)
    # Between zones, nothing is exempt.
    c.on_query = lambda: None
    checker.sample()
    assert (c.counts.samples, c.counts.inactive) == (2, 1)


def test_pause_waits_for_the_sample_in_flight() -> None:
    # The only root service is stopped as soon as pause() returns: a sample begun before the
    # pause must have sent both its statements by then (a clean-clone run counted the second
    # one's "connection refused" as an unclear answer).
    c = FakeCluster({Z1: ("z1", "ACTIVE")})
    checker = Checker(c, interval_s=0.01)  # type: ignore[arg-type]
    in_flight, proceed, stopped = threading.Event(), threading.Event(), threading.Event()
    second_saw_stopped: list[bool] = []

    def first_answered() -> None:
        if not in_flight.is_set():
            in_flight.set()
            assert proceed.wait(30)

    c.on_query = first_answered
    plain_sql = c.sql

    def sql(statement: str, timeout_s: float = 60.0) -> obrpc_pb2.SqlResponse:
        if "DBA_OB_LS_LOCATIONS" in statement and not second_saw_stopped:
            # Without the wait in pause() the stop comes at once; with it, never while
            # this statement is on its way (the bound is only for that second case).
            second_saw_stopped.append(stopped.wait(0.5))
        return plain_sql(statement, timeout_s)

    c.sql = sql  # type: ignore[method-assign]

    def stop_the_root_service() -> None:
        checker.pause()
        stopped.set()

    checker.start()
    try:
        assert in_flight.wait(30)
        stopper = threading.Thread(target=stop_the_root_service)
        stopper.start()
        assert checker.paused.wait(30)
        proceed.set()
        stopper.join(30)
        assert stopped.is_set()
        assert second_saw_stopped == [False]
    finally:
        proceed.set()
        checker.finish()
