"""``__all_user``: the users, their password hashes and global privileges.

Every function takes a connection inside the caller's transaction and never commits. The
privileges are named as MySQL writes them (``SELECT``, ``ALTER SYSTEM``, ``CREATE USER``);
:data:`PRIVILEGE_COLUMNS` maps each to its 0/1 column.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from rootservice.db import param_repo
from rootservice.db.tables import all_user
from rootservice.db.timestamps import us_to_datetime

ROOT_USER = "root"
"""The superuser: created by migration 0004, never dropped, always every privilege."""

ROOT_USER_ID = 200001
"""OceanBase's ``OB_SYS_USER_ID``; later users get ids above it."""

PARAM_MAX_USER_ID = "max_used_user_id"
"""The ``__all_sys_parameter`` counter of user ids (never reused, as server ids)."""

PRIVILEGE_COLUMNS: dict[str, str] = {
    "SELECT": "priv_select",
    "ALTER SYSTEM": "priv_alter_system",
    "CREATE USER": "priv_create_user",
}
"""Privilege name -> ``__all_user`` column, in the order SHOW GRANTS lists them."""


@dataclass(frozen=True)
class UserRow:
    """One ``__all_user`` row: ``passwd`` is the argon2 hash ('' = no password),
    ``privileges`` the names of :data:`PRIVILEGE_COLUMNS` granted, ``native_passwd`` the
    hex ``SHA1(SHA1(password))`` of mysql_native_password (None: no password, or a user
    created before migration 0005)."""

    user_id: int
    user_name: str
    passwd: str
    privileges: frozenset[str]
    native_passwd: str | None = None


def _row(r: sa.Row[tuple[object, ...]]) -> UserRow:
    m = r._mapping
    privs = frozenset(name for name, col in PRIVILEGE_COLUMNS.items() if m[col])
    native = m["native_passwd"]
    return UserRow(
        int(m["user_id"]),
        str(m["user_name"]),
        str(m["passwd"]),
        privs,
        str(native) if native else None,
    )


def get_user(conn: sa.Connection, user_name: str) -> UserRow | None:
    """The row of ``user_name`` (exact, case-sensitive as MySQL user names), or None."""
    r = conn.execute(sa.select(all_user).where(all_user.c.user_name == user_name)).first()
    return _row(r) if r is not None else None


def list_users(conn: sa.Connection) -> list[UserRow]:
    """Every user, by user_id."""
    return [_row(r) for r in conn.execute(sa.select(all_user).order_by(all_user.c.user_id))]


def insert_user(
    conn: sa.Connection,
    user_name: str,
    passwd: str,
    now_us: int,
    native_passwd: str | None = None,
) -> int:
    """Add ``user_name`` with hash ``passwd`` (and mysql_native_password verifier
    ``native_passwd``, hex, or None) and no privilege; returns its new user_id (allocated
    from :data:`PARAM_MAX_USER_ID`). The caller checks it does not exist; a concurrent
    insert of the same name fails on the unique index."""
    user_id = param_repo.next_counter(conn, PARAM_MAX_USER_ID, now_us, at_least=ROOT_USER_ID)
    ts = us_to_datetime(now_us)
    conn.execute(
        all_user.insert().values(
            user_id=user_id,
            user_name=user_name,
            passwd=passwd,
            native_passwd=native_passwd,
            priv_select=0,
            priv_alter_system=0,
            priv_create_user=0,
            gmt_create=ts,
            gmt_modified=ts,
        )
    )
    return user_id


def set_password(
    conn: sa.Connection,
    user_name: str,
    passwd: str,
    now_us: int,
    native_passwd: str | None = None,
) -> bool:
    """Replace the hash of ``user_name`` and its mysql_native_password verifier
    (``native_passwd``, hex, or None); False when there is no such user."""
    t = all_user
    return bool(
        conn.execute(
            t.update()
            .where(t.c.user_name == user_name)
            .values(passwd=passwd, native_passwd=native_passwd, gmt_modified=us_to_datetime(now_us))
        ).rowcount
    )


def set_privileges(
    conn: sa.Connection, user_name: str, privileges: Iterable[str], now_us: int
) -> bool:
    """Make the privileges of ``user_name`` exactly ``privileges`` (names of
    :data:`PRIVILEGE_COLUMNS`; ``KeyError`` for another name); False when there is no such
    user."""
    wanted = set(privileges)
    unknown = wanted - PRIVILEGE_COLUMNS.keys()
    if unknown:
        raise KeyError(f"unknown privilege(s) {sorted(unknown)}")
    values: dict[str, object] = {
        col: int(name in wanted) for name, col in PRIVILEGE_COLUMNS.items()
    }
    values["gmt_modified"] = us_to_datetime(now_us)
    t = all_user
    return bool(
        conn.execute(t.update().where(t.c.user_name == user_name).values(**values)).rowcount
    )


def delete_user(conn: sa.Connection, user_name: str) -> bool:
    """Remove ``user_name``; False when there was no such user."""
    t = all_user
    return bool(conn.execute(t.delete().where(t.c.user_name == user_name)).rowcount)
