"""Which RS the agent tries next (docs/design/leases.md): the RS list the RS last sent, then the
configured one, round robin; a leader hint or a reconnect target goes first."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from obcommon.addresses import parse_host_port


class RsAddresses:
    """The RS addresses of one agent. ``configured`` is ``settings.rs_list`` (``ip:port``
    strings); ``log`` the agent's logger."""

    def __init__(
        self,
        configured: Sequence[str],
        log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
    ) -> None:
        """Round robin over ``configured`` until the RS sends a list."""
        self._configured = list(configured)
        self.log = log
        self._adopted: list[str] = []
        self._index = 0
        self._preferred: list[str] = []

    @property
    def rs_list(self) -> list[str]:
        """RS addresses tried round robin: the list the RS last sent, then our own ones."""
        out = list(self._adopted)
        out.extend(a for a in self._configured if a not in out)
        return out

    def next_address(self) -> str:
        """The RS to try next: a leader hint or reconnect target first, else round robin."""
        if self._preferred:
            return self._preferred.pop(0)
        candidates = self.rs_list
        addr = candidates[self._index % len(candidates)]
        self._index += 1
        return addr

    def prefer(self, addr: str) -> None:
        """Try ``addr`` (``ip:port``) next, before any address preferred earlier."""
        if addr in self._preferred:
            self._preferred.remove(addr)
        self._preferred.insert(0, addr)

    def adopt(self, rs_list: Iterable[str]) -> None:
        """Adopt the RS list of an accepted lease response, normalised; malformed entries are
        skipped, and an empty list keeps the previous one."""
        adopted: list[str] = []
        for addr in rs_list:
            try:
                host, port = parse_host_port(addr)
            except ValueError:
                continue  # one bad entry must not cost us the others
            norm = f"{host}:{port}"
            if norm not in adopted:
                adopted.append(norm)
        if adopted and adopted != self._adopted:
            self.log.info("RS list is now %s", ",".join(adopted))
            self._adopted = adopted
