"""Expand / contract schema changes: the migrations an RS runs when it starts, and the ones
that wait for the end of a rolling upgrade.

During an upgrade root services of two releases run on one database. A migration is either

- **expand** (the default): it adds a table, a nullable or defaulted column, a view column.
  The previous release runs beside it unchanged, so every RS applies it when it starts; or
- **contract**: a drop, a rename, a new NOT NULL, anything the previous release would break
  on. Its module says ``contract = True`` and ``contract_level = n`` (1, 2, ... in history
  order) and its ``upgrade()`` calls :func:`set_contract_level`. It runs only when the leader
  finalizes the upgrade (``ALTER SYSTEM END ROLLING UPGRADE``): after it, no RS of the previous
  release may run.

Steps when ``rootservice serve`` opens the database (:func:`upgrade_at_start`), in one
transaction under the migration lock (PostgreSQL: ``pg_advisory_xact_lock``; SQLite has one
writer), so two root services never migrate at once (a transaction PostgreSQL aborts to
break a deadlock with a running root service is run again):

1. A database without a schema gets every migration, contract ones included: no older RS can
   be running on it.
2. A database at a revision this release does not know was migrated by a newer release.
   Its ``__all_schema_contract.contract_level`` says how far it was contracted: above this
   release's own level, the RS refuses to start (:class:`SchemaAhead`) and touches nothing;
   otherwise the newer release only expanded it and this RS runs on it as it is.
3. Otherwise the pending migrations are applied up to, not including, the first contract
   one.
4. ``alembic_version`` is stamped for the previous release's root services
   (:mod:`rootservice.db.schema_version`: its head until the upgrade is finalized, a
   revision it refuses after).

:func:`contract` (the leader, at END ROLLING UPGRADE) applies the rest. ``rootservice db
upgrade`` stays the operator's tool: it goes where it is told.

This is CockroachDB's rule for its own system tables (schema changes gated on the finalized
cluster version) in Alembic's terms; OceanBase upgrades its inner tables in
``ObUpgradeProcessor`` once every observer runs the new binary.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from rootservice.db import cluster_version_repo, schema_version
from rootservice.db.engine import MIGRATIONS_DIR, alembic_config, io_deadline, migration_lock
from rootservice.db.tables import all_schema_contract

log = logging.getLogger(__name__)

#: Attempts of the start-up migration when the database aborts it to break a deadlock or a
#: serialization conflict (:func:`upgrade_at_start`), and the delay unit between them.
RETRY_ATTEMPTS = 5
RETRY_DELAY_S = 0.2
#: PostgreSQL's deadlock_detected and serialization_failure.
RETRY_SQLSTATES = frozenset({"40P01", "40001"})


class SchemaAhead(Exception):
    """The database was contracted by a newer release than this RS's code: it must not run
    on it. ``str()`` is the operator's message."""


@dataclass(frozen=True)
class Migration:
    """One migration of the script directory: its revision and whether it contracts."""

    revision: str
    contract: bool
    contract_level: int


def migrations(location: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migrations of ``location`` in history order (oldest first). Raises
    ``ValueError`` when a contract migration gives no positive ``contract_level``."""
    script = ScriptDirectory.from_config(alembic_config(location=location))
    out = []
    for s in reversed(list(script.walk_revisions())):
        module: Any = s.module
        is_contract = bool(getattr(module, "contract", False))
        level = int(getattr(module, "contract_level", 0))
        if is_contract and level <= 0:
            raise ValueError(f"contract migration {s.revision} has no contract_level")
        out.append(Migration(s.revision, is_contract, level))
    return out


def code_contract_level(history: list[Migration]) -> int:
    """The highest contract level this code's migrations reach (0: none contract)."""
    return max((m.contract_level for m in history if m.contract), default=0)


def start_target(current: str | None, history: list[Migration]) -> str | None:
    """Where an RS starting on a database at ``current`` migrates to (steps 1 and 3 of the
    module doc): the newest revision before the first pending contract migration, every
    revision for an empty database, ``current`` when nothing may run. ``current`` must be
    a revision of ``history`` or None."""
    if not history:
        return current
    if current is None:
        return history[-1].revision
    ids = [m.revision for m in history]
    target = current
    for m in history[ids.index(current) + 1 :]:
        if m.contract:
            break
        target = m.revision
    return target


def contract_level(conn: sa.Connection) -> int:
    """``__all_schema_contract.contract_level`` (0 when the table or its row is missing: a
    schema no release contracted)."""
    if not sa.inspect(conn).has_table(all_schema_contract.name):
        return 0
    level = conn.execute(sa.select(all_schema_contract.c.contract_level)).scalar()
    return int(level or 0)


def set_contract_level(conn: sa.Connection, level: int) -> None:
    """Record that the schema is contracted to ``level`` (a contract migration's last
    step, in its own transaction)."""
    conn.execute(sa.update(all_schema_contract).values(contract_level=level))


def upgrade_at_start(
    engine: sa.Engine,
    location: Path = MIGRATIONS_DIR,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Steps 1 to 3 of the module doc; returns the revision the database is at afterwards.

    A migration's DDL locks whole tables, which the root services already running (of the
    previous release, during a rolling upgrade) also lock row by row in their own
    transactions, in another order: PostgreSQL may then break a deadlock by aborting the
    migration's transaction (SQLSTATE 40P01; 40001 for a serialization failure). Nothing of it
    was written, so it runs again, after :data:`RETRY_DELAY_S` times the attempt number
    (``sleep``), up to :data:`RETRY_ATTEMPTS` attempts in all. Raises
    :class:`SchemaAhead` (nothing written), SQLAlchemy errors (the last one, once the
    attempts are used up)."""
    for attempt in range(1, RETRY_ATTEMPTS):
        try:
            return _upgrade_at_start_once(engine, location)
        except sa.exc.DBAPIError as e:
            state = getattr(e.orig, "sqlstate", None)
            if state not in RETRY_SQLSTATES:
                raise
            log.warning(
                "the start-up migration was aborted by the database (SQLSTATE %s, attempt %d "
                "of %d): running it again: %s",
                state,
                attempt,
                RETRY_ATTEMPTS,
                str(e.orig).strip(),
            )
            sleep(RETRY_DELAY_S * attempt)
    return _upgrade_at_start_once(engine, location)  # the last attempt: its error is raised


def _upgrade_at_start_once(engine: sa.Engine, location: Path) -> str | None:
    history = migrations(location)
    with io_deadline(None), engine.begin() as conn:
        migration_lock(conn)
        current = schema_version.read(conn)
        if current is not None and current not in {m.revision for m in history}:
            theirs, ours = contract_level(conn), code_contract_level(history)
            if theirs > ours:
                raise SchemaAhead(
                    f"the database schema is at revision {current}, contracted to level "
                    f"{theirs} by a newer release; this root service's code reaches level "
                    f"{ours} and cannot run on it: start a root service of the newer release"
                )
            return current
        target = start_target(current, history)
        if target is not None and target != current:
            command.upgrade(alembic_config(conn, location), target)
        stamp_previous_release(conn)
        return target


def contract(engine: sa.Engine, location: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply every pending migration, contract ones included (END ROLLING UPGRADE, by the
    leader); returns the revisions applied (none when at head). A database ahead of this
    code is left alone. Raises SQLAlchemy errors (the transaction rolls back whole)."""
    history = migrations(location)
    ids = [m.revision for m in history]
    with io_deadline(None), engine.begin() as conn:
        migration_lock(conn)
        current = schema_version.read(conn)
        if current is not None and current not in ids:
            return []
        pending = ids[ids.index(current) + 1 :] if current is not None else ids
        if pending:
            command.upgrade(alembic_config(conn, location), pending[-1])
        stamp_previous_release(conn)
        return pending


def stamp_previous_release(conn: sa.Connection) -> str | None:
    """:func:`schema_version.stamp_previous_release` for the cluster version and contract
    level stored (nothing before the cluster version's table exists, as in the test
    migrations of an old head); returns the stamp written."""
    if not sa.inspect(conn).has_table("__all_cluster_version"):
        return None
    try:
        cluster = cluster_version_repo.get(conn)
    except LookupError:
        return None
    return schema_version.stamp_previous_release(conn, cluster, contract_level(conn) > 0)
