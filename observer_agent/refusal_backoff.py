"""How long an agent waits before asking again for a lease an RS refused (pure; times in
integer microseconds).

Three kinds of refusal:

- **Looking for the leader** (:data:`NO_BACKOFF`: ``OB_RS_NOT_MASTER``): a standby, or an RS
  waiting for BOOTSTRAP. Asked again every ``heartbeat_interval``: the agent must find the
  leader, and join a bootstrap, within a heartbeat or two.
- **Lifted by a statement** (:data:`LIFTED_BY_STATEMENT`): the server is not in the whitelist
  (ADD SERVER lifts it) or its zone does not exist (ADD ZONE, then ADD SERVER). The wait
  doubles from ``heartbeat_interval`` up to :data:`LIFTED_BY_STATEMENT_INTERVALS` intervals (8 s
  with the default 2 s, under the default 10 s ``lease_time``), never to a minute: an
  operator who runs the statement expects the server in service within a lease, also when
  the RS could not pull a heartbeat from it. OceanBase's observer does not back off at all:
  its ``ObLeaseStateMgr`` asks again every ``REGISTER_TIME_SLEEP`` / ``DELAY_TIME`` (2 s)
  whatever the answer (src/observer/ob_lease_state_mgr.cpp, ``register_self_busy_wait`` and
  ``renew_lease``); the doubling up to four intervals keeps a quarter of that load off the
  RS from the agents of deleted servers, which ask for ever.
- **Anything else** (a buried address, another cluster's identity, a wiped data directory):
  only an operator on the node lifts it. The wait doubles up to
  :data:`MAX_REFUSAL_BACKOFF_US` (a minute; a deleted server's agent asked every 2 s forever
  before).

Every wait is scaled by a random factor in [0.8, 1.0] so that the agents of a deleted zone
do not ask in step (exponential backoff with jitter, as gRPC's connection backoff).
"""

from __future__ import annotations

import random

#: Longest wait, in microseconds, between lease requests an RS keeps refusing.
MAX_REFUSAL_BACKOFF_US = 60_000_000

#: Longest wait, in heartbeat intervals, after a refusal that a statement lifts.
LIFTED_BY_STATEMENT_INTERVALS = 4

#: Refusals that do not back off (the agent is looking for the leader).
NO_BACKOFF = frozenset({"OB_RS_NOT_MASTER"})

#: Refusals an operator's statement lifts: ADD SERVER, ADD ZONE.
LIFTED_BY_STATEMENT = frozenset({"OB_SERVER_NOT_IN_WHITE_LIST", "OB_ZONE_INFO_NOT_EXIST"})


def refusal_delay_us(
    heartbeat_interval: int, refusals_in_row: int, lifted_by_statement: bool, rng: random.Random
) -> int:
    """Microseconds to wait before the next lease request.

    ``heartbeat_interval`` (> 0) when ``refusals_in_row`` is 0 (no refusal that backs off);
    after ``n`` refusals in a row ``heartbeat_interval * 2**(n-1)``, capped at
    ``LIFTED_BY_STATEMENT_INTERVALS * heartbeat_interval`` when the last refusal is one a
    statement lifts (``lifted_by_statement``) and at :data:`MAX_REFUSAL_BACKOFF_US`
    otherwise, times a factor drawn from ``rng`` in [0.8, 1.0]."""
    hb = heartbeat_interval
    n = refusals_in_row
    if n <= 0:
        return hb
    cap = MAX_REFUSAL_BACKOFF_US
    if lifted_by_statement:
        cap = min(cap, LIFTED_BY_STATEMENT_INTERVALS * hb)
    delay = min(cap, hb << min(n - 1, 40))
    return int(delay * rng.uniform(0.8, 1.0))
