"""The ``server_report_sync`` task: mirror what the agents report of their node (CPU, memory,
log and data disk capacities and use, data-disk health) into ``__all_server_report``, the
table under ``GV$OB_SERVERS`` (migration 0014).

OceanBase's ``GV$OB_SERVERS`` reads ``__all_virtual_server``, which each observer answers
for itself (src/observer/virtual_table/ob_all_virtual_server.cpp): a server that is down
has no row. Here the RS leader holds the reports, so it writes one row per server whose
lease is alive and deletes the row of a server whose lease expired or that left the
whitelist. ``data_disk_abnormal_time`` is when the RS first saw the agent report its data
disk broken (kept while it stays broken, also across a change of RS leader, which reads
it back), 0 once it is healthy. Only rows whose values changed are written, in one fenced
transaction per round. Sizes are bytes, CPU cores, times microseconds since the epoch.

Cost: the table is read once per term (its first round, and again after a round that
failed), then the task keeps what it wrote; each round reads a few fields of the alive
records under the whitelist lock, without copying them. Reading 5,000 rows and copying
5,000 records every 2 s made this task the largest Python cost of the RS while thousands
of agents took their first lease.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from obcommon.addresses import format_server
from obcommon.clock import Clock
from obcommon.fencing import FenceToken
from rootservice.db import server_report_repo
from rootservice.db.server_report_repo import ServerKey
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.servers.status import ReportStatus, ServerStatus

#: How often the leader writes the reports, in microseconds: GV$OB_SERVERS lags the
#: agents' reports by at most this (plus a heartbeat).
INTERVAL_US = 2_000_000

HEALTHY, BROKEN = "NORMAL", "ERROR"

T = TypeVar("T")


class Servers(Protocol):
    """The whitelist (:class:`rootservice.servers.whitelist.Whitelist`)."""

    def map_alive(self, fn: Callable[[ServerStatus], T]) -> list[T]:
        """``fn`` of every alive record, under the whitelist's lock."""
        ...


def report_row(s: ServerStatus, old: dict[str, Any] | None, now_us: int) -> dict[str, Any]:
    """The ``__all_server_report`` values of server ``s`` at ``now_us``, given its row
    ``old`` (None when it has none): the agent's last resources, ``ERROR`` while the agent
    reports a data-disk error (since ``old``'s abnormal time when it was already ERROR, else
    since now), else ``NORMAL`` with abnormal time 0."""
    r = s.resource_info
    broken = s.server_report_status is ReportStatus.DATA_DISK_ERROR
    since = 0
    if broken:
        kept = old is not None and old["data_disk_health_status"] == BROKEN
        since = int(old["data_disk_abnormal_time"]) if kept and old is not None else 0
        since = since or now_us
    return {
        "cpu_capacity": float(r.cpu_total),
        "mem_capacity": int(r.mem_total),
        "mem_in_use": int(r.mem_in_use),
        "log_disk_capacity": int(r.log_disk_total),
        "log_disk_in_use": int(r.log_disk_in_use),
        "data_disk_capacity": int(r.data_disk_total),
        "data_disk_in_use": int(r.data_disk_in_use),
        "data_disk_health_status": BROKEN if broken else HEALTHY,
        "data_disk_abnormal_time": since,
    }


def _report_key(s: ServerStatus) -> ServerKey:
    return (s.ip, s.port)


class ServerReportSync:
    """``run_once()`` -> rows written or deleted (see the module docstring). ``servers`` is
    the whitelist; writes go through ``store``'s fenced transaction, and nothing happens
    while ``term.may_act()`` is False."""

    name = "server_report_sync"

    def __init__(self, term: Term, store: MetaStore, clock: Clock, servers: Servers) -> None:
        """Nothing is read before the first round; the first round of each term reads the
        table afresh (a previous leader may have written it)."""
        self.term = term
        self.store = store
        self.clock = clock
        self.servers = servers
        # The table as this RS last read or wrote it, and the term it did so in: another
        # leader may write it only under another token.
        self._have: dict[ServerKey, dict[str, Any]] | None = None
        self._have_token: FenceToken | None = None
        # Per server: the resources object and data-disk status its last row was made of,
        # and that row; for the ``_have`` it was made against (a new read starts afresh).
        # Keyed by the server's 'ip:port', with its table key last.
        self._rows: dict[str, tuple[object, ReportStatus, dict[str, Any], ServerKey]] = {}
        self._rows_of: object = None

    def run_once(self) -> int:
        """One round: the rows of the alive servers that differ from the table, and the
        deletion of the others' rows. Raises ``ObError`` (OB_RS_NOT_MASTER, OB_ERR_SYS) from
        the store; the next round then reads the table again."""
        if not self.term.may_act():
            return 0
        token = self.term.token()
        have = self._have if self._have_token == token else None
        if have is None:
            with self.store.read() as conn:
                have = server_report_repo.load_reports(conn)
            self._have, self._have_token = have, token
        now = self.clock.now_us()
        if self._rows_of is not have:
            self._rows, self._rows_of = {}, have
        rows = self._rows

        def visit(s: ServerStatus) -> tuple[ServerKey, dict[str, Any]] | None:
            # A server whose resources object (replaced whole when the agent's report
            # changes) and data-disk status are the ones of its last row has that row again,
            # and when the table holds that very row there is nothing to do (None): most
            # servers, every round. Building and comparing 5,000 rows every 2 s was this
            # task's whole cost.
            ri, status = s.resource_info, s.server_report_status
            made = rows.get(s.key)
            if made is not None and made[0] is ri and made[1] is status:
                if have.get(made[3]) is made[2]:
                    return None
                return made[3], made[2]
            k = (s.ip, s.port)
            r = report_row(s, have.get(k), now)
            rows[s.key] = (ri, status, r, k)
            return k, r

        visited = self.servers.map_alive(visit)
        upserts: dict[ServerKey, dict[str, Any]] = {}
        for item in visited:
            if item is None:
                continue
            k, v = item
            old = have.get(k)
            if old != v:
                upserts[k] = v
            else:
                # The same values: the table's row needs nothing, and next round's visit
                # finds it by identity.
                have[k] = v
        # Every alive server not upserted has its row (see visit): rows to delete exist only
        # when the table holds more rows than that. Only then are the alive keys read again.
        inserted = sum(1 for k in upserts if k not in have)
        deletes: list[ServerKey] = []
        if len(have) + inserted != len(visited):
            alive = set(self.servers.map_alive(_report_key))
            deletes = [k for k in have if k not in alive and k not in upserts]
        if not upserts and not deletes:
            return 0
        # Forgotten until the write is known to have committed: a failed or ambiguous
        # commit leaves the next round to read what the table really holds.
        self._have = None
        with self.store.txn() as conn:
            server_report_repo.put_reports(conn, upserts, deletes, now, set(have))
        for k in deletes:
            del have[k]
            # A server back after its row was deleted gets a row made afresh.
            rows.pop(format_server(*k), None)
        have.update(upserts)
        self._have = have
        return len(upserts) + len(deletes)
