"""The in-memory copy of ``__all_server_tombstone``: the identities
FORCE DELETE SERVER and RECOVER LS retired. The heartbeat intake asks it on every lease
request (one dict lookup, no I/O, no lock) and ADD SERVER before it admits an address; the
loader fills it at take office (:attr:`rootservice.servers.whitelist.Whitelist.tombstones`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from obcommon.errors import ObError
from rootservice.db.tombstone_repo import Tombstone


class Tombstones:
    """The buried ``'ip:port'`` keys and server ids. Thread-safe; reads take no lock (a
    dict / set lookup on the heartbeat path), writes swap in new containers."""

    def __init__(self) -> None:
        """Nothing buried (the loader fills it at take office)."""
        self._lock = threading.Lock()
        self._by_key: dict[str, Tombstone] = {}
        self._ids: frozenset[int] = frozenset()

    def replace_all(self, stones: Iterable[Tombstone]) -> None:
        """Take the table's rows (a load)."""
        by_key = {s.key: s for s in stones}
        with self._lock:
            self._by_key = by_key
            self._ids = frozenset(s.server_id for s in by_key.values() if s.server_id > 0)

    def add(self, stones: Iterable[Tombstone]) -> None:
        """Add committed burials (a row already known keeps its first version)."""
        with self._lock:
            by_key = dict(self._by_key)
            for s in stones:
                by_key.setdefault(s.key, s)
            self._by_key = by_key
            self._ids = frozenset(s.server_id for s in by_key.values() if s.server_id > 0)

    def get(self, key: str) -> Tombstone | None:
        """The tombstone of ``key`` ('ip:port'), or None."""
        return self._by_key.get(key)

    def keys(self) -> set[str]:
        """Every buried 'ip:port'."""
        return set(self._by_key)

    def refusal(self, key: str, server_id: int) -> ObError | None:
        """The lease refusal of an agent presenting ``key`` or ``server_id`` (0: none) when
        either is buried, else None: OB_SERVER_ALREADY_DELETED naming the burial and the
        way out (another address, a wiped data directory)."""
        if not self._by_key:
            return None
        stone = self._by_key.get(key)
        if stone is None and server_id > 0 and server_id in self._ids:
            stone = next((s for s in self._by_key.values() if s.server_id == server_id), None)
        if stone is None:
            return None
        via = "" if stone.key == key else f"; '{key}' presents its server id"
        return ObError(
            "OB_SERVER_ALREADY_DELETED",
            detail=(
                f"server '{stone.key}' (id {stone.server_id}) was retired by {stone.reason} "
                f"and may never rejoin{via}: wipe the data directory and ADD SERVER the "
                "host under another address"
            ),
        )
