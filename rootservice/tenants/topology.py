"""The desired layout of the log streams (docs/design/servers.md and docs/design/statements.md): which server of each
zone hosts a replica of each LS, read from ``__all_tenant`` / ``__all_ls_status`` /
``__all_unit`` and cached until the layout version moves.

:class:`LayoutVersion` is the version every layout change bumps (the DDL after each
committed statement, the balancer after moving units); :class:`LayoutCache` re-reads the
tables only when it moved.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from rootservice.db import election_ref_repo, ls_repo, tenant_repo, unit_repo
from rootservice.db.election_ref_repo import LeaderPreference
from rootservice.db.ls_repo import LsStatus
from rootservice.ha.store import MetaStore
from rootservice.tenants.vocabulary import LsKey, zone_priority


@dataclass(frozen=True)
class LsPlan:
    """What one log stream should look like: its members (server per zone, from the units of
    its unit group) and leader preferences."""

    key: LsKey
    members: dict[str, tuple[str, int]]  # server -> (zone, unit_id)
    zone_priority: dict[str, int]  # zone -> priority (0 best) from the tenant's primary zone
    primary_zone: str  # the LS's own preferred zone (__all_ls_status.primary_zone)
    # SWITCH REPLICA LEADER's manual leader ("" = none) and FOLLOWER's blacklist
    # (__all_ls_election_reference_info).
    manual_leader: str = ""
    blacklist: frozenset[str] = frozenset()


@dataclass
class Topology:
    """The desired layout read from ``__all_tenant`` / ``__all_ls_status`` / ``__all_unit``."""

    version: int = -1
    plans: dict[LsKey, LsPlan] = field(default_factory=dict)
    tenants: dict[int, tenant_repo.Tenant] = field(default_factory=dict)


class LayoutVersion:
    """A counter that grows with every committed change of tenants, pools, units or log
    streams, so that readers can cache the layout. ``version`` is read and bumped from any
    thread (an int assignment; a lost bump only costs a re-read at the next change)."""

    def __init__(self) -> None:
        """Start at 0 (the cache starts at -1, so the first read always loads)."""
        self.version = 0

    def changed(self) -> None:
        """Record one committed change."""
        self.version += 1


class LayoutCache:
    """The :class:`Topology` of the current :class:`LayoutVersion`, read on demand."""

    def __init__(self, store: MetaStore, version: LayoutVersion) -> None:
        """Read through ``store``; re-read whenever ``version`` moved."""
        self.store = store
        self.version = version
        self._lock = threading.Lock()
        self._topology = Topology()

    def topology(self, *, force: bool = False) -> Topology:
        """The desired layout, re-read when the layout version changed (or ``force``).
        Raises ``ObError(OB_ERR_SYS)`` when the database fails."""
        version = self.version.version
        with self._lock:
            if not force and self._topology.version == version:
                return self._topology
        with self.store.read() as conn:
            tenants = {t.tenant_id: t for t in tenant_repo.load_tenants(conn).values()}
            ls_rows = ls_repo.load_ls_status(conn)
            units = unit_repo.load_units(conn)
            pools = {p.resource_pool_id: p for p in unit_repo.load_pools(conn).values()}
            prefs = election_ref_repo.load_all(conn)
        topo = build_topology(version, tenants, ls_rows, units, pools, prefs)
        with self._lock:
            self._topology = topo
        return topo

    def clear(self) -> None:
        """Forget the cached layout (the RS steps down)."""
        with self._lock:
            self._topology = Topology()


def build_topology(
    version: int,
    tenants: dict[int, tenant_repo.Tenant],
    ls_rows: list[LsStatus],
    units: list[unit_repo.Unit],
    pools: dict[int, unit_repo.ResourcePool],
    prefs: dict[LsKey, LeaderPreference] | None = None,
) -> Topology:
    """The desired layout: for each LS, the server of the unit of its unit group in each
    zone of its tenant's pools (the i-th unit group of each pool, by unit_group_id order,
    serves the i-th unit group of the first pool), with its leader preferences from
    ``prefs``."""
    topo = Topology(version=version, tenants=tenants)
    by_tenant_pool: dict[int, list[unit_repo.ResourcePool]] = {}
    for p in pools.values():
        if p.tenant_id != -1:
            by_tenant_pool.setdefault(p.tenant_id, []).append(p)
    units_by_pool: dict[int, list[unit_repo.Unit]] = {}
    for u in units:
        units_by_pool.setdefault(u.resource_pool_id, []).append(u)
    for tpools in by_tenant_pool.values():
        tpools.sort(key=lambda p: p.resource_pool_id)
    for row in ls_rows:
        tenant = tenants.get(row.tenant_id)
        tpools = by_tenant_pool.get(row.tenant_id, [])
        if tenant is None or not tpools:
            continue
        first_groups = sorted(
            {u.unit_group_id for u in units_by_pool.get(tpools[0].resource_pool_id, [])}
        )
        if row.unit_group_id not in first_groups:
            continue
        index = first_groups.index(row.unit_group_id)
        members: dict[str, tuple[str, int]] = {}
        for p in tpools:
            pu = units_by_pool.get(p.resource_pool_id, [])
            groups = sorted({u.unit_group_id for u in pu})
            if index >= len(groups):
                continue
            g = groups[index]
            for u in pu:
                if u.unit_group_id == g:
                    members[u.server] = (u.zone, u.unit_id)
        pref = (prefs or {}).get((row.tenant_id, row.ls_id), LeaderPreference())
        topo.plans[(row.tenant_id, row.ls_id)] = LsPlan(
            (row.tenant_id, row.ls_id),
            members,
            zone_priority(tenant.primary_zone, tenant.zone_list),
            row.primary_zone,
            pref.manual_leader,
            pref.blacklist,
        )
    return topo
