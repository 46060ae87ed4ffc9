"""The one step a statement takes before it answers "done" about leaders: wait until
``DBA_OB_LS_LOCATIONS``, the view operators read, shows what the statement did.

The RS decides from its memory (the agents' replica reports); the view is
``__all_ls_meta_table``, which the ``ls_meta_sync`` task writes every ``ls_check_interval``.
Answering from memory lets the next SELECT contradict the OK for up to that interval. So a
round here asks the servers concerned for a fresh report, syncs the meta table itself and
reads the view back; the statement answers once the view agrees, or fails when its time is
spent, naming the rows that still disagree (nothing half-done is reported as OK).

OceanBase does the same for STOP / FORCE STOP SERVER and STOP ZONE:
``ObAdminServerExecutor::wait_leader_switch_out_`` (and ``ObAdminZoneExecutor``'s) in
``src/sql/engine/cmd/ob_alter_system_executor.cpp`` count ``role = 'LEADER'`` rows of
``CDB_OB_LS_LOCATIONS`` for the servers (the zone) once a second until 0, failing with
OB_WAIT_LEADER_SWITCH_TIMEOUT when the statement's timeout is spent.

Used by DRAIN SERVER (each round), STOP / FORCE STOP / ISOLATE SERVER and STOP ZONE (through
:meth:`rootservice.tenants.leaders.LeaderCoordinator.move_leaders_off`), SWITCH REPLICA LEADER
and the member changes of FORCE DELETE SERVER / RECOVER LS. Times are microseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.db import ls_repo
from rootservice.ha.store import MetaStore
from rootservice.tenants.host_health import HostHealth
from rootservice.tenants.meta_sync import LsMetaSync
from rootservice.tenants.ports import HeartbeatRequester, Sleep
from rootservice.tenants.reports import ReplicaReports
from rootservice.tenants.vocabulary import LsKey

#: Period of the wait's rounds, seconds.
POLL_S = 0.2
#: Bound on the rounds of one wait, whatever the clock says.
MAX_ROUNDS = 100_000

#: (tenant_id, ls_id) -> the servers the view shows as LEADER.
ViewLeaders = dict[LsKey, list[str]]


def ls_text(key: LsKey) -> str:
    """``"LS 1001 (tenant 1002)"``."""
    return f"LS {key[1]} (tenant {key[0]})"


def leaders_on(view: ViewLeaders, servers: Collection[str]) -> list[str]:
    """The LEADER rows of ``view`` on ``servers``: ``"LS 1001 (tenant 1002) on ip:port"``."""
    return [
        f"{ls_text(k)} on {s}" for k, rows in sorted(view.items()) for s in rows if s in servers
    ]


class ViewAgreement:
    """Fresh reports, the meta table synced, the view read back: :meth:`leaders` for one
    round, :meth:`wait` until a check of the view passes."""

    def __init__(
        self,
        *,
        store: MetaStore,
        meta_sync: LsMetaSync,
        heartbeats: HeartbeatRequester,
        health: HostHealth,
        reports: ReplicaReports,
        clock: Clock,
        sleep: Sleep,
    ) -> None:
        """Wire the collaborators; nothing is read until a call."""
        self.store = store
        self.meta_sync = meta_sync
        self.heartbeats = heartbeats
        self.health = health
        self.reports = reports
        self.clock = clock
        self.sleep = sleep

    def leaders(self, refresh: Collection[str] = ()) -> ViewLeaders:
        """One round: a heartbeat requested of each alive server of ``refresh`` ('ip:port'),
        the replica meta table synced from the reports, then what ``DBA_OB_LS_LOCATIONS``
        shows as LEADER. Raises ``ObError`` of the sync (OB_RS_NOT_MASTER, OB_ERR_SYS) and of
        the read."""
        alive = [s for s in sorted(set(refresh)) if self.health.is_alive(s)]
        if alive:
            self.heartbeats.request_heartbeats(alive)
        self.meta_sync.sync_meta()
        with self.store.read() as conn:
            return ls_repo.view_leaders(conn)

    def wait(
        self,
        what: str,
        disagreements: Callable[[ViewLeaders], list[str]],
        *,
        refresh: Collection[str],
        deadline_us: int,
        code: str = "OB_TIMEOUT",
    ) -> None:
        """Rounds of :meth:`leaders` every :data:`POLL_S` until ``disagreements(view)`` is
        empty. Raises ``ObError(code)`` once ``deadline_us`` (the RS's wall clock) has passed,
        its text ``"<what>: DBA_OB_LS_LOCATIONS still shows <the disagreements>"``; and
        ``ObError`` of a round."""
        left: list[str] = []
        for _ in range(MAX_ROUNDS):
            left = disagreements(self.leaders(refresh))
            if not left:
                return
            if self.clock.now_us() >= deadline_us:
                break
            self.sleep(POLL_S)
        shown = "; ".join(left[:10]) + (f"; and {len(left) - 10} more" if len(left) > 10 else "")
        raise ObError(code, detail=f"{what}: DBA_OB_LS_LOCATIONS still shows {shown}")

    def wait_leaders_off(self, servers: Collection[str], deadline_us: int, what: str) -> None:
        """Until the view shows no LEADER row on ``servers``. Raises
        OB_WAIT_LEADER_SWITCH_TIMEOUT naming the rows left (and what :meth:`wait` raises)."""
        keys = set(servers)
        self.wait(
            what,
            lambda view: [f"LEADER {r}" for r in leaders_on(view, keys)],
            refresh=keys,
            deadline_us=deadline_us,
            code="OB_WAIT_LEADER_SWITCH_TIMEOUT",
        )

    def wait_leader(
        self, key: LsKey, server: str, refresh: Collection[str], deadline_us: int
    ) -> None:
        """Until the view shows ``server`` as the one LEADER of LS ``key`` (or, when the
        reports say the leader moved on at a later term than the first round saw, that
        leader: the view then agrees with what is). Raises OB_WAIT_LEADER_SWITCH_TIMEOUT naming the LEADER rows it shows instead."""

        first_term: list[int] = []

        def wrong(view: ViewLeaders) -> list[str]:
            rows = view.get(key, [])
            now = self.reports.views().get(key)
            term = now.term if now is not None else 0
            first_term[:1] = first_term[:1] or [term]
            if rows == [server]:
                return []
            # Moved on at a later term than the first round saw (the reconciler's choice):
            # the view agrees with what is, which is all the answer may wait for.
            if now is not None and now.leader and rows == [now.leader] and term > first_term[0]:
                return []
            return [f"{ls_text(key)} led by {', '.join(rows) or 'no server'}"]

        self.wait(
            f"{ls_text(key)} switched to {server}",
            wrong,
            refresh={server, *refresh},
            deadline_us=deadline_us,
            code="OB_WAIT_LEADER_SWITCH_TIMEOUT",
        )

    def wait_led(
        self,
        keys: Collection[LsKey],
        avoid: Collection[str],
        refresh: Collection[str],
        deadline_us: int,
        what: str,
    ) -> None:
        """Until the view shows each LS of ``keys`` with exactly one LEADER row, on none of
        ``avoid`` and on the leader the reports name (when they name one). Raises
        OB_WAIT_LEADER_SWITCH_TIMEOUT naming each LS and the LEADER rows it shows."""
        gone = set(avoid)

        def wrong(view: ViewLeaders) -> list[str]:
            now = self.reports.views()
            out = []
            for key in sorted(keys):
                rows = view.get(key, [])
                lead = now[key].leader if key in now else None
                if len(rows) == 1 and rows[0] not in gone and lead in (None, rows[0]):
                    continue
                out.append(f"{ls_text(key)} led by {', '.join(rows) or 'no server'}")
            return out

        self.wait(
            what,
            wrong,
            refresh=set(refresh) - gone,
            deadline_us=deadline_us,
            code="OB_WAIT_LEADER_SWITCH_TIMEOUT",
        )
