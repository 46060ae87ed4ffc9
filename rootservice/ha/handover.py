"""ALTER SYSTEM SWITCH ROOTSERVICE LEADER: the leader gives its office to a named standby
(docs/operations/ha.md, "Handing the office over").

The handover runs on the leader's :class:`rootservice.ha.election.Election`, under its round
lock (no election round runs meanwhile) and in its short round transactions: the leader
checks the successor, writes its queued changes, steps down, and in one transaction
conditioned on its epoch and holder ends the lease and reserves the next take-office for the
successor for one lease (:func:`rootservice.db.lease_repo.hand_over`). OceanBase serves the
same statement with the RPC ``admin_switch_rs_role`` (``ObRootService``,
src/rootserver/ob_root_service.h).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from obcommon.addresses import parse_server
from obcommon.errors import ObError
from rootservice.db import lease_repo, member_repo
from rootservice.ha.election import Election, db_errors
from rootservice.ha.term import HANDOVER

log = logging.getLogger(__name__)


class Handover:
    """The handover of ``election``'s office (one per RS process)."""

    def __init__(self, election: Election) -> None:
        """Hand over the office ``election`` holds; nothing runs until :meth:`hand_over`."""
        self.election = election

    def hand_over(self, successor: str, before_resigning: Callable[[], None]) -> int:
        """ALTER SYSTEM SWITCH ROOTSERVICE LEADER: give the office to the standby at
        ``successor`` (``ip:port``) now; returns the epoch handed over.

        Checks that this RS leads and that ``successor`` is another root service whose
        election round ran within one lease (by the database's clock, in
        ``__all_rootservice_member``); then calls ``before_resigning`` (the leader's
        queued table changes are written), steps down, and in one transaction conditioned on
        the epoch and holder ends the lease and reserves the next take-office for the
        successor for one lease (:func:`rootservice.db.lease_repo.hand_over`). The
        successor takes office at its next round with the next epoch; the other RS do not
        compete until the reservation runs out. Raises OB_RS_NOT_MASTER (not the leader, or
        the lease was lost meanwhile), OB_OP_NOT_ALLOW (``successor`` is this RS, or not
        seen alive), OB_ENTRY_NOT_EXIST (no root service ever ran at ``successor``),
        OB_ERR_SYS (the database failed: checked before stepping down, nothing changed;
        after, the office is given up and a normal election follows the lease)."""
        election = self.election
        me, holder = election.me()
        with election.round_lock:
            epoch = election.term.epoch
            if epoch == 0:
                raise ObError("OB_RS_NOT_MASTER", detail=f"root service {me} is not the leader")
            if successor == me:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"switching the root service leader to {me}, the leader already,",
                )
            lease = election.lease_time()
            with (
                db_errors(election.metrics, "reading the root services"),
                election.round_txn() as conn,
            ):
                now = election.db_now(conn)
                seen = {m.addr: m.last_seen_us for m in member_repo.seen_since(conn, 0)}
            if successor not in seen:
                raise ObError(
                    "OB_ENTRY_NOT_EXIST",
                    f"root service '{successor}' not exist (no root service of this cluster "
                    "ever ran there)",
                )
            if seen[successor] < now - lease:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    f"switching the root service leader to '{successor}', a standby whose "
                    f"last election round was {(now - seen[successor]) // 1000} ms ago (not "
                    "alive),",
                )
            before_resigning()
            election.term.request_step_down(f"{HANDOVER} to {successor}", epoch)
            election.finish_step_down()
            with (
                db_errors(election.metrics, "recording the handover"),
                election.round_txn() as conn,
            ):
                now = election.db_now(conn)
                done = lease_repo.hand_over(
                    conn, epoch, holder, parse_server(successor), now, now + lease
                )
            if not done:
                raise ObError("OB_RS_NOT_MASTER", detail=f"epoch {epoch} was taken meanwhile")
            election.term.leader = successor
            log.info("handed the office of epoch %d over to %s", epoch, successor)
            return epoch
