"""What differs between two desired layouts of the log streams (:class:`rootservice.tenants.
topology.Topology`): the units manager's state that ALTER SYSTEM RELOAD UNIT reloads and
ROOT_INSPECTION compares with the tables. Pure."""

from __future__ import annotations

from rootservice.db import ls_repo, tenant_repo, unit_repo
from rootservice.ha.store import MetaStore
from rootservice.tenants.topology import LayoutCache, Topology, build_topology


def _members(plan_members: dict[str, tuple[str, int]]) -> str:
    return ", ".join(f"{s} (zone {z}, unit {u})" for s, (z, u) in sorted(plan_members.items()))


def layout_changes(old: Topology, new: Topology) -> list[str]:
    """One line per difference, tenants first then log streams in key order:
    ``tenant 1002 added``, ``LS 1001 of tenant 1002 members ... -> ...``."""
    out: list[str] = []
    for tid in sorted(old.tenants.keys() | new.tenants.keys()):
        a, b = old.tenants.get(tid), new.tenants.get(tid)
        if a is None:
            out.append(f"tenant {tid} added")
        elif b is None:
            out.append(f"tenant {tid} removed")
        elif (a.zone_list, a.primary_zone) != (b.zone_list, b.primary_zone):
            out.append(
                f"tenant {tid} zone_list/primary_zone {';'.join(a.zone_list)}/{a.primary_zone}"
                f" -> {';'.join(b.zone_list)}/{b.primary_zone}"
            )
    for key in sorted(old.plans.keys() | new.plans.keys()):
        p, q = old.plans.get(key), new.plans.get(key)
        name = f"LS {key[1]} of tenant {key[0]}"
        if p is None:
            out.append(f"{name} added")
        elif q is None:
            out.append(f"{name} removed")
        elif p.members != q.members:
            out.append(f"{name} members {_members(p.members)} -> {_members(q.members)}")
        elif p.primary_zone != q.primary_zone:
            out.append(f"{name} primary_zone {p.primary_zone} -> {q.primary_zone}")
    return out


def read_layout(store: MetaStore, version: int) -> Topology:
    """The layout as the tables hold it now, built as :class:`LayoutCache` builds it,
    stamped ``version``. Raises ``ObError(OB_ERR_SYS)`` when the database fails."""
    with store.read() as conn:
        tenants = {t.tenant_id: t for t in tenant_repo.load_tenants(conn).values()}
        ls_rows = ls_repo.load_ls_status(conn)
        units = unit_repo.load_units(conn)
        pools = {p.resource_pool_id: p for p in unit_repo.load_pools(conn).values()}
    return build_topology(version, tenants, ls_rows, units, pools)


def reload_layout(layout: LayoutCache) -> list[str]:
    """ALTER SYSTEM RELOAD UNIT (OceanBase's ``ObRootService::admin_reload_unit``, the unit
    manager reloaded from ``__all_unit`` and friends): the cached layout re-read from the
    tables; returns what changed."""
    before = layout.topology()
    after = layout.topology(force=True)
    return layout_changes(before, after)
