"""Server addresses: the one address grammar of the RS, the agent and ``obadmin``.

A server's identity is ``ip:port`` (OceanBase's ``ObAddr``): an IPv4 address or a bracketed
IPv6 address and a port in 1..65535. :func:`parse_server` checks a server address as
statements and lease requests carry it (``ObError(OB_INVALID_ARGUMENT)``);
:func:`parse_host_port` checks a listen / connect address of a flag, where a host name is
allowed (``ValueError``, for pydantic-settings).
"""

from __future__ import annotations

import ipaddress
import re

from obcommon.errors import ObError


def parse_server(text: str) -> tuple[str, int]:
    """``'127.0.0.1:2882'`` -> ``('127.0.0.1', 2882)``.

    Accepts an IPv4 address or a bracketed IPv6 address (``'[::1]:2882'``) and a port in
    1..65535; host names are refused because the whitelist is keyed by address, as in
    OceanBase's ``ObAddr``. Raises ``ObError(OB_INVALID_ARGUMENT)`` naming the bad value
    (truncated to 64 characters so a 1 MB string yields a short message).
    """
    shown = text if len(text) <= 64 else text[:61] + "..."
    if not isinstance(text, str) or len(text) > 64:
        raise ObError("OB_INVALID_ARGUMENT", f"server '{shown}'")
    host, sep, port_s = text.strip().rpartition(":")
    if not sep or not port_s.isdigit() or not host:
        raise ObError("OB_INVALID_ARGUMENT", f"server '{shown}'", detail="expected 'ip:port'")
    port = int(port_s)
    if not 1 <= port <= 65535:
        raise ObError("OB_INVALID_ARGUMENT", f"server '{shown}'", detail="port must be 1..65535")
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        addr = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        raise ObError(
            "OB_INVALID_ARGUMENT", f"server '{shown}'", detail="host must be an IP address"
        ) from None
    if addr.version == 6 and not bracketed:
        raise ObError(
            "OB_INVALID_ARGUMENT",
            f"server '{shown}'",
            detail="IPv6 addresses are written [addr]:port",
        )
    return str(addr), port


def format_server(ip: str, port: int) -> str:
    """Inverse of :func:`parse_server`."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


_HOST_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,252}))$")


def parse_host_port(addr: str, *, allow_port_zero: bool = False) -> tuple[str, int]:
    """``"127.0.0.1:2882"`` -> ``("127.0.0.1", 2882)``: a flag's listen or connect address.

    The host is an IPv4 address, a host name or a bracketed IPv6 address; the port is
    1..65535 (0 too when ``allow_port_zero``, meaning "any free port", for in-process tests).
    Raises ``ValueError`` with a readable message otherwise.
    """
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()):
        raise ValueError(f"{addr!r} is not host:port")
    if not _HOST_RE.match(host):
        raise ValueError(f"{addr!r} has an invalid host {host!r}")
    lo = 0 if allow_port_zero else 1
    if not lo <= int(port) <= 65535:
        raise ValueError(f"{addr!r}: port {int(port)} is out of range [{lo}, 65535]")
    return host, int(port)
