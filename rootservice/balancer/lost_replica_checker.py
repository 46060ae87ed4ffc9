"""The lost-replica checker task (``lost_replica_checker``; docs/design/migration.md, OceanBase's
``ObLostReplicaChecker``): the rows of ``__all_ls_meta_table`` the lost-replica plan calls
lost are deleted in batches, each logged, in fenced transactions (docs/design/ha.md#fenced-writes).
"""

from __future__ import annotations

import logging

from rootservice.balancer.planner import Planner, PlannerError, server_rows
from rootservice.balancer.ports import Gate, MetaCache, Store, UpgradeHold, Waker, Whitelist
from rootservice.db import ls_repo
from rootservice.metrics import Metrics
from rootservice.servers.status import HeartbeatStatus

log = logging.getLogger(__name__)

#: Rows deleted per transaction.
BATCH = 500


class LostReplicaChecker:
    """The scheduled lost-replica task (``name = "lost_replica_checker"``).

    ``planner`` computes the lost rows (Spark); ``ls`` re-reads ``__all_ls_meta_table``
    after a deletion; ``wake`` runs the ``empty_server_checker`` then (a server may be empty
    now).
    """

    name = "lost_replica_checker"

    def __init__(
        self,
        *,
        servers: Whitelist,
        ls: MetaCache,
        planner: Planner,
        term: Gate,
        store: Store,
        wake: Waker,
        metrics: Metrics,
        upgrade: UpgradeHold | None = None,
    ) -> None:
        """Nothing runs until :meth:`run_once`; nothing runs while ``upgrade`` says the
        cluster is in upgrade mode."""
        self.servers = servers
        self.ls = ls
        self.planner = planner
        self.term = term
        self.store = store
        self.wake = wake
        self.metrics = metrics
        self.upgrade = upgrade

    def run_once(self) -> int:
        """ObLostReplicaChecker's round: delete the rows of ``__all_ls_meta_table`` the plan
        calls lost, in batches of 500, each logged. Returns rows deleted. Runs only when some
        row sits on a server that is gone or permanently offline (no Spark job otherwise), and
        only while the RS is in service and the cluster not in upgrade mode. A failed plan (``PlannerError``, already made visible by
        the planner) deletes nothing. Raises ``ObError`` when a transaction fails (the
        batches before it stay deleted)."""
        if not self.term.may_act():
            return 0
        if self.upgrade is not None and self.upgrade.in_upgrade_mode():
            return 0
        with self.store.read() as conn:
            servers = {f"{ip}:{port}" for ip, port in ls_repo.replica_servers(conn)}
        suspects = [
            k
            for k in servers
            if (s := self.servers.get(k)) is None
            or s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE
        ]
        if not suspects:
            return 0
        try:
            rows = self.planner.lost_replicas(server_rows(self.servers))
        except PlannerError:
            # Counted, logged once and recorded as an event by the planner.
            return 0
        deleted = 0
        for i in range(0, len(rows), BATCH):
            batch = rows[i : i + BATCH]
            keys = [
                (int(r["tenant_id"]), int(r["ls_id"]), str(r["svr_ip"]), int(r["svr_port"]))
                for r in batch
            ]
            with self.store.txn() as conn:
                deleted += ls_repo.delete_ls_meta(conn, keys)
            for r in batch:
                log.info(
                    "lost replica removed: tenant %s ls %s on %s:%s (%s)",
                    r["tenant_id"],
                    r["ls_id"],
                    r["svr_ip"],
                    r["svr_port"],
                    r["reason"],
                )
        if deleted:
            self.ls.forget_meta()
            self.metrics.inc("lost_replicas_removed_total", deleted)
            self.wake("empty_server_checker")
        return deleted
