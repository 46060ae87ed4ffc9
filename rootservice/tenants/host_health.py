"""Whether a server may host or lead replicas (docs/design/statements.md, OceanBase's leader
coordinator): a leader must be alive, started (``stop_time == 0``), in service and in an
ACTIVE zone; a stopped or isolated server is never chosen.

A SUSPECT server (:mod:`rootservice.servers.suspect_policy`) keeps its
replicas and its leaders and counts as a healthy member for majority checks
(:meth:`HostHealth.can_lead`, :meth:`HostHealth.healthy_member`), but is no new leader while a
server that is not SUSPECT can lead (:meth:`HostHealth.is_suspect`, used by the leader
coordinator) and no copy destination (the balancer and the rebuilder ask
:meth:`HostHealth.is_suspect`).
"""

from __future__ import annotations

from collections.abc import Set

from obcommon.clock import Clock
from obcommon.proto import obrpc_pb2
from rootservice.tenants.ports import ServerDirectory, ZoneDirectory
from rootservice.tenants.topology import LsPlan


class HostHealth:
    """Answers about servers as replica hosts, from the whitelist and the zones."""

    def __init__(self, servers: ServerDirectory, zones: ZoneDirectory, clock: Clock) -> None:
        """Read ``servers`` and ``zones`` on every question (no caching); SUSPECT is judged
        on ``clock``'s monotonic microseconds."""
        self.servers = servers
        self.zones = zones
        self.clock = clock

    def is_suspect(self, server: str) -> bool:
        """``server`` is alive and SUSPECT now: no new leader, no copy
        destination."""
        s = self.servers.get(server)
        return s is not None and s.is_suspect(self.clock.monotonic_us())

    def lag_reasons(self, server: str) -> tuple[str, ...]:
        """Why ``server`` is LAGGING (``("command",)``, ``("disk",)`` ...;
        :mod:`rootservice.servers.lag_policy`), empty when it is not or is not whitelisted."""
        s = self.servers.get(server)
        return s.lag.reasons if s is not None and s.lag.lagging else ()

    def is_alive(self, server: str) -> bool:
        """``server`` is whitelisted and its heartbeat status is alive."""
        s = self.servers.get(server)
        return s is not None and s.is_alive()

    def can_lead(self, server: str, exclude: Set[str] = frozenset()) -> bool:
        """Alive, not stopped, started (``start_service_time > 0``), zone ACTIVE and not in
        ``exclude``."""
        s = self.servers.get(server)
        return (
            s is not None
            and server not in exclude
            and s.is_alive()
            and not s.is_stopped()
            and s.start_service_time > 0
            and self.zones.is_active(s.zone)
        )

    def healthy_member(
        self, server: str, r: obrpc_pb2.ReplicaInfo | None, exclude: Set[str]
    ) -> bool:
        """Alive, started, in service, zone ACTIVE, not being stopped, replica in service
        (the members that count for STOP's majority, docs/design/statements.md)."""
        return r is not None and r.in_service and self.can_lead(server, exclude)

    def zone_of(self, plan: LsPlan, server: str) -> str:
        """The zone of ``server``: from the whitelist, else from the plan ("" if neither)."""
        s = self.servers.get(server)
        if s is not None:
            return s.zone
        return plan.members.get(server, ("", 0))[0]
