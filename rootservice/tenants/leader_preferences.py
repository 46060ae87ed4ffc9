"""``ALTER SYSTEM SWITCH REPLICA {LEADER | FOLLOWER | DEFAULT}``: the leader preferences of a
log stream, as OceanBase 4.x keeps them (src/rootserver/ob_admin_switch_replica_role.cpp,
``__all_ls_election_reference_info``).

- **LEADER** makes the server the LS's manual leader and moves the leadership there now. It
  is sticky: the leader coordinator (:class:`rootservice.tenants.leaders.LeaderCoordinator`)
  never moves it for the primary zone, and gives it back to the manual leader whenever that
  server can lead again. The server must be in the cluster (OB_ENTRY_NOT_EXIST "server not
  in cluster"), ACTIVE (OB_OP_NOT_ALLOW "server not active which is not allowed"), a member
  whose replica is in service and whose log is in sync.
- **FOLLOWER** puts the server on the LS's blacklist: leaders are moved off it now and not
  given to it while another member can lead. It is taken off the manual leader too.
- **DEFAULT** clears the manual leader and takes the server off the blacklist; the primary
  zone decides again at the next round.

The preferences are a table, not memory, so a new RS leader keeps them. A statement whose
leader move fails puts the preferences back as they were (bad input changes nothing).
"""

from __future__ import annotations

import logging
import threading

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.config import RsSettings
from rootservice.db import election_ref_repo
from rootservice.db.election_ref_repo import LeaderPreference
from rootservice.db.event_repo import Event
from rootservice.ha.store import MetaStore
from rootservice.tenants.leaders import LeaderCoordinator
from rootservice.tenants.ports import EventSink, ServerDirectory
from rootservice.tenants.reports import LsView, ReplicaReports, effective_members, in_sync
from rootservice.tenants.topology import LayoutCache, LayoutVersion, LsPlan
from rootservice.tenants.vocabulary import LsKey

log = logging.getLogger(__name__)

ROLES = ("LEADER", "FOLLOWER", "DEFAULT")


class LeaderPreferences:
    """Records SWITCH REPLICA's preferences and moves the leader accordingly."""

    def __init__(
        self,
        *,
        store: MetaStore,
        layout: LayoutCache,
        version: LayoutVersion,
        servers: ServerDirectory,
        reports: ReplicaReports,
        leaders: LeaderCoordinator,
        events: EventSink,
        clock: Clock,
        settings: RsSettings,
    ) -> None:
        """Wire the collaborators; nothing is read until a call."""
        self.store = store
        self.layout = layout
        self.version = version
        self.servers = servers
        self.reports = reports
        self.leaders = leaders
        self.events = events
        self.clock = clock
        self.settings = settings
        # One SWITCH REPLICA at a time: a statement's rollback must not undo another's.
        self._lock = threading.Lock()

    def switch_replica(self, key: LsKey, server: str, role: str) -> str:
        """SWITCH REPLICA ``role`` (LEADER, FOLLOWER or DEFAULT) for ``server``
        (``ip:port``) on log stream ``key``; returns the statement's info text.

        Raises OB_ENTRY_NOT_EXIST (no such LS, the server is not in the cluster, or for
        LEADER not a member), OB_OP_NOT_ALLOW (LEADER: not ACTIVE, cannot lead, SUSPECT,
        replica not in service or log not in sync), and the leader switch's errors
        (OB_WAIT_LEADER_SWITCH_TIMEOUT, OB_SERVER_CONNECTION_ERROR...); on any error the
        preferences are as before."""
        if role not in ROLES:
            raise ObError("OB_INVALID_ARGUMENT", f"role {role}")
        with self._lock:
            plan = self.layout.topology(force=True).plans.get(key)
            if plan is None:
                raise ObError("OB_ENTRY_NOT_EXIST", f"log stream {key[1]} of tenant {key[0]}")
            s = self.servers.get(server)
            if s is None:
                raise ObError("OB_ENTRY_NOT_EXIST", "server not in cluster")
            old = LeaderPreference(plan.manual_leader, plan.blacklist)
            view = self.reports.views().get(key, LsView(key))
            if role == "LEADER":
                if not s.is_active():
                    raise ObError("OB_OP_NOT_ALLOW", "server not active which is")
                self._check_can_lead(plan, view, server)
                new = LeaderPreference(server, old.blacklist - {server})
            elif role == "FOLLOWER":
                manual = "" if old.manual_leader == server else old.manual_leader
                new = LeaderPreference(manual, old.blacklist | {server})
            else:
                new = LeaderPreference("", old.blacklist - {server})
            self._save(key, new)
            try:
                info = self._move(plan, view, server, role)
            except ObError:
                self._save(key, old)
                raise
        self.events.add_event(
            Event(
                self.clock.now_us(),
                "leader_coordinator",
                "switch_replica_role",
                (
                    ("tenant_id", key[0]),
                    ("ls_id", key[1]),
                    ("server", server),
                    ("role", role),
                    ("manual_leader", new.manual_leader),
                    ("blacklist", ";".join(sorted(new.blacklist))),
                ),
            )
        )
        log.info("LS %d.%d: SWITCH REPLICA %s %s (%s)", key[0], key[1], role, server, info)
        return info

    def _check_can_lead(self, plan: LsPlan, view: LsView, server: str) -> None:
        if server not in effective_members(plan, view):
            raise ObError(
                "OB_ENTRY_NOT_EXIST",
                f"server '{server}' is not a member of log stream {plan.key[1]} of tenant "
                f"{plan.key[0]}",
            )
        if view.leader != server and not in_sync(view, server, self.settings.ls_log_sync_threshold):
            raise ObError(
                "OB_OP_NOT_ALLOW",
                f"switching the leader of log stream {plan.key[1]} to '{server}' while its "
                "log is not in sync (see GV$OB_LOG_STAT / DBA_OB_LS_LOCATIONS)",
            )

    def _save(self, key: LsKey, pref: LeaderPreference) -> None:
        with self.store.txn() as conn:
            election_ref_repo.save(conn, key, pref, self.clock.now_us())
        # The coordinator reads the preferences with the layout.
        self.version.changed()

    def _move(self, plan: LsPlan, view: LsView, server: str, role: str) -> str:
        if role == "LEADER":
            self.leaders.switch_leader(plan.key, server, "manual leader (SWITCH REPLICA LEADER)")
            return f"manual leader {server}"
        if role == "DEFAULT" or view.leader != server:
            return "recorded"
        best = self.leaders.choose_leader(plan, view, {server})
        if best is None or not in_sync(view, best, self.settings.ls_log_sync_threshold):
            return f"recorded; the leader stays on {server}: no other member can lead now"
        self.leaders.switch_leader(
            plan.key, best, f"{server} blacklisted (SWITCH REPLICA FOLLOWER)"
        )
        return f"leader moved to {best}"
