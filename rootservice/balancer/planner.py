"""The planner seam of the balancer (docs/design/migration.md): the :class:`Planner` protocol and the
servers input every plan takes.

The plans are computed by Spark jobs (:mod:`rootservice.balancer.spark`, through
:class:`rootservice.balancer.planners.SparkPlanner`) or their pandas reference
(:class:`rootservice.balancer.planners.PandasPlanner`); only the balancer's own classes
write what the plans say.
"""

from __future__ import annotations

from typing import Any, Protocol

from rootservice.balancer.ports import Whitelist

Row = dict[str, Any]

#: Columns of the servers input the planner gets from the RS's memory (capacity and health
#: are not in ``__all_server``).
SERVER_COLUMNS = (
    "svr_ip",
    "svr_port",
    "zone",
    "status",
    "hb_status",
    "stop_time",
    "cpu_total",
    "mem_total",
    "log_disk_total",
    "suspect",
)


class Planner(Protocol):
    """Computes the three plans of docs/design/migration.md from the system tables plus the
    ``servers`` rows (one dict per whitelisted server with :data:`SERVER_COLUMNS`)."""

    def unit_plan(self, servers: list[Row]) -> list[Row]:
        """Rows: unit_id, tenant_id, zone, from_svr_ip, from_svr_port, to_svr_ip (None when
        no room), to_svr_port, reason."""
        ...

    def replica_plan(self, servers: list[Row]) -> list[Row]:
        """Rows: tenant_id, ls_id, src_svr_ip, src_svr_port, dest_svr_ip, dest_svr_port,
        old_svr_ip, old_svr_port, reason."""
        ...

    def lost_replicas(self, servers: list[Row]) -> list[Row]:
        """Rows: tenant_id, ls_id, svr_ip, svr_port, reason."""
        ...


class PlannerError(Exception):
    """A plan could not be computed: no Java, a JVM crash, a lost executor,
    an unreachable master, a database error in the planner... ``cause`` is a short one-line
    reason (shown in the jobs' ``stalled``), ``task`` the caller (``balancer`` or
    ``lost_replica_checker``); the original exception is chained. Raised by
    :class:`rootservice.balancer.planners.SwitchablePlanner`, which has already counted,
    logged and recorded the failure."""

    def __init__(self, task: str, cause: str) -> None:
        """``task`` and ``cause`` as in the class doc."""
        super().__init__(f"{task}: planner failed: {cause}")
        self.task = task
        self.cause = cause


def short_cause(exc: BaseException, limit: int = 200) -> str:
    """One line naming what failed: the exception's first line (its type when empty), plus
    its chained cause's first line when that adds something, at most ``limit`` characters."""

    def first(e: BaseException) -> str:
        lines = str(e).strip().splitlines()
        return lines[0].strip() if lines else type(e).__name__

    text = first(exc)
    inner = exc.__cause__
    if inner is not None and first(inner) not in text:
        text = f"{text}: {first(inner)}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def server_rows(servers: Whitelist) -> list[Row]:
    """The whitelist as planner rows (:data:`SERVER_COLUMNS`): status and heartbeat status
    as their display strings, ``stop_time`` in microseconds, CPU in cores, memory and log
    disk in bytes, ``suspect`` whether it is SUSPECT as ``__all_server.suspect_end_time``
    shows it, or LAGGING (no unit, hence no copy, goes to it)."""
    out = []
    for s in servers.snapshot():
        r = s.resource_info
        out.append(
            {
                "svr_ip": s.ip,
                "svr_port": s.port,
                "zone": s.zone,
                "status": s.display_status().value,
                "hb_status": s.hb_status.value,
                "stop_time": s.stop_time,
                "cpu_total": float(r.cpu_total),
                "mem_total": int(r.mem_total),
                "log_disk_total": int(r.log_disk_total),
                "suspect": bool(s.suspect_end_time or s.lagging_time) and s.is_alive(),
            }
        )
    return out
