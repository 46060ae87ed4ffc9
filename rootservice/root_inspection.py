"""ALTER SYSTEM RUN JOB 'ROOT_INSPECTION': the RS checks what it holds in memory against its
tables, and the operators' views against each other, and says what differs.

After OceanBase's root inspection (``ObRootInspection``, src/rootserver/ob_root_inspection.cpp,
run by ``ALTER SYSTEM RUN JOB 'root_inspection'`` through ``ObAdminRunJob``; its per-check
results are ``__all_virtual_upgrade_inspection``'s NAME / INFO rows, and each problem it
finds is a ``ROOTSERVICE_EVENT_ADD("inspector", ...)`` event). Here the checks are this RS's
own state:

- ``server_table``: the whitelist against ``__all_server`` (a row missing, a row not
  whitelisted, a checked column that differs; rows waiting in the persistence queue differ
  legitimately and are skipped, as the ``check_all_server`` task skips them);
- ``zone_table``: the zone cache against ``__all_zone``;
- ``unit_layout``: the cached layout of units and log streams against the tables;
- ``view_consistency``: ``DBA_OB_SERVERS``, ``DBA_OB_ZONES``, ``DBA_OB_UNITS`` and
  ``DBA_OB_LS_LOCATIONS`` against each other (:mod:`rootservice.db.inspection_repo`).

The run is a ``ROOT_INSPECTION`` job of ``__all_rootservice_job``: SUCCESS when nothing
differs, else FAILED with return code OB_STATE_NOT_MATCH and every finding in its
``extra_info``; one event ``inspector`` / ``root_inspection`` per finding. Nothing is
repaired: ``RELOAD SERVER`` / ``RELOAD ZONE`` / ``RELOAD UNIT`` take the tables' side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from obcommon.addresses import format_server
from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.db import event_repo, inspection_repo, job_repo, server_repo, zone_repo
from rootservice.db.event_repo import Event
from rootservice.ha.store import MetaStore
from rootservice.servers.loader import table_value
from rootservice.servers.status import CHECKED_COLUMNS
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager, zone_changes
from rootservice.tenants.layout_diff import layout_changes, read_layout
from rootservice.tenants.topology import LayoutCache

JOB_TYPE = "ROOT_INSPECTION"
CHECKS = ("server_table", "zone_table", "unit_layout", "view_consistency")
EXTRA_INFO_MAX = 4096


class PendingRows(Protocol):
    """The servers whose rows are queued for writing (:class:`rootservice.servers.
    persist_queue.PersistQueue`)."""

    def pending_keys(self) -> set[str]:
        """``'ip:port'`` of every server with a queued row."""
        ...


@dataclass
class InspectionResult:
    """One run: the job's id, ``(check, info)`` per check (info ``succeed`` or its
    findings joined by ``; ``), and every finding as ``(check, text)``."""

    job_id: int
    rows: list[tuple[str, str]] = field(default_factory=list)
    findings: list[tuple[str, str]] = field(default_factory=list)


class RootInspection:
    """The ROOT_INSPECTION job over the RS's in-memory parts and its store."""

    def __init__(
        self,
        *,
        store: MetaStore,
        clock: Clock,
        whitelist: Whitelist,
        pending: PendingRows,
        zones: ZoneManager,
        layout: LayoutCache,
    ) -> None:
        """Keep the parts it compares; nothing is read until :meth:`run`."""
        self.store = store
        self.clock = clock
        self.whitelist = whitelist
        self.pending = pending
        self.zones = zones
        self.layout = layout

    def run(self, sql_text: str = "ALTER SYSTEM RUN JOB 'ROOT_INSPECTION'") -> InspectionResult:
        """Run every check, then write the job, its result and the events in one fenced
        transaction. Raises ``ObError`` of the database (nothing written)."""
        found: dict[str, list[str]] = {c: [] for c in CHECKS}
        # Under the write lock: no statement or queued row lands between reading memory and
        # reading the tables, so a difference is not one write seen half-done.
        with self.store.write_lock:
            found["server_table"] = self._servers()
            with self.store.read() as conn:
                table_zones = zone_repo.load_zones(conn)
            found["zone_table"] = [
                f"{d} (memory -> __all_zone)"
                for d in zone_changes(self.zones.snapshot(), table_zones)
            ]
            cached = self.layout.topology()
            fresh = read_layout(self.store, cached.version)
            found["unit_layout"] = [
                f"{d} (memory -> tables)" for d in layout_changes(cached, fresh)
            ]
            with self.store.read() as conn:
                found["view_consistency"] = inspection_repo.view_disagreements(conn)
        findings = [(c, text) for c in CHECKS for text in found[c]]
        rows = [(c, "; ".join(found[c]) or "succeed") for c in CHECKS]
        now = self.clock.now_us()
        ip, port = self.store.rs_addr
        summary = f"{len(findings)} difference(s)" + "".join(f"; {c}: {t}" for c, t in findings)
        with self.store.txn() as conn:
            job_id = job_repo.create_job(
                conn, JOB_TYPE, ip, port, now, self.store.rs_addr, sql_text
            )
            job_repo.set_job_progress(conn, job_id, 100, summary[:EXTRA_INFO_MAX], now)
            if findings:
                code = ObError("OB_STATE_NOT_MATCH").code
                job_repo.finish_job(conn, job_id, "FAILED", now, code)
            else:
                job_repo.finish_job(conn, job_id, "SUCCESS", now)
            events = [
                Event(
                    now,
                    "inspector",
                    "root_inspection",
                    (("check", c), ("info", t), ("job_id", job_id)),
                )
                for c, t in findings
            ]
            events.append(
                Event(
                    now,
                    "root_service",
                    "admin_run_job",
                    (("job", JOB_TYPE), ("job_id", job_id), ("differences", len(findings))),
                )
            )
            event_repo.insert_events(conn, events, self.store.rs_addr)
        return InspectionResult(job_id, rows, findings)

    def _servers(self) -> list[str]:
        """The whitelist against ``__all_server``; the caller holds the write lock."""
        with self.store.read() as conn:
            table = {
                format_server(r["svr_ip"], r["svr_port"]): r for r in server_repo.load_servers(conn)
            }
        with self.whitelist.lock:
            keys = sorted(self.whitelist.records)
        mine = dict(self.whitelist.rows_chunked(keys))
        # The queue after memory: a heartbeat changes a server and queues its row under the
        # whitelist lock, so a change read above is queued by now (the flush waits for the
        # write lock). Read before memory, a heartbeat landing in between was reported as a
        # difference that was only a row on its way.
        pending = self.pending.pending_keys()
        out: list[str] = []
        for key in sorted(mine.keys() | table.keys()):
            if key in pending:
                continue
            if key not in table:
                out.append(f"server {key} is in memory but __all_server has no row")
            elif key not in mine:
                out.append(f"__all_server row {key} is not in memory (RELOAD SERVER loads it)")
            else:
                for c in CHECKED_COLUMNS:
                    if mine[key][c] != table_value(table[key], c):
                        out.append(
                            f"server {key} {c}: memory {mine[key][c]!r}, "
                            f"__all_server {table_value(table[key], c)!r}"
                        )
        return out
