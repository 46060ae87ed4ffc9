"""The empty-server checker (OceanBase's ``ObEmptyServerChecker``, SPEC.md section 9).

A DELETING server that holds no unit gets ``force_stop_hb``; when, in addition, no log
stream has it in its leader's member list and ``__all_ls_meta_table`` has no replica on it,
it is removed (``ServerManager.finish_delete_server``). Units and replicas arrive with the
tenants layer; until then the hooks report nothing held, so a DELETING server is empty and
is removed by the next check, as SPEC.md section 9 says of a server with no units.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rootservice.servers.manager import ServerManager

log = logging.getLogger(__name__)


class EmptyServerChecker:
    """``run_once()`` -> number of servers removed.

    ``has_units(key)``, ``has_replicas(key)`` and ``all_ls_have_leader()`` are supplied by the
    tenant layer; ``extra_deletes(conn, ip, port)`` deletes the server's other rows (its
    ``__all_space_usage``) inside the removal transaction.
    """

    name = "empty_server_checker"

    def __init__(
        self,
        manager: ServerManager,
        has_units: Callable[[str], bool] = lambda key: False,
        has_replicas: Callable[[str], bool] = lambda key: False,
        all_ls_have_leader: Callable[[], bool] = lambda: True,
        extra_deletes: Callable[[Any, str, int], None] | None = None,
    ) -> None:
        """Check the whitelist of ``manager``; the hook defaults model a cluster with no tenants.

        Defaults: no server has units or replicas, every LS has a leader, no extra rows to delete.
        """
        self.manager = manager
        self.has_units = has_units
        self.has_replicas = has_replicas
        self.all_ls_have_leader = all_ls_have_leader
        self.extra_deletes = extra_deletes

    def run_once(self) -> int:
        """One round of ``ObEmptyServerChecker``; returns how many servers were removed.

        Does nothing (returns 0) while the RS is not in service. Each DELETING server without units
        gets ``force_stop_hb = true``; if some LS has no leader nothing is removed this round;
        otherwise each of those servers that also has no replica is removed through
        ``ServerManager.finish_delete_server`` (SPEC.md section 9). Raises
        ``ObError(OB_RS_NOT_MASTER)`` when this RS was deposed and ``ObError(OB_ERR_SYS)`` when
        the database fails during a removal.
        """
        if not self.manager.term.in_service:
            return 0
        deleting = self.manager.deleting_servers()
        if not deleting:
            return 0
        empty = []
        for s in deleting:
            if not self.has_units(s.key):
                self.manager.set_force_stop_hb(s.key, True)
                empty.append(s.key)
        if not empty or not self.all_ls_have_leader():
            # Without a leader the member lists cannot be trusted: remove nothing this round.
            return 0
        removed = 0
        for key in empty:
            if self.has_replicas(key):
                continue
            if self.manager.finish_delete_server(key, self.extra_deletes):
                log.info("server %s is empty and left the cluster (DELETE SERVER finished)", key)
                removed += 1
        return removed
