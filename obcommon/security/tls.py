"""Mutual TLS for every gRPC channel of the cluster, or an explicit ``--insecure`` (CockroachDB's ``--certs-dir`` / ``--insecure``).

One :class:`TransportSecurity` per process says how it listens and how it dials:

- secure: it serves with its own certificate (``rs.crt``, ``node.crt``) and *requires* a
  client certificate signed by ``ca.crt``; it dials with ``ca.crt`` as the only root and
  presents its own certificate (a client presents ``client.USER.crt``).
- insecure: plaintext both ways, no authentication; the process logs a warning at start.

Certificates are re-read when their files change (checked at most every
:data:`RELOAD_CHECK_S`): a server takes the new pair at its next handshake
(``grpc.dynamic_ssl_server_credentials``); channels opened after the change use it, and
:meth:`TransportSecurity.generation` tells channel caches to reopen theirs. A pair that does
not match (a rotation caught between writing the key and the certificate) is ignored until
it does.

Channels do not resume TLS sessions (we tried gRPC's experimental
``grpc.ssl_session_cache``, shared by a process's channels: worker processes of the test
suite then died of segmentation faults in TLS code, and gRPC resumes nothing anyway for a
server dialled by IP address, as every rs_list is, or restarted, since its ticket key is
per process).
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from obcommon.security.certs import CA_CERT, Role, cert_file, key_file

log = logging.getLogger(__name__)

#: How often, at most, the certificate files are stat'ed for changes (seconds).
RELOAD_CHECK_S = 0.5


class SecurityConfigError(Exception):
    """Neither ``--certs-dir`` nor ``--insecure`` given, both given, or the certificates
    directory lacks a file or holds a broken pair; the message says which."""


@dataclass(frozen=True)
class _Material:
    ca: bytes
    cert: bytes
    key: bytes
    stamp: tuple[Any, ...]


def _stamp(paths: list[Path]) -> tuple[Any, ...]:
    out: list[Any] = []
    for p in paths:
        try:
            st = p.stat()
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append(None)
    return tuple(out)


@dataclass
class TransportSecurity:
    """How one process secures its gRPC channels.

    ``role`` / ``user`` pick the process's own pair in ``certs_dir``: ``rs.crt``,
    ``node.crt`` or ``client.<user>.crt``. Build it with :meth:`from_flags` (which enforces
    "exactly one of --certs-dir and --insecure") or :meth:`insecure_mode`.
    """

    certs_dir: Path | None
    role: Role
    user: str = ""
    _material: _Material | None = field(default=None, init=False, repr=False)
    _generation: int = field(default=0, init=False, repr=False)
    _checked_at: float = field(default=0.0, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def from_flags(
        cls, certs_dir: Path | str | None, insecure: bool, role: Role, user: str = ""
    ) -> TransportSecurity:
        """The process's security from its two flags. Raises :class:`SecurityConfigError`
        naming both flags when neither or both are given, and when the certificates cannot
        be read (secure mode reads them once here, so a bad directory stops the start)."""
        if insecure and certs_dir:
            raise SecurityConfigError("--certs-dir and --insecure exclude each other")
        if not insecure and not certs_dir:
            raise SecurityConfigError(
                "no --certs-dir given: pass --certs-dir DIR (mutual TLS; create the files with "
                "'rootservice cert create-ca' and 'create-rs' / 'create-node' / 'create-client') "
                "or --insecure (plaintext, no authentication: every client is root)"
            )
        if insecure:
            return cls.insecure_mode(role)
        sec = cls(Path(str(certs_dir)), role, user)
        sec._load()
        return sec

    @classmethod
    def for_dir(cls, certs_dir: Path | None, role: Role, user: str = "") -> TransportSecurity:
        """Mutual TLS from ``certs_dir`` (read lazily, at first use), or plaintext when it
        is None: for in-process components whose process already checked its flags."""
        return cls.insecure_mode(role) if certs_dir is None else cls(Path(certs_dir), role, user)

    @classmethod
    def insecure_mode(cls, role: Role) -> TransportSecurity:
        """Plaintext, no authentication (``--insecure``)."""
        return cls(None, role)

    @property
    def insecure(self) -> bool:
        """True for plaintext (``--insecure``)."""
        return self.certs_dir is None

    def _paths(self) -> list[Path]:
        assert self.certs_dir is not None
        d = self.certs_dir
        return [
            d / CA_CERT,
            d / cert_file(self.role, self.user),
            d / key_file(self.role, self.user),
        ]

    def _read(self) -> _Material:
        paths = self._paths()
        stamp = _stamp(paths)
        try:
            ca, cert, key = (p.read_bytes() for p in paths)
        except OSError as e:
            raise SecurityConfigError(f"cannot read {e.filename}: {e.strerror}") from None
        try:
            pub = x509.load_pem_x509_certificate(cert).public_key()
            priv = serialization.load_pem_private_key(key, password=None)
            x509.load_pem_x509_certificates(ca)
        except ValueError as e:
            raise SecurityConfigError(
                f"unreadable certificate or key in {self.certs_dir}: {e}"
            ) from None
        fmt = serialization.PublicFormat.SubjectPublicKeyInfo
        enc = serialization.Encoding.DER
        if pub.public_bytes(enc, fmt) != priv.public_key().public_bytes(enc, fmt):
            raise SecurityConfigError(f"{paths[2]} is not the key of {paths[1]}")
        return _Material(ca, cert, key, stamp)

    def _load(self) -> _Material:
        with self._lock:
            if self._material is None:
                self._material = self._read()
            return self._material

    def refresh(self) -> bool:
        """Re-read the files if they changed since the last look (at most every
        :data:`RELOAD_CHECK_S`); returns True when a new, consistent pair was taken. A broken
        pair is logged and ignored (the previous one stays in use)."""
        if self.insecure:
            return False
        now = time.monotonic()
        with self._lock:
            if now - self._checked_at < RELOAD_CHECK_S and self._material is not None:
                return False
            self._checked_at = now
            current = self._material
        if current is not None and _stamp(self._paths()) == current.stamp:
            return False
        try:
            fresh = self._read()
        except SecurityConfigError as e:
            log.warning("certificates in %s changed but cannot be used yet: %s", self.certs_dir, e)
            return False
        with self._lock:
            self._material = fresh
            self._generation += 1
        log.info("certificates reloaded from %s", self.certs_dir)
        return True

    def server_ssl_context(self) -> ssl.SSLContext | None:
        """A server context for the listeners that are not gRPC (the RS's MySQL and HTTP
        endpoints, the agent's HTTP endpoint): this process's own pair and ``ca.crt`` as
        they are now, TLS 1.2+, client certificate optional (verified against ``ca.crt``
        when sent; each endpoint decides whether it needs one). None in insecure mode.
        Raises ``OSError`` / ``ssl.SSLError`` for unreadable files."""
        if self.insecure or self.certs_dir is None:
            return None
        d = self.certs_dir
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(d / cert_file(self.role, self.user), d / key_file(self.role, self.user))
        ctx.load_verify_locations(cafile=str(d / CA_CERT))
        ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    def client_ssl_context(self) -> ssl.SSLContext | None:
        """A client context for HTTPS to another process of the cluster (the agents' bulk
        copy path): ``ca.crt`` as the only root, the peer's address checked
        against its certificate's subjectAltName, this process's pair as the client
        certificate, TLS 1.2+, as they are now (callers rebuild it when :meth:`generation`
        changes). None in insecure mode. Raises ``OSError`` / ``ssl.SSLError`` for
        unreadable files."""
        if self.insecure or self.certs_dir is None:
            return None
        self.refresh()
        d = self.certs_dir
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(d / CA_CERT))
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(d / cert_file(self.role, self.user), d / key_file(self.role, self.user))
        return ctx

    def issued_by_current_ca(self, cert_der: bytes) -> bool:
        """True when the DER certificate ``cert_der`` is signed by one of the certificates of
        the current ``ca.crt`` (re-read after a rotation). For listeners whose TLS library
        can only add trusted CAs, never drop one (Python's ``ssl`` behind the HTTP endpoint):
        after a CA rotation a certificate of the old CA still completes the handshake there,
        and this check refuses it. False in insecure mode and for unreadable input."""
        if self.insecure:
            return False
        self.refresh()
        try:
            cert = x509.load_der_x509_certificate(cert_der)
            cas = x509.load_pem_x509_certificates(self._load().ca)
        except ValueError:
            return False
        for ca in cas:
            try:
                cert.verify_directly_issued_by(ca)
            except (ValueError, TypeError, InvalidSignature):
                continue
            return True
        return False

    def generation(self) -> int:
        """A number that changes whenever a new pair was taken: channel caches compare it and
        reopen their channels (after calling :meth:`refresh`)."""
        self.refresh()
        return self._generation

    # ------------------------------------------------------------------ server side

    def _server_config(self) -> Any:
        m = self._load()
        return grpc.ssl_server_certificate_configuration([(m.key, m.cert)], root_certificates=m.ca)

    def add_port(self, server: Any, addr: str) -> int:
        """Bind ``server`` (sync or aio) to ``addr``: TLS requiring a client certificate of
        this CA, or plaintext when insecure. Returns the bound port (0 = failed)."""
        if self.insecure:
            return int(server.add_insecure_port(addr))
        initial = self._server_config()
        served = [self._generation]

        def fetch() -> Any:
            # Called by gRPC at each new handshake; None keeps the current configuration.
            # Compared with the generation last served, not with refresh()'s answer: another
            # reader (the MySQL / HTTP endpoints' TLS contexts) may have taken the change.
            gen = self.generation()
            if gen == served[0]:
                return None
            served[0] = gen
            return self._server_config()

        creds = grpc.dynamic_ssl_server_credentials(
            initial, fetch, require_client_authentication=True
        )
        return int(server.add_secure_port(addr, creds))

    # ------------------------------------------------------------------ client side

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """``ca.crt`` as the only root and this process's pair as the client certificate."""
        self.refresh()
        m = self._load()
        return grpc.ssl_channel_credentials(
            root_certificates=m.ca, private_key=m.key, certificate_chain=m.cert
        )

    def _client_options(self, options: list[tuple[str, Any]] | None) -> list[tuple[str, Any]]:
        return [("grpc.enable_http_proxy", 0), *(options or [])]

    def channel(self, addr: str, options: list[tuple[str, Any]] | None = None) -> grpc.Channel:
        """A synchronous channel to ``addr`` (``host:port``), secured as configured."""
        opts = self._client_options(options)
        if self.insecure:
            return grpc.insecure_channel(addr, options=opts)
        return grpc.secure_channel(addr, self.channel_credentials(), options=opts)

    def aio_channel(
        self, addr: str, options: list[tuple[str, Any]] | None = None
    ) -> grpc.aio.Channel:
        """An asyncio channel to ``addr`` (``host:port``), secured as configured."""
        opts = self._client_options(options)
        if self.insecure:
            return grpc.aio.insecure_channel(addr, options=opts)
        return grpc.aio.secure_channel(addr, self.channel_credentials(), options=opts)

    def describe(self) -> str:
        """One line for the start-up log."""
        if self.insecure:
            return "INSECURE: plaintext gRPC, no authentication (every client is root)"
        return f"mutual TLS with certificates from {self.certs_dir}"


class ChannelCache:
    """One synchronous channel per ``host:port``, opened through a :class:`TransportSecurity`
    on first use and reopened after a certificate rotation (``generation()`` changed: new
    connections must present the new pair). Thread-safe; channels are closed outside the
    lock, and a channel held through :meth:`use` only once its last holder is done. Used by
    the RS's clients of the agents and of the leader."""

    def __init__(self, security: TransportSecurity) -> None:
        """No channel is opened yet."""
        self.security = security
        self._channels: dict[str, grpc.Channel] = {}
        # Holders per channel (use()), and the channels dropped from the cache while held:
        # their last holder closes them. A call started on a closed channel raises
        # ValueError (not an RpcError) and one in flight ends CANCELLED, so a failed call of
        # one thread must not close the channel another thread is about to call on.
        self._holders: dict[grpc.Channel, int] = {}
        self._dropped: set[grpc.Channel] = set()
        self._generation = security.generation()
        self._lock = threading.Lock()

    def get(self, addr: str) -> grpc.Channel:
        """The channel to ``addr``, opened if needed (closing every channel of older
        certificates first). Not held: a :meth:`forget` may close it at once; callers on
        several threads use :meth:`use`."""
        return self._get(addr, hold=False)

    @contextmanager
    def use(self, addr: str) -> Iterator[grpc.Channel]:
        """The channel to ``addr`` as :meth:`get` gives it, kept open until the block ends:
        a :meth:`forget`, a rotation or :meth:`close` meanwhile drops it from the cache at
        once (later callers get a new one) and its last holder closes it."""
        ch = self._get(addr, hold=True)
        try:
            yield ch
        finally:
            with self._lock:
                self._holders[ch] -= 1
                last = False
                if not self._holders[ch]:
                    del self._holders[ch]
                    last = ch in self._dropped
                    self._dropped.discard(ch)
            if last:
                ch.close()

    def _get(self, addr: str, hold: bool) -> grpc.Channel:
        generation = self.security.generation()
        stale: list[grpc.Channel] = []
        with self._lock:
            if generation != self._generation:
                stale, self._channels = list(self._channels.values()), {}
                self._generation = generation
            ch = self._channels.get(addr)
            if ch is None:
                ch = self._channels[addr] = self.security.channel(addr)
            if hold:
                self._holders[ch] = self._holders.get(ch, 0) + 1
            unheld = self._drop(stale)
        for old in unheld:
            old.close()
        return ch

    def _drop(self, channels: list[grpc.Channel]) -> list[grpc.Channel]:
        """Of ``channels``, just taken out of the cache (under the lock), those nobody holds:
        the caller closes them outside the lock; the held ones wait for their last holder."""
        self._dropped.update(ch for ch in channels if ch in self._holders)
        return [ch for ch in channels if ch not in self._holders]

    def forget(self, addr: str) -> None:
        """Close the channel to ``addr`` (a failed or departed peer), once its holders are
        done; the next :meth:`get` or :meth:`use` opens a new one."""
        with self._lock:
            ch = self._channels.pop(addr, None)
            unheld = self._drop([ch] if ch is not None else [])
        for old in unheld:
            old.close()

    def close(self) -> None:
        """Close every channel (a held one once its holders are done); later calls of
        :meth:`get` and :meth:`use` open new ones."""
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
            unheld = self._drop(channels)
        for ch in unheld:
            ch.close()


class ServerTlsContext:
    """The ``ssl.SSLContext`` of a listener that is not gRPC (the RS's and the agents' HTTP
    endpoints), following certificate rotations as the gRPC listeners do (their
    :meth:`TransportSecurity.add_port` asks at each handshake): :meth:`reload` loads the
    process's new pair and ``ca.crt`` into the same context, so the next handshakes use
    them. ``ctx`` is None in insecure mode."""

    def __init__(self, security: TransportSecurity) -> None:
        """The context as the files are now (:meth:`TransportSecurity.server_ssl_context`;
        raises ``OSError`` / ``ssl.SSLError`` for unreadable files)."""
        self.security = security
        self._generation = security.generation()
        self.ctx = security.server_ssl_context()

    def reload(self) -> bool:
        """Load the pair again when the files changed (a new :meth:`generation`); True when
        it did. A pair that cannot be loaded is logged and the previous one kept. The context
        can add trusted CAs but not drop one: endpoints that name callers by certificate
        check :meth:`TransportSecurity.issued_by_current_ca` too."""
        sec, ctx = self.security, self.ctx
        if ctx is None or sec.certs_dir is None:
            return False
        gen = sec.generation()
        if gen == self._generation:
            return False
        d = sec.certs_dir
        try:
            ctx.load_cert_chain(d / cert_file(sec.role, sec.user), d / key_file(sec.role, sec.user))
            ctx.load_verify_locations(cafile=str(d / CA_CERT))
        except (OSError, ssl.SSLError) as e:
            log.warning("an HTTP endpoint keeps its TLS certificate: %s", e)
            return False
        self._generation = gen
        log.info("HTTP endpoint: certificates reloaded from %s", d)
        return True
