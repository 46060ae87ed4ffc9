"""unit_repo's unit-move statements on both databases (docs/design/migration.md): a move starts only
from where the plan saw the unit, finishes by clearing ``migrate_from``, and goes back on
CANCEL DELETE."""

from __future__ import annotations

import sqlalchemy as sa

from rootservice.db import unit_repo
from rootservice.db.unit_repo import Unit

NOW = 1_767_225_600_000_000
A, B = ("127.0.0.1", 3001), ("127.0.0.1", 3004)


def seed(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        unit_repo.insert_units(conn, [Unit(1001, 1001, 1001, "z1", *A)], NOW)


def the_unit(engine: sa.Engine) -> Unit:
    with engine.connect() as conn:
        return unit_repo.load_units(conn)[0]


def test_a_move_starts_once_from_where_the_plan_saw_the_unit(engine: sa.Engine) -> None:
    seed(engine)
    with engine.begin() as conn:
        assert not unit_repo.start_unit_move(conn, 1001, B, A, NOW)  # not on B
        assert unit_repo.start_unit_move(conn, 1001, A, B, NOW)
        # moving already: a second plan changes nothing
        assert not unit_repo.start_unit_move(conn, 1001, B, A, NOW)
    u = the_unit(engine)
    assert (u.server, u.migrate_from) == ("127.0.0.1:3004", "127.0.0.1:3001")


def test_a_finished_move_clears_migrate_from(engine: sa.Engine) -> None:
    seed(engine)
    with engine.begin() as conn:
        unit_repo.start_unit_move(conn, 1001, A, B, NOW)
        unit_repo.finish_unit_move(conn, 1001, NOW + 1)
    u = the_unit(engine)
    assert (u.server, u.migrate_from, u.migrate_from_svr_port) == ("127.0.0.1:3004", "", 0)


def test_a_cancelled_move_goes_back(engine: sa.Engine) -> None:
    seed(engine)
    with engine.begin() as conn:
        unit_repo.start_unit_move(conn, 1001, A, B, NOW)
        unit_repo.move_unit_back(conn, 1001, A, NOW + 1)
    u = the_unit(engine)
    assert (u.server, u.migrate_from) == ("127.0.0.1:3001", "")
