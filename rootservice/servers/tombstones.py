"""Buried servers: the identities FORCE DELETE SERVER and RECOVER LS
retired, refused for ever.

:class:`rootservice.servers.tombstone_set.Tombstones` is the in-memory copy of
``__all_server_tombstone``. :class:`ServerBurial` writes a burial through: in one fenced transaction
the tombstone rows, the servers' rows DELETING, a DELETE_SERVER job each (so the balancer
moves their units once some server has room, and the empty-server checker removes their rows
as after DELETE SERVER) and the events; then memory. TiDB PD buries failed stores the same
way before ``unsafe remove-failed-stores`` (a store that returns must not rejoin with its old
replicas).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from obcommon.clock import Clock
from rootservice.db import event_repo, job_repo, server_repo, tombstone_repo
from rootservice.db.event_repo import Event
from rootservice.db.tombstone_repo import Tombstone
from rootservice.ha.store import MetaStore
from rootservice.servers.events import log_transitions, server_event
from rootservice.servers.status import AdminStatus
from rootservice.servers.tombstone_set import Tombstones
from rootservice.servers.whitelist import Whitelist


class ServerBurial:
    """Buries servers: tombstone, DELETING and a DELETE_SERVER job, in one transaction."""

    def __init__(
        self, whitelist: Whitelist, tombstones: Tombstones, store: MetaStore, clock: Clock
    ) -> None:
        """Write through ``store``; change ``whitelist`` and ``tombstones`` once committed."""
        self.whitelist = whitelist
        self.tombstones = tombstones
        self.store = store
        self.clock = clock

    def bury(
        self,
        keys: list[str],
        reason: str,
        sql_text: str,
        stage: tuple[int, int, str] | None = None,
        events: Iterable[Event] = (),
    ) -> list[int]:
        """Bury the whitelisted servers ``keys`` ('ip:port'; a key already buried or no
        longer whitelisted is skipped) in one fenced transaction: a tombstone row each
        (``reason``), the server row DELETING with ``force_stop_hb`` (its lease is never
        extended again), a DELETE_SERVER job (``sql_text``) unless one is in progress, event
        ``force_delete_server``; with ``stage`` = (job id, progress, extra_info), that job's
        progress is set in the same transaction (RECOVER LS records its stage there), and
        ``events`` are written with it. Then memory. Returns the new job
        ids. Raises ``ObError`` from the store (nothing changed)."""
        with self.store.write_lock:
            with self.whitelist.lock:
                found = [replace(s) for k in keys if (s := self.whitelist.records.get(k))]
            targets = [s for s in found if self.tombstones.get(s.key) is None]
            now = self.clock.now_us()
            stones = [Tombstone(s.ip, s.port, s.id, s.zone, now, reason) for s in targets]
            buried = [
                server_event(now, "force_delete_server", s, ("id", s.id), ("reason", reason))
                for s in targets
            ]
            jobs: list[int] = []
            with self.store.txn() as conn:
                tombstone_repo.insert_tombstones(conn, stones)
                running = {j.server for j in job_repo.inprogress_jobs(conn, "DELETE_SERVER")}
                for s in targets:
                    s.admin_status = AdminStatus.DELETING
                    if s.key not in running:
                        jobs.append(
                            job_repo.create_job(
                                conn,
                                "DELETE_SERVER",
                                s.ip,
                                s.port,
                                now,
                                self.store.rs_addr,
                                sql_text,
                            )
                        )
                server_repo.update_servers(conn, [s.to_row() for s in targets], now)
                if stage is not None:
                    job_repo.set_job_progress(conn, stage[0], stage[1], stage[2], now)
                event_repo.insert_events(conn, [*buried, *events], self.store.rs_addr)
            self.tombstones.add(stones)
            with self.whitelist.lock:
                for s in targets:
                    cur = self.whitelist.records.get(s.key)
                    if cur is not None:
                        cur.admin_status = AdminStatus.DELETING
                        cur.force_stop_hb = True
        log_transitions((e, reason) for e in buried)
        return jobs
