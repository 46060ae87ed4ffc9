"""The RS's handle on its system-table database: one write lock, epoch-fenced transactions.

Every write to the system tables goes through :meth:`MetaStore.txn`, which holds the
process-wide write lock (so admin operations, the persistence queue and CheckAllServerTask
never interleave their read-memory / write-table / apply-memory sequences) and first checks
that this RS's epoch is still the stored one (SPEC.md sections 6 and 10). Database failures
become ``ObError(OB_ERR_SYS)`` with a short reason, so callers have one error type.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from rootservice.db import repo
from rootservice.errors import ObError

log = logging.getLogger(__name__)


def db_error_summary(exc: BaseException) -> str:
    """First line of a driver error, without SQLAlchemy's background link."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return (text[0] if text else type(orig).__name__)[:300]


class MetaStore:
    """Engine + epoch + write lock.

    ``epoch`` is the RS epoch this process holds (0 before taking office). ``on_deposed`` is
    called (once per detection) when a fenced transaction finds a different epoch.
    """

    def __init__(self, engine: sa.Engine, rs_addr: tuple[str, int]) -> None:
        """Wrap ``engine``; ``rs_addr`` is this RS's ``(ip, port)`` for event-history rows.

        The epoch starts at 0 (not in office) and there is no ``on_deposed`` callback yet.
        """
        self.engine = engine
        self.rs_addr = rs_addr
        self.epoch = 0
        self.write_lock = threading.RLock()
        self.on_deposed: Callable[[], None] | None = None
        # The SELECT catalog (rootservice.select.Catalog), built on first use.
        self.catalog: Any = None

    @contextmanager
    def txn(self, *, fenced: bool = True) -> Iterator[sa.Connection]:
        """A transaction under the write lock that commits on normal exit.

        Raises ``ObError(OB_RS_NOT_MASTER)`` when fenced and the epoch moved on, and
        ``ObError(OB_ERR_SYS)`` when the database fails; in both cases nothing is committed.
        """
        with self.write_lock:
            try:
                with self.engine.begin() as conn:
                    if fenced:
                        repo.check_epoch(conn, self.epoch)
                    yield conn
            except ObError as e:
                if e.name == "OB_RS_NOT_MASTER" and self.on_deposed is not None:
                    self.on_deposed()
                raise
            except sa.exc.SQLAlchemyError as e:
                raise ObError(
                    "OB_ERR_SYS",
                    detail=f"system tables unavailable, nothing was changed: {db_error_summary(e)}",
                ) from e

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """A read-only connection (no write lock, no fencing). Raises ``ObError(OB_ERR_SYS)``."""
        try:
            with self.engine.connect() as conn:
                conn.execution_options(read_only=True)
                yield conn
        except sa.exc.SQLAlchemyError as e:
            raise ObError(
                "OB_ERR_SYS", detail=f"system tables unavailable: {db_error_summary(e)}"
            ) from e
