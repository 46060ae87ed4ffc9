"""The JSON status API's documents (the contract of the dashboard): servers
with their in-memory state, zones, root services, jobs, events, and the Doris FE actions
used as anchor (Health, HA, Bootstrap, Hardware Info, Check Decommission).

Every method here blocks (locks, table reads through ``store.read()``: read-only, no
fencing): the handlers call them in a worker thread. In-memory state comes from the
whitelist (:class:`rootservice.servers.whitelist.Whitelist`), the zone cache and the replica
reports of the tenant layer; jobs, events and the root services from their tables. Times
are integer microseconds since the epoch (``*_us``), ages microseconds, sizes bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.app import RootService
from rootservice.balancer.dry_run import COLUMNS as DRY_RUN_COLUMNS
from rootservice.db import event_repo, job_repo, lease_repo, member_repo
from rootservice.servers.status import ServerStatus

#: How many ended jobs ``jobs`` lists after the running ones.
ENDED_JOBS = 20
#: How many events the cluster snapshot carries.
SNAPSHOT_EVENTS = 50
#: Bounds and default of ``/api/v1/events?limit=``.
EVENTS_MAX, EVENTS_DEFAULT = 1000, 100


def server_doc(
    s: ServerStatus, now_us: int, replicas: int, leaders: int | None = None
) -> dict[str, Any]:
    """One server of ``servers``: the whitelist record ``s`` at ``now_us`` holding
    ``replicas`` reported replicas. ``leader_count`` is ``leaders``, the log streams the RS
    knows it leads (an alive server reporting LEADER at the LS's highest term: a paused or
    deposed leader's last report does not count); without ``leaders``, the LEADER replicas of
    its last report (0 until its first report, the record's -1). ``last_heartbeat_age_us`` None when it never heartbeated; ``suspect``
    whether it is SUSPECT (back after its lease expired, no new leaders and
    no copies) until ``suspect_end_time_us`` (0 when not); ``lagging`` whether it is LAGGING since ``lagging_time_us`` for ``lag_reasons`` (``command``, ``disk``),
    and its last ``disk_probe_latency_us``; ``draining`` whether a DRAIN SERVER runs on it and ``maintenance_end_time_us`` the end of its ``STOP ... FOR
    MAINTENANCE`` window while it lasts (0 when none or over)."""
    r = s.resource_info
    return {
        "server": s.key,
        "svr_ip": s.ip,
        "svr_port": s.port,
        "id": s.id,
        "zone": s.zone,
        "status": s.display_status().value,
        "heartbeat_status": s.hb_status.value,
        "admin_status": s.admin_status.value,
        "last_heartbeat_age_us": max(0, now_us - s.last_hb_time) if s.last_hb_time else None,
        "stop_time_us": s.stop_time,
        "start_service_time_us": s.start_service_time,
        "suspect": bool(s.suspect_end_time) and s.is_alive(),
        "suspect_end_time_us": s.suspect_end_time if s.is_alive() else 0,
        "lagging": bool(s.lagging_time),
        "lagging_time_us": s.lagging_time,
        "lag_reasons": list(s.lag.reasons) if s.lagging_time else [],
        "disk_probe_latency_us": s.disk_probe_latency_us,
        "draining": s.draining,
        "maintenance_end_time_us": s.maintenance_end_time if s.in_maintenance(now_us) else 0,
        "leader_count": max(0, s.leader_cnt) if leaders is None else leaders,
        "replica_count": replicas,
        "resources": {
            "cpu_capacity": float(r.cpu_total),
            "cpu_assigned": float(r.cpu_assigned),
            "mem_capacity": int(r.mem_total),
            "mem_assigned": int(r.mem_assigned),
            "log_disk_capacity": int(r.log_disk_total),
            "log_disk_assigned": int(r.log_disk_assigned),
            "data_disk_capacity": int(r.data_disk_total),
            "data_disk_in_use": int(r.data_disk_in_use),
        },
        "disk_status": s.server_report_status.value,
    }


def job_doc(row: dict[str, Any]) -> dict[str, Any]:
    """One job of ``jobs`` from a :func:`rootservice.db.job_repo.recent_jobs` row:
    ``extra_info`` parsed (``{}`` when empty or not a JSON object), ``eta`` and ``stalled``
    lifted out of it ("" when absent; :mod:`rootservice.balancer.job_progress` writes them)."""
    try:
        extra = json.loads(row["extra_info"]) if row["extra_info"] else {}
    except ValueError:
        extra = {}
    if not isinstance(extra, dict):
        extra = {}
    server = f"{row['svr_ip']}:{row['svr_port']}" if row["svr_ip"] else ""
    return {
        "job_id": row["job_id"],
        "job_type": row["job_type"],
        "job_status": row["job_status"],
        "server": server,
        "progress": max(0, min(100, row["progress"])),
        "eta": str(extra.get("eta") or ""),
        "stalled": str(extra.get("stalled") or ""),
        "extra_info": extra,
        "create_time_us": row["create_time_us"],
        "modify_time_us": row["modify_time_us"],
    }


class ClusterStatus:
    """The status documents of one RS ``rs`` (read-only; see the module docstring)."""

    def __init__(self, rs: RootService) -> None:
        """Read ``rs``'s whitelist, zones, reports and tables."""
        self.rs = rs

    def servers(self) -> list[dict[str, Any]]:
        """Every whitelisted server, by id (:func:`server_doc`)."""
        now = self.rs.clock.now_us()
        reports = self.rs.tenant_layer.reports.reports()
        leaders = Counter(v.leader for v in self.rs.tenant_layer.reports.views().values())
        return [
            server_doc(s, now, len(reports.get(s.key, {})), leaders.get(s.key, 0))
            for s in self.rs.whitelist.snapshot()
        ]

    def ls_locations(self) -> list[dict[str, Any]]:
        """Every replica of every log stream as the RS knows it now, by (tenant, LS,
        server): ``role`` LEADER only for the LS's current leader (an alive server
        reporting LEADER at the LS's highest term, OceanBase's ``ObLSInfo::find_leader``),
        else FOLLOWER; ``stale`` when the row is not the replica's current state (its
        server is not alive: its last report; or it reports LEADER at a term below the
        LS's), with ``last_report_time_us`` its server's last heartbeat (0 when fresh);
        ``term`` the reported term. Raises ``ObError(OB_ERR_SYS)`` when the layout cannot
        be read."""
        servers = {s.key: s for s in self.rs.whitelist.snapshot()}
        out = []
        for (tenant, ls), v in sorted(self.rs.tenant_layer.reports.views().items()):
            for server, r in sorted(v.replicas.items()):
                s = servers.get(server)
                alive = s is not None and s.is_alive()
                stale = not alive or (r.role == obrpc_pb2.LEADER and r.term < v.term)
                out.append(
                    {
                        "tenant_id": tenant,
                        "ls_id": ls,
                        "server": server,
                        "zone": s.zone if s is not None else "",
                        "role": "LEADER" if server == v.leader else "FOLLOWER",
                        "term": r.term,
                        "stale": stale,
                        "last_report_time_us": s.last_hb_time if stale and s is not None else 0,
                    }
                )
        return out

    def zones(self, servers: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Every zone with its servers and active servers counted (from ``servers``, default
        :meth:`servers`), in the zone cache's order."""
        servers = self.servers() if servers is None else servers
        out = []
        for z in self.rs.zones.all():
            mine = [s for s in servers if s["zone"] == z.zone]
            out.append(
                {
                    "zone": z.zone,
                    "status": z.status,
                    "region": z.region,
                    "idc": z.idc,
                    "servers": len(mine),
                    "active_servers": sum(1 for s in mine if s["status"] == "ACTIVE"),
                }
            )
        return out

    def root_services(self) -> dict[str, Any]:
        """The lease row of ``__all_service_epoch`` (leader while unexpired, epoch, expiry)
        and the root services whose election round ran within the last ``lease_time`` by the
        database's clock (``__all_rootservice_member``): the leader first, then standbys.
        Raises ``ObError(OB_ERR_SYS)`` when the tables cannot be read."""
        lease_us = self.rs.settings.lease_time
        with self.rs.store.read() as conn:
            lease = lease_repo.read_lease(conn)
            now = lease_repo.db_now_us(conn)
            seen = member_repo.seen_since(conn, now - lease_us)
        leader = lease.holder if lease.holder and now < lease.expire_us else ""
        members = [
            {
                "addr": m.addr,
                "role": "leader" if m.addr == leader else "standby",
                "last_seen_us": m.last_seen_us,
            }
            for m in seen
        ]
        members.sort(key=lambda m: (m["role"] != "leader", m["addr"]))
        return {
            "leader": leader,
            "epoch": lease.epoch,
            "lease_expire_us": lease.expire_us,
            "members": members,
        }

    def jobs(self) -> list[dict[str, Any]]:
        """INPROGRESS jobs, then the latest :data:`ENDED_JOBS` ended ones (:func:`job_doc`).
        Raises ``ObError(OB_ERR_SYS)``."""
        with self.rs.store.read() as conn:
            rows = job_repo.recent_jobs(conn, ENDED_JOBS)
        return [job_doc(r) for r in rows]

    def events(self, limit: int = EVENTS_DEFAULT) -> list[dict[str, Any]]:
        """The ``limit`` latest events, newest first. Raises ``ObError(OB_ERR_SYS)``."""
        with self.rs.store.read() as conn:
            return event_repo.latest_events(conn, limit)

    def cluster(self) -> dict[str, Any]:
        """The one snapshot the dashboard polls (the contract's ``/api/v1/cluster``)."""
        servers = self.servers()
        return {
            "now_us": self.rs.clock.now_us(),
            "self": self.rs.rpc_addr,
            "state": self.rs.term.state.value,
            "root_services": self.root_services(),
            "zones": self.zones(servers),
            "servers": servers,
            "jobs": self.jobs(),
            "events": self.events(SNAPSHOT_EVENTS),
            "intake": self.rs.intake_health.status(),
            "lease_intake": self.rs.lease_queue.status(),
            "self_suspicion": self.rs.self_suspicion.status(),
        }

    def planner(self) -> dict[str, Any]:
        """The balancer planner: ``name`` (balancer_planner), ``ready`` and
        ``detail`` of the last check (None / "" before one), ``failing`` (task -> cause of
        its last failed plan, empty while plans succeed)."""
        check = self.rs.planner_check
        return {
            "name": self.rs.settings.balancer_planner,
            "ready": check.ready if check else None,
            "detail": check.detail if check else "",
            "failing": dict(self.rs.planner.failures),
        }

    # --- the Doris FE actions ------------------------------------------------------------

    def health(self) -> dict[str, int]:
        """Doris' HealthAction: ``total_servers`` whitelisted, ``online_servers`` alive."""
        counts = self.rs.whitelist.counts()
        return {"total_servers": counts["servers"], "online_servers": counts["alive"]}

    def bootstrap(self) -> dict[str, Any]:
        """Doris' BootstrapAction: ``bootstrapped`` and ``cluster_id`` ("" before)."""
        ident = self.rs.identity
        return {"bootstrapped": bool(ident.bootstrapped), "cluster_id": ident.cluster_id}

    def hardware(self) -> list[dict[str, Any]]:
        """Doris' HardwareInfoAction: per server its ``server``, ``zone`` and
        ``resources`` (as in :func:`server_doc`)."""
        return [
            {"server": s["server"], "zone": s["zone"], "resources": s["resources"]}
            for s in self.servers()
        ]

    def check_decommission(self, servers: list[str], plan: bool = False) -> dict[str, Any]:
        """Doris' CheckDecommissionAction: could ``servers`` be deleted now?
        (:meth:`rootservice.servers.admin.ServerAdmin.check_delete_servers`, nothing
        changed). ``{"ok": True, "reason": ""}`` or ``{"ok": False, "reason": message}``.
        With ``plan`` and ``ok``, also ``"plan"``: the rows of EXPLAIN ALTER SYSTEM DELETE
        SERVER (:meth:`rootservice.balancer.dry_run.DeleteDryRun.explain`),
        one object per row by column name. Opt-in because a server with units costs a
        planner run (a Spark job of seconds), too slow for a page that polls.
        Raises ``ObError(OB_SERVER_NOT_IN_WHITE_LIST)`` for an unknown server and
        ``ObError(OB_INVALID_ARGUMENT)`` for a malformed one (the caller's mistakes)."""
        try:
            keys = self.rs.server_admin.check_delete_servers(servers)
        except ObError as e:
            if e.name in ("OB_SERVER_NOT_IN_WHITE_LIST", "OB_INVALID_ARGUMENT"):
                raise
            return {"ok": False, "reason": e.to_sql_text()}
        doc: dict[str, Any] = {"ok": True, "reason": ""}
        if plan:
            rows = self.rs.delete_dry_run.explain(keys)
            doc["plan"] = [dict(zip(DRY_RUN_COLUMNS, r.as_tuple(), strict=True)) for r in rows]
        return doc
