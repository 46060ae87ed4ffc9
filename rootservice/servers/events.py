"""Rows of ``__all_rootservice_event_history`` raised by the server layer (module
``server``), SPEC.md sections 5-7: ``online``, ``lease_expire``, ``permanent_offline``,
``data_disk_error``, ``add_server``, ``delete_server``... each naming the server and its zone.
"""

from __future__ import annotations

from typing import Any

from rootservice.db.event_repo import Event
from rootservice.servers.status import ServerStatus

MODULE = "server"


def server_event(now: int, event: str, s: ServerStatus, *extra: tuple[str, Any]) -> Event:
    """The event ``event`` of server ``s`` at ``now`` (microseconds since the epoch), with
    ``("server", 'ip:port')``, ``("zone", zone)`` and then the ``extra`` (name, value) pairs."""
    return Event(now, MODULE, event, (("server", s.key), ("zone", s.zone), *extra))
