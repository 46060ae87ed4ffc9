"""What this RS tells every agent in a lease response and how it knows itself
(docs/design/leases.md and docs/design/ha.md): the cluster identity, the rs_list and this RS's own server.

Set by the RS life cycle (``RootService.open``, ``do_restart``, BOOTSTRAP) before the
whitelist is served; read on the heartbeat path (plain attribute reads, no lock: each is
replaced whole, never mutated in place).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ClusterIdentity:
    """``cluster_id``: ``__all_sys_parameter.cluster_id`` ("" before BOOTSTRAP: any agent's
    cluster id is accepted); ``rs_list``: the 'ip:port' of the root services, sent in every
    lease response; ``self_server``: the 'ip:port' of the observer co-located with this RS
    (its ``with_rootserver`` is 1), or ""; ``bootstrapped``: ``bootstrap_time`` is in
    ``__all_sys_parameter`` (ALTER SYSTEM BOOTSTRAP succeeded once)."""

    cluster_id: str = ""
    rs_list: list[str] = field(default_factory=list)
    self_server: str = ""
    bootstrapped: bool = False
