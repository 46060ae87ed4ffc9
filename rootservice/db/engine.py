"""Engine creation and schema migration for SQLite (embedded default) and PostgreSQL.

``make_engine(url)`` returns an engine tuned for the RS: SQLite in WAL mode with a busy
timeout and foreign keys on, PostgreSQL through psycopg 3 with a short connect timeout, TCP
keepalives and a user timeout so an unreachable database fails fast, a bounded pool, and a
client-side bound on every wait for the server (:func:`io_deadline`: a
database that stops answering - a network blackhole, a hung server - must produce an error,
not a thread stuck for ever holding the RS's write lock or its election round).
``upgrade(engine)`` applies the Alembic migrations in ``migrations/``; it is the only way the
schema is created.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

import migrations
from rootservice.db import schema_version
from rootservice.db.server_identity import ServerIdentity, read_dbapi_identity

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent
# pg_advisory_xact_lock key serialising schema migrations (an arbitrary constant).
MIGRATION_LOCK_ID = 46304630


#: Longest wait for one answer of PostgreSQL outside an :func:`io_deadline`, in seconds:
#: above any statement the RS runs on its own tables (a migration runs without it).
IO_TIMEOUT_S = 30.0
#: Pool bounds (PostgreSQL): connections kept, extra ones under load, and how long a thread
#: waits for a free one before failing (``sqlalchemy.exc.TimeoutError``), in seconds.
POOL_SIZE = 5
MAX_OVERFLOW = 5
POOL_TIMEOUT_S = 10.0
#: libpq's TCP settings: keepalive probes after 5 s idle, every 2 s, 3 lost = dead; and
#: unacknowledged data for 10 s = dead (``tcp_user_timeout``, ms). A real partition (packets
#: dropped) is then noticed by the kernel; the wait bound covers a server that accepts the
#: bytes but never answers.
TCP_ARGS = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}

#: The same bounds on the server's side of each connection, sent as session settings in the
#: start-up packet (libpq ``options``): the RS's own settings only cover its end. A backend
#: of a leader cut off from the database, blocked writing a result to it, is neither idle
#: (``idle_in_transaction_session_timeout``) nor cancellable, so without them it kept the
#: row locks of its fenced transaction (the lease row ``FOR KEY SHARE``) until the server's
#: kernel gave the connection up, about 15 minutes; the standby's take-office waited on them
#: and failed every round on its statement timeout (seen once in three runs of the partition
#: test with the leader cut from PostgreSQL). All four are settable by any user (PostgreSQL
#: 12+). A pooler that refuses start-up options (PgBouncer without
#: ``ignore_startup_parameters = options``) must be told to pass or ignore them.
SERVER_TCP_OPTIONS = (
    "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3"
    " -c tcp_user_timeout=10000"
)


def server_options(url: sa.URL) -> str:
    """libpq ``options`` for a connection to ``url``: the URL's own ``options`` (if any)
    followed by :data:`SERVER_TCP_OPTIONS`."""
    own = url.query.get("options", "")
    if isinstance(own, tuple):
        own = " ".join(own)
    return f"{own} {SERVER_TCP_OPTIONS}".strip()


# The monotonic deadline (seconds, time.monotonic) of the current thread's database work, or
# None for the default bound; 0.0 disables the bound (migrations).
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "ob_db_deadline", default=None
)


class DatabaseTimeout(psycopg.OperationalError):
    """PostgreSQL did not answer within the client-side bound; the connection was closed."""


@contextlib.contextmanager
def io_deadline(seconds: float | None) -> Iterator[None]:
    """Bound every wait for PostgreSQL in this thread (context) to end within ``seconds``
    from now (nested deadlines keep the earlier one); ``None`` lifts the bound entirely (a
    migration). A wait past it raises :class:`DatabaseTimeout` (a ``psycopg.OperationalError``,
    which SQLAlchemy reports as ``OperationalError`` and treats as a disconnect). No effect on
    SQLite."""
    if seconds is None:
        token = _deadline.set(0.0)
    else:
        new = time.monotonic() + max(0.0, seconds)
        old = _deadline.get()
        token = _deadline.set(new if not old else min(old, new))
    try:
        yield
    finally:
        _deadline.reset(token)


#: libpq's (and psycopg's) shortest ``connect_timeout``, seconds: a smaller value counts as 2.
MIN_CONNECT_TIMEOUT_S = 2


def connect_params_within(params: dict[str, Any], left_s: float | None) -> dict[str, Any]:
    """``params`` (psycopg connection keywords) with ``connect_timeout`` cut so that the
    start-up of a new connection ends within ``left_s`` seconds (the :func:`io_deadline`
    left; None: no deadline, ``params`` unchanged). The timeout applies to each host of a
    multi-host ``host`` in turn, so it is ``left_s`` shared among them, in whole seconds and at
    least :data:`MIN_CONNECT_TIMEOUT_S` (the start-up may then overrun a deadline under 2 s
    per host). Raises :class:`DatabaseTimeout` when no time is left. Without this a fresh
    connection of a statement at the moment the database was cut off waited the whole
    ``connect_timeout`` per host (10 s for two attempts of 5 s), past its fenced transaction's
    own bound and past the client's deadline."""
    if left_s is None:
        return params
    if left_s <= 0:
        raise DatabaseTimeout("no time left to connect to the database (connection not opened)")
    hosts = max(1, len(str(params.get("host") or "").split(",")))
    per_host = max(MIN_CONNECT_TIMEOUT_S, int(left_s / hosts))
    configured = int(float(params.get("connect_timeout") or 0))
    if 0 < configured <= per_host:
        return params
    return {**params, "connect_timeout": per_host}


def _deadline_left_s() -> float | None:
    # Seconds left of this context's io_deadline; None when there is none (the default bound
    # per wait) or it was lifted (a migration).
    deadline = _deadline.get()
    return None if not deadline else deadline - time.monotonic()


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose waits for the server end at the :func:`io_deadline` of the
    calling context (default :data:`IO_TIMEOUT_S` per wait). On expiry the connection is
    closed (its protocol state is unknown) and :class:`DatabaseTimeout` raised. psycopg's own
    ``wait(timeout=...)`` does the bounding (psycopg >= 3.2)."""

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        """psycopg's wait with the context's bound (see the class docstring)."""
        deadline = _deadline.get()
        if deadline == 0.0:
            bound = timeout
        else:
            left = IO_TIMEOUT_S if deadline is None else deadline - time.monotonic()
            bound = max(0.001, left) if timeout is None else min(timeout, max(0.001, left))
        try:
            return super().wait(gen, interval=interval, timeout=bound)
        except psycopg.errors._WaitTimeout:
            if timeout is not None and bound == timeout:
                raise  # the caller's own bound (psycopg's cancel path)
            with contextlib.suppress(Exception):
                self.pgconn.finish()
            raise DatabaseTimeout(
                f"no answer from the database within {bound:.1f} s (connection closed)"
            ) from None


#: ``ConnectionRecord.info`` key of the :class:`ServerIdentity` a connection reached.
IDENTITY_KEY = "ob_server_identity"

#: Judges the server a new connection reached: the reason to refuse it, or None.
ServerJudge = Callable[[ServerIdentity | None], str | None]


class DeadlineQueuePool(sa.pool.QueuePool):
    """SQLAlchemy's ``QueuePool`` whose wait for a free connection also ends at the calling
    context's :func:`io_deadline` (the configured ``timeout`` stays the longest wait), so a
    bounded transaction is bounded in the pool too. Without it a fenced write of a leader
    cut off from its database, with every connection taken by reads waiting for answers,
    waited the whole pool timeout (10 s) past its deadline, and a statement's audit record
    another 10 s after it. Raises ``sqlalchemy.exc.TimeoutError`` when no connection came
    in time."""

    _configured_timeout: float

    @property  # type: ignore[override]
    def _timeout(self) -> float:
        # QueuePool._do_get waits ``self._timeout`` seconds for a returned connection.
        left = _deadline_left_s()
        configured = self._configured_timeout
        return configured if left is None else max(0.0, min(configured, left))

    @_timeout.setter
    def _timeout(self, value: float) -> None:
        self._configured_timeout = value

    def recreate(self) -> DeadlineQueuePool:
        """A new pool like this one (``engine.dispose()``), with the configured timeout, not
        what is left of the caller's deadline."""
        token = _deadline.set(None)
        try:
            return super().recreate()  # type: ignore[return-value]
        finally:
            _deadline.reset(token)


def _without_server(params: dict[str, Any], host: str, port: int) -> dict[str, Any] | None:
    """``params`` of a libpq multi-host connection without the ``host:port`` entry, or None
    when no other server is left (or the hosts cannot be told apart)."""
    hosts = str(params.get("host") or "").split(",")
    ports = str(params.get("port") or "").split(",")
    if len(hosts) < 2:
        return None
    if len(ports) != len(hosts):
        ports = [ports[0] if ports else ""] * len(hosts)
    keep = [
        (h, p) for h, p in zip(hosts, ports, strict=True) if (h, p or "5432") != (host, str(port))
    ]
    if not keep or len(keep) == len(hosts):
        return None
    return {**params, "host": ",".join(h for h, _ in keep), "port": ",".join(p for _, p in keep)}


def make_engine(
    url: str,
    *,
    connect_timeout_s: int = 5,
    pool_timeout_s: float = POOL_TIMEOUT_S,
    server_judge: ServerJudge | None = None,
) -> sa.Engine:
    """Create an engine for ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``).

    PostgreSQL: :class:`BoundedConnection` connections (every wait bounded), ``connect_timeout``
    of ``connect_timeout_s`` (libpq: the whole connection start-up, per host; less within an
    :func:`io_deadline`: :func:`connect_params_within`), :data:`TCP_ARGS`, a
    pre-ping on checkout, at most ``POOL_SIZE + MAX_OVERFLOW`` connections and
    ``pool_timeout_s`` of waiting for one (less within an :func:`io_deadline`:
    :class:`DeadlineQueuePool`). SQLite files' parent directories are created.
    ``server_judge`` (PostgreSQL) sees the :class:`ServerIdentity` of every
    new connection (None when unreadable) and may refuse it: the connection is closed and,
    with a multi-host URL, the next server of the list is tried without the refused one (libpq
    alone would pick the first writable one again: an old primary restarted writable); with
    none left the connection fails (``psycopg.OperationalError``). The accepted identity is
    kept in the connection's ``info`` under :data:`IDENTITY_KEY`.
    Raises ``sqlalchemy.exc.ArgumentError`` for a malformed URL; connection errors surface on
    first use.
    """
    u = sa.make_url(url)
    kwargs: dict[str, Any] = {"future": True}
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            Path(u.database).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        engine = sa.create_engine(u, **kwargs)

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _rec: Any) -> None:
            # pysqlite's own transaction handling defers BEGIN; take it over so that
            # BEGIN IMMEDIATE serialises writers instead of failing on lock upgrade.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:
            # Readers (connections marked read_only) need no lock in WAL mode; writers take
            # it up front so two writers queue instead of failing on lock upgrade.
            if conn.get_execution_options().get("read_only"):
                conn.exec_driver_sql("BEGIN")
            else:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    if u.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {
            "connect_timeout": connect_timeout_s,
            **TCP_ARGS,
            "options": server_options(u),
        }
        kwargs["pool_pre_ping"] = True
        kwargs["pool_size"] = POOL_SIZE
        kwargs["max_overflow"] = MAX_OVERFLOW
        kwargs["pool_timeout"] = pool_timeout_s
        kwargs["poolclass"] = DeadlineQueuePool
        engine = sa.create_engine(u, **kwargs)

        @sa.event.listens_for(engine, "do_connect")
        def _connect(_d: Any, rec: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
            params = cparams
            while True:
                # The start-up is bounded by the context's deadline too (psycopg waits for it
                # with connect_timeout only, outside BoundedConnection.wait).
                within = connect_params_within(params, _deadline_left_s())
                conn = BoundedConnection.connect(*cargs, **within)
                if server_judge is None:
                    return conn
                try:
                    ident = read_dbapi_identity(conn)
                except BaseException:
                    conn.close()
                    raise
                why = server_judge(ident)
                if why is None:
                    rec.info[IDENTITY_KEY] = ident
                    return conn
                host, port = conn.info.host, conn.info.port
                conn.close()
                log.warning("not using the database server %s:%s: %s", host, port, why)
                rest = _without_server(params, host, port)
                if rest is None:
                    raise psycopg.OperationalError(f"server {host}:{port} refused: {why}")
                params = rest

        return engine
    return sa.create_engine(u, **kwargs)


def alembic_config(
    connection: sa.Connection | None = None, location: Path = MIGRATIONS_DIR
) -> Config:
    """An Alembic ``Config`` pointing at ``location`` (``migrations/``; tests give a copy
    with migrations of their own).

    When ``connection`` is given it is handed to ``migrations/env.py`` (as
    ``cfg.attributes["connection"]``) so the migration runs inside the caller's transaction.
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(location))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` in one transaction per run (no client-side wait
    bound: a migration of a large table may take long)."""
    with io_deadline(None), engine.begin() as conn:
        migration_lock(conn)
        command.upgrade(alembic_config(conn), revision)


def migration_lock(conn: sa.Connection) -> None:
    """Take the migration lock in ``conn``'s transaction (released at its end): two RS
    processes starting together must not both migrate. PostgreSQL only (an advisory lock);
    SQLite has a single writer anyway."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")


def downgrade(engine: sa.Engine, revision: str = "base") -> None:
    """Walk migrations back down to ``revision`` (``base`` drops everything)."""
    with io_deadline(None), engine.begin() as conn:
        command.downgrade(alembic_config(conn), revision)


def current_revision(engine: sa.Engine) -> str | None:
    """The revision the database is at, or None when it has no schema."""
    with engine.connect() as conn:
        return schema_version.read(conn)


def head_revision() -> str | None:
    """The newest revision id in ``migrations/`` (where :func:`upgrade` goes), or None if none."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def db_error_summary(exc: BaseException) -> str:
    """First line of a driver error, without SQLAlchemy's background link."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return (text[0] if text else type(orig).__name__)[:300]


def set_local(conn: sa.Connection, settings: dict[str, str]) -> None:
    """Set PostgreSQL run-time parameters (``name -> value``, e.g. ``lock_timeout`` in ms) for
    the current transaction only (``set_config(name, value, true)``, i.e. ``SET LOCAL``).
    A no-op on other databases. Raises SQLAlchemy errors."""
    if conn.dialect.name != "postgresql" or not settings:
        return
    # One statement for all of them: every round trip counts when the database is slow
    # (at 1 s per statement, three SETs were three of a renewal's seconds).
    calls = ", ".join(f"set_config(:n{i}, :v{i}, true)" for i in range(len(settings)))
    params: dict[str, str] = {}
    for i, (name, value) in enumerate(settings.items()):
        params[f"n{i}"] = name
        params[f"v{i}"] = value
    conn.execute(sa.text(f"SELECT {calls}"), params)
