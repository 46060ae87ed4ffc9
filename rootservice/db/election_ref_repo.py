"""``__all_ls_election_reference_info``: the leader preferences of the log streams set by
``ALTER SYSTEM SWITCH REPLICA`` (OceanBase 4.x's table of that name,
src/rootserver/ob_admin_switch_replica_role.cpp; migration 0017).

Every function takes a connection inside the caller's transaction and never commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from rootservice.db.tables import all_ls_election_reference_info
from rootservice.db.timestamps import us_to_datetime


@dataclass(frozen=True)
class LeaderPreference:
    """One log stream's preferences: ``manual_leader`` (``"ip:port"`` of SWITCH REPLICA
    LEADER, "" = none) and ``blacklist`` (the servers SWITCH REPLICA FOLLOWER keeps
    leaders off)."""

    manual_leader: str = ""
    blacklist: frozenset[str] = field(default_factory=frozenset)

    def is_empty(self) -> bool:
        """Nothing is preferred: the row is deleted."""
        return not self.manual_leader and not self.blacklist


def _split(text: str) -> frozenset[str]:
    return frozenset(a for a in (x.strip() for x in text.split(";")) if a)


def load_all(conn: sa.Connection) -> dict[tuple[int, int], LeaderPreference]:
    """Every log stream's preferences, by ``(tenant_id, ls_id)``."""
    t = all_ls_election_reference_info
    rows = conn.execute(
        sa.select(t.c.tenant_id, t.c.ls_id, t.c.manual_leader_server, t.c.blacklist)
    )
    return {
        (int(r.tenant_id), int(r.ls_id)): LeaderPreference(
            r.manual_leader_server or "", _split(r.blacklist or "")
        )
        for r in rows
    }


def save(conn: sa.Connection, key: tuple[int, int], pref: LeaderPreference, now_us: int) -> None:
    """Write the preferences of log stream ``key`` (``(tenant_id, ls_id)``); an empty one
    deletes the row. ``now_us`` stamps ``gmt_modified``."""
    t = all_ls_election_reference_info
    where = (t.c.tenant_id == key[0], t.c.ls_id == key[1])
    if pref.is_empty():
        conn.execute(t.delete().where(*where))
        return
    ts = us_to_datetime(now_us)
    values = {
        "manual_leader_server": pref.manual_leader,
        "blacklist": ";".join(sorted(pref.blacklist)),
        "gmt_modified": ts,
    }
    if not conn.execute(t.update().where(*where).values(**values)).rowcount:
        conn.execute(t.insert().values(tenant_id=key[0], ls_id=key[1], gmt_create=ts, **values))


def delete_tenant(conn: sa.Connection, tenant_id: int) -> None:
    """Forget the preferences of every log stream of ``tenant_id`` (DROP TENANT)."""
    t = all_ls_election_reference_info
    conn.execute(t.delete().where(t.c.tenant_id == tenant_id))
