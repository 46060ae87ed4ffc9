"""The agent's check of the root service's own certificate against the revocation list.

The RS judges every agent's certificate against the list of revoked serials, and sends the
list with its lease answers (:class:`obcommon.security.revocation.RevokedSerials`). The
other direction needs the certificate the RS serves, which gRPC's Python client never shows
its caller. So, while the list is not empty, before the agent opens a lease stream to an RS
address (and again whenever the list changes) it makes one TLS handshake of its own to that
address, with the same CA and node certificate as its gRPC channel (ALPN ``h2``, nothing
sent, closed at once), and reads the serial served. A revoked one: the agent does not open
the stream (or closes the one it has), logs why and counts it; it tries the next RS.

A probe that completed no handshake gives no verdict (the stream attempt that follows fails
on its own, as with any unreachable RS), and that non-answer is kept only for
:data:`FAILED_PROBE_RETRY_US`: an RS that was down when probed and comes back serving a
revoked certificate is probed again then, not trusted until the list next changes.

What it does not cover: the probe and the gRPC channel are two connections, so a server that
swapped certificates between them would not be seen until the next check; with an empty list
(the default) there is no probe at all and no cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from obcommon.addresses import parse_host_port
from obcommon.clock import Clock, SystemClock
from obcommon.security.identity import identity_of_der
from obcommon.security.revocation import RevokedSerials
from obcommon.security.tls import TransportSecurity


async def served_serial(addr: str, security: TransportSecurity, timeout_s: float) -> str | None:
    """The serial (:func:`obcommon.security.revocation.serial_text`) of the certificate the server at ``addr`` (``ip:port``)
    serves once verified against the cluster CA; None in insecure mode or when no handshake
    completed within ``timeout_s`` seconds (the stream attempt that follows then fails and is
    handled as any unreachable RS)."""
    ctx = security.client_ssl_context()
    if ctx is None:
        return None
    ctx.set_alpn_protocols(["h2"])
    host, port = parse_host_port(addr)
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=ctx, server_hostname=host), timeout_s
        )
    except (OSError, ssl.SSLError, TimeoutError):
        return None
    try:
        obj = writer.get_extra_info("ssl_object")
        der = obj.getpeercert(binary_form=True) if obj is not None else None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), timeout_s)
    ident = identity_of_der(der) if der else None
    return ident.serial if ident is not None else None


#: How long a probe that completed no handshake stands as the address's (empty) answer
#: before the next one (microseconds): a few heartbeat periods, so an RS that was down is
#: judged soon after it is back, while an address that keeps failing costs one attempt per
#: period of this, not one per lease round.
FAILED_PROBE_RETRY_US = 10_000_000


class RsCertificateCheck:
    """:meth:`refusal` says why the agent must not use the RS at an address: its certificate is
    in ``revoked``. Each address is probed once per version of the list (the answer is kept
    until the list changes; a probe without a handshake for :data:`FAILED_PROBE_RETRY_US`
    of ``clock``'s monotonic time only); ``checks`` counts the probes made."""

    def __init__(
        self, security: TransportSecurity, revoked: RevokedSerials, clock: Clock | None = None
    ) -> None:
        self.security = security
        self.revoked = revoked
        self.clock = clock or SystemClock()
        self.checks = 0
        # addr -> (list version, serial served or None, monotonic time the answer lapses).
        self._seen: dict[str, tuple[int, str | None, int | None]] = {}

    def current(self, addr: str) -> bool:
        """Whether ``addr`` was judged against the list as it is now (no probe needed)."""
        if not self.revoked.serials:
            return True
        seen = self._seen.get(addr)
        if seen is None or seen[0] != self.revoked.version:
            return False
        return seen[2] is None or self.clock.monotonic_us() < seen[2]

    async def refusal(self, addr: str, timeout_s: float) -> str | None:
        """None when the RS at ``addr`` may be used (the list is empty, insecure mode, its
        serial is not revoked, or no handshake completed); else a one-line reason naming the
        address and the serial."""
        if not self.revoked.serials:
            return None
        version = self.revoked.version
        seen = self._seen.get(addr)
        if seen is None or not self.current(addr):
            self.checks += 1
            serial = await served_serial(addr, self.security, timeout_s)
            if len(self._seen) > 64:
                self._seen.clear()
            lapses = None
            if serial is None:
                lapses = self.clock.monotonic_us() + FAILED_PROBE_RETRY_US
            seen = self._seen[addr] = (version, serial, lapses)
        serial = seen[1]
        if serial is not None and serial in self.revoked:
            return (
                f"the root service at {addr} serves a revoked certificate (serial {serial}); "
                "its lease answers are not trusted"
            )
        return None
