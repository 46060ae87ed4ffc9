"""What the tenant layer needs from the layers below it, as consumer protocols.

The servers package provides them (the ``Whitelist`` is the server directory, the
``HeartbeatRequester`` the heartbeat requester, the ``ZoneManager`` the zone directory and
the ``PersistQueue`` the event sink; see :mod:`rootservice.tenants.layer`); the tenant classes
take only what they use, at construction. ``Sleep`` is the wait of the polling loops (seconds; tests
pass one that advances a FakeClock).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from obcommon.proto import obrpc_pb2
from rootservice.db.event_repo import Event
from rootservice.db.zone_repo import ZoneInfo
from rootservice.servers.status import ServerStatus

Sleep = Callable[[float], None]


class ServerDirectory(Protocol):
    """The server whitelist, read side (docs/design/servers.md#the-server-record)."""

    def get(self, server: str) -> ServerStatus | None:
        """A copy of the record of ``server`` ('ip:port'), or None when not whitelisted."""
        ...

    def snapshot(self) -> list[ServerStatus]:
        """Copies of every record, ordered by id."""
        ...

    def with_server(self, server: str, fn: Callable[[ServerStatus], None]) -> None:
        """Run ``fn`` on the live record of ``server`` under the whitelist lock (no-op when
        it is not whitelisted)."""
        ...


class ZoneDirectory(Protocol):
    """The zones of ``__all_zone`` as the RS holds them (docs/design/servers.md#the-tables)."""

    def get(self, zone: str) -> ZoneInfo | None:
        """The zone, or None."""
        ...

    def all(self) -> list[ZoneInfo]:
        """Every zone."""
        ...

    def is_active(self, zone: str) -> bool:
        """The zone exists and is ACTIVE."""
        ...


class EventSink(Protocol):
    """Queues a ``__all_rootservice_event_history`` row for the next persistence round."""

    def add_event(self, event: Event) -> None:
        """Queue ``event`` (no I/O)."""
        ...


class HeartbeatRequester(Protocol):
    """Asks servers for a heartbeat now (docs/design/leases.md, RS -> agent)."""

    def request_heartbeats(self, servers: Iterable[str]) -> int:
        """Ask each server for a lease request and process the answers; failures are only
        logged. Returns how many answered."""
        ...


class ReplicaAgents(Protocol):
    """The ApplyReplicas RPC of the agents (``AgentClient``)."""

    def apply_replicas(
        self,
        server: str,
        request: obrpc_pb2.ApplyReplicasRequest,
        timeout_us: int | None = None,
    ) -> obrpc_pb2.ApplyReplicasResponse:
        """Send the desired state of some replicas to ``server``; the answer carries the
        agent's full report. Raises ``ObError(OB_SERVER_CONNECTION_ERROR)``."""
        ...


class ReplicaMoves(Protocol):
    """Hears the steps of a replica move as the tenant layer learns them, so that the task
    that takes the next step runs now rather than at its next period (a DELETE
    SERVER waited up to ``balancer_interval`` after its last replica had left). The RS's
    :class:`rootservice.balancer.emptying_wake.EmptyingWake`; called on the heartbeat path
    and in the meta sync's round, so it must be cheap and never raise."""

    def copy_built(self, server: str, /) -> None:
        """A replica being built on ``server`` ('ip:port') reported in service."""
        ...

    def replica_dropped(self, server: str, /) -> None:
        """``server`` ('ip:port'), DELETING, reported fewer replicas than before."""
        ...

    def rows_deleted(self, servers: frozenset[str], /) -> None:
        """``__all_ls_meta_table`` rows of ``servers`` ('ip:port') were deleted (committed)."""
        ...
