"""Logins of the MySQL endpoint: mysql-mimic authentication plugins checking the
users of ``__all_user``.

- ``mysql_native_password`` (:class:`NativePassword`): the client's SHA1 scramble against
  the stored ``SHA1(SHA1(password))`` (``__all_user.native_passwd``, migration 0005), as
  MySQL 5.7 / OceanBase. Users without a verifier (no password, or created before 0005) are
  switched to ``caching_sha2_password``.
- ``caching_sha2_password`` (:class:`CachingSha2Password`, MySQL 8's default; mysql-mimic
  has none): the fast path checks the SHA256 scramble against ``SHA256(SHA256(password))``
  remembered in memory (:class:`Sha2Cache`) after a full authentication of the same user
  and argon2 hash; else the full authentication takes the password in clear, over TLS
  only, and checks it with :meth:`rootservice.auth.users.Users.authenticate` (argon2).
- A verified client certificate (OU ``client``, CN = the login user) logs in with an empty
  password under either plugin, as the gRPC path
  (:meth:`rootservice.auth.users.Users.authenticate` with ``cert_user``).

Every check that reads the database or hashes runs on the statements' admission threads
(:class:`rootservice.api.admission.Admission`), never on the event loop. A refusal is a
:class:`Refused` decision carrying MySQL's 1045 (``ER_ACCESS_DENIED_ERROR``).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mysql_mimic import utils
from mysql_mimic.auth import (
    AuthInfo,
    AuthPlugin,
    AuthState,
    Forbidden,
    IdentityProvider,
    Success,
    User,
)

from obcommon.errors import ObError
from rootservice.api.admission import Admission
from rootservice.app import RootService
from rootservice.auth.users import access_denied
from rootservice.db.user_repo import ROOT_USER, UserRow

T = TypeVar("T")

NATIVE = "mysql_native_password"
CACHING_SHA2 = "caching_sha2_password"

#: caching_sha2_password's one-byte AuthMoreData answers (MySQL's sha2_password.h).
FAST_AUTH_SUCCESS = b"\x03"
PERFORM_FULL_AUTHENTICATION = b"\x04"
REQUEST_PUBLIC_KEY = b"\x02"

NONCE_BYTES = 20


@dataclass
class LoginFacts:
    """What the connection knows of the client when it logs in: ``tls`` (the handshake
    was upgraded to TLS), ``cert_user`` (the CN of a verified client certificate of role
    ``client``, else None), ``client_addr`` (``host:port``) and ``cert_serial`` (the
    serial of any verified certificate of the cluster, "" without one)."""

    tls: bool = False
    cert_user: str | None = None
    client_addr: str = ""
    cert_serial: str = ""


@dataclass
class RsUser(User):
    """mysql-mimic's ``User`` with the ``__all_user`` row (None: no such user) read once
    per login."""

    row: UserRow | None = None


class FastSuccess(Success):
    """A caching_sha2_password fast-path success: the connection sends
    :data:`FAST_AUTH_SUCCESS` before the OK packet, as MySQL does (clients wait for it)."""


class Refused(Forbidden):
    """A refused login with the ``ObError`` to send (1045 unless said otherwise)."""

    def __init__(self, error: ObError) -> None:
        """Refuse with ``error``."""
        super().__init__(error.message)
        self.error = error


class Sha2Cache:
    """caching_sha2_password's server cache: per user, ``SHA256(SHA256(password))`` of the
    last full authentication, tied to the argon2 hash it was checked against (an ALTER USER
    on any RS changes the hash, so the entry stops matching). Bounded LRU; thread-safe."""

    def __init__(self, max_entries: int = 1024) -> None:
        """An empty cache of at most ``max_entries`` users."""
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, user: str, stored_hash: str, password: str) -> None:
        """Remember ``user``'s password digest after a full authentication against
        ``stored_hash`` (its ``__all_user.passwd``)."""
        digest = hashlib.sha256(hashlib.sha256(password.encode("utf-8")).digest()).digest()
        with self._lock:
            self._entries[user] = (stored_hash, digest)
            self._entries.move_to_end(user)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def get(self, user: str, stored_hash: str) -> bytes | None:
        """The digest of ``user`` when it was filled against ``stored_hash``, else None."""
        with self._lock:
            entry = self._entries.get(user)
            if entry is None or entry[0] != stored_hash:
                return None
            self._entries.move_to_end(user)
            return entry[1]

    def forget(self, user: str) -> None:
        """Drop ``user``'s entry."""
        with self._lock:
            self._entries.pop(user, None)


def sha2_scramble_matches(scramble: bytes, nonce: bytes, digest2: bytes) -> bool:
    """caching_sha2_password's fast check: the client sent ``XOR(SHA256(pw),
    SHA256(SHA256(SHA256(pw)) || nonce))``; with ``digest2 = SHA256(SHA256(pw))`` the server
    recovers ``SHA256(pw)`` and compares its hash with ``digest2`` (MySQL's
    ``generate_sha2_scramble`` / ``validate_scramble``)."""
    if len(scramble) != 32:
        return False
    mask = hashlib.sha256(digest2 + nonce).digest()
    sha_pw = utils.xor(scramble, mask)
    return hmac.compare_digest(hashlib.sha256(sha_pw).digest(), digest2)


def native_scramble_matches(scramble: bytes, nonce: bytes, verifier_hex: str) -> bool:
    """mysql_native_password's check: the client sent ``XOR(SHA1(pw), SHA1(nonce ||
    SHA1(SHA1(pw))))``; ``verifier_hex`` is the stored hex ``SHA1(SHA1(pw))``."""
    try:
        stored = bytes.fromhex(verifier_hex)
    except ValueError:
        return False
    if len(scramble) != 20 or len(stored) != 20:
        return False
    sha_pw = utils.xor(scramble, hashlib.sha1(nonce + stored).digest())
    return hmac.compare_digest(hashlib.sha1(sha_pw).digest(), stored)


def _empty(data: bytes) -> bool:
    # An empty password: no bytes (or one NUL, as some clients send it).
    return data in (b"", b"\x00")


class RsIdentityProvider(IdentityProvider):
    """The users of one connection's login: built per connection with its
    :class:`LoginFacts` (filled by the connection once TLS is up). ``run(fn)`` runs blocking
    work (table reads, argon2) on the admission threads. In insecure mode every login is
    root, as on the gRPC path."""

    def __init__(
        self,
        rs: RootService,
        admission: Admission,
        cache: Sha2Cache,
        facts: LoginFacts,
    ) -> None:
        """Log users of ``rs`` in, caching sha2 digests in ``cache``."""
        self.rs = rs
        self.admission = admission
        self.cache = cache
        self.facts = facts
        self._plugins: list[AuthPlugin] = [NativePassword(self), CachingSha2Password(self)]

    async def run(self, user: str, fn: Callable[[], T]) -> T:
        """``fn()`` on an admission thread, counted against the certificate's user when
        there is one, else ``user`` (as :func:`rootservice.api.admin_servicer.admission_key`).
        Raises what ``fn`` raises, and admission's ``ObError`` refusals."""
        return await self.admission.run(self.facts.cert_user or user or ROOT_USER, fn)

    def get_plugins(self) -> list[AuthPlugin]:
        """Native first: it is the handshake's plugin (one round trip for users with a
        verifier)."""
        return self._plugins

    async def get_user(self, username: str) -> RsUser:
        """Always a user (an unknown one too, so that the refusal is MySQL's 1045 and not
        mysql-mimic's 3162, which would tell which names exist): native when it has a
        verifier, else caching_sha2. Raises ``ObError`` when the table cannot be read."""
        if self.rs.settings.insecure:
            return RsUser(name=username, auth_plugin=NATIVE)
        row = await self.run(username, functools.partial(self.rs.users.get, username))
        plugin = NATIVE if row is not None and row.native_passwd else CACHING_SHA2
        return RsUser(
            name=username,
            auth_string=row.native_passwd if row is not None else None,
            auth_plugin=plugin,
            row=row,
        )

    async def certificate_login(self, username: str) -> Success | Refused:
        """An empty password: the verified certificate's user must be ``username``
        (:meth:`rootservice.auth.users.Users.authenticate` without a password)."""
        return await self.password_login(username, None)

    async def password_login(self, username: str, password: str | None) -> Success | Refused:
        """:meth:`rootservice.auth.users.Users.authenticate` on an admission thread (argon2
        for a password); Success as the principal's user, else Refused with its error."""
        f = self.facts
        try:
            principal = await self.run(
                username,
                functools.partial(
                    self.rs.users.authenticate,
                    username or None,
                    password,
                    f.cert_user,
                    f.client_addr,
                ),
            )
        except ObError as e:
            return Refused(e)
        return Success(principal.user)

    def denied(self, username: str, password_used: bool) -> Refused:
        """MySQL's 1045 for ``username`` from this client."""
        return Refused(access_denied(username, self.facts.client_addr, password_used))


def _user(auth_info: AuthInfo) -> RsUser:
    user = auth_info.user
    assert isinstance(user, RsUser)
    return user


class NativePassword(AuthPlugin):
    """``mysql_native_password`` against ``__all_user.native_passwd``; an empty password
    is a certificate login."""

    name = NATIVE
    client_plugin_name = NATIVE

    def __init__(self, provider: RsIdentityProvider) -> None:
        """Check logins for ``provider``."""
        self.provider = provider

    async def auth(self, auth_info: AuthInfo | None = None) -> AuthState:
        """mysql-mimic's plugin life cycle: the handshake's nonce is reused when the client
        answered it with this plugin, else a fresh one is sent (AuthSwitch / AuthMoreData)."""
        if (
            auth_info
            and auth_info.handshake_plugin_name == self.name
            and auth_info.handshake_auth_data
        ):
            nonce = auth_info.handshake_auth_data.rstrip(b"\x00")
        else:
            nonce = utils.nonce(NONCE_BYTES)
            auth_info = yield nonce + b"\x00"
        p = self.provider
        if p.rs.settings.insecure:
            yield Success(ROOT_USER)
            return
        user = _user(auth_info)
        if _empty(auth_info.data):
            yield await p.certificate_login(user.name)
            return
        row = user.row
        if (
            row is not None
            and row.native_passwd
            and native_scramble_matches(auth_info.data, nonce, row.native_passwd)
        ):
            yield Success(row.user_name)
            return
        yield p.denied(user.name, True)


class CachingSha2Password(AuthPlugin):
    """``caching_sha2_password``: fast path from :class:`Sha2Cache`, full authentication with
    the clear password over TLS only (checked with argon2); an empty password is a
    certificate login."""

    name = CACHING_SHA2
    client_plugin_name = CACHING_SHA2

    def __init__(self, provider: RsIdentityProvider) -> None:
        """Check logins for ``provider``."""
        self.provider = provider

    async def auth(self, auth_info: AuthInfo | None = None) -> AuthState:
        """Fast path, then (TLS only) full authentication; see the module docstring."""
        if (
            auth_info
            and auth_info.handshake_auth_data
            and auth_info.handshake_plugin_name
            in (
                self.name,
                NATIVE,
            )
        ):
            # The client scrambled with the handshake's nonce, whichever plugin announced it.
            nonce = auth_info.handshake_auth_data.rstrip(b"\x00")
        else:
            nonce = utils.nonce(NONCE_BYTES)
            auth_info = yield nonce + b"\x00"
        p = self.provider
        if p.rs.settings.insecure:
            yield Success(ROOT_USER)
            return
        user = _user(auth_info)
        if _empty(auth_info.data):
            yield await p.certificate_login(user.name)
            return
        row = user.row
        if row is not None and row.passwd:
            digest2 = p.cache.get(row.user_name, row.passwd)
            if digest2 is not None and sha2_scramble_matches(auth_info.data, nonce, digest2):
                yield FastSuccess(row.user_name)
                return
        if not p.facts.tls:
            # MySQL would offer its RSA key; the cleartext password goes over TLS only.
            yield p.denied(user.name, True)
            return
        answer: Any = yield PERFORM_FULL_AUTHENTICATION
        data = answer.data
        if data == REQUEST_PUBLIC_KEY:
            yield p.denied(user.name, True)
            return
        password = data.rstrip(b"\x00").decode("utf-8", "replace")
        decision = await p.password_login(user.name, password)
        if isinstance(decision, Success) and row is not None:
            p.cache.put(row.user_name, row.passwd, password)
        yield decision
