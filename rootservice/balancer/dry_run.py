"""The dry run of DELETE SERVER (``EXPLAIN ALTER SYSTEM DELETE SERVER``, after
CockroachDB's ``node decommission --dry-run`` and Doris' Check Decommission).

:class:`DeleteDryRun` computes what the balancer would do if the servers were DELETING now,
with the planner the balancer uses and the tables and reports as they are, and writes
nothing: no row, no event, no job, no change in memory. It never takes the balancer round's
lock (it only reads), so it answers while a round is computing.

- **Units.** The unit plan (:meth:`rootservice.balancer.planner.Planner.unit_plan`,
  docs/design/migration.md) on the servers rows in which the targets show ``DELETING`` gives each unit's
  destination, or the reason it has no room (a ``BLOCKER``). Units of other DELETING or
  permanently offline servers compete for the same room and are placed in the same plan
  (``unit_id`` order, as the balancer does), so a unit the pre-check alone would place may
  find no room here.
- **Replicas** follow their unit (docs/design/migration.md, "migrate replica due to unit not
  match"): every replica on a target (``__all_ls_meta_table`` and the target's latest
  report) of an LS whose planned member there is the unit moves to the unit's destination.
  Bytes come from the report, else the meta table; a unit's bytes are its replicas', else
  its tenant's ``__all_space_usage`` on the server.
- **Blockers**: a unit without room, a unit still moving onto a target, an LS with a replica
  to move and no leader (nothing copies or changes members without one), a replica no unit
  accounts for (nothing moves it, and the server is only removed once it is gone), and, for
  a target that is not alive, every LS left without a healthy member to copy from.

Sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.balancer.planner import Planner, PlannerError, Row, server_rows
from rootservice.balancer.ports import LsKey, LsLayout, ReadStore, ReplicaReports, Whitelist
from rootservice.db import ls_repo, space_usage_repo, unit_repo
from rootservice.servers.status import DisplayStatus

UNIT = "UNIT"
REPLICA = "REPLICA"
BLOCKER = "BLOCKER"

COLUMNS = ("kind", "tenant_id", "unit_id", "ls_id", "from_svr", "to_svr", "bytes", "reason")
"""The columns of the EXPLAIN result set, one :class:`DryRunRow` field each."""

TYPES = ("VARCHAR", "BIGINT", "BIGINT", "BIGINT", "VARCHAR", "VARCHAR", "BIGINT", "VARCHAR")
"""The MySQL types of :data:`COLUMNS`."""

_KIND_ORDER = {UNIT: 0, REPLICA: 1, BLOCKER: 2}


@dataclass(frozen=True)
class DryRunRow:
    """One row of the dry run: ``kind`` is :data:`UNIT` / :data:`REPLICA` (it would move
    ``from_svr`` -> ``to_svr``, ``'ip:port'``) or :data:`BLOCKER` (what stops or slows the
    delete; ``to_svr`` None). ``tenant_id`` / ``unit_id`` / ``ls_id`` / ``bytes`` are None
    where they do not apply or are unknown; ``bytes`` in bytes."""

    kind: str
    tenant_id: int | None
    unit_id: int | None
    ls_id: int | None
    from_svr: str | None
    to_svr: str | None
    bytes: int | None
    reason: str

    def as_tuple(self) -> tuple[object, ...]:
        """The row in :data:`COLUMNS` order."""
        return (
            self.kind,
            self.tenant_id,
            self.unit_id,
            self.ls_id,
            self.from_svr,
            self.to_svr,
            self.bytes,
            self.reason,
        )

    def sort_key(self) -> tuple[int, int, int, int, str]:
        """UNIT rows, then REPLICA, then BLOCKER; within each by tenant, unit, LS, reason."""
        return (
            _KIND_ORDER[self.kind],
            self.tenant_id or 0,
            self.unit_id or 0,
            self.ls_id or 0,
            self.reason,
        )


class LsReports(LsLayout, ReplicaReports, Protocol):
    """The tenant layer's layout, views and reports
    (:class:`rootservice.tenants.balancer_view.BalancerView`)."""


def _addr(ip: object, port: object) -> str | None:
    if ip is None or ip == "":
        return None
    return f"{ip}:{int(port)}"  # type: ignore[call-overload]


class DeleteDryRun:
    """``EXPLAIN ALTER SYSTEM DELETE SERVER``'s computation (see the module docstring).

    ``planner`` is the balancer's (Spark by default); ``servers`` the whitelist; ``ls`` the
    layout, the LS views and the replica reports; ``store`` is only read. The caller runs
    DELETE SERVER's validation first
    (:meth:`rootservice.servers.admin.ServerAdmin.check_delete_servers`)."""

    def __init__(
        self, *, planner: Planner, servers: Whitelist, ls: LsReports, store: ReadStore
    ) -> None:
        """Nothing is read until :meth:`explain`."""
        self.planner = planner
        self.servers = servers
        self.ls = ls
        self.store = store

    def servers_deleting(self, targets: list[str]) -> list[Row]:
        """The planner's servers rows (:func:`rootservice.balancer.planner.server_rows`) with
        the ``targets`` (``'ip:port'``) shown DELETING, as DELETE SERVER would leave them."""
        rows = server_rows(self.servers)
        wanted = set(targets)
        for r in rows:
            if f"{r['svr_ip']}:{r['svr_port']}" in wanted:
                r["status"] = DisplayStatus.DELETING.value
        return rows

    def explain(self, targets: list[str]) -> list[DryRunRow]:
        """What deleting ``targets`` (canonical ``'ip:port'`` keys) would move and what would
        block it, sorted by :meth:`DryRunRow.sort_key`. Changes nothing. Raises ``ObError``
        (OB_ERR_SYS) when the tables cannot be read or the planner fails (its cause in the
        message)."""
        keys = set(targets)
        with self.store.read() as conn:
            units = {u.unit_id: u for u in unit_repo.load_units(conn)}
            meta = ls_repo.load_ls_meta(conn)
            usage = space_usage_repo.load_space_usage(conn)
        # Servers without units take no room from anyone: the planner (a Spark job) is not
        # asked, so a dry run of an empty server costs a few reads.
        hosted = any(u.server in keys or u.migrate_from in keys for u in units.values())
        try:
            plan = self.planner.unit_plan(self.servers_deleting(targets)) if hosted else []
        except PlannerError as e:
            # The operator asked a question the planner cannot answer now: say why, as the
            # stalled jobs do, rather than an internal error.
            raise ObError("OB_ERR_SYS", detail=f"the dry run's plan failed: {e.cause}") from e
        topo = self.ls.topology()
        views = self.ls.views()
        reports = self.ls.reports()

        # The replicas on each target: the meta table's rows and what it reports itself.
        on_target: dict[str, dict[LsKey, int | None]] = {k: {} for k in targets}
        for (t, ls, ip, port), values in meta.items():
            server = f"{ip}:{port}"
            if server in keys:
                on_target[server][(t, ls)] = int(values["data_size"] or 0)
        for server in targets:
            for key, info in reports.get(server, {}).items():
                on_target[server][key] = int(info.data_size)

        def unit_of(server: str, key: LsKey) -> int | None:
            p = topo.plans.get(key)
            if p is not None and server in p.members:
                return p.members[server][1]
            ip, _, port = server.rpartition(":")
            row = meta.get((key[0], key[1], ip, int(port)))
            return int(row["unit_id"]) if row and row.get("unit_id") else None

        replicas_of: dict[tuple[str, int], list[tuple[LsKey, int | None]]] = {}
        out: list[DryRunRow] = []
        for server, held in on_target.items():
            for key, size in held.items():
                uid = unit_of(server, key)
                u = units.get(uid) if uid is not None else None
                if u is None or server not in (u.server, u.migrate_from):
                    out.append(
                        DryRunRow(
                            BLOCKER,
                            key[0],
                            uid,
                            key[1],
                            server,
                            None,
                            size,
                            f"replica of log stream {key[1]} has no unit on {server}: nothing "
                            "moves it, and the server is removed only once it is gone",
                        )
                    )
                    continue
                replicas_of.setdefault((server, u.unit_id), []).append((key, size))

        for r in plan:
            src = _addr(r["from_svr_ip"], r["from_svr_port"])
            uid, tid = int(r["unit_id"]), int(r["tenant_id"])
            dest = _addr(r.get("to_svr_ip"), r.get("to_svr_port"))
            mine = replicas_of.get((src or "", uid), [])
            known = [s for _, s in mine if s is not None]
            size = sum(known) if known else None
            if size is None and src is not None:
                src_ip, _, src_port = src.rpartition(":")
                size = usage.get((tid, src_ip, int(src_port)), (None, None))[0]
            if dest is None:
                out.append(
                    DryRunRow(
                        BLOCKER, tid, uid, None, src, None, size, f"no room: {r.get('reason')}"
                    )
                )
                continue
            if src not in keys:
                continue  # another emptied server's unit: it moves whatever we do
            out.append(DryRunRow(UNIT, tid, uid, None, src, dest, size, str(r.get("reason"))))
            for key, rsize in mine:
                out.append(
                    DryRunRow(REPLICA, key[0], uid, key[1], src, dest, rsize, f"follows unit {uid}")
                )

        for u in units.values():
            if u.server in keys and u.migrate_from and u.migrate_from != u.server:
                out.append(
                    DryRunRow(
                        BLOCKER,
                        None,
                        u.unit_id,
                        None,
                        u.server,
                        None,
                        None,
                        f"unit {u.unit_id} is still moving onto {u.server} from "
                        f"{u.migrate_from}: it is planned once that move ends",
                    )
                )

        stuck = {key for held in on_target.values() for key in held}
        for key in sorted(stuck):
            view = views.get(key)
            if view is None or view.leader is None:
                out.append(
                    DryRunRow(
                        BLOCKER,
                        key[0],
                        None,
                        key[1],
                        None,
                        None,
                        None,
                        f"log stream {key[1]} of tenant {key[0]} has no leader: no replica is "
                        "copied and no member changes until it has one",
                    )
                )
                continue
            for server in targets:
                if key in on_target[server] and not self._has_source(server, key, view.replicas):
                    out.append(
                        DryRunRow(
                            BLOCKER,
                            key[0],
                            None,
                            key[1],
                            server,
                            None,
                            None,
                            f"log stream {key[1]} has no healthy replica to copy from: "
                            f"{server} is not alive and no other member is in service",
                        )
                    )
        return sorted(out, key=DryRunRow.sort_key)

    def _has_source(
        self, server: str, key: LsKey, replicas: dict[str, obrpc_pb2.ReplicaInfo]
    ) -> bool:
        """Some replica of ``key`` can feed the copy: ``server``'s own while it is alive, else
        a replica in service on an alive server."""
        me = self.servers.get(server)
        if me is not None and me.is_alive():
            return True
        for m, info in replicas.items():
            s = self.servers.get(m)
            if s is not None and s.is_alive() and info.in_service:
                return True
        return False
