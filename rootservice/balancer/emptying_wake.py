"""Event-driven steps of emptying a server (docs/design/migration.md): the tenant layer
tells :class:`EmptyingWake` what it learnt from the reports and the meta sync, and the task
that takes the next step of the move is woken at once instead of at its next period.

The end of a DELETE SERVER is a chain: the copy is in service at the destination (its
report), the reconciler changes the member list and drops the old replica, the DELETING
server reports it gone, the meta sync deletes its row of ``__all_ls_meta_table``, the
balancer finishes the unit's move and the empty-server checker removes the server. Each
step used to wait for its task's period; the last two for ``balancer_interval`` and
``empty_server_check_interval`` (10 s each): ``make bench-empty`` measured a tail of
10.6-10.9 s between the last copy in service and the job's SUCCESS, because nothing woke the
balancer once the meta sync had deleted the last row (:class:`rootservice.balancer.
copy_tasks.CopyWatch` sees copies and emptied servers, but a unit still moving keeps its
server from looking empty until a balancer round finishes the move).

OceanBase wakes its checkers the same way: ``ObEmptyServerChecker::wakeup()``
(``src/rootserver/ob_empty_server_checker.cpp``) broadcasts the condition its thread waits
on between two 10 s checks, and the disaster-recovery task manager wakes ``ObDRWorker`` when a
task finishes; the unit-migration end is ``ObMigrateUnitFinishChecker``
(``src/rootserver/ob_migrate_unit_finish_checker.cpp``), here the balancer's
:meth:`rootservice.balancer.unit_moves.UnitMoves.finish_units`, which wakes the empty-server
checker itself.
"""

from __future__ import annotations

from rootservice.balancer.ports import Waker, Whitelist
from rootservice.servers.status import AdminStatus, HeartbeatStatus

#: The tasks woken (their ``name``: rootservice.app's leader task list).
RECONCILER = "ls_reconciler"
META_SYNC = "ls_meta_sync"
BALANCER = "balancer"
EMPTY_SERVER_CHECKER = "empty_server_checker"


class EmptyingWake:
    """Implements :class:`rootservice.tenants.ports.ReplicaMoves` with wakes by task name.

    ``servers`` is the whitelist (only moves while some server is being emptied, DELETING
    or permanently offline, wake anything: a tenant's creation builds no copies, but a
    rebuild after a permanent offline does); ``wake`` runs a registered task now (a no-op
    for a task that is not registered, e.g. on a standby). Every method is cheap (one pass
    over the whitelist's flags at most) and never raises.
    """

    def __init__(self, *, servers: Whitelist, wake: Waker) -> None:
        """Nothing is read until a move is heard."""
        self.servers = servers
        self.wake = wake

    def copy_built(self, server: str, /) -> None:
        """A copy on ``server`` is in service: the reconciler changes the member list next
        (once its log is in sync) and drops the old replica."""
        if self.servers.has_servers_to_empty():
            self.wake(RECONCILER)

    def replica_dropped(self, server: str, /) -> None:
        """DELETING ``server`` dropped a replica: the meta sync deletes its row next."""
        self.wake(META_SYNC)

    def rows_deleted(self, servers: frozenset[str], /) -> None:
        """Rows of ``servers`` left ``__all_ls_meta_table``: when one of them is being
        emptied, the balancer may finish its unit moves and the empty-server checker may
        remove it."""
        for key in servers:
            s = self.servers.get(key)
            if s is not None and (
                s.admin_status is AdminStatus.DELETING
                or s.hb_status is HeartbeatStatus.PERMANENT_OFFLINE
            ):
                self.wake(BALANCER)
                self.wake(EMPTY_SERVER_CHECKER)
                return
