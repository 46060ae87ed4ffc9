"""Password hashes: argon2id with a random salt per hash, through argon2-cffi's
``PasswordHasher`` (its defaults are RFC 9106's low-memory profile: 3 passes over 64 MiB,
4 lanes, a 16-byte salt). The hash string carries the salt and the parameters, so hashes
made with other parameters still verify. Plain passwords are never stored nor logged.

A verification costs tens to hundreds of milliseconds by design; :class:`VerifiedCache`
remembers successful ones so that a shell sending one statement after another does not pay it
on every statement.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_HASHER = PasswordHasher()

NO_PASSWORD = ""
"""The stored ``passwd`` of a user with no password (certificate login only)."""


def hash_password(password: str) -> str:
    """The argon2id hash of ``password`` (``$argon2id$v=19$m=...``), salted at random; ``""``
    (:data:`NO_PASSWORD`) for the empty password, as MySQL's ``IDENTIFIED BY ''``."""
    if password == "":
        return NO_PASSWORD
    return _HASHER.hash(password)


def verify_password(stored: str, password: str) -> bool:
    """True when ``password`` matches the hash ``stored``. A user with no password
    (``stored == ""``) matches no password at all; a malformed hash matches nothing."""
    if not stored:
        return False
    try:
        return bool(_HASHER.verify(stored, password))
    except (VerificationError, InvalidHashError):
        return False


def native_verifier(password: str) -> str | None:
    """mysql_native_password's stored verifier of ``password``: hex ``SHA1(SHA1(password))``
    (MySQL's ``authentication_string`` without its ``*``), None for the empty password (no
    password login). SHA1 is MySQL's protocol, not a choice: the scramble the client sends
    can only be checked against this value."""
    if password == "":
        return None
    return hashlib.sha1(hashlib.sha1(password.encode("utf-8")).digest()).hexdigest()


_DUMMY_HASH: str | None = None


def burn_verification(password: str) -> None:
    """Spend the time of one verification and throw the result away: called for an unknown
    user, so that the answer's delay does not tell which user names exist."""
    global _DUMMY_HASH
    if _DUMMY_HASH is None:
        _DUMMY_HASH = _HASHER.hash(secrets.token_hex(16))
    verify_password(_DUMMY_HASH, password)


class VerifiedCache:
    """Successful verifications, keyed by ``(user, stored hash, HMAC-SHA256 of the password
    under a random key of this process)``: the plain password is not kept, and the digest is
    useless outside this process. A changed hash (ALTER USER) cannot match an old entry;
    :meth:`forget` drops a user's entries at once. Bounded: the least recently used entry
    goes first beyond ``max_entries``. Thread-safe."""

    def __init__(self, max_entries: int = 256) -> None:
        """An empty cache of at most ``max_entries`` entries."""
        self.max_entries = max_entries
        self._key = secrets.token_bytes(32)
        self._entries: OrderedDict[tuple[str, str, bytes], None] = OrderedDict()
        self._lock = threading.Lock()

    def _digest(self, password: str) -> bytes:
        return hmac.new(
            self._key, password.encode("utf-8", "surrogatepass"), hashlib.sha256
        ).digest()

    def hit(self, user: str, stored: str, password: str) -> bool:
        """True when this exact (user, hash, password) was verified before."""
        key = (user, stored, self._digest(password))
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return True
        return False

    def add(self, user: str, stored: str, password: str) -> None:
        """Remember a successful verification."""
        key = (user, stored, self._digest(password))
        with self._lock:
            self._entries[key] = None
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def forget(self, user: str) -> None:
        """Drop every entry of ``user`` (its password changed or it was dropped)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == user]:
                del self._entries[key]

    def __len__(self) -> int:
        """How many verifications are remembered."""
        with self._lock:
            return len(self._entries)
