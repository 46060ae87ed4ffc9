"""``__all_cluster_version``: the cluster version, one row that only rises (migration 0019).

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

import sqlalchemy as sa

from obcommon import releases
from obcommon.releases import Release
from rootservice.db import schema_version
from rootservice.db.tables import all_cluster_version
from rootservice.db.timestamps import us_to_datetime

_ROW = 1


def get(conn: sa.Connection) -> Release:
    """The cluster version. Raises ``LookupError`` when the row is missing (a database the
    migrations did not make)."""
    t = all_cluster_version
    code = conn.execute(sa.select(t.c.version_code).where(t.c.id == _ROW)).scalar()
    if code is None:
        raise LookupError("__all_cluster_version has no row: run the migrations")
    return releases.decode(int(code))


def raise_to(conn: sa.Connection, version: Release, now_us: int) -> bool:
    """Raise the cluster version to ``version`` when it is below it; True when it rose. Never
    lowers it: the comparison is in the UPDATE itself, so two writers cannot undo each
    other's raise. Once it is above the previous release, the previous release's stamp
    says so (:func:`schema_version.stamp_previous_release`): its root services no longer
    start."""
    t = all_cluster_version
    code = releases.encode(version)
    n = conn.execute(
        t.update()
        .where(t.c.id == _ROW, t.c.version_code < code)
        .values(version=str(version), version_code=code, gmt_modified=us_to_datetime(now_us))
    ).rowcount
    if n and version.line > schema_version.previous_release().line:
        schema_version.stamp_previous_release(conn, version, contracted=False)
    return bool(n)
