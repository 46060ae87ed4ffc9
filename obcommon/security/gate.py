"""The one check of "may this peer make this call" on the gRPC servers of the RS and the
agents (Kubernetes' NodeRestriction: a node may only speak for itself).

Each servicer method asks :meth:`PeerGate.admit` with the roles it serves and, where the
request names a server, the name the peer's certificate must carry. A refusal aborts the
call with ``UNAUTHENTICATED`` (no certificate of this cluster) or ``PERMISSION_DENIED``
(the wrong role or name), the message naming what was expected and what was presented; it
is counted, and logged at most once per :data:`LOG_EVERY_US` per kind of refusal
(:class:`obcommon.ratelimit_log.RateLimitedLog`), so that a
flood of forged calls cannot flood the log. Nothing else happens for a refused call.
In insecure mode every call is admitted (there are no identities).

A certificate on the revocation list (:class:`obcommon.security.revocation.RevokedSerials`) is refused with ``UNAUTHENTICATED`` and kind ``revoked`` before its role
is looked at: one set lookup of the serial, no database read. The connections open with a
certificate are closed when it is revoked
(:class:`obcommon.security.grpc_connections.GrpcConnections`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

import grpc

from obcommon.clock import Clock, SystemClock
from obcommon.ratelimit_log import RateLimitedLog
from obcommon.security.certs import Role
from obcommon.security.grpc_connections import GrpcConnections
from obcommon.security.identity import PeerIdentity, peer_identity
from obcommon.security.revocation import RevokedSerials

log = logging.getLogger(__name__)

#: At most one log line per kind of refusal in this many microseconds (the rest are counted).
LOG_EVERY_US = 10_000_000


class PeerRefused(Exception):
    """A call the peer may not make: ``code`` is the gRPC status, ``message`` names the
    expected and the presented identity, ``kind`` is the counter's label."""

    def __init__(self, code: grpc.StatusCode, kind: str, message: str) -> None:
        """Keep the status code, the counter label and the message."""
        super().__init__(message)
        self.code = code
        self.kind = kind
        self.message = message


def _describe(roles: Collection[Role]) -> str:
    return " or ".join(f"{r.value}" for r in sorted(roles, key=lambda r: r.value))


class PeerGate:
    """Admits or refuses gRPC calls by the peer's verified certificate.

    ``insecure``: admit everything. ``count(kind)`` is called once per refusal (e.g. the RS's
    metrics); :attr:`refused_total` keeps the same counts per kind. ``clock`` paces the log
    (its monotonic time). ``revoked`` is the process's revocation list (default: a new,
    empty one, kept as :attr:`revoked`). :attr:`connections` remembers which peer address
    presented which certificate and closes the open connections of a serial once it is
    revoked (:class:`obcommon.security.grpc_connections.GrpcConnections`; the servers tell it
    their bound ports).
    """

    def __init__(
        self,
        insecure: bool,
        count: Callable[[str], None] | None = None,
        clock: Clock | None = None,
        revoked: RevokedSerials | None = None,
    ) -> None:
        """``insecure`` True admits every call; ``count`` receives each refusal's kind."""
        self.insecure = insecure
        self.revoked = revoked if revoked is not None else RevokedSerials()
        self.connections = GrpcConnections(self.revoked)
        self._count = count
        self.refused_total: dict[str, int] = {}
        # One line per kind of refusal per LOG_EVERY_US (the shared rate limiter).
        self._log = RateLimitedLog(log, clock or SystemClock(), LOG_EVERY_US)
        self._lock = threading.Lock()

    def check(
        self,
        context: Any,
        method: str,
        roles: Collection[Role],
        *,
        name: str | None = None,
        names: Collection[str] | None = None,
    ) -> PeerIdentity | None:
        """The peer's identity when it may call ``method``; raises :class:`PeerRefused`.

        ``roles``: the certificate roles served. ``name``: the identity the certificate must
        carry (a lease for server X needs node X). ``names``: for node certificates only,
        the identities allowed (an LS's members); RS certificates pass ``names``.
        Returns None in insecure mode.
        """
        if self.insecure:
            return None
        ident, peer = peer_identity(context), context.peer()
        if ident is not None:
            self.connections.seen(peer, ident.serial)
        return self.check_identity(ident, peer, method, roles, name=name, names=names)

    def check_identity(
        self,
        ident: PeerIdentity | None,
        peer: str,
        method: str,
        roles: Collection[Role],
        *,
        name: str | None = None,
        names: Collection[str] | None = None,
    ) -> PeerIdentity:
        """:meth:`check` of an identity already read from a verified certificate (``None``:
        none was presented) by a listener that is not gRPC (the agent's HTTPS data path); ``peer`` names the remote end in the message. Raises
        :class:`PeerRefused`; the caller answers the refusal in its own protocol."""
        if ident is None:
            raise self._refuse(
                grpc.StatusCode.UNAUTHENTICATED,
                "no_certificate",
                f"{method} needs a certificate of this cluster ({_describe(roles)}); "
                f"the peer {peer} presented none",
            )
        if ident.serial in self.revoked.serials:
            raise self._refuse(
                grpc.StatusCode.UNAUTHENTICATED,
                "revoked",
                f"{method}: the certificate of {ident} (serial {ident.serial}) presented by "
                f"{peer} is revoked",
            )
        if ident.role not in roles:
            raise self._refuse(
                grpc.StatusCode.PERMISSION_DENIED,
                "wrong_role",
                f"{method} needs a {_describe(roles)} certificate; {peer} presented {ident}",
            )
        if name is not None and ident.name != name:
            raise self._refuse(
                grpc.StatusCode.PERMISSION_DENIED,
                "wrong_name",
                f"{method} for '{name}' needs {ident.role.value} '{name}'; "
                f"{peer} presented {ident}",
            )
        if names is not None and ident.role is Role.NODE and ident.name not in names:
            shown = ", ".join(sorted(names)[:8]) or "none"
            raise self._refuse(
                grpc.StatusCode.PERMISSION_DENIED,
                "not_member",
                f"{method} needs the rs or a member ({shown}); {peer} presented {ident}",
            )
        return ident

    async def admit(
        self,
        context: grpc.aio.ServicerContext,
        method: str,
        roles: Collection[Role],
        *,
        name: str | None = None,
        names: Collection[str] | None = None,
    ) -> PeerIdentity | None:
        """:meth:`check`, aborting the call (``context.abort``) with the refusal's status and
        message instead of raising :class:`PeerRefused`."""
        try:
            return self.check(context, method, roles, name=name, names=names)
        except PeerRefused as e:
            await context.abort(e.code, e.message)
            raise  # unreachable: abort raises

    def is_revoked(self, ident: PeerIdentity | None) -> bool:
        """True when ``ident``'s certificate is on the revocation list (a set lookup, for
        long-lived streams that check each message)."""
        return ident is not None and ident.serial in self.revoked.serials

    async def refuse(
        self, context: grpc.aio.ServicerContext, code: grpc.StatusCode, kind: str, message: str
    ) -> None:
        """Refuse an admitted call for a reason of the servicer's own (e.g. an RS certificate
        calling the admin service without forwarding a client): counted and logged as the
        gate's refusals are, then the call is aborted with ``code`` (``context.abort``
        raises)."""
        e = self._refuse(code, kind, message)
        await context.abort(e.code, e.message)

    def _refuse(self, code: grpc.StatusCode, kind: str, message: str) -> PeerRefused:
        with self._lock:
            self.refused_total[kind] = self.refused_total.get(kind, 0) + 1
        self._log.warning(kind, "refused: %s", message, extra={"reason": kind})
        if self._count is not None:
            self._count(kind)
        return PeerRefused(code, kind, message)
