"""The view-against-view checks of ALTER SYSTEM RUN JOB 'ROOT_INSPECTION': each query reads
the operators' views (``DBA_OB_SERVERS``, ``DBA_OB_ZONES``, ``DBA_OB_UNITS``,
``DBA_OB_LS_LOCATIONS``) and returns the rows on which two of them disagree.

Every function takes a connection inside the caller's transaction and never commits. Each
returns one finding per row, as text naming the row, in a stable order.
"""

from __future__ import annotations

import sqlalchemy as sa

_SERVERS_WITHOUT_ZONE = sa.text(
    "SELECT s.SVR_IP, s.SVR_PORT, s.ZONE FROM DBA_OB_SERVERS s "
    "WHERE NOT EXISTS (SELECT 1 FROM DBA_OB_ZONES z WHERE z.ZONE = s.ZONE) "
    "ORDER BY s.SVR_IP, s.SVR_PORT"
)

_UNITS_OFF_SERVERS = sa.text(
    "SELECT u.UNIT_ID, u.SVR_IP, u.SVR_PORT, u.ZONE, s.ZONE AS SERVER_ZONE "
    "FROM DBA_OB_UNITS u LEFT JOIN DBA_OB_SERVERS s "
    "ON s.SVR_IP = u.SVR_IP AND s.SVR_PORT = u.SVR_PORT "
    "WHERE s.SVR_IP IS NULL OR s.ZONE <> u.ZONE ORDER BY u.UNIT_ID"
)

_LEADERS_PER_LS = sa.text(
    "SELECT TENANT_ID, LS_ID, COUNT(*) AS N FROM DBA_OB_LS_LOCATIONS WHERE ROLE = 'LEADER' "
    "GROUP BY TENANT_ID, LS_ID HAVING COUNT(*) > 1 ORDER BY TENANT_ID, LS_ID"
)

_LOCATIONS_OFF_SERVERS = sa.text(
    "SELECT l.TENANT_ID, l.LS_ID, l.SVR_IP, l.SVR_PORT FROM DBA_OB_LS_LOCATIONS l "
    "WHERE NOT EXISTS (SELECT 1 FROM DBA_OB_SERVERS s "
    "WHERE s.SVR_IP = l.SVR_IP AND s.SVR_PORT = l.SVR_PORT) "
    "ORDER BY l.TENANT_ID, l.LS_ID, l.SVR_IP, l.SVR_PORT"
)


def view_disagreements(conn: sa.Connection) -> list[str]:
    """Rows on which two views disagree: a server of ``DBA_OB_SERVERS`` whose zone is not in
    ``DBA_OB_ZONES``; a unit of ``DBA_OB_UNITS`` on a server ``DBA_OB_SERVERS`` lacks or
    in another zone than the server's; a log stream with more than one LEADER in
    ``DBA_OB_LS_LOCATIONS``; a replica of ``DBA_OB_LS_LOCATIONS`` on a server
    ``DBA_OB_SERVERS`` lacks."""
    out: list[str] = []
    for r in conn.execute(_SERVERS_WITHOUT_ZONE):
        out.append(f"DBA_OB_SERVERS {r[0]}:{r[1]} is in zone {r[2]}, which DBA_OB_ZONES lacks")
    for r in conn.execute(_UNITS_OFF_SERVERS):
        if r[4] is None:
            out.append(f"DBA_OB_UNITS unit {r[0]} is on {r[1]}:{r[2]}, which DBA_OB_SERVERS lacks")
        else:
            out.append(
                f"DBA_OB_UNITS unit {r[0]} is in zone {r[3]} but its server {r[1]}:{r[2]} "
                f"is in zone {r[4]} in DBA_OB_SERVERS"
            )
    for r in conn.execute(_LEADERS_PER_LS):
        out.append(f"DBA_OB_LS_LOCATIONS shows {r[2]} leaders of LS {r[1]} of tenant {r[0]}")
    for r in conn.execute(_LOCATIONS_OFF_SERVERS):
        out.append(
            f"DBA_OB_LS_LOCATIONS has a replica of LS {r[1]} of tenant {r[0]} on "
            f"{r[2]}:{r[3]}, which DBA_OB_SERVERS lacks"
        )
    return out
