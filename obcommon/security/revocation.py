"""The revoked certificates as every front end checks them.

A certificate is revoked by its serial number (CockroachDB's and OpenSSL's key for a CRL
entry): :class:`RevokedSerials` is the set one process checks, a ``frozenset`` replaced
whole, so a check is one set lookup with no lock and no database read (the heartbeat path
asks it once per lease stream message). The RS fills it from ``__all_revoked_certificate``
(:mod:`rootservice.auth.revocations`); an agent from its lease answers (``LeaseResponse.
revoked_serials``, sent only when the agent's :attr:`RevokedSerials.version` differs from
the RS's, so an unchanged list costs one integer per heartbeat).

:class:`OpenConnections` keeps the connections of the front ends that are not gRPC (the
MySQL and HTTP endpoints) by the serial of their client certificate, so that a revocation
closes those already open. gRPC exposes no connection: its calls are refused one by one,
its lease streams ended at their next message, and its open connections closed by
:class:`obcommon.security.grpc_connections.GrpcConnections`.

Serials are written as lower-case hexadecimal without separators (:func:`serial_text`);
:func:`parse_serial` also reads OpenSSL's ``serial=0A1B...`` and ``0a:1b:...`` forms.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from cryptography import x509

log = logging.getLogger(__name__)

#: A serial of an X.509 certificate is at most 20 octets (RFC 5280 section 4.1.2.2).
MAX_SERIAL_HEX = 40


def serial_text(serial: int) -> str:
    """``serial`` as this project writes it: lower-case hex, no separators, no leading
    zeros (``0`` for zero)."""
    return format(serial, "x")


def parse_serial(text: str) -> str:
    """The serial ``text`` names, as :func:`serial_text` writes it. Accepts hex with or
    without ``0x``, ``serial=`` (``openssl x509 -serial``) and ``:`` separators, in either
    case. Raises ``ValueError`` for anything else, or a serial over 20 octets."""
    t = text.strip().lower().removeprefix("serial=").removeprefix("0x").replace(":", "")
    if not t or len(t.lstrip("0")) > MAX_SERIAL_HEX or any(c not in "0123456789abcdef" for c in t):
        raise ValueError(f"{text!r} is not a certificate serial (hexadecimal, at most 20 octets)")
    return serial_text(int(t, 16))


def serial_of_pem(pem: bytes) -> str:
    """The serial of a PEM certificate (:func:`serial_text`). Raises ``ValueError`` when
    ``pem`` is not a certificate."""
    return serial_text(x509.load_pem_x509_certificate(pem).serial_number)


def list_version(serials: Iterable[str]) -> int:
    """A number naming this exact set of serials, the same in every process: 0 for the
    empty set, else the first 63 bits of the BLAKE2b digest of the sorted serials (so that
    an agent and any RS agree without a counter kept in the database)."""
    items = sorted(set(serials))
    if not items:
        return 0
    digest = hashlib.blake2b("\n".join(items).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 1) or 1


class RevokedSerials:
    """The set of revoked serials one process refuses, and who to tell when it changes.

    :attr:`serials` (a ``frozenset`` of :func:`serial_text` strings) and :attr:`version`
    (:func:`list_version`) are replaced together under a lock and read without one;
    :attr:`state` gives both from the same list.
    Listeners added with :meth:`on_change` are called with the new set after each change
    (in the caller's thread; they must not block).
    """

    def __init__(self) -> None:
        """Nothing revoked (version 0)."""
        self.state: tuple[frozenset[str], int] = (frozenset(), 0)
        self._listeners: list[Callable[[frozenset[str]], None]] = []
        self._lock = threading.Lock()

    @property
    def serials(self) -> frozenset[str]:
        """The revoked serials."""
        return self.state[0]

    @property
    def version(self) -> int:
        """:func:`list_version` of :attr:`serials`."""
        return self.state[1]

    def __contains__(self, serial: object) -> bool:
        """True when ``serial`` (a :func:`serial_text` string) is revoked."""
        return serial in self.serials

    def on_change(self, listener: Callable[[frozenset[str]], None]) -> None:
        """Call ``listener(serials)`` after every change of the set."""
        with self._lock:
            self._listeners.append(listener)

    def replace(self, serials: Iterable[str]) -> bool:
        """Take ``serials`` as the whole set; returns True (and tells the listeners) when it
        differs from the current one. A listener's exception is logged, not raised."""
        fresh = frozenset(serials)
        with self._lock:
            if fresh == self.serials:
                return False
            added = fresh - self.serials
            self.state = (fresh, list_version(fresh))
            listeners = list(self._listeners)
        if added:
            log.warning("certificates revoked: %s", ", ".join(sorted(added)))
        for listener in listeners:
            try:
                listener(fresh)
            except Exception:  # noqa: BLE001 - one front end must not stop the others
                log.exception("revocation listener failed")
        return True


class Closable(Protocol):
    """A connection :class:`OpenConnections` can close (an ``asyncio`` transport or
    ``StreamWriter``)."""

    def close(self) -> None:
        """Close the connection."""
        ...

    def is_closing(self) -> bool:
        """True once closed or closing."""
        ...


class OpenConnections:
    """The open connections of one front end by the serial of their client certificate.

    ``revoked`` is the process's :class:`RevokedSerials`; on each change the connections
    whose serial was revoked are closed, each on the event loop it was added from
    (``call_soon_threadsafe``: the list changes in a timer's or a statement's thread).
    :attr:`closed_total` counts them.
    """

    def __init__(self, revoked: RevokedSerials) -> None:
        """No connection yet; listens to ``revoked``."""
        self._conns: dict[int, tuple[str, Closable, asyncio.AbstractEventLoop]] = {}
        self._lock = threading.Lock()
        self.closed_total = 0
        revoked.on_change(self._revoked)

    def add(self, serial: str, conn: Closable) -> None:
        """Remember ``conn``, opened with the certificate of ``serial``, from its event
        loop's thread; forgets the connections closed since (so the map holds the open ones
        only). Raises ``RuntimeError`` outside a running event loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            for key in [k for k, (_, c, _) in self._conns.items() if c.is_closing()]:
                del self._conns[key]
            self._conns[id(conn)] = (serial, conn, loop)

    def discard(self, conn: Closable) -> None:
        """Forget ``conn`` (it closed)."""
        with self._lock:
            self._conns.pop(id(conn), None)

    def __len__(self) -> int:
        """How many connections are remembered."""
        return len(self._conns)

    def _revoked(self, serials: frozenset[str]) -> None:
        with self._lock:
            doomed = [k for k, (s, _, _) in self._conns.items() if s in serials]
            entries = [self._conns.pop(k) for k in doomed]
        for serial, conn, loop in entries:
            try:
                loop.call_soon_threadsafe(self._close, serial, conn)
            except RuntimeError:  # its loop is closed: so is the connection
                continue

    def _close(self, serial: str, conn: Closable) -> None:
        if not conn.is_closing():
            conn.close()
            with self._lock:
                self.closed_total += 1
            log.warning("closed a connection of the revoked certificate %s", serial)
