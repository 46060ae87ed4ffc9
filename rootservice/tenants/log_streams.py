"""A tenant's log-stream replicas on the agents: created by CREATE TENANT, dropped by DROP
TENANT (docs/design/statements.md).

The rows (``__all_ls_status``, ``__all_unit``) are written by the DDL first; this module then
tells the agents: every replica of a new tenant at term 1 with its leader in the primary
zone, and waits until each LS has a leader, driving the reconciler meanwhile. Times are
microseconds since the epoch.
"""

from __future__ import annotations

import logging

from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.config import RsSettings
from rootservice.tenants.leaders import LeaderCoordinator
from rootservice.tenants.ports import Sleep
from rootservice.tenants.reconciler import LsReconciler
from rootservice.tenants.replica_specs import ReplicaApplier
from rootservice.tenants.reports import LsView, ReplicaReports
from rootservice.tenants.topology import LayoutCache
from rootservice.tenants.vocabulary import LsKey

__all__ = ["POLL_S", "TenantReplicas"]

log = logging.getLogger(__name__)

# Poll period (seconds) of the wait for a new tenant's leaders.
POLL_S = 0.2


class TenantReplicas:
    """Creates and drops the replicas of one tenant's log streams."""

    def __init__(
        self,
        *,
        layout: LayoutCache,
        reports: ReplicaReports,
        applier: ReplicaApplier,
        leaders: LeaderCoordinator,
        reconciler: LsReconciler,
        clock: Clock,
        settings: RsSettings,
        sleep: Sleep,
    ) -> None:
        """Wire the collaborators; ``sleep`` waits between polls (seconds)."""
        self.layout = layout
        self.reports = reports
        self.applier = applier
        self.leaders = leaders
        self.reconciler = reconciler
        self.clock = clock
        self.settings = settings
        self.sleep = sleep

    def create_tenant_replicas(self, tenant_id: int) -> None:
        """Tell the agents to create every replica of ``tenant_id`` (term 1, leader in the
        primary zone), then wait up to ``tenant_create_timeout`` until each LS has a leader.
        Raises ``ObError(OB_TIMEOUT)`` naming the log streams still without one."""
        topo = self.layout.topology(force=True)
        plans = [p for k, p in topo.plans.items() if k[0] == tenant_id]
        work: dict[str, list[obrpc_pb2.ReplicaSpec]] = {}
        for plan in plans:
            leader = self.leaders.choose_leader(plan, LsView(plan.key), set(), require_report=False)
            for server in plan.members:
                work.setdefault(server, []).append(self.applier.spec(plan, server, leader or "", 1))
        failures = self.applier.apply_many(work)
        for server, e in failures.items():
            log.warning("creating replicas of tenant %d on %s failed: %s", tenant_id, server, e)
        deadline = self.clock.now_us() + self.settings.tenant_create_timeout
        missing: list[LsKey] = []
        for _ in range(100_000):
            views = self.reports.views()
            missing = [p.key for p in plans if views.get(p.key, LsView(p.key)).leader is None]
            if not missing or self.clock.now_us() >= deadline:
                break
            self.reconciler.reconcile(only=set(missing))
            self.sleep(POLL_S)
        if missing:
            raise ObError(
                "OB_TIMEOUT",
                detail=(
                    f"tenant {tenant_id} was created, but log stream(s) "
                    f"{', '.join(str(k[1]) for k in missing[:10])} have no leader yet; "
                    "the root service keeps creating them"
                ),
            )

    def drop_tenant_replicas(self, tenant_id: int) -> None:
        """Tell every server reporting a replica of ``tenant_id`` to drop it (best effort:
        the reconciler drops what is left)."""
        self.layout.topology(force=True)
        drops: dict[str, list[LsKey]] = {}
        for server, table in self.reports.reports().items():
            for k in table:
                if k[0] == tenant_id:
                    drops.setdefault(server, []).append(k)
        for server, e in self.applier.apply_many({}, drops).items():
            log.warning("dropping replicas of tenant %d on %s failed: %s", tenant_id, server, e)
