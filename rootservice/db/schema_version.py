"""Where the schema's revision is kept, and what a root service of the previous release reads
instead.

Release 0.1.0 kept Alembic's revision in ``alembic_version`` and, on every start, migrates to
its own head with Alembic: a revision it does not know (any migration of a later release) makes
Alembic fail ("Can't locate revision identified by ...") and the root service exits. So a
0.1.0 root service could not be put back on a database a later root service had only expanded,
the rollback a rolling upgrade promises until it is finalized.

Since 0.2.0 Alembic keeps this code's revision in :data:`VERSION_TABLE` (``migrations/env.py``)
and ``alembic_version`` is a stamp for the previous release (:func:`stamp_previous_release`):

- until the upgrade is finalized it holds :data:`PREVIOUS_HEAD`, the previous release's own
  newest revision, so a root service of that release starts, finds nothing to migrate and runs
  on the expanded schema (every migration since is expand-only, as
  :mod:`rootservice.db.schema_upgrade` requires);
- once the cluster version is above the previous release (END ROLLING UPGRADE, BOOTSTRAP of a
  new cluster) or a contract migration ran, it holds :func:`finalized_stamp`, a revision no
  release knows whose name says why: the previous release's root service refuses to start
  with "Can't locate revision identified by 'upgraded-to-0.2.0'".

A database only the previous release migrated has no :data:`VERSION_TABLE` row: its
``alembic_version`` revision is adopted (:func:`adopt`) before Alembic runs.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from obcommon import releases
from obcommon.releases import Release

#: Alembic's version table of this code.
VERSION_TABLE = "__all_schema_version"
#: The table the previous release (0.1.0) reads its revision from.
LEGACY_TABLE = "alembic_version"
#: The previous release's newest migration: what it must find to start.
PREVIOUS_HEAD = "0013"

# Alembic's own shape of a version table (version_num, VARCHAR(32), the primary key).
_meta = sa.MetaData()
_legacy = sa.Table(
    LEGACY_TABLE,
    _meta,
    sa.Column("version_num", sa.String(32), nullable=False),
    sa.PrimaryKeyConstraint("version_num", name=f"{LEGACY_TABLE}_pkc"),
)


def _revision_in(conn: sa.Connection, table: str) -> str | None:
    return MigrationContext.configure(conn, opts={"version_table": table}).get_current_revision()


def read(conn: sa.Connection) -> str | None:
    """The schema's revision as this code counts it: :data:`VERSION_TABLE`'s, else (a
    database only the previous release migrated: no such table) ``alembic_version``'s; None
    without a schema."""
    if sa.inspect(conn).has_table(VERSION_TABLE):
        return _revision_in(conn, VERSION_TABLE)
    return _revision_in(conn, LEGACY_TABLE)


def adopt(conn: sa.Connection, script: ScriptDirectory) -> None:
    """Copy the previous release's revision into :data:`VERSION_TABLE` when that table does
    not exist yet (in ``conn``'s transaction; Alembic runs next). A revision ``script`` does
    not know is left alone (Alembic then names it)."""
    if sa.inspect(conn).has_table(VERSION_TABLE):
        return
    legacy = _revision_in(conn, LEGACY_TABLE)
    if legacy is None:
        return
    try:
        script.get_revision(legacy)
    except Exception:  # alembic's lookup errors: not one of ours
        return
    MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).stamp(script, legacy)


def finalized_stamp(cluster: Release) -> str:
    """The ``alembic_version`` row once the upgrade to ``cluster`` is finalized: a revision
    no release has, naming the release (at most 32 characters, Alembic's column)."""
    return f"upgraded-to-{cluster}"[:32]


def previous_release() -> Release:
    """The release before this one (``releases.toml``; the oldest when it lists one)."""
    table = releases.table()
    return table[-2].release if len(table) > 1 else table[0].release


def stamp_previous_release(conn: sa.Connection, cluster: Release, contracted: bool) -> str:
    """Write ``alembic_version`` for the previous release's root services, in ``conn``'s
    transaction: :data:`PREVIOUS_HEAD` while ``cluster`` (the cluster version) is not above
    the previous release and no contract migration ran (``contracted``), else
    :func:`finalized_stamp`. Returns the revision written."""
    if contracted or cluster.line > previous_release().line:
        stamp = finalized_stamp(max(cluster, releases.current()))
    else:
        stamp = PREVIOUS_HEAD
    _legacy.create(conn, checkfirst=True)
    conn.execute(sa.delete(_legacy))
    conn.execute(sa.insert(_legacy).values(version_num=stamp))
    return stamp
