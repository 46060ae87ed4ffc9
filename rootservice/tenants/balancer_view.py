"""The balancer's view of the tenant layer: the one object ``rootservice.balancer`` is given
as ``ls`` (docs/design/migration.md).

The balancer (unit migration, replica copies, disaster recovery) reads the layout and the
reports, sends replica specs and asks for reconciler rounds and leader switches; each call
is delegated to the tenant class that owns it. Nothing else should use this facade: other
callers take the owning class directly.
"""

from __future__ import annotations

from collections.abc import Iterable

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.tenants.leaders import LeaderCoordinator
from rootservice.tenants.meta_sync import LsMetaSync
from rootservice.tenants.reconciler import LsReconciler
from rootservice.tenants.replica_specs import ReplicaApplier
from rootservice.tenants.reports import LsView, ReplicaReports, effective_members
from rootservice.tenants.topology import LayoutCache, LayoutVersion, LsPlan, Topology
from rootservice.tenants.vocabulary import LsKey


class BalancerView:
    """Delegates to the layout cache, the reports, the replica applier, the leader
    coordinator, the reconciler and the meta sync. ``tenants`` is the
    :class:`LayoutVersion` (the balancer bumps ``tenants.version`` after moving units)."""

    def __init__(
        self,
        *,
        layout: LayoutCache,
        reports: ReplicaReports,
        applier: ReplicaApplier,
        leaders: LeaderCoordinator,
        reconciler: LsReconciler,
        meta_sync: LsMetaSync,
    ) -> None:
        """Wire the owners of each call."""
        self.layout = layout
        self._reports = reports
        self.applier = applier
        self.leaders = leaders
        self.reconciler = reconciler
        self.meta_sync = meta_sync

    @property
    def tenants(self) -> LayoutVersion:
        """The layout version (``.version`` is bumped by whoever changes the layout)."""
        return self.layout.version

    def topology(self, *, force: bool = False) -> Topology:
        """See :meth:`LayoutCache.topology`. Raises ``ObError(OB_ERR_SYS)``."""
        return self.layout.topology(force=force)

    def views(self) -> dict[LsKey, LsView]:
        """See :meth:`ReplicaReports.views`."""
        return self._reports.views()

    def reports(self) -> dict[str, dict[LsKey, obrpc_pb2.ReplicaInfo]]:
        """See :meth:`ReplicaReports.reports`."""
        return self._reports.reports()

    def members(self, plan: LsPlan, view: LsView) -> list[str]:
        """See :func:`rootservice.tenants.reports.effective_members`."""
        return effective_members(plan, view)

    def apply(
        self, server: str, upsert: Iterable[obrpc_pb2.ReplicaSpec] = (), drop: Iterable[LsKey] = ()
    ) -> obrpc_pb2.ApplyReplicasResponse:
        """One ApplyReplicas call (see :meth:`ReplicaApplier.apply`). Raises ``ObError``."""
        return self.applier.apply(server, upsert, drop)

    def apply_many(
        self,
        work: dict[str, list[obrpc_pb2.ReplicaSpec]],
        drops: dict[str, list[LsKey]] | None = None,
    ) -> dict[str, ObError]:
        """See :meth:`ReplicaApplier.apply_many`: failures by server."""
        return self.applier.apply_many(work, drops)

    def copy_spec(self, plan: LsPlan, view: LsView, dest: str, src: str) -> obrpc_pb2.ReplicaSpec:
        """See :meth:`ReplicaApplier.copy_spec`."""
        return self.applier.copy_spec(plan, view, dest, src)

    def announce_copy(self, plan: LsPlan, view: LsView, dest: str, src: str) -> LsView:
        """See :meth:`ReplicaApplier.announce_copy`. Raises ``ObError``."""
        return self.applier.announce_copy(plan, view, dest, src)

    def switch_leader(self, key: LsKey, new_leader: str, reason: str) -> None:
        """See :meth:`LeaderCoordinator.switch_leader`. Raises ``ObError``."""
        self.leaders.switch_leader(key, new_leader, reason)

    def reconcile(self, only: set[LsKey] | None = None) -> int:
        """See :meth:`LsReconciler.reconcile`."""
        return self.reconciler.reconcile(only=only)

    def forget_meta(self) -> None:
        """See :meth:`LsMetaSync.forget_meta`."""
        self.meta_sync.forget_meta()

    def clear(self) -> None:
        """Forget reports and caches (the RS steps down or reloads)."""
        self._reports.clear()
        self.layout.clear()
        self.meta_sync.forget_meta()
