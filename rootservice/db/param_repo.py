"""``__all_sys_parameter``: parameters set with ALTER SYSTEM SET, the rows the RS keeps for
itself (cluster id, rootservice_list, bootstrap time) and the id counters (ids are never
reused, as in OceanBase).

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

import sqlalchemy as sa

from rootservice.db.tables import (
    all_sys_parameter,
    all_sys_parameter_info,
    all_sys_parameter_override,
)
from rootservice.db.timestamps import us_to_datetime

# Rows of __all_sys_parameter the RS keeps for itself (not settable with ALTER SYSTEM SET).
PARAM_CLUSTER_ID = "cluster_id"
PARAM_RS_LIST = "rootservice_list"
PARAM_MAX_SERVER_ID = "max_used_server_id"
PARAM_MAX_JOB_ID = "max_used_job_id"
PARAM_BOOTSTRAP_TIME = "bootstrap_time"
#: ``svr_ip`` / ``svr_port`` of a zone's row of ``__all_sys_parameter_override`` (OceanBase's
#: "ANY" server).
ANY_SERVER = ("ANY", 0)
#: One override's key: (zone, svr_ip, svr_port, name); a zone's is (zone, 'ANY', 0, name), a
#: server's ('', ip, port, name).
OverrideKey = tuple[str, str, int, str]
# OceanBase numbers user objects from 1001 (1-1000 are reserved for the sys tenant's own).
FIRST_USER_ID = 1000


def load_params(conn: sa.Connection) -> dict[str, str]:
    """All ``__all_sys_parameter`` rows as name -> value."""
    return {
        r.name: r.value
        for r in conn.execute(sa.select(all_sys_parameter.c.name, all_sys_parameter.c.value))
    }


def set_param(conn: sa.Connection, name: str, value: str, now_us: int, info: str = "") -> None:
    """Insert or update one parameter, bumping its config_version."""
    ts = us_to_datetime(now_us)
    t = all_sys_parameter
    updated = conn.execute(
        t.update()
        .where(t.c.name == name)
        .values(value=value, gmt_modified=ts, config_version=t.c.config_version + 1)
    ).rowcount
    if not updated:
        conn.execute(
            t.insert().values(
                name=name, value=value, info=info, config_version=1, gmt_create=ts, gmt_modified=ts
            )
        )


def next_counter(conn: sa.Connection, name: str, now_us: int, at_least: int = 0) -> int:
    """Allocate the next value of a counter kept in ``__all_sys_parameter`` (server ids, job
    ids: never reused, docs/design/servers.md#the-server-record). The update takes the row lock, so concurrent
    allocators serialise."""
    t = all_sys_parameter
    cur = conn.execute(sa.select(t.c.value).where(t.c.name == name).with_for_update()).scalar()
    new = max(int(cur) if cur is not None else 0, at_least) + 1
    set_param(conn, name, str(new), now_us)
    return new


def load_overrides(conn: sa.Connection) -> dict[OverrideKey, str]:
    """Every ``__all_sys_parameter_override`` row as (zone, svr_ip, svr_port, name) -> value."""
    t = all_sys_parameter_override
    return {
        (r.zone, r.svr_ip, int(r.svr_port), r.name): r.value
        for r in conn.execute(sa.select(t.c.zone, t.c.svr_ip, t.c.svr_port, t.c.name, t.c.value))
    }


def set_override(
    conn: sa.Connection, key: OverrideKey, value: str, comment: str, now_us: int
) -> None:
    """Insert or update one zone's or server's value of a parameter (``comment`` into
    ``info``), bumping its config_version."""
    ts = us_to_datetime(now_us)
    t = all_sys_parameter_override
    zone, ip, port, name = key
    match = sa.and_(t.c.zone == zone, t.c.svr_ip == ip, t.c.svr_port == port, t.c.name == name)
    updated = conn.execute(
        t.update()
        .where(match)
        .values(value=value, info=comment, gmt_modified=ts, config_version=t.c.config_version + 1)
    ).rowcount
    if not updated:
        conn.execute(
            t.insert().values(
                zone=zone,
                svr_ip=ip,
                svr_port=port,
                name=name,
                value=value,
                info=comment,
                config_version=1,
                gmt_create=ts,
                gmt_modified=ts,
            )
        )


def replace_param_info(conn: sa.Connection, rows: list[dict[str, str]], now_us: int) -> None:
    """Make ``__all_sys_parameter_info`` exactly ``rows`` (one dict of its columns, without
    the timestamps, per parameter)."""
    ts = us_to_datetime(now_us)
    t = all_sys_parameter_info
    conn.execute(t.delete())
    if rows:
        conn.execute(t.insert(), [r | {"gmt_create": ts, "gmt_modified": ts} for r in rows])
