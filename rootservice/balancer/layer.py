"""Building the emptying layer (docs/design/migration.md): the planner, the unit moves, the copy
hand-out, the re-plan of copy destinations, the DELETE SERVER jobs, the balancer round, its
dry run and the lost-replica checker, in dependency order, kept together in one :class:`BalancerLayer` (the RS's
composition root, :mod:`rootservice.app.wiring`, takes them from it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from obcommon.clock import Clock
from rootservice.balancer.copy_replan import CopyReplan
from rootservice.balancer.copy_tasks import CopyTasks, CopyWatch
from rootservice.balancer.dry_run import DeleteDryRun
from rootservice.balancer.job_progress import DeleteJobProgress
from rootservice.balancer.lost_replica_checker import LostReplicaChecker
from rootservice.balancer.partial_replica_gc import PartialReplicaGc
from rootservice.balancer.planner import Planner
from rootservice.balancer.planners import LazySparkPlanner, PandasPlanner, SwitchablePlanner
from rootservice.balancer.ports import EventSink, UpgradeHold, Waker, Whitelist
from rootservice.balancer.replica_adds import ReplicaAdds
from rootservice.balancer.root_balancer import RootBalancer
from rootservice.balancer.unit_migration import LockedStore, ManualUnitMoves
from rootservice.balancer.unit_moves import UnitMoves
from rootservice.config import RsSettings
from rootservice.metrics import Metrics
from rootservice.tenants.layer import TenantLayer


@dataclass(frozen=True)
class BalancerLayer:
    """The emptying layer's objects, one per concern (see each class)."""

    planner: SwitchablePlanner
    unit_moves: UnitMoves
    copy_tasks: CopyTasks
    copy_replan: CopyReplan
    delete_jobs: DeleteJobProgress
    migration: RootBalancer
    delete_dry_run: DeleteDryRun
    lost_replica_checker: LostReplicaChecker
    #: ALTER SYSTEM MIGRATE UNIT / CANCEL MIGRATE UNIT and their jobs' progress.
    manual_moves: ManualUnitMoves
    #: Wakes the balancer / the empty-server checker when a copy ends or a server is empty,
    #: instead of their next period.
    copy_watch: CopyWatch
    #: Partial replicas nothing wants any more (a cancel's drop that lost a race), dropped.
    partial_replica_gc: PartialReplicaGc


def build_balancer_layer(
    *,
    servers: Whitelist,
    tenants: TenantLayer,
    events: EventSink,
    store: LockedStore,
    clock: Clock,
    settings: RsSettings,
    metrics: Metrics,
    wake: Waker,
    spark: Planner | None = None,
    background: Callable[[Callable[[], None]], object] | None = None,
    upgrade: UpgradeHold | None = None,
) -> BalancerLayer:
    """Build the emptying layer on the server whitelist ``servers`` and the tenant layer.

    ``spark`` replaces the Spark planner behind ``balancer_planner = 'spark'`` (fake-clock
    tests pass the pandas one or one that fails); by default a SparkSession starts on its
    first use. ``wake`` runs a registered background task now by name; ``background`` runs
    the drop of a cancelled move's partial replicas (None: inline); ``upgrade`` holds
    re-replication in upgrade mode (None: never). Nothing is started.
    """
    # Plans by Spark or pandas, as balancer_planner says at each call; a failed plan is
    # counted, logged and recorded by the one planner object.
    planner = SwitchablePlanner(
        settings,
        spark=spark or LazySparkPlanner(settings),
        local=PandasPlanner(settings.effective_db_url()),
        events=events,
        metrics=metrics,
        clock=clock,
    )
    units = UnitMoves(
        servers=servers,
        ls=tenants.balancer_view,
        layout=tenants.version,
        store=store,
        clock=clock,
        metrics=metrics,
        wake=wake,
    )
    copies = CopyTasks(
        servers=servers,
        ls=tenants.balancer_view,
        events=events,
        store=store,
        clock=clock,
        settings=settings,
        metrics=metrics,
    )
    # A stalled or drained copy destination sent elsewhere.
    replan = CopyReplan(
        copies=copies,
        ls=tenants.balancer_view,
        rooms=tenants.rooms,
        servers=servers,
        store=store,
        layout=tenants.version,
        clock=clock,
        settings=settings,
        metrics=metrics,
        wake=wake,
    )
    jobs = DeleteJobProgress(
        servers=servers,
        ls=tenants.balancer_view,
        events=events,
        store=store,
        clock=clock,
        settings=settings,
        units=units,
        copies=copies,
    )
    # Log streams short of a replica in a zone of their units (after RECOVER LS / FORCE
    # DELETE SERVER): copies added through the same hand-out, jobs saying why they wait.
    adds = ReplicaAdds(
        servers=servers,
        ls=tenants.balancer_view,
        unplaced=lambda: units.unplaced,
        store=store,
        events=events,
        clock=clock,
    )
    # Units moved by hand, by the same unit moves and copies.
    manual = ManualUnitMoves(
        servers=servers,
        zones=tenants.rooms.zones,
        rooms=tenants.rooms,
        ls=tenants.balancer_view,
        units=units,
        copies=copies,
        store=store,
        clock=clock,
        wake=wake,
        background=background,
    )
    return BalancerLayer(
        planner=planner,
        unit_moves=units,
        copy_tasks=copies,
        copy_replan=replan,
        delete_jobs=jobs,
        migration=RootBalancer(
            servers=servers,
            ls=tenants.balancer_view,
            planner=planner,
            term=tenants.gate,
            units=units,
            copies=copies,
            jobs=jobs,
            replan=replan,
            adds=adds,
            manual=manual,
            upgrade=upgrade,
        ),
        # EXPLAIN ALTER SYSTEM DELETE SERVER: the balancer's planner on
        # the servers as DELETE would leave them; reads only, never the round's lock.
        delete_dry_run=DeleteDryRun(
            planner=planner, servers=servers, ls=tenants.balancer_view, store=store
        ),
        lost_replica_checker=LostReplicaChecker(
            servers=servers,
            ls=tenants.balancer_view,
            planner=planner,
            term=tenants.gate,
            store=store,
            wake=wake,
            metrics=metrics,
            upgrade=upgrade,
        ),
        manual_moves=manual,
        copy_watch=CopyWatch(
            copies=copies,
            servers=servers,
            contents=tenants.probes,
            wake=wake,
            term=tenants.gate,
        ),
        partial_replica_gc=PartialReplicaGc(
            ls=tenants.balancer_view,
            counts=tenants.reports,
            copies=copies,
            term=tenants.gate,
            events=events,
            metrics=metrics,
            clock=clock,
        ),
    )
