"""The clean stop's last lease request: an agent that stops cleanly tells the RS so, with
``server_status`` bit :data:`obcommon.releases.STOPPING_STATUS_BIT` on the lease stream still open,
so the event history tells a deliberate stop (an upgrade's restart) from a crash.

A gated change of 0.2.0: a 0.1.0 RS refuses a lease request with a bit it does not know, so
the notice is sent only while the RS that answered last said the cluster version is at least
0.2.0 (:func:`obcommon.releases.stopping_bit`); otherwise nothing
is sent and the RS learns of the stop from the lease's expiry, as from a 0.1.0 agent.
"""

from __future__ import annotations

from obcommon import releases
from observer_agent.lease_loop import LeaseClient


async def say_stopping(lease: LeaseClient) -> bool:
    """Send the stopping notice on ``lease``'s open stream when the gate allows (after the
    answer to a renewal still out, if any); wait up to ``rpc_timeout`` for each answer. True
    when the RS accepted it. Never raises."""
    conn = lease.stream
    if (
        conn is None
        or conn.broken
        or not lease.registered
        or not releases.stopping_bit(lease.cluster_version)
    ):
        return False
    timeout_s = lease.settings.rpc_timeout / 1e6
    try:
        if conn.outstanding is not None:
            # The lease loop was stopped while a renewal was out: its answer first.
            await conn.await_answer(timeout_s)
        resp = await conn.exchange(lease.build_lease_request(stopping=True), timeout_s)
    except Exception as e:
        lease.log.info("the stopping notice to %s got no answer: %s", conn.addr, e)
        return False
    accepted = resp.error.code == 0
    lease.log.info(
        "told %s this server is stopping%s",
        conn.addr,
        "" if accepted else f" (refused: {resp.error.name})",
    )
    return accepted
