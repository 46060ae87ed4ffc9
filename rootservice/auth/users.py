"""Users, authentication and privilege checks of the admin statements, as MySQL /
OceanBase: ``__all_user`` rows with argon2 hashes and global privileges, ``root`` always
there with every privilege, MySQL's error codes and texts.
"""

from __future__ import annotations

import logging

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.auth import passwords
from rootservice.auth.principal import Principal, client_host
from rootservice.auth.privileges import ALL_PRIVILEGES, required_privilege
from rootservice.config import RsSettings
from rootservice.db import user_repo
from rootservice.db.user_repo import ROOT_USER, UserRow
from rootservice.ha.store import MetaStore
from sql import ast

log = logging.getLogger(__name__)

MAX_USER_NAME_CHARS = 64
"""OceanBase's ``OB_MAX_USER_NAME_LENGTH``."""


def _quoted(user: str) -> str:
    return "'" + user.replace("'", "''") + "'"


def access_denied(user: str, client_addr: str, password_used: bool) -> ObError:
    """MySQL's 1045: ``Access denied for user 'u'@'host' (using password: YES|NO)``."""
    return ObError(
        "ER_ACCESS_DENIED_ERROR",
        user.replace("'", "''")[:MAX_USER_NAME_CHARS],
        client_host(client_addr),
        "YES" if password_used else "NO",
    )


def _cannot(operation: str, user: str) -> ObError:
    """MySQL's 1396: ``Operation CREATE USER failed for 'u'@'%'``."""
    return ObError("ER_CANNOT_USER", operation, f"{_quoted(user)}@'%'")


def _root_is_fixed(what: str) -> ObError:
    return ObError("OB_OP_NOT_ALLOW", what, detail="root always exists and has every privilege")


def _check_name(user: str) -> str:
    if not user or len(user) > MAX_USER_NAME_CHARS:
        raise ObError(
            "OB_INVALID_ARGUMENT",
            "user name",
            detail=f"it must have 1 to {MAX_USER_NAME_CHARS} characters",
        )
    return user


def grants_line(user: str, privileges: frozenset[str]) -> str:
    """One SHOW GRANTS line: ``GRANT SELECT, ALTER SYSTEM ON *.* TO 'u'``; ``ALL PRIVILEGES``
    when the user has every one, ``USAGE`` (MySQL's "no privilege") when none."""
    if privileges >= set(ALL_PRIVILEGES):
        names = "ALL PRIVILEGES"
    else:
        names = ", ".join(p for p in ALL_PRIVILEGES if p in privileges) or "USAGE"
    return f"GRANT {names} ON *.* TO {_quoted(user)}"


class Users:
    """Authentication, privilege checks and the user statements.

    Reads go through ``store.read()`` (standbys authenticate too), writes through fenced
    ``store.txn()`` (the leader only, write-through). ``settings.insecure`` makes everyone
    root (CockroachDB's insecure mode). ``cache`` remembers successful password
    verifications (:class:`rootservice.auth.passwords.VerifiedCache`).
    """

    def __init__(
        self,
        store: MetaStore,
        clock: Clock,
        settings: RsSettings,
        cache: passwords.VerifiedCache | None = None,
    ) -> None:
        """Users kept in ``store``'s ``__all_user``."""
        self.store = store
        self.clock = clock
        self.settings = settings
        self.cache = cache if cache is not None else passwords.VerifiedCache()

    # --- who is asking -----------------------------------------------------------------

    def _get(self, user: str) -> UserRow | None:
        with self.store.read() as conn:
            return user_repo.get_user(conn, user)

    def get(self, user: str) -> UserRow | None:
        """The ``__all_user`` row of ``user`` (None when unknown), read from the database:
        the MySQL endpoint's plugins check scrambles against it. Raises
        ``ObError("OB_ERR_SYS")`` when the table cannot be read."""
        return self._get(user)

    def authenticate(
        self,
        user: str | None,
        password: str | None,
        cert_user: str | None,
        client_addr: str,
    ) -> Principal:
        """The principal of an admin call.

        ``user`` and ``password`` are what the client sent (None when absent); ``cert_user``
        the user named by a verified client certificate (None without one); ``client_addr``
        the peer's ``host:port``. With a password, the user (``user``, else ``cert_user``)
        must exist and the password verify; without one, ``cert_user`` is the user, and
        ``user``, when given, must be the same. In insecure mode everyone is root.

        Raises ``ObError("ER_ACCESS_DENIED_ERROR")`` (MySQL's 1045, ``using password:
        YES|NO``) and ``ObError("OB_ERR_SYS")`` when the tables cannot be read.
        """
        if self.settings.insecure:
            return Principal(ROOT_USER, client_addr)
        if password is not None:
            name = user if user is not None else (cert_user or "")
            row = self._get(name) if name else None
            if row is None:
                passwords.burn_verification(password)
                raise access_denied(name, client_addr, True)
            if not self.cache.hit(name, row.passwd, password):
                if not passwords.verify_password(row.passwd, password):
                    raise access_denied(name, client_addr, True)
                self.cache.add(name, row.passwd, password)
            return Principal(name, client_addr)
        if cert_user is None or (user is not None and user != cert_user):
            raise access_denied(user if user is not None else "", client_addr, False)
        # root always exists: its certificate needs no table read, so that during a
        # database outage it is still told OB_RS_NOT_MASTER (and the leader) by the gate.
        if cert_user != ROOT_USER and self._get(cert_user) is None:
            raise access_denied(cert_user, client_addr, False)
        return Principal(cert_user, client_addr)

    def privileges(self, user: str) -> frozenset[str]:
        """The privileges of ``user`` (every one for root, none for an unknown user)."""
        if user == ROOT_USER:
            return frozenset(ALL_PRIVILEGES)
        row = self._get(user)
        return row.privileges if row is not None else frozenset()

    def check(self, principal: Principal, statement: ast.Statement) -> None:
        """Refuse ``statement`` unless ``principal`` has the privilege it needs
        (:func:`rootservice.auth.privileges.required_privilege`). Read from the table on
        every statement, so a REVOKE applies to the next statement of an open shell.

        Raises ``ObError("ER_SPECIFIC_ACCESS_DENIED_ERROR")`` (MySQL's 1227) naming the
        privilege, ``ObError("OB_ERR_SYS")`` when the table cannot be read."""
        needed = required_privilege(statement, principal.user)
        if needed is None or principal.user == ROOT_USER:
            return
        if needed not in self.privileges(principal.user):
            raise ObError("ER_SPECIFIC_ACCESS_DENIED_ERROR", needed)

    # --- the user statements (executed by rootservice.api.statements) --------------------

    def create_user(self, user: str, password: str, *, if_not_exists: bool = False) -> bool:
        """CREATE USER: a user with no privilege (MySQL's USAGE), with its argon2 hash and
        mysql_native_password verifier. Returns False when it
        exists and ``if_not_exists``. Raises ER_CANNOT_USER (1396) when it exists,
        OB_INVALID_ARGUMENT for a bad name, OB_RS_NOT_MASTER / OB_ERR_SYS from the store."""
        _check_name(user)
        hashed = passwords.hash_password(password)  # slow: before taking the write lock
        native = passwords.native_verifier(password)
        with self.store.txn() as conn:
            if user_repo.get_user(conn, user) is not None:
                if if_not_exists:
                    return False
                raise _cannot("CREATE USER", user)
            user_repo.insert_user(conn, user, hashed, self.clock.now_us(), native)
        return True

    def drop_user(self, user: str, *, if_exists: bool = False) -> bool:
        """DROP USER. Returns False when it does not exist and ``if_exists``. Raises
        OB_OP_NOT_ALLOW for root, ER_CANNOT_USER (1396) for an unknown user."""
        if user == ROOT_USER:
            raise _root_is_fixed("drop user 'root'")
        with self.store.txn() as conn:
            dropped = user_repo.delete_user(conn, user)
        self.cache.forget(user)
        if not dropped and not if_exists:
            raise _cannot("DROP USER", user)
        return dropped

    def alter_password(self, user: str, password: str) -> None:
        """ALTER USER ... IDENTIFIED BY: a new hash ('' = no password, certificate only) and
        mysql_native_password verifier (:func:`rootservice.auth.passwords.native_verifier`).
        Raises ER_CANNOT_USER (1396) for an unknown user."""
        hashed = passwords.hash_password(password)
        native = passwords.native_verifier(password)
        with self.store.txn() as conn:
            changed = user_repo.set_password(conn, user, hashed, self.clock.now_us(), native)
        self.cache.forget(user)
        if not changed:
            raise _cannot("ALTER USER", user)

    def grant(self, user: str, privileges: tuple[str, ...]) -> None:
        """GRANT: add ``privileges`` (names of ALL_PRIVILEGES). Root has them already. Raises
        ER_CANT_CREATE_USER_WITH_GRANT (MySQL's 1410) for an unknown user."""
        if user == ROOT_USER:
            return
        with self.store.txn() as conn:
            row = user_repo.get_user(conn, user)
            if row is None:
                raise ObError("ER_CANT_CREATE_USER_WITH_GRANT")
            user_repo.set_privileges(
                conn, user, row.privileges | set(privileges), self.clock.now_us()
            )

    def revoke(self, user: str, privileges: tuple[str, ...]) -> None:
        """REVOKE: remove ``privileges``. Raises OB_OP_NOT_ALLOW for root,
        ER_NONEXISTING_GRANT (MySQL's 1141) for an unknown user."""
        if user == ROOT_USER:
            raise _root_is_fixed("revoke from 'root'")
        with self.store.txn() as conn:
            row = user_repo.get_user(conn, user)
            if row is None:
                raise ObError("ER_NONEXISTING_GRANT", user[:MAX_USER_NAME_CHARS], "%")
            user_repo.set_privileges(
                conn, user, row.privileges - set(privileges), self.clock.now_us()
            )

    def show_grants(self, user: str) -> list[str]:
        """SHOW GRANTS FOR ``user``: one :func:`grants_line`. Raises ER_NONEXISTING_GRANT
        (1141) for an unknown user."""
        if user == ROOT_USER:
            return [grants_line(user, frozenset(ALL_PRIVILEGES))]
        row = self._get(user)
        if row is None:
            raise ObError("ER_NONEXISTING_GRANT", user[:MAX_USER_NAME_CHARS], "%")
        return [grants_line(user, row.privileges)]
