"""A PostgreSQL primary with a streaming standby on loopback: the HA recipe
(docs/operations/ha.md#postgresql-failover-the-fencing-token-and-the-ha-recipe), for the failover tests in tests/integration/test_pg_failover.py.

:class:`PgPair` makes the primary (``initdb``), the standby (``pg_basebackup -R`` of it,
``application_name=standby``) and, with ``synchronous=True``, makes the primary wait for the
standby's flush at every commit (``synchronous_standby_names = standby``,
``synchronous_commit = on``). The faults: :meth:`PgPair.kill_primary` (SIGKILL of the
postmaster and every backend: a crash, not a shutdown), :meth:`PgPair.promote`,
:meth:`PgPair.restart_old_primary` (the old data directory started again as a writable
primary of its own, timeline unchanged) and :meth:`PgPair.pause_replication` (the standby's
WAL receiver stopped with SIGSTOP, so the primary's next commits never reach it: the lost
tail of asynchronous replication, made certain).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from tests.support.pgserver import HOST, SUPERUSER, PgServer, PgServerError


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from ``/proc``)."""
    out: list[int] = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields follow its last ")".
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(d.name))
    return out


class PgPair:
    """A primary and a streaming standby (two :class:`PgServer`); ``synchronous``: the primary
    acknowledges a commit only once the standby has flushed it."""

    def __init__(self, *, synchronous: bool) -> None:
        """Start both and wait until the standby streams (``pg_stat_replication``)."""
        settings = {"synchronous_commit": "on", "wal_level": "replica"}
        primary = dict(settings)
        if synchronous:
            primary["synchronous_standby_names"] = "standby"
        self.primary = PgServer(settings=primary)
        try:
            # Without synchronous_standby_names: once promoted it has no standby to wait
            # for, and with the setting every commit would hang (Patroni's synchronous_mode
            # changes it at the promotion; by hand, the promoted server starts without it).
            self.standby = PgServer(settings=settings, standby_of=self.primary)
        except BaseException:
            self.primary.stop()
            raise
        self.synchronous = synchronous
        self._paused: int | None = None

    def url(self, dbname: str) -> str:
        """The RS's SQLAlchemy URL: both servers in one libpq multi-host URL, the writable
        one chosen (``target_session_attrs=read-write``)."""
        hosts = "&".join(f"host={HOST}:{s.port}" for s in (self.primary, self.standby))
        return f"postgresql+psycopg://{SUPERUSER}@/{dbname}?{hosts}&target_session_attrs=read-write"

    def streaming(self) -> bool:
        """True when the primary has a standby in ``streaming`` state (``sync`` when
        synchronous)."""
        with self.primary.connect() as c:
            rows = c.execute("SELECT state, sync_state FROM pg_stat_replication").fetchall()
        want = "sync" if self.synchronous else "async"
        return any(st == "streaming" and sync == want for st, sync in rows)

    def replayed(self) -> bool:
        """True when the standby has replayed everything the primary has written so far."""
        with self.primary.connect() as c:
            (lsn,) = c.execute("SELECT pg_current_wal_lsn()::text").fetchone() or ("0/0",)
        with self.standby.connect() as c:
            row = c.execute(
                "SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), %s::pg_lsn) >= 0", (lsn,)
            ).fetchone()
        return bool(row and row[0])

    def pause_replication(self) -> None:
        """SIGSTOP the primary's WAL sender: nothing the primary commits from now on reaches
        the standby (an asynchronous standby's lag, made certain; stopping the standby's
        receiver instead would not do: the kernel keeps receiving into its socket buffer).
        :meth:`resume_replication` ends it; :meth:`kill_primary` kills it with the rest."""
        with self.primary.connect() as c:
            row = c.execute("SELECT pid FROM pg_stat_replication").fetchone()
        if row is None or row[0] is None:
            raise PgServerError("the primary has no WAL sender")
        self._paused = int(row[0])
        os.kill(self._paused, signal.SIGSTOP)

    def resume_replication(self) -> None:
        """SIGCONT the WAL sender :meth:`pause_replication` stopped (a no-op otherwise)."""
        pid, self._paused = self._paused, None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster and all its processes at once (a crash: nothing
        is flushed, no shutdown checkpoint)."""
        self.primary.kill9()

    def promote(self) -> None:
        """``pg_ctl promote -w`` the standby: it becomes a primary on the next timeline."""
        self.standby.promote()

    def restart_old_primary(self) -> None:
        """Start the killed primary again on its data directory: crash recovery, then a
        writable primary of its own history (its timeline is the old one), without a
        synchronous standby to wait for (so it would commit whatever reached it)."""
        self.primary.settings.pop("synchronous_standby_names", None)
        self.primary.recover()

    def timeline(self, server: PgServer) -> int:
        """``server``'s current timeline (``pg_control_checkpoint()``, at least that of its
        WAL insert position on a primary)."""
        with server.connect() as c:
            row = c.execute(
                "SELECT GREATEST((SELECT timeline_id FROM pg_control_checkpoint()), "
                "CASE WHEN pg_is_in_recovery() THEN 0 ELSE "
                "('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))"
                "::bit(32)::int END)"
            ).fetchone()
        return int(row[0]) if row else 0

    def stop(self) -> None:
        """Stop and remove both servers (idempotent)."""
        self.resume_replication()
        try:
            self.standby.stop()
        finally:
            self.primary.stop()
