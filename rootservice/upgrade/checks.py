"""The checks of the upgrade statements: what keeps ALTER SYSTEM BEGIN UPGRADE from entering
upgrade mode, and what keeps STOP ZONE from taking the next zone down during one.

BEGIN UPGRADE follows OceanBase's pre-upgrade checker (tools/upgrade/upgrade_checker.py:
``check_observer_status``, ``check_server_version``, ``check_paxos_replica``,
``check_rebalance_task`` / ``check_restore_job_exist``), asked of the RS's own state instead
of the tables: every whitelisted server ACTIVE (alive, NORMAL, not stopped or isolated, in
service), one release among the agents, every log stream with a leader and each member's log
within ``ls_log_sync_threshold`` of the leader's (the measure of
:func:`rootservice.tenants.reports.in_sync`), and no DELETE SERVER, DRAIN SERVER, unit
migration or RECOVER LS / FORCE DELETE SERVER in progress.

The zone order follows OceanBase's health check after each zone of a rolling upgrade
(tools/upgrade/upgrade_health_checker.py with ``-z``: the zone's servers active and in
service, its servers on one build version, every Paxos replica in sync): before another zone
stops, every other zone must be back, all ACTIVE, on one release (a zone where some servers
run the newest release and others an older one is half-upgraded) and its replicas caught up.
"""

from __future__ import annotations

from typing import Protocol

from obcommon import releases
from obcommon.releases import Release
from rootservice.config import RsSettings
from rootservice.db import drain_repo, job_repo, unit_repo
from rootservice.ha.store import MetaStore
from rootservice.servers.status import AdminStatus, ServerStatus
from rootservice.tenants.reports import LsView, effective_members, in_sync
from rootservice.tenants.topology import Topology
from rootservice.tenants.vocabulary import LsKey

#: The jobs that are a change in progress BEGIN UPGRADE waits for (their job_type).
BLOCKING_JOBS = ("DELETE_SERVER", "MIGRATE_UNIT", "RECOVER_LS")

#: Blockers named in one refusal; the rest are counted.
MAX_NAMED = 10


class Servers(Protocol):
    """The whitelist, read side."""

    def snapshot(self) -> list[ServerStatus]:
        """Copies of every record, ordered by id."""
        ...


class Views(Protocol):
    """The log streams as the replica reports show them."""

    def views(self) -> dict[LsKey, LsView]:
        """Every LS's view."""
        ...


class Layout(Protocol):
    """The desired layout of the log streams."""

    def topology(self) -> Topology:
        """The layout (cached)."""
        ...


def named(blockers: list[str]) -> str:
    """``blockers`` joined for a refusal: the first :data:`MAX_NAMED`, then how many more."""
    more = len(blockers) - MAX_NAMED
    return "; ".join(blockers[:MAX_NAMED]) + (f" and {more} more" if more > 0 else "")


def server_problem(s: ServerStatus) -> str:
    """Why server ``s`` is not ACTIVE for an upgrade ("" when it is): OceanBase's
    ``status != 'active' or start_service_time <= 0``, with a stop or isolation named."""
    if s.admin_status is AdminStatus.DELETING:
        return f"server '{s.key}' is being deleted (DELETE SERVER in progress)"
    if not s.is_alive():
        return f"server '{s.key}' is not ACTIVE (heartbeat status {s.hb_status.value})"
    if s.is_stopped():
        return f"server '{s.key}' is stopped or isolated (STOP / ISOLATE SERVER in effect)"
    if not s.in_service():
        return f"server '{s.key}' has not started service"
    return ""


def release_of(s: ServerStatus) -> Release | None:
    """The release ``s`` reports (None before its first report)."""
    return releases.of_build_version(s.build_version) if s.build_version else None


class UpgradeChecks:
    """:meth:`begin_blockers` for BEGIN UPGRADE, :meth:`zone_blockers` for STOP ZONE in
    upgrade mode. Each returns what blocks, in words, in a stable order (empty: nothing)."""

    def __init__(
        self,
        *,
        servers: Servers,
        views: Views,
        layout: Layout,
        store: MetaStore,
        settings: RsSettings,
    ) -> None:
        """Read ``settings.ls_log_sync_threshold`` at each check."""
        self.servers = servers
        self.views = views
        self.layout = layout
        self.store = store
        self.settings = settings

    def begin_blockers(self) -> list[str]:
        """What keeps the cluster from entering upgrade mode: servers not ACTIVE, more than
        one release among the agents, log streams without a leader or with a member out of
        sync, and changes in progress. Raises ``ObError(OB_ERR_SYS)`` when the database
        fails."""
        snapshot = self.servers.snapshot()
        out = [p for s in snapshot if (p := server_problem(s))]
        by_release: dict[str, list[str]] = {}
        for s in snapshot:
            r = release_of(s)
            by_release.setdefault(str(r) if r else "none reported", []).append(s.key)
        if len(by_release) > 1:
            out.append(
                "the servers run more than one release: "
                + ", ".join(
                    f"{r} on {len(keys)} ({keys[0]}...)" for r, keys in sorted(by_release.items())
                )
            )
        out += self._log_problems(None)
        out += self._changes_in_progress(snapshot)
        return out

    def zone_blockers(self, zone: str, newest: Release) -> list[str]:
        """What keeps ``zone`` from stopping during upgrade mode: in every other zone, a server
        not ACTIVE, a mix of ``newest`` and older releases, or a replica out of sync with
        its leader."""
        others = [s for s in self.servers.snapshot() if s.zone != zone]
        out = [p for s in others if (p := server_problem(s))]
        by_zone: dict[str, list[ServerStatus]] = {}
        for s in others:
            by_zone.setdefault(s.zone, []).append(s)
        for z, members in sorted(by_zone.items()):
            new = [s.key for s in members if release_of(s) == newest]
            old = [s.key for s in members if release_of(s) != newest]
            if new and old:
                out.append(
                    f"zone '{z}' is half-upgraded: {', '.join(old)} not on release {newest} "
                    f"yet while {', '.join(new)} is"
                )
        out += self._log_problems({s.key for s in others})
        return out

    def _log_problems(self, on: set[str] | None) -> list[str]:
        """Log streams without a leader, and members (of those on the servers ``on``; all
        when None) whose log trails the leader's by more than ``ls_log_sync_threshold``."""
        threshold = self.settings.ls_log_sync_threshold
        views = self.views.views()
        out = []
        for key, plan in sorted(self.layout.topology().plans.items()):
            view = views.get(key, LsView(key))
            name = f"log stream {key[1]} of tenant {key[0]}"
            if view.leader is None:
                out.append(f"{name} has no leader")
                continue
            for m in effective_members(plan, view):
                if (on is None or m in on) and not in_sync(view, m, threshold):
                    out.append(
                        f"the replica of {name} on '{m}' is not in sync with its leader "
                        f"'{view.leader}' (ls_log_sync_threshold {threshold // 1000} ms)"
                    )
        return out

    def _changes_in_progress(self, snapshot: list[ServerStatus]) -> list[str]:
        """DELETE SERVER, MIGRATE UNIT and RECOVER LS jobs in progress, units moving and
        drains running."""
        with self.store.read() as conn:
            jobs = [j for t in BLOCKING_JOBS for j in job_repo.inprogress_jobs(conn, t)]
            moving = [u for u in unit_repo.load_units(conn) if u.migrate_from_svr_ip]
            drains = drain_repo.load_drains(conn, drain_repo.DRAINING)
        out = [f"{j.job_type} job {j.job_id} is in progress" for j in jobs]
        out += [
            f"unit {u.unit_id} is migrating from "
            f"'{u.migrate_from_svr_ip}:{u.migrate_from_svr_port}' to '{u.svr_ip}:{u.svr_port}'"
            for u in moving
        ]
        draining = {f"{d.ip}:{d.port}" for d in drains} | {s.key for s in snapshot if s.draining}
        out += [
            f"server '{k}' is being drained (DRAIN SERVER in progress)" for k in sorted(draining)
        ]
        return out
