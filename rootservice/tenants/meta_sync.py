"""The ``ls_meta_sync`` task: mirror the replica reports into ``__all_ls_meta_table`` and
``__all_space_usage`` (docs/design/servers.md and docs/design/migration.md), like OceanBase's LS meta table updater.

Only what changed since the last sync is written, in one fenced transaction. A server that is
not alive keeps its rows, written FOLLOWER and stale (it leads nothing while it does not
heartbeat; ``last_report_time`` is its last heartbeat); the row of a dead replica that is no
longer a Paxos member goes (disaster recovery's member-removal step). An alive server's
report of LEADER at a term below its log stream's current term (a deposed leader that has not
heard of the new term yet) is written FOLLOWER and stale too: OceanBase's
``ObLSInfo::find_leader`` (src/share/ls/ob_ls_info.cpp) takes as leader only the LEADER
replica at the highest ``proposal_id``, and ``ObLSInfo::composite_with`` turns the replicas
it merges from an older source into followers (``update_to_follower_role``). Each row also
says whether the replica's log is within ``ls_log_sync_threshold`` of its leader's
(``in_sync``, the measure of :func:`rootservice.tenants.reports.in_sync`, shown by
``GV$OB_LOG_STAT.IN_SYNC``) and, while it is being built, the member it copies from
(``copy_from``, shown by ``CDB_OB_LS_REPLICA_TASKS``), and the log entries it no longer keeps
(``begin_lsn``, the report's ``log_base_index``, shown by ``GV$OB_LOG_STAT.BEGIN_LSN``; the
log's end is not written: it moves with every entry a leader appends). Sizes are bytes; times
microseconds since the epoch.
"""

from __future__ import annotations

import threading
from typing import Any

from obcommon.clock import Clock
from obcommon.proto import obrpc_pb2
from rootservice.config import RsSettings
from rootservice.db import ls_repo, space_usage_repo
from rootservice.db.ls_repo import MetaKey
from rootservice.db.space_usage_repo import SpaceKey
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.tenants.ports import ReplicaMoves, ServerDirectory
from rootservice.tenants.reports import LsView, ReplicaReports, effective_members, in_sync
from rootservice.tenants.topology import LayoutCache, Topology
from rootservice.tenants.vocabulary import LsKey


class LsMetaSync:
    """``run_once()`` -> rows written. Keeps what the two tables hold (as far as this RS
    wrote or read them) to write only the differences. ``moves`` hears of the replica rows it
    deleted once they are committed (:meth:`ReplicaMoves.rows_deleted`: the last step a unit
    moving off a server, and the server's removal, wait for)."""

    name = "ls_meta_sync"

    def __init__(
        self,
        term: Term,
        store: MetaStore,
        clock: Clock,
        servers: ServerDirectory,
        layout: LayoutCache,
        reports: ReplicaReports,
        moves: ReplicaMoves,
        settings: RsSettings | None = None,
    ) -> None:
        """Start with nothing read: the first sync loads both tables. ``settings`` gives
        ``ls_log_sync_threshold`` (read every round; the defaults' without it)."""
        self.moves = moves
        self.settings = settings or RsSettings()
        self.term = term
        self.store = store
        self.clock = clock
        self.servers = servers
        self.layout = layout
        self.reports = reports
        self._lock = threading.Lock()
        self._meta: dict[MetaKey, dict[str, Any]] | None = None
        self._space: dict[SpaceKey, tuple[int, int]] | None = None

    def run_once(self) -> int:
        """One round of the scheduled task: see :meth:`sync_meta`."""
        return self.sync_meta()

    def forget_meta(self) -> None:
        """Re-read ``__all_ls_meta_table`` and ``__all_space_usage`` at the next sync
        (someone else deleted rows, or the RS steps down)."""
        with self._lock:
            self._meta = None
            self._space = None

    def delete_space_of_server(self, conn: Any, ip: str, port: int) -> None:
        """Delete the ``__all_space_usage`` rows of a server being removed, inside the
        caller's transaction ``conn``, and forget them."""
        space_usage_repo.delete_space_usage_of_server(conn, ip, port)
        space = self._space
        if space is not None:
            for k in [k for k in space if (k[1], k[2]) == (ip, port)]:
                space.pop(k, None)

    def sync_meta(self) -> int:
        """Write the replica rows and space usage that changed since the last sync, in one
        fenced transaction. A server that is not alive keeps its rows, written FOLLOWER and
        stale, as is a deposed leader's report (see the module docstring). Returns the rows written (0 while
        not in service). Raises ``ObError`` (OB_RS_NOT_MASTER, OB_ERR_SYS) from the store.

        Runs under the store's write lock: the task and a statement waiting for the view
        (:mod:`rootservice.tenants.view_agreement`) may sync at once, and two syncs diffing
        against the same cache would write the same rows twice."""
        if not self.term.may_act():
            return 0
        with self.store.write_lock:
            return self._sync_meta()

    def _sync_meta(self) -> int:
        if self._meta is None or self._space is None:
            with self.store.read() as conn:
                self._meta = ls_repo.load_ls_meta(conn)
                self._space = space_usage_repo.load_space_usage(conn)
        meta, space = self._meta, self._space
        want: dict[MetaKey, dict[str, Any]] = {}
        reported_servers: set[tuple[str, int]] = set()
        usage: dict[SpaceKey, tuple[int, int]] = {}
        topo = self.layout.topology()
        views = self.reports.views()
        threshold = self.settings.ls_log_sync_threshold
        for server, table in self.reports.reports().items():
            s = self.servers.get(server)
            # A server that does not heartbeat keeps its rows as they are (but for the
            # role and member-removal fixes below): its last report is not news.
            if s is None or not s.is_alive():
                continue
            reported_servers.add((s.ip, s.port))
            for (t, ls), r in table.items():
                if (t, ls) not in topo.plans:
                    continue
                view = views.get((t, ls))
                deposed = r.role == obrpc_pb2.LEADER and view is not None and r.term < view.term
                role = (
                    ls_repo.ROLE_LEADER
                    if r.role == obrpc_pb2.LEADER and not deposed
                    else ls_repo.ROLE_FOLLOWER
                )
                want[(t, ls, s.ip, s.port)] = {
                    "sql_port": s.sql_port,
                    "role": role,
                    "member_list": ",".join(sorted(r.member_list)),
                    "proposal_id": r.term,
                    "replica_status": "NORMAL" if r.in_service else "OFFLINE",
                    "unit_id": r.unit_id,
                    "zone": s.zone,
                    "paxos_replica_number": r.paxos_replica_number,
                    "data_size": r.data_size,
                    "required_size": r.required_size,
                    "stale": int(deposed),
                    "last_report_time": s.last_hb_time if deposed else 0,
                    "in_sync": int(view is None or in_sync(view, server, threshold)),
                    "copy_from": r.copy_from if not r.in_service else "",
                    # Moves only when the agent compacts or restarts its log, unlike the
                    # end, which is kept out of the table (it moves with every entry).
                    "begin_lsn": r.log_base_index,
                }
                d, u = usage.get((t, s.ip, s.port), (0, 0))
                usage[(t, s.ip, s.port)] = (d + r.data_size, u + r.required_size)
        inserts, updates, deletes = {}, {}, []
        for k, v in want.items():
            cur = meta.get(k)
            if cur is None:
                inserts[k] = v
                continue
            if v["stale"] and cur.get("stale"):
                # Still the same stale report: its time is when it went stale.
                v["last_report_time"] = cur.get("last_report_time", 0)
            if cur != v:
                updates[k] = v
        for k, cur in meta.items():
            if k in want:
                continue
            s = self.servers.get(f"{k[2]}:{k[3]}")
            if (k[0], k[1]) not in topo.plans and topo.version >= 0:
                deletes.append(k)  # the tenant or LS is gone
            elif (k[2], k[3]) in reported_servers or s is None:
                # The server reports and no longer has it, or left the whitelist.
                if s is not None:
                    deletes.append(k)
            elif self._removed_member(views, topo, k):
                # DR's member-removal step: a dead replica that is no longer a Paxos member.
                deletes.append(k)
            elif not s.is_alive() and (cur["role"] == ls_repo.ROLE_LEADER or not cur["stale"]):
                # Its last report, kept while it cannot report: not its current state.
                updates[k] = cur | {
                    "role": ls_repo.ROLE_FOLLOWER,
                    "stale": 1,
                    "last_report_time": cur["last_report_time"] or s.last_hb_time,
                }
        space_changes: dict[SpaceKey, tuple[int, int] | None] = {
            k: v for k, v in usage.items() if space.get(k) != v
        }
        for sk in space:
            if sk not in usage and (sk[1], sk[2]) in reported_servers:
                space_changes[sk] = None
        if not (inserts or updates or deletes or space_changes):
            return 0
        now = self.clock.now_us()
        with self.store.txn() as conn:
            ls_repo.upsert_ls_meta(conn, inserts, updates, now)
            ls_repo.delete_ls_meta(conn, deletes)
            space_usage_repo.put_space_usage(conn, space_changes, now)
        meta.update(inserts)
        meta.update(updates)
        for k in deletes:
            meta.pop(k, None)
        for sk, sv in space_changes.items():
            if sv is None:
                space.pop(sk, None)
            else:
                space[sk] = sv
        if deletes:
            self.moves.rows_deleted(frozenset(f"{k[2]}:{k[3]}" for k in deletes))
        return len(inserts) + len(updates) + len(deletes) + len(space_changes)

    def _removed_member(self, views: dict[LsKey, LsView], topo: Topology, k: MetaKey) -> bool:
        """The row ``k`` is on a server that is not alive and no longer a member of its LS,
        whose leader is known."""
        view = views.get((k[0], k[1]))
        plan = topo.plans.get((k[0], k[1]))
        if view is None or plan is None or view.leader is None:
            return False
        server = f"{k[2]}:{k[3]}"
        s = self.servers.get(server)
        if s is not None and s.is_alive():
            return False
        return server not in effective_members(plan, view)
