"""Taking office and stepping down (docs/design/ha.md#taking-office).

The election (:class:`rootservice.ha.election.Election`) calls :meth:`Office.take_office` in
the round that won the lease, and :meth:`Office.step_down` in its own thread once a
step-down was requested (:meth:`rootservice.ha.term.Term.request_step_down`), so the two
never run at the same time.

Taking office with a new epoch:

1. re-read ``__all_sys_parameter`` (a former leader may have changed parameters) and whether
   the cluster is bootstrapped; if not, wait for ALTER SYSTEM BOOTSTRAP (WAIT_BOOTSTRAP);
2. :meth:`Office.do_restart` (OceanBase's ``ObRootService::do_restart``): IN_SERVICE, the
   cluster id and the rs_list (this RS added to the 8 most recent leaders), load the
   whitelist and zones from the tables with the take-office grace, open the service window,
   write the rs_list and the ``rs_take_office`` event, start the leader's timers, ask every
   server that is not alive for a heartbeat, FULL_SERVICE.

Stepping down: stop the leader's timers, close the service window, drop the queued table
changes, the whitelist, the zones and every other piece of leader-only state (the
``forget`` list), NOT_MASTER; a later term loads everything afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.db import cluster_version_repo, event_repo, param_repo
from rootservice.db.event_repo import Event
from rootservice.ha.election import merge_rs_list
from rootservice.ha.store import MetaStore
from rootservice.ha.term import CLEAN_STOP, HANDOVER, RsState, Term
from rootservice.metrics import Metrics
from rootservice.parameters import Parameters
from rootservice.servers.identity import ClusterIdentity
from rootservice.servers.loader import ServerLoader, TakeOfficeGrace
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.ports import Background, HeartbeatRequests
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager
from rootservice.timers import Schedule, Timers
from rootservice.upgrade.mode import stage_of
from rootservice.upgrade.versions import Versions

log = logging.getLogger(__name__)


class LeaderTasks(Protocol):
    """The leader's background tasks with their current intervals (read at each start, so
    ALTER SYSTEM SET applies)."""

    def leader_tasks(self) -> Schedule:
        """``(task, interval_us)`` pairs."""
        ...


class Office:
    """The take-office and step-down paths of one RS.

    ``forget`` lists what else a deposed leader drops (the tenant layer's replica reports
    and layout cache, the balancer's migrations...), each called once per step-down in the
    election thread; a failing one is logged and the others still run. ``address()`` is this
    RS's ``ip:port``.
    """

    def __init__(
        self,
        *,
        term: Term,
        store: MetaStore,
        clock: Clock,
        metrics: Metrics,
        parameters: Parameters,
        identity: ClusterIdentity,
        loader: ServerLoader,
        whitelist: Whitelist,
        zones: ZoneManager,
        persist: PersistQueue,
        grace: TakeOfficeGrace,
        heartbeats: HeartbeatRequests,
        background: Background,
        timers: Timers,
        tasks: LeaderTasks,
        forget: Sequence[Callable[[], None]],
        address: Callable[[], str],
        versions: Versions | None = None,
    ) -> None:
        """Nothing happens until the election calls in. ``versions`` gets the cluster version
        read at each restart (None: not read)."""
        self.versions = versions
        self.term = term
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.parameters = parameters
        self.identity = identity
        self.loader = loader
        self.whitelist = whitelist
        self.zones = zones
        self.persist = persist
        self.grace = grace
        self.heartbeats = heartbeats
        self.background = background
        self.timers = timers
        self.tasks = tasks
        self.forget = list(forget)
        self.address = address

    def take_office(self, epoch: int) -> None:
        """Take office with ``epoch``, just won by the election (step 1 of the module doc).
        Raises ``ObError`` (the election then steps down again and releases the lease)."""
        started = self.clock.monotonic_us()
        if self.term.epoch != epoch:
            raise ObError("OB_RS_NOT_MASTER", detail=f"epoch {epoch} lost while taking office")
        with self.store.read() as conn:
            params = param_repo.load_params(conn)
        try:
            self.parameters.apply_table(params)
        except ValueError as e:
            raise ObError("OB_ERR_SYS", detail=str(e)) from e
        # What GV$OB_PARAMETERS shows of each parameter is this leader's.
        self.parameters.publish()
        self.identity.bootstrapped = param_repo.PARAM_BOOTSTRAP_TIME in params
        log.info("root service at %s took office with epoch %d", self.address(), epoch)
        self.metrics.inc("rs_take_office_total")
        if self.identity.bootstrapped:
            self.do_restart()
        else:
            self.term.state = RsState.WAIT_BOOTSTRAP
            log.info("the cluster is not bootstrapped: waiting for ALTER SYSTEM BOOTSTRAP")
        self.metrics.window("take_office_us").record(self.clock.monotonic_us() - started)

    def do_restart(self) -> None:
        """Step 2 of the module doc: load_server_manager, start the timers, request
        heartbeats from servers that are not alive, FULL_SERVICE. Raises ``ObError`` when
        the database fails."""
        self.term.state = RsState.IN_SERVICE
        with self.store.read() as conn:
            params = param_repo.load_params(conn)
            cluster_version = cluster_version_repo.get(conn) if self.versions else None
        if self.versions is not None and cluster_version is not None:
            # A former leader may have finalized an upgrade, or begun or ended upgrade mode:
            # the gates follow the table.
            self.versions.set_cluster(cluster_version)
            self.versions.set_upgrade_stage(stage_of(params))
        self.identity.cluster_id = params.get(param_repo.PARAM_CLUSTER_ID, "")
        stored_rs_list = params.get(param_repo.PARAM_RS_LIST, "")
        self.identity.rs_list = merge_rs_list(stored_rs_list, self.address())
        self.loader.load(take_office=True)
        self.term.open_service()
        now = self.clock.now_us()
        with self.store.txn() as conn:
            if ";".join(self.identity.rs_list) != stored_rs_list:
                param_repo.set_param(
                    conn,
                    param_repo.PARAM_RS_LIST,
                    ";".join(self.identity.rs_list),
                    now,
                    "root service list",
                )
            event_repo.insert_events(
                conn,
                [
                    Event(
                        now,
                        "root_service",
                        "rs_take_office",
                        (("epoch", self.store.epoch), ("rs", self.address())),
                    )
                ],
                self.store.rs_addr,
            )
        self.timers.start(self.tasks.leader_tasks())
        # docs/design/leases.md: every server not alive is asked, and "not alive" is judged at its
        # turn: after a restart the agents reconnect by themselves while thousands of
        # requests go out 32 at a time, and asking one that is back costs both sides a TLS
        # handshake in the middle of the reconnect storm.
        not_alive = self.whitelist.not_alive_servers()
        self.background(
            lambda: self.heartbeats.request_heartbeats(not_alive, unless=self.whitelist.is_alive)
        )
        self.term.state = RsState.FULL_SERVICE
        log.info(
            "root service is in FULL_SERVICE with %d servers", self.whitelist.counts()["servers"]
        )

    def step_down(self, reason: str) -> None:
        """The clean-up of a step-down, in the election thread: stop the leader's timers,
        drop the in-memory state of the finished term and stand by."""
        self.timers.stop()
        for drop in (self._drop_server_state, *self.forget):
            try:
                drop()
            except Exception:
                log.exception("dropping in-memory state failed")
        self.term.state = RsState.NOT_MASTER
        if reason == CLEAN_STOP or reason.startswith(HANDOVER):
            log.info("stepped down (%s)", reason)
        else:
            log.warning("stepped down (%s); standing by", reason, extra={"reason": reason})

    def _drop_server_state(self) -> None:
        self.term.close_service()
        dropped = self.persist.clear()
        if dropped:
            log.warning("dropped %d queued table changes of the finished term", dropped)
        self.grace.clear()
        self.whitelist.clear()
        self.zones.replace_all({})
