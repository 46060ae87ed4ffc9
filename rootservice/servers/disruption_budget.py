"""The disruption budget: DRAIN, STOP, ISOLATE and maintenance windows are
judged together with every server already unavailable, and refused when some log stream
would be left below its majority or without a possible leader.

Pure: the callers (the tenant layer's :class:`rootservice.tenants.drain_work.DrainWork`)
pass the log streams' members and the servers' records; nothing here reads a table or a lock.

A server counts as *disrupted* for the budget when :func:`disruption` names a reason: it is
being drained, INACTIVE (lease expired or permanently offline), stopped or isolated (a
maintenance window included) or SUSPECT. That is one function on purpose: the lag detector's
LAGGING joins it with one line. SUSPECT counts as live for an LS's own
majority (it keeps its replicas) but not for the budget: a server that
flapped a minute ago is the one most likely to fail during a maintenance.

After Kubernetes' PodDisruptionBudget (voluntary disruptions are refused while the budget is
spent, the involuntary ones already counted) and cockroach#55624 (two concurrent
decommissions left ranges without a quorum). OceanBase's ``check_majority_and_log_in_sync_``
(``ob_server_zone_op_service.cpp``) counts only the servers of the statement and the stopped
ones, not the flapping ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass

from rootservice.servers.status import ServerStatus

LsKey = tuple[int, int]
"""``(tenant_id, ls_id)``."""


def disruption(s: ServerStatus | None, mono: int, now: int) -> str | None:
    """Why ``s`` cannot be counted on for a majority at monotonic ``mono`` / wall ``now``
    (None: it can): ``"draining"``, ``"INACTIVE"``, ``"in maintenance"``, ``"stopped"``,
    ``"LAGGING"``, ``"SUSPECT"``, or ``"not in the whitelist"`` for None.
    The one place a state that makes a server unavailable is added."""
    if s is None:
        return "not in the whitelist"
    if s.draining:
        return "draining"
    if not s.is_alive():
        return "INACTIVE"
    if s.is_stopped():
        return "in maintenance" if s.in_maintenance(now) else "stopped"
    if s.lag.lagging and s.is_alive():
        return "LAGGING"
    if s.is_suspect(mono):
        return "SUSPECT"
    return None


@dataclass(frozen=True, slots=True)
class LsMembers:
    """One log stream's paxos members (``'ip:port'``), in a stable order."""

    key: LsKey
    members: tuple[str, ...]


def ls_name(key: LsKey) -> str:
    """``LS 1001 (tenant 1002)``: how refusals and drain blockers name a log stream."""
    return f"LS {key[1]} (tenant {key[0]})"


def refusals(
    streams: Iterable[LsMembers],
    disrupted: Mapping[str, str],
    targets: Set[str],
    action: str,
) -> list[str]:
    """The log streams that disrupting ``targets`` (for ``action``, e.g. ``"draining"``)
    on top of ``disrupted`` (server -> reason, :func:`disruption`) would leave with fewer
    available members than a majority (``len(members) // 2 + 1``), or with no member that
    could lead. Only log streams with a member in ``targets`` are judged (the budget refuses
    the new disruption, not an old one). Returns one line per LS, by key:
    ``"LS 1001 (tenant 1002): 1 of 3 members would stay available, a majority needs 2
    (127.0.0.1:2882 draining, 127.0.0.1:2883 SUSPECT)"``; empty when allowed."""
    out = []
    for ls in sorted(streams, key=lambda x: x.key):
        if not targets & set(ls.members):
            continue
        down = {
            m: (action if m in targets else disrupted[m])
            for m in ls.members
            if m in targets or m in disrupted
        }
        n = len(ls.members)
        majority = n // 2 + 1
        left = n - len(down)
        why = ", ".join(f"{m} {r}" for m, r in down.items())
        if left < majority:
            out.append(
                f"{ls_name(ls.key)}: {left} of {n} members would stay available, "
                f"a majority needs {majority} ({why})"
            )
        elif left == 0:  # pragma: no cover - a majority is at least 1
            out.append(f"{ls_name(ls.key)}: no member could lead ({why})")
    return out
