"""The authenticated caller of an admin statement."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    """``user`` as in ``__all_user`` (case-sensitive) and ``client_addr``, the caller's
    ``host:port`` as gRPC saw it (``[v6]:port`` for IPv6; "" when unknown)."""

    user: str
    client_addr: str

    @property
    def client_host(self) -> str:
        """The host part of :attr:`client_addr` (no port, no IPv6 brackets), the ``'h'`` of
        MySQL's ``'user'@'h'``."""
        return client_host(self.client_addr)


def client_host(client_addr: str) -> str:
    """``"10.0.0.5:51234"`` -> ``"10.0.0.5"``, ``"[::1]:5"`` -> ``"::1"``; an address
    without a port is returned as is."""
    host, sep, port = client_addr.rpartition(":")
    if not sep or not port.isdigit() or (":" in host and not host.startswith("[")):
        host = client_addr  # no port (or a bare IPv6 address)
    return host.strip("[]")
