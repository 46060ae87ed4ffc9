"""Expand / contract migrations (rootservice.db.schema_upgrade) on SQLite and PostgreSQL: an
RS starting applies the expand migrations only, the contract ones wait for
:func:`contract`; an empty database gets everything; an RS whose code is older than the
schema runs beside an expanded one and refuses a contracted one, touching nothing. The
migrations are the product's plus three of the test's own, in a copy of ``migrations/``."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.runtime.migration import MigrationContext

from obcommon import releases
from rootservice.db import cluster_version_repo, schema_upgrade, schema_version
from rootservice.db.engine import (
    MIGRATIONS_DIR,
    alembic_config,
    current_revision,
    head_revision,
    make_engine,
)
from rootservice.db.schema_upgrade import (
    Migration,
    SchemaAhead,
    contract,
    contract_level,
    start_target,
    upgrade_at_start,
)
from rootservice.db.schema_version import LEGACY_TABLE, PREVIOUS_HEAD, VERSION_TABLE
from tests.support.cluster import wait_until

HEAD = head_revision()


def migration(
    revision: str, down: str | None, upgrade: str, downgrade: str = "pass", flags: str = ""
) -> str:
    """The source of an Alembic migration file: ``revision`` after ``down``, whose
    ``upgrade()`` and ``downgrade()`` run the given lines; ``flags``: lines after the revision
    identifiers (a contract migration's ``contract`` and ``contract_level``)."""

    def body(lines: str) -> str:
        return "".join(f"    {line}\n" for line in lines.strip().splitlines())

    return (
        "from alembic import op\n"
        "import sqlalchemy as sa\n"
        "from rootservice.db.schema_upgrade import set_contract_level\n"
        f'revision = "{revision}"\n'
        f'down_revision = "{down}"\n'
        "branch_labels = None\n"
        "depends_on = None\n"
        f"{flags}"
        f"def upgrade():\n{body(upgrade)}"
        f"def downgrade():\n{body(downgrade)}"
    )


# An expand migration, a contract one (drops the expand one's table) and another expand one.
EXTRA = {
    "9001_expand.py": migration(
        "9001",
        HEAD,
        'op.create_table("t_expand", sa.Column("id", sa.Integer, primary_key=True))',
        'op.drop_table("t_expand")',
    ),
    "9002_contract.py": migration(
        "9002",
        "9001",
        'op.drop_table("t_expand")\nset_contract_level(op.get_bind(), 1)',
        flags="contract = True\ncontract_level = 1\n",
    ),
    "9003_expand.py": migration(
        "9003",
        "9002",
        'op.create_table("t_later", sa.Column("id", sa.Integer, primary_key=True))',
        'op.drop_table("t_later")',
    ),
}


def newer_migrations(tmp_path: Path) -> Path:
    """A copy of ``migrations/`` with the three migrations of a "newer release" (9001
    expand, 9002 contract to level 1, 9003 expand)."""
    loc = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, loc, ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in EXTRA.items():
        (loc / "versions" / name).write_text(text)
    return loc


@pytest.fixture
def newer(tmp_path: Path) -> Path:
    return newer_migrations(tmp_path)


@pytest.fixture
def blank(db_url: str) -> Iterator[sa.Engine]:
    eng = make_engine(db_url)
    try:
        yield eng
    finally:
        eng.dispose()


def revision_of(engine: sa.Engine) -> str | None:
    return current_revision(engine)


def legacy_row(engine: sa.Engine) -> str | None:
    """What a root service of the previous release reads as the revision."""
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": LEGACY_TABLE})
        return ctx.get_current_revision()


def as_previous_release_left_it(engine: sa.Engine) -> None:
    """The schema the previous release makes: its head, recorded in alembic_version only."""
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), PREVIOUS_HEAD)
        conn.execute(sa.text(f"DROP TABLE {VERSION_TABLE}"))
        schema_version.stamp_previous_release(conn, releases.oldest(), contracted=False)


def tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def level(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return contract_level(conn)


def test_start_target_stops_before_the_first_pending_contract_migration() -> None:
    h = [
        Migration("a", False, 0),
        Migration("b", False, 0),
        Migration("c", True, 1),
        Migration("d", False, 0),
    ]
    assert start_target(None, h) == "d"  # an empty database: everything
    assert start_target("a", h) == "b"
    assert start_target("b", h) == "b"  # the next one contracts: nothing runs
    assert start_target("c", h) == "d"
    assert start_target("d", h) == "d"
    assert start_target(None, []) is None


def test_a_contract_migration_must_give_its_level(newer: Path) -> None:
    path = newer / "versions" / "9002_contract.py"
    path.write_text(path.read_text().replace("contract_level = 1\n", ""))
    with pytest.raises(ValueError, match="9002 has no contract_level"):
        schema_upgrade.migrations(newer)


def test_an_empty_database_gets_every_migration(blank: sa.Engine, newer: Path) -> None:
    assert upgrade_at_start(blank, newer) == "9003"
    assert revision_of(blank) == "9003" and level(blank) == 1
    assert "t_later" in tables(blank) and "t_expand" not in tables(blank)


def test_a_starting_rs_expands_and_the_contract_waits_for_the_end_of_the_upgrade(
    blank: sa.Engine, newer: Path
) -> None:
    upgrade_at_start(blank)  # the previous release's schema
    assert revision_of(blank) == HEAD and level(blank) == 0
    assert upgrade_at_start(blank, newer) == "9001"
    assert "t_expand" in tables(blank) and level(blank) == 0
    assert upgrade_at_start(blank, newer) == "9001"  # started again: still waits
    assert contract(blank, newer) == ["9002", "9003"]
    assert revision_of(blank) == "9003" and level(blank) == 1
    assert "t_expand" not in tables(blank) and "t_later" in tables(blank)
    assert contract(blank, newer) == []


def test_an_older_rs_runs_beside_an_expanded_schema_and_refuses_a_contracted_one(
    blank: sa.Engine, newer: Path
) -> None:
    upgrade_at_start(blank)
    upgrade_at_start(blank, newer)  # the newer release started: expanded to 9001
    # This release's code does not know 9001; the schema was only expanded: it runs.
    assert upgrade_at_start(blank) == "9001"
    assert contract(blank) == []  # and never touches a schema it does not know
    assert revision_of(blank) == "9001"
    contract(blank, newer)
    with pytest.raises(SchemaAhead) as e:
        upgrade_at_start(blank)
    assert "contracted to level 1" in str(e.value) and "reaches level 0" in str(e.value)
    assert revision_of(blank) == "9003" and level(blank) == 1


def test_the_previous_release_reads_its_head_until_the_cluster_version_rises(
    blank: sa.Engine,
) -> None:
    as_previous_release_left_it(blank)
    assert revision_of(blank) == PREVIOUS_HEAD and legacy_row(blank) == PREVIOUS_HEAD
    # This release starts: its revision adopted, expanded to its head; the previous
    # release still finds its own head (it starts, with nothing to migrate).
    assert upgrade_at_start(blank) == HEAD
    assert revision_of(blank) == HEAD and legacy_row(blank) == PREVIOUS_HEAD
    assert upgrade_at_start(blank) == HEAD and legacy_row(blank) == PREVIOUS_HEAD
    # The cluster version at the previous release changes nothing; above it, it is refused.
    current = releases.table()[-1].release
    with blank.begin() as conn:
        assert not cluster_version_repo.raise_to(conn, releases.oldest(), 1)
    assert legacy_row(blank) == PREVIOUS_HEAD
    with blank.begin() as conn:
        assert cluster_version_repo.raise_to(conn, current, 1)
    assert legacy_row(blank) == f"upgraded-to-{current}"
    assert upgrade_at_start(blank) == HEAD and legacy_row(blank) == f"upgraded-to-{current}"


def test_a_new_database_is_stamped_for_the_previous_release_a_contracted_one_not(
    blank: sa.Engine, newer: Path
) -> None:
    upgrade_at_start(blank)
    assert legacy_row(blank) == PREVIOUS_HEAD and VERSION_TABLE in tables(blank)
    upgrade_at_start(blank, newer)
    assert legacy_row(blank) == PREVIOUS_HEAD  # expanded only
    contract(blank, newer)
    assert legacy_row(blank) == f"upgraded-to-{releases.current()}"


# Locks __all_zone, then __all_server: the order a running root service's transaction
# below reverses.
ALTER_BOTH = migration(
    "9101",
    HEAD,
    'op.add_column("__all_zone", sa.Column("t_a", sa.Integer, nullable=True))\n'
    'op.add_column("__all_server", sa.Column("t_b", sa.Integer, nullable=True))',
)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_migration_postgresql_aborts_for_a_deadlock_runs_again(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loc = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, loc, ignore=shutil.ignore_patterns("__pycache__"))
    (loc / "versions" / "9101_alter_both.py").write_text(ALTER_BOTH)
    # The migration's session detects the deadlock (its check comes 2 s after it starts to
    # wait, the other session's after 30 s): it is the one PostgreSQL aborts.
    migrating = make_engine(db_url + "?options=-c%20deadlock_timeout%3D2s")
    running = make_engine(db_url)
    try:
        assert upgrade_at_start(migrating) == HEAD
        result: list[object] = []
        with running.connect() as other:
            other.exec_driver_sql("SET deadlock_timeout = '30s'")
            other.exec_driver_sql("LOCK TABLE __all_server IN ROW EXCLUSIVE MODE")

            def migrate() -> None:
                try:
                    result.append(upgrade_at_start(migrating, loc))
                except Exception as e:  # reported by the assertion below
                    result.append(e)

            t = threading.Thread(target=migrate)
            with caplog.at_level(logging.WARNING, "rootservice.db.schema_upgrade"):
                t.start()
                # The migration holds __all_zone and waits for __all_server ...
                wait_until(
                    lambda: other.exec_driver_sql(
                        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                        "WHERE c.relname = '__all_server' AND NOT l.granted"
                    ).scalar(),
                    30,
                    message="the migration waiting for __all_server",
                )
                # ... and this session's read of __all_zone closes the cycle: PostgreSQL aborts
                # the migration, then this read goes through.
                other.exec_driver_sql("SELECT count(*) FROM __all_zone").scalar()
                other.commit()
                t.join(timeout=60)
        assert not t.is_alive()
        assert result == ["9101"], result
        assert "SQLSTATE 40P01, attempt 1 of 5" in caplog.text
        assert "t_b" in {c["name"] for c in sa.inspect(running).get_columns("__all_server")}
    finally:
        migrating.dispose()
        running.dispose()


def raising(sqlstate: str) -> str:
    """A migration whose upgrade makes PostgreSQL raise an error of ``sqlstate`` (a DO block:
    a real server error, as a deadlock or a missing table would give)."""
    return migration(
        "9102",
        HEAD,
        'op.create_table("t_half", sa.Column("id", sa.Integer, primary_key=True))\n'
        f"op.execute(\"DO $$ BEGIN RAISE EXCEPTION 'forced' USING ERRCODE = '{sqlstate}'; END $$\")",
    )


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize(
    ("sqlstate", "sleeps"),
    [
        # Aborted every time: five attempts, the error of the last one raised.
        ("40P01", [0.2, 0.4, 0.6, 0.8]),
        ("40001", [0.2, 0.4, 0.6, 0.8]),
        # Any other error is the migration's own: raised at once, never run again.
        ("42P01", []),
    ],
)
def test_a_migration_that_keeps_failing_raises_its_error_and_writes_nothing(
    db_url: str, tmp_path: Path, sqlstate: str, sleeps: list[float]
) -> None:
    loc = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, loc, ignore=shutil.ignore_patterns("__pycache__"))
    (loc / "versions" / "9102_raising.py").write_text(raising(sqlstate))
    engine = make_engine(db_url)
    try:
        assert upgrade_at_start(engine) == HEAD
        slept: list[float] = []
        with pytest.raises(sa.exc.DBAPIError) as err:
            upgrade_at_start(engine, loc, sleep=slept.append)
        assert getattr(err.value.orig, "sqlstate", None) == sqlstate
        assert slept == pytest.approx(sleeps)
        # Each attempt rolled back whole: the table it created first is not there.
        assert "t_half" not in tables(engine)
        with engine.connect() as conn:
            assert schema_version.read(conn) == HEAD
    finally:
        engine.dispose()
