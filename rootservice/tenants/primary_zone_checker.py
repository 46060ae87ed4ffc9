"""The ``primary_zone_checker`` task: the progress and the end of the
``ALTER_TENANT_PRIMARY_ZONE`` jobs (OceanBase's ``ObAlterPrimaryZoneChecker``,
src/rootserver/ob_alter_primary_zone_checker.cpp, which completes the job once the tenant's
leaders are balanced on its new primary zone).

A job's tenant is done when every one of its log streams has a leader in a zone of the first
priority of its primary zone (any zone for ``RANDOM``): the job becomes SUCCESS. Until then
``progress`` is the share of log streams led there (0-99) and ``extra_info`` names them. A
tenant dropped meanwhile ends its job FAILED with ``OB_TENANT_NOT_EXIST``. The leaders
themselves are moved by the reconciler (:meth:`rootservice.tenants.leaders.LeaderCoordinator.coordinate`).
"""

from __future__ import annotations

import logging

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.db import job_repo
from rootservice.ha.store import MetaStore
from rootservice.tenants.host_health import HostHealth
from rootservice.tenants.pause import PausableGate
from rootservice.tenants.reports import ReplicaReports
from rootservice.tenants.topology import LayoutCache

log = logging.getLogger(__name__)

JOB_TYPE = "ALTER_TENANT_PRIMARY_ZONE"


class PrimaryZoneChecker:
    """The task (``name = "primary_zone_checker"``); see the module doc. ``gate`` gates each
    run; ``layout``, ``reports`` and ``health`` tell where the leaders are and should be."""

    name = "primary_zone_checker"

    def __init__(
        self,
        *,
        gate: PausableGate,
        store: MetaStore,
        layout: LayoutCache,
        reports: ReplicaReports,
        health: HostHealth,
        clock: Clock,
    ) -> None:
        """Nothing is read until the first run."""
        self.gate = gate
        self.store = store
        self.layout = layout
        self.reports = reports
        self.health = health
        self.clock = clock
        # job_id -> (progress, extra_info) last written: an unchanged job is not rewritten.
        self._written: dict[int, tuple[int, str]] = {}

    def run_once(self) -> int:
        """Write each INPROGRESS job's progress, ending the finished ones. Returns the jobs
        ended. Nothing is read while the RS may not act, nor written when no job is open.
        Raises ``ObError`` when a transaction fails (the next run starts afresh)."""
        if not self.gate.may_act():
            return 0
        with self.store.read() as conn:
            jobs = job_repo.inprogress_tenant_jobs(conn, JOB_TYPE)
        if not jobs:
            return 0
        topo = self.layout.topology()
        views = self.reports.views()
        ended = 0
        now = self.clock.now_us()
        with self.store.txn() as conn:
            for tenant_id, job_id in jobs.items():
                if tenant_id not in {t.tenant_id for t in topo.tenants.values()}:
                    code = ObError("OB_TENANT_NOT_EXIST").code
                    ended += job_repo.finish_job(conn, job_id, "FAILED", now, code)
                    continue
                plans = [p for k, p in sorted(topo.plans.items()) if k[0] == tenant_id]
                waiting = []
                for p in plans:
                    view = views.get(p.key)
                    leader = view.leader if view is not None else None
                    zone = self.health.zone_of(p, leader) if leader else ""
                    if not leader or p.zone_priority.get(zone, 99) != 0:
                        waiting.append(f"LS {p.key[1]} led in {zone or 'no zone'}")
                if not waiting:
                    ended += job_repo.finish_job(conn, job_id, "SUCCESS", now)
                    log.info("tenant %d: leaders on the primary zone (job %d)", tenant_id, job_id)
                    continue
                done = len(plans) - len(waiting)
                progress = min(99, done * 100 // len(plans)) if plans else 0
                info = f"{done} of {len(plans)} log stream(s) led in the primary zone; " + (
                    ", ".join(waiting[:10])
                )
                if self._written.get(job_id) != (progress, info):
                    job_repo.set_job_progress(conn, job_id, progress, info, now)
                    self._written[job_id] = (progress, info)
        self._written = {j: w for j, w in self._written.items() if j in jobs.values()}
        return ended
