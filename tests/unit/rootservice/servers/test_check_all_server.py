"""CheckAllServerTask (docs/design/servers.md#memory-and-the-table). Unit tests on an in-process RS with a FakeClock, on
SQLite and PostgreSQL."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import sqlalchemy as sa

from rootservice.app import RootService
from rootservice.servers.check_all_server import CheckAllServerTask
from tests.support.harness import (
    SEEDED,
    ZB,
    A,
    B,
    C,
    flush,
    heartbeat_all,
    server_row,
)
from tests.support.server_parts import make_parts, seed


def test_check_all_server_repairs_the_table(rs: RootService) -> None:
    import sqlalchemy as sa

    heartbeat_all(rs)
    flush(rs)
    assert rs.check_all_server.run_once() == 0
    with rs.store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE __all_server SET status = 'INACTIVE', stop_time = 42 WHERE svr_port = 3001"
            )
        )
        conn.execute(sa.text("UPDATE __all_server SET zone = 'zz' WHERE svr_port = 3002"))
    # One row per page: pagination must visit every row exactly once.
    assert rs.check_all_server.run_once(page_size=1) == 2
    flush(rs)
    assert (server_row(rs, A)["status"], server_row(rs, A)["stop_time"]) == ("ACTIVE", 0)
    assert server_row(rs, B)["zone"] == ZB


# --- built from its collaborators, without RootService ------------------------------------


def test_task_alone_queues_repairs_but_not_pending_rows_or_candidates(
    engine: sa.Engine, tmp_path: Path
) -> None:
    p = make_parts(engine, tmp_path)
    seed(p)
    pauses: list[float] = []
    task = CheckAllServerTask(
        p.whitelist, p.persist, p.grace, p.term, p.store, p.metrics, pauses.append
    )
    assert task.name == "check_all_server"
    assert task.run_once() == 0
    for key in (A, B, C):
        p.whitelist.with_server(key, lambda s: setattr(s, "build_version", "changed"))
    with p.whitelist.lock:
        p.grace.candidates.add(C)
    p.persist.mark(B)
    assert task.run_once(page_size=1) == 1
    assert p.persist.pending_keys() == {A, B}
    assert pauses == [0.05] * len(SEEDED)
    assert p.metrics.get("check_all_server_repairs_total") == 1
    p.term.close_service()
    assert task.run_once() == 0


class _HeartbeatOnRead:
    """The persistence queue, with a heartbeat landing right after its pending set is first
    read: ``server``'s build_version changes in memory and its row is queued, under the
    whitelist lock, as the heartbeat path does."""

    def __init__(self, parts: object, server: str) -> None:
        self.p = parts
        self.server = server
        self.landed = 0

    def pending_keys(self) -> set[str]:
        keys: set[str] = self.p.persist.pending_keys()  # type: ignore[attr-defined]
        if not self.landed:
            self.landed += 1

            def upgraded(s: object) -> None:
                s.build_version = "4.2.1-after"  # type: ignore[attr-defined]
                self.p.persist.mark(self.server)  # type: ignore[attr-defined]

            self.p.whitelist.with_server(self.server, upgraded)  # type: ignore[attr-defined]
        return keys

    def mark(self, key: str) -> None:
        self.p.persist.mark(key)  # type: ignore[attr-defined]


def test_a_heartbeat_landing_during_the_run_is_no_difference(
    engine: sa.Engine, tmp_path: Path
) -> None:
    # Memory is read before the queue: a row changed meanwhile is a queued one, not a
    # difference between memory and __all_server to repair.
    p = make_parts(engine, tmp_path)
    seed(p)
    hook = _HeartbeatOnRead(p, B)
    task = CheckAllServerTask(
        p.whitelist,
        hook,  # type: ignore[arg-type]
        p.grace,
        p.term,
        p.store,
        p.metrics,
        lambda _s: None,
    )
    assert task.run_once() == 0
    assert hook.landed == 1
    assert p.metrics.get("check_all_server_repairs_total") == 0
    assert p.persist.pending_keys() == {B}  # queued by the heartbeat, not by a repair


def test_a_term_ending_during_the_scan_abandons_it(
    engine: sa.Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A scan on a slow database outlived its term; the step-down dropped memory meanwhile.
    # The rest of the table must not be reported as "not in the whitelist" (an ERROR a
    # slow-database test printed for a term already over) nor queued for repair.
    p = make_parts(engine, tmp_path)
    seed(p)

    def step_down_between_pages(_s: float) -> None:
        p.term.request_step_down("lease of epoch 1 not renewed", p.term.epoch)
        p.whitelist.clear()

    task = CheckAllServerTask(
        p.whitelist, p.persist, p.grace, p.term, p.store, p.metrics, step_down_between_pages
    )
    with caplog.at_level(logging.INFO, logger="rootservice.servers.check_all_server"):
        assert task.run_once(page_size=1) == 0
    mine = [r for r in caplog.records if r.name == "rootservice.servers.check_all_server"]
    assert [r.levelno for r in mine] == [logging.INFO]
    assert "abandoned" in mine[0].getMessage()
    assert p.persist.pending_keys() == set()


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("zone", "'zz'"),
        ("inner_port", "1"),
        ("build_version", "'other'"),
        ("status", "'INACTIVE'"),
        ("with_rootserver", "1"),
        ("block_migrate_in_time", "7"),
        ("stop_time", "42"),
        ("start_service_time", "43"),
        ("with_partition", "0"),
        ("last_offline_time", "44"),
        ("suspect_end_time", "45"),
        ("maintenance_end_time", "46"),
        ("lagging_time", "47"),
    ],
)
def test_each_checked_column_that_differs_is_named_and_repaired(
    rs: RootService, column: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    from rootservice.servers.status import CHECKED_COLUMNS

    assert column in CHECKED_COLUMNS
    heartbeat_all(rs)
    flush(rs)
    before = server_row(rs, A)[column]
    with rs.store.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE __all_server SET {column} = {value} WHERE svr_port = 3001"))
    assert server_row(rs, A)[column] != before
    with caplog.at_level(logging.WARNING):
        assert rs.check_all_server.run_once() == 1
    assert f"{A} ({column})" in caplog.text
    flush(rs)
    assert server_row(rs, A)[column] == before
    assert rs.check_all_server.run_once() == 0


def test_a_status_in_other_case_is_no_difference(rs: RootService) -> None:
    heartbeat_all(rs)
    flush(rs)
    with rs.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE __all_server SET status = lower(status)"))
    assert rs.check_all_server.run_once() == 0
