"""Closing the open gRPC connections of a revoked certificate.

grpcio's servers (sync and asyncio) expose no connection: a servicer sees a call's
``context.peer()`` (``ipv4:127.0.0.1:54321``) and its TLS ``auth_context()``, never the
transport. ``context.abort`` ends one call; ``grpc.max_connection_age_ms`` ends every
connection at an age, whoever owns it; ``server.stop`` ends all of them. None closes the
one connection a revoked certificate holds. The C core reads and writes the connection's
socket, which is a file descriptor of this process: ``shutdown(SHUT_RDWR)`` on that socket
(the operating system's call, no protocol of ours) makes the core read end-of-stream, close
the transport and fail the calls on it, exactly as when the peer hangs up; the core keeps
and later closes its descriptor itself.

:class:`GrpcConnections` learns which peer address presented which serial from the calls
its :class:`~obcommon.security.gate.PeerGate` checks (:meth:`GrpcConnections.seen`), and on
each change of the revocation list finds the sockets of the doomed peers among this
process's descriptors (``/proc/self/fd``, ``/dev/fd`` elsewhere) - only those whose local
port is one of the gRPC servers' bound ports (:meth:`GrpcConnections.serve`), so an
outgoing channel of this process is never touched - and shuts them down. A client whose
connection was closed may open another (the TLS handshake checks the CA, not the list):
its calls are refused one by one by the gate, and the connection closed at the next change
of the list.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator

from obcommon.security.revocation import RevokedSerials

log = logging.getLogger(__name__)

#: Past this many remembered peers the ones without an open socket are forgotten (a scan of
#: the descriptors), so the map follows the open connections, not every one ever opened.
#: Above the agents of a large cluster (10,000) as the identity cache is: at 4,096 every
#: reconnect storm of 5,000 agents scanned the process's 5,000 sockets (1.5 % of the RS's
#: samples while they connected). A peer costs about 200 bytes: 3 MiB at the limit.
PRUNE_AT = 16_384

#: ``(ip, port)`` of a TCP end, the ip in :mod:`ipaddress`'s canonical text.
Endpoint = tuple[str, int]


def parse_peer(peer: str) -> Endpoint | None:
    """The ``(ip, port)`` of a gRPC peer string (``ipv4:127.0.0.1:5000``,
    ``ipv6:[::1]:5000``, ``ipv6:%5B::1%5D:5000``), None for anything else (``unix:``, a
    malformed string)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    rest = rest.replace("%5B", "[").replace("%5D", "]").replace("%5b", "[").replace("%5d", "]")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    host = host.strip("[]").split("%", 1)[0]  # an IPv6 zone is not part of the address
    try:
        return (str(ipaddress.ip_address(host)), int(port))
    except ValueError:
        return None


def _endpoint(addr: object) -> Endpoint | None:
    if not isinstance(addr, tuple) or len(addr) < 2:
        return None  # AF_UNIX and the like
    try:
        ip = ipaddress.ip_address(str(addr[0]).split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # gRPC names a v4 peer of a dual-stack socket as ipv4
    return (str(ip), int(addr[1]))


def _fd_dir() -> str:
    return "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"


def open_sockets() -> Iterator[tuple[int, Endpoint, Endpoint]]:
    """``(fd, local, remote)`` of every connected TCP socket of this process. Each
    descriptor is duplicated to be looked at and the duplicate closed: a descriptor closed
    (or reused) meanwhile is skipped or seen as what it is now, never misread."""
    try:
        names = os.listdir(_fd_dir())
    except OSError as e:
        log.error("cannot list this process's descriptors: %s", e)
        return
    for name in names:
        if not name.isdigit():
            continue
        fd = int(name)
        try:
            dup = os.dup(fd)
        except OSError:
            continue  # closed since the listing (or the listing's own descriptor)
        try:
            s = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)  # not a socket
            continue
        try:
            if s.type != socket.SOCK_STREAM:
                continue
            local, remote = _endpoint(s.getsockname()), _endpoint(s.getpeername())
        except OSError:
            continue  # listening or not connected
        finally:
            s.close()
        if local is not None and remote is not None:
            yield fd, local, remote


def shutdown_fd(fd: int) -> None:
    """``shutdown(SHUT_RDWR)`` the socket of ``fd`` through a duplicate (the owner keeps its
    descriptor and closes it itself). Raises ``OSError``."""
    s = socket.socket(fileno=os.dup(fd))
    try:
        s.shutdown(socket.SHUT_RDWR)
    finally:
        s.close()


class GrpcConnections:
    """The peers of this process's gRPC servers by the serial of their certificate; the
    connections of a serial that gets revoked are closed.

    ``revoked``: the process's list (listened to). ``sockets`` and ``shutdown`` are the
    operating-system seams (default :func:`open_sockets`, :func:`shutdown_fd`; unit tests
    pass fakes). :attr:`closed_total` counts the connections closed. Thread-safe: the list
    changes in a lease loop's or a timer's thread, calls are checked on the event loop.
    """

    def __init__(
        self,
        revoked: RevokedSerials,
        sockets: Callable[[], Iterable[tuple[int, Endpoint, Endpoint]]] = open_sockets,
        shutdown: Callable[[int], None] = shutdown_fd,
    ) -> None:
        """No server port and no peer known yet."""
        self._sockets = sockets
        self._shutdown = shutdown
        self._ports: set[int] = set()
        # By the peer string as gRPC gives it: parsed only when connections are looked for.
        self._peers: dict[str, str] = {}
        # The map's size that makes the next scan: twice what the last scan left, so that
        # with more live peers than PRUNE_AT a scan (every descriptor of the process) is not
        # made again at each new peer (5,000 agents connecting made it O(N) per stream).
        self._prune_at = PRUNE_AT
        self._lock = threading.Lock()
        self.closed_total = 0
        revoked.on_change(self._on_change)

    def serve(self, port: int) -> None:
        """A gRPC server of this process listens on ``port``: its connections are ours to
        close (those of other ports, and the channels this process opens, never are)."""
        with self._lock:
            self._ports.add(port)

    def seen(self, peer: str, serial: str) -> None:
        """A call from ``peer`` (``context.peer()``) presented the certificate of ``serial``.
        One dictionary look-up when already known (every admitted call comes here)."""
        if not self._ports or self._peers.get(peer) == serial:
            return
        with self._lock:
            self._peers[peer] = serial
            crowded = len(self._peers) > self._prune_at
        if crowded:
            self._prune()

    def __len__(self) -> int:
        """How many peers are remembered."""
        return len(self._peers)

    def _ours(self) -> dict[Endpoint, list[int]]:
        """The descriptors of our servers' connections, by remote end."""
        with self._lock:
            ports = set(self._ports)
        found: dict[Endpoint, list[int]] = {}
        for fd, local, remote in self._sockets():
            if local[1] in ports:
                found.setdefault(remote, []).append(fd)
        return found

    def _prune(self) -> None:
        live = self._ours()
        with self._lock:
            for peer in [p for p in self._peers if parse_peer(p) not in live]:
                del self._peers[peer]
            self._prune_at = max(PRUNE_AT, 2 * len(self._peers))

    def _on_change(self, serials: frozenset[str]) -> None:
        self.close_revoked(serials)

    def close_revoked(self, serials: frozenset[str]) -> int:
        """Shut down the connections of the peers whose serial is in ``serials`` (the
        revocation list's listener); returns how many. A failure is logged, never raised."""
        with self._lock:
            doomed = {p: s for p, s in self._peers.items() if s in serials}
        if not doomed:
            return 0
        closed = 0
        try:
            live = self._ours()
        except OSError as e:
            log.error("cannot look for the connections of revoked certificates: %s", e)
            return 0
        for peer, serial in doomed.items():
            end = parse_peer(peer)
            if end is None:
                continue  # not TCP (a unix socket): nothing of ours to find
            for fd in live.get(end, []):
                try:
                    self._shutdown(fd)
                except OSError as e:
                    log.warning("cannot close the connection of %s:%d: %s", end[0], end[1], e)
                    continue
                closed += 1
                log.warning(
                    "closed the gRPC connection of %s:%d, whose certificate %s is revoked",
                    end[0],
                    end[1],
                    serial,
                )
        with self._lock:
            for peer in doomed:
                self._peers.pop(peer, None)
            self.closed_total += closed
        return closed
