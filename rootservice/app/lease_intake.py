"""The lease intake's objects wired together for the composition root
(:class:`rootservice.app.wiring.RsComponents`): the heartbeat handler and its queue, the RS's
own intake lag, the agents' parameters read by every lease answer, the 100 ms lease checker,
the RS's suspicion of itself after a mass expiry, and ``check_all_server``. Nothing is
started here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from obcommon.clock import Clock
from obcommon.proto import obrpc_pb2
from rootservice.config import RsSettings
from rootservice.ha.fence import EpochFence
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.metrics import Metrics
from rootservice.servers.admin import ServerAdmin
from rootservice.servers.agent_parameters import AgentParameterValues
from rootservice.servers.check_all_server import CheckAllServerTask
from rootservice.servers.command_ledger import CommandLedger
from rootservice.servers.heartbeat import HeartbeatIntake
from rootservice.servers.identity import ClusterIdentity
from rootservice.servers.intake_health import IntakeHealth
from rootservice.servers.lease_checker import LeaseChecker
from rootservice.servers.lease_queue import PACE_DIVISOR, LeaseQueue
from rootservice.servers.loader import TakeOfficeGrace
from rootservice.servers.loop_load import LoopLoad
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.ports import Background
from rootservice.servers.self_suspicion import SelfSuspicion
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager
from rootservice.tenants.reports import ReplicaReports
from rootservice.upgrade.versions import Versions


@dataclass
class LeaseIntake:
    """The lease intake's objects, one per concern (see each class)."""

    intake_health: IntakeHealth
    loop_load: LoopLoad
    lease_queue: LeaseQueue[obrpc_pb2.LeaseResponse]
    agent_values: AgentParameterValues
    heartbeats: HeartbeatIntake
    self_suspicion: SelfSuspicion
    lease_checker: LeaseChecker
    check_all_server: CheckAllServerTask


@dataclass
class IntakeParts:
    """What the intake is built from (the composition root's objects)."""

    whitelist: Whitelist
    zones: ZoneManager
    persist: PersistQueue
    grace: TakeOfficeGrace
    identity: ClusterIdentity
    term: Term
    store: MetaStore
    clock: Clock
    settings: RsSettings
    metrics: Metrics
    replicas: ReplicaReports
    server_admin: ServerAdmin
    wake: Callable[[str], None]
    background: Background
    fence: EpochFence
    commands: CommandLedger
    versions: Versions


def build_lease_intake(
    p: IntakeParts, *, measure_ticks: bool, sleep: Callable[[float], None]
) -> LeaseIntake:
    """Build the intake from ``p``; ``measure_ticks`` says whether the checker's tick lateness
    is measured (only when the timers run it: unit tests tick by hand); ``sleep`` (seconds)
    paces ``check_all_server``'s pages. Raises nothing."""
    # The RS's own intake delay lengthens the leases.
    intake_health = IntakeHealth(p.clock, p.settings, measure_ticks=measure_ticks)
    # The lease streams' requests wait here, seen: fair turns, the intake lag, and no
    # expiry of a server whose request waits.
    # A server's renewals are paced to one per lease_time / PACE_DIVISOR.
    settings = p.settings
    # The event loop's busy share (its selector is made here, the loop by the serve command):
    # one of the two signs of saturation that turn the pacing on.
    loop_load = LoopLoad()
    lease_queue: LeaseQueue[obrpc_pb2.LeaseResponse] = LeaseQueue(
        p.clock,
        p.persist.add_event,
        pace_us=lambda: settings.lease_time // PACE_DIVISOR,
        loop_saturated=loop_load.saturated,
    )
    # The agents' parameters by zone and server, kept by the parameters and read by every
    # lease answer.
    agent_values = AgentParameterValues(p.settings)
    heartbeats = HeartbeatIntake(
        p.whitelist,
        p.zones,
        p.persist,
        p.grace,
        p.identity,
        p.term,
        p.store,
        p.clock,
        p.settings,
        replicas=p.replicas,
        server_ops=p.server_admin,
        wake=p.wake,
        background=p.background,
        transit=intake_health,
        fence=p.fence,
        commands=p.commands,
        versions=p.versions,
        agent_params=agent_values,
    )
    # A mass expiry makes the RS suspect itself and hold permanent offline.
    whitelist = p.whitelist
    self_suspicion = SelfSuspicion(
        p.clock,
        p.settings,
        is_alive=lambda key: (s := whitelist.records.get(key)) is not None and s.is_alive(),
        add_event=p.persist.add_event,
    )
    lease_checker = LeaseChecker(
        p.whitelist,
        p.persist,
        p.grace,
        p.term,
        p.clock,
        p.settings,
        p.metrics,
        p.wake,
        allowance=intake_health,
        suspicion=self_suspicion,
        queued=lease_queue,
        upgrade=p.versions,
    )
    check_all_server = CheckAllServerTask(
        p.whitelist, p.persist, p.grace, p.term, p.store, p.metrics, sleep
    )
    return LeaseIntake(
        intake_health=intake_health,
        loop_load=loop_load,
        lease_queue=lease_queue,
        agent_values=agent_values,
        heartbeats=heartbeats,
        self_suspicion=self_suspicion,
        lease_checker=lease_checker,
        check_all_server=check_all_server,
    )
