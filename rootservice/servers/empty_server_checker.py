"""The empty-server checker (OceanBase's ``ObEmptyServerChecker``, docs/design/migration.md).

A DELETING server that holds no unit gets ``force_stop_hb``; when, in addition, no log
stream has it in its leader's member list and ``__all_ls_meta_table`` has no replica on it,
it is removed (:meth:`EmptyServerChecker.finish_delete_server`). Units and replicas come from
the tenant layer; with no tenants a DELETING server is empty and is removed by the next check,
as docs/design/migration.md says of a server with no units.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Protocol

from obcommon.clock import Clock
from rootservice.db import event_repo, job_repo, server_repo
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.servers.agent_client import AgentClient
from rootservice.servers.events import log_transition, server_event
from rootservice.servers.status import AdminStatus
from rootservice.servers.whitelist import Whitelist

log = logging.getLogger(__name__)


class ServerContents(Protocol):
    """What a server still holds (the tenant layer's
    :class:`rootservice.tenants.server_probes.ServerProbes`)."""

    def has_units(self, server: str, /) -> bool:
        """``server`` hosts a unit, or a unit is migrating away from it."""
        ...

    def has_replicas(self, server: str, /) -> bool:
        """Some LS leader has ``server`` in its member list, or ``__all_ls_meta_table`` has a
        replica on it."""
        ...

    def all_ls_have_leader(self) -> bool:
        """Every LS has a leader (else member lists cannot be trusted)."""
        ...


class RemovalRows(Protocol):
    """Other rows that leave with a removed server (the tenant layer: ``__all_space_usage``)."""

    def extra_deletes(self, conn: Any, ip: str, port: int, /) -> None:
        """Delete them on ``conn``, inside the removal transaction (never commits)."""
        ...


class JobFinalizer(Protocol):
    """The final progress of the server's DELETE_SERVER job (the balancer)."""

    def finalize_job(self, conn: Any, ip: str, port: int, /) -> None:
        """Write it on ``conn``, inside the removal transaction (never commits)."""
        ...


class EmptyServerChecker:
    """``run_once()`` -> number of servers removed."""

    name = "empty_server_checker"

    def __init__(
        self,
        whitelist: Whitelist,
        term: Term,
        store: MetaStore,
        clock: Clock,
        agents: AgentClient,
        contents: ServerContents,
        removal: RemovalRows,
        jobs: JobFinalizer,
    ) -> None:
        """Check the DELETING servers of ``whitelist``; ``agents`` forgets a removed server's
        channel."""
        self.whitelist = whitelist
        self.term = term
        self.store = store
        self.clock = clock
        self.agents = agents
        self.contents = contents
        self.removal = removal
        self.jobs = jobs

    def run_once(self) -> int:
        """One round of ``ObEmptyServerChecker``; returns how many servers were removed.

        Does nothing (returns 0) while this RS may not act. Each DELETING server without units
        gets ``force_stop_hb = true``; if some LS has no leader nothing is removed this round;
        otherwise each of those servers that also has no replica is removed through
        :meth:`finish_delete_server` (docs/design/migration.md). Raises ``ObError(OB_RS_NOT_MASTER)``
        when this RS was deposed and ``ObError(OB_ERR_SYS)`` when the database fails during a
        removal.
        """
        if not self.term.may_act():
            return 0
        deleting = self.whitelist.deleting_servers()
        if not deleting:
            return 0
        empty = []
        for s in deleting:
            if not self.contents.has_units(s.key):
                self.whitelist.set_force_stop_hb(s.key, True)
                empty.append(s.key)
        if not empty or not self.contents.all_ls_have_leader():
            # Without a leader the member lists cannot be trusted: remove nothing this round.
            return 0
        removed = 0
        for key in empty:
            if self.contents.has_replicas(key):
                continue
            if self.finish_delete_server(key):
                removed += 1
        return removed

    def finish_delete_server(self, key: str) -> bool:
        """Remove an emptied DELETING server: its ``__all_server`` row (and, through
        ``removal.extra_deletes(conn, ip, port)``, its ``__all_space_usage`` rows, and through
        ``jobs.finalize_job(conn, ip, port)`` its job's final progress) in one transaction,
        job SUCCESS, event ``finish_delete_server``; then it leaves memory. Returns False when
        it is no longer a DELETING whitelisted server. Raises ``ObError`` on database errors."""
        with self.store.write_lock:
            with self.whitelist.lock:
                s = self.whitelist.records.get(key)
                if s is None or s.admin_status is not AdminStatus.DELETING:
                    return False
                s = replace(s)
            now = self.clock.now_us()
            with self.store.txn() as conn:
                self.removal.extra_deletes(conn, s.ip, s.port)
                self.jobs.finalize_job(conn, s.ip, s.port)
                server_repo.delete_server(conn, s.ip, s.port)
                job_repo.finish_jobs(conn, "DELETE_SERVER", s.ip, s.port, "SUCCESS", now)
                finished = server_event(now, "finish_delete_server", s, ("id", s.id))
                event_repo.insert_events(conn, [finished], self.store.rs_addr)
            self.whitelist.remove(key)
            log_transition(finished, "no unit and no replica left: removed from the cluster")
        self.agents.forget(key)
        return True
