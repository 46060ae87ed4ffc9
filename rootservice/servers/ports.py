"""Collaborators the server layer's parts, and the root service's own bootstrap and take-office
paths, are given at construction: the task registry's "run this task now", the background
executor and the RS -> agent heartbeat requests.

``Wake`` and ``Background`` are plain typed callables (``Timers.wake`` and
``RootService._background`` in production; tests pass no-ops or run the work inline);
:class:`HeartbeatRequests` is met by
:class:`rootservice.servers.heartbeat_requester.HeartbeatRequester`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

Wake = Callable[[str], None]
"""``wake(name)``: run the registered task ``name`` now (``"balancer"``,
``"empty_server_checker"``, ``"lost_replica_checker"``); a no-op for a name with no job.
Called on the heartbeat path, so it must be cheap (``rootservice.tasks.wake``)."""

Background = Callable[[Callable[[], object]], None]
"""``background(fn)``: run ``fn`` off the calling thread (the RS thread pool), e.g. the
automatic STOP / START of a server whose data disk fails / recovers, or the heartbeat request
after ADD SERVER. Exceptions of ``fn`` are the executor's to log."""


class HeartbeatRequests(Protocol):
    """RS -> agent heartbeat requests, whose answers go through the heartbeat intake."""

    def request_heartbeats(
        self, servers: Iterable[str], /, *, unless: Callable[[str], bool] | None = None
    ) -> int:
        """Ask ``servers`` for a heartbeat now, except those for which ``unless(key)`` is true
        when their turn comes; returns how many answered."""
        ...


def inline(fn: Callable[[], object]) -> None:
    """A :data:`Background` that runs ``fn`` at once in the calling thread (unit tests)."""
    fn()


class LeaseAllowance(Protocol):
    """The RS's own intake delay, met by
    :class:`rootservice.servers.intake_health.IntakeHealth`."""

    def checker_tick(self) -> int:
        """Called at the start of each checker tick; the extra time (microseconds) to grant
        before expiring a lease."""
        ...


class TransitSink(Protocol):
    """Where the heartbeat path reports each accepted heartbeat's send and receive times, met by :class:`rootservice.servers.intake_health.IntakeHealth`. Called
    under the whitelist lock for every heartbeat: cheap, no I/O."""

    def transit(self, server: str, sent_us: int, received_us: int, /) -> None:
        """``server`` sent a heartbeat at ``sent_us`` (its clock), handled at
        ``received_us`` (the RS's clock); microseconds since the epoch."""
        ...


class WaitingRequests(Protocol):
    """The RS's own queue of lease requests, met by
    :class:`rootservice.servers.lease_queue.LeaseQueue`."""

    def waiting(self, server: str, /) -> bool:
        """True while a request of ``server`` waits to be handled."""
        ...


class MassExpiry(Protocol):
    """Self-suspicion, met by
    :class:`rootservice.servers.self_suspicion.SelfSuspicion`."""

    def observe(self, now: int, expired: list[str], alive: int, /) -> bool:
        """One checker tick's expiries; True while the RS suspects itself (hold permanent
        offline)."""
        ...


class UpgradeHold(Protocol):
    """The cluster's upgrade mode, met by :class:`rootservice.upgrade.versions.Versions`."""

    def in_upgrade_mode(self) -> bool:
        """True between ALTER SYSTEM BEGIN UPGRADE and END UPGRADE (hold permanent offline)."""
        ...


class Gate(Protocol):
    """The term's gate (``Term.may_act``): the drain and the maintenance ticker act only
    while it says yes."""

    def may_act(self) -> bool:
        """This RS is the leader in service."""
        ...
