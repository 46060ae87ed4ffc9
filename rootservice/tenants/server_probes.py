"""What the empty-server checker asks of the tenant layer about a DELETING server
(docs/design/migration.md; OceanBase's ``ObEmptyServerChecker``): does it still host units or replicas, may
anything be removed now (every LS has a leader), and which rows go with it.
"""

from __future__ import annotations

from typing import Any

from rootservice.db import ls_repo, unit_repo
from rootservice.ha.store import MetaStore
from rootservice.tenants.meta_sync import LsMetaSync
from rootservice.tenants.reports import LsView, ReplicaReports
from rootservice.tenants.topology import LayoutCache


class ServerProbes:
    """``has_units`` / ``has_replicas`` / ``all_ls_have_leader`` / ``extra_deletes``."""

    def __init__(
        self,
        store: MetaStore,
        layout: LayoutCache,
        reports: ReplicaReports,
        meta_sync: LsMetaSync,
    ) -> None:
        """Read ``__all_unit`` / ``__all_ls_meta_table`` through ``store``; the leaders from
        ``reports``; ``meta_sync`` owns the space-usage rows of a removed server."""
        self.store = store
        self.layout = layout
        self.reports = reports
        self.meta_sync = meta_sync

    def has_units(self, server: str) -> bool:
        """``server`` ('ip:port') hosts a unit, or a unit is migrating away from it."""
        ip, _, port = server.rpartition(":")
        with self.store.read() as conn:
            return bool(unit_repo.units_on_server(conn, ip, int(port)))

    def has_replicas(self, server: str) -> bool:
        """Some LS leader has ``server`` in its member list, or ``__all_ls_meta_table`` has a
        replica on it."""
        for v in self.reports.views().values():
            if v.leader is not None and server in v.replicas[v.leader].member_list:
                return True
        ip, _, port = server.rpartition(":")
        with self.store.read() as conn:
            return ls_repo.replicas_on_server(conn, ip, int(port)) > 0

    def all_ls_have_leader(self) -> bool:
        """Every LS of the layout has a leader."""
        views = self.reports.views()
        return all(views.get(k, LsView(k)).leader is not None for k in self.layout.topology().plans)

    def extra_deletes(self, conn: Any, ip: str, port: int) -> None:
        """Rows removed with a deleted server, in its removal transaction ``conn``: its
        ``__all_space_usage``."""
        self.meta_sync.delete_space_of_server(conn, ip, port)
