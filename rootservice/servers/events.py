"""Rows of ``__all_rootservice_event_history`` raised by the server layer (module
``server``), docs/design/leases.md, docs/design/servers.md and docs/design/statements.md: ``online``, ``lease_expire``, ``permanent_offline``,
``data_disk_error``, ``add_server``, ``delete_server``... each naming the server and its zone.

Each such transition is also one INFO line on the ``rootservice.servers.transitions`` logger
(:func:`log_transition`): ``server 10.0.0.1:2882 lease_expire: no heartbeat
for 10s (lease_time 10s)`` with ``server``, ``zone``, ``event`` and ``reason`` as structured
fields, once per transition and never per heartbeat.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from rootservice.db.event_repo import Event
from rootservice.servers.status import ServerStatus

MODULE = "server"

log = logging.getLogger("rootservice.servers.transitions")


def server_event(now: int, event: str, s: ServerStatus, *extra: tuple[str, Any]) -> Event:
    """The event ``event`` of server ``s`` at ``now`` (microseconds since the epoch), with
    ``("server", 'ip:port')``, ``("zone", zone)`` and then the ``extra`` (name, value) pairs."""
    return Event(now, MODULE, event, (("server", s.key), ("zone", s.zone), *extra))


def log_transition(event: Event, reason: str) -> None:
    """Log server event ``event`` (built by :func:`server_event`) at INFO with why it happened:
    ``server <ip:port> <event>: <reason>``, ``extra`` fields ``server``, ``zone``, ``event``,
    ``reason``. Call it once the transition holds (queued for the tables, or committed)."""
    values = dict(event.values)
    server, zone = str(values.get("server", "")), str(values.get("zone", ""))
    log.info(
        "server %s %s: %s",
        server,
        event.event,
        reason,
        extra={"server": server, "zone": zone, "event": event.event, "reason": reason},
    )


def log_transitions(events: Iterable[tuple[Event, str]]) -> None:
    """:func:`log_transition` for each ``(event, reason)``."""
    for e, reason in events:
        log_transition(e, reason)


def seconds(us: int) -> str:
    """A gap of ``us`` microseconds for a log line: ``10.000s``."""
    return f"{us / 1e6:.3f}s"
