"""Admission of admin statements: their own bounded pool of threads, a
limit on the statements admitted at once in all and per user, and a cheap bound on a
statement's tokens before the parser sees it.

Why: admin statements used to run on ``rs.executor``, the 8 threads the RS's background
work also uses, and one client sending 8 statements of 4 MiB made the admin path unusable
for about 270 s and caused 6 step-downs of the leader. Now a statement
runs on :class:`Admission`'s threads (``admin_workers``); one over ``admin_queue_limit``
statements admitted (running or waiting) is refused at once with MySQL's
``ER_CON_COUNT_ERROR`` (1040, 08004), one over ``admin_per_user_limit`` of the same user with
``ER_TOO_MANY_USER_CONNECTIONS`` (1203, 42000), as MySQL refuses ``max_connections`` /
``max_user_connections``. The lease path runs on the event loop and the election and the
timers on their own schedulers' threads (``rootservice.app``, ``rootservice.timers``), so
none of them waits behind admin work.

:func:`check_tokens` bounds the parse: the lark parser's time and memory grow with the
tokens, so a statement of more than ``max_statement_tokens`` tokens (counted by one
compiled regular expression, which stops counting at the limit) is refused with
``OB_NOT_SUPPORTED`` before parsing, as the parser already refuses a WHERE nested too deep.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from obcommon.errors import ObError

__all__ = ["DEFAULT_USER", "Admission", "check_tokens"]

T = TypeVar("T")

DEFAULT_USER = "root"
"""The admission key of a call that names no user (no ``ob-user`` metadata) and presents no
client certificate: only in insecure mode, where everyone is root (CockroachDB's
``--insecure``)."""

# One token: a quoted string or identifier (with backslash escapes and doubled quotes), a run
# of word characters (keyword, name, number), or any other single non-blank character. An
# upper bound of the grammar's tokens (comments count as tokens too), cheap to count.
# Each quoted form is written as an "unrolled loop" (a run of plain characters, then escapes
# each followed by another run): the regex engine holds the GIL for a whole match, and the
# naive `(?:[^']|\\.)*` takes 0.6 s on a 4 MiB literal, which starved the election's thread
# into step-downs; this form takes milliseconds.
_TOKEN = re.compile(
    r"'[^'\\]*(?:(?:\\.|'')[^'\\]*)*'"
    r'|"[^"\\]*(?:(?:\\.|"")[^"\\]*)*"'
    r"|`[^`]*(?:``[^`]*)*`"
    r"|\w+|\S",
    re.S,
)


def check_tokens(text: str, max_tokens: int) -> None:
    """Raise ``ObError("OB_NOT_SUPPORTED", ...)`` when ``text`` has more than ``max_tokens``
    tokens (see :data:`_TOKEN`). Counts at most ``max_tokens + 1`` matches, so its time is
    bounded by the limit, not by the statement's size (about 20 ms for 100,000 tokens)."""
    n = sum(1 for _ in itertools.islice(_TOKEN.finditer(text), max_tokens + 1))
    if n > max_tokens:
        raise ObError(
            "OB_NOT_SUPPORTED",
            f"a statement of more than {max_tokens} tokens (max_statement_tokens)",
        )


class Admission:
    """Runs admin statements on ``workers`` threads of their own, admitting at most
    ``queue_limit`` at once in all and ``per_user_limit`` per user (running or waiting for a
    thread). Thread-safe; the counts are released when a statement's work ends, even if its
    caller stopped waiting (a cancelled call still holds its slot until its thread is done,
    so a client cannot exceed the limit by hanging up)."""

    def __init__(self, workers: int, queue_limit: int, per_user_limit: int) -> None:
        """Start with nothing admitted; threads are created on demand (``rs-admin-N``)."""
        self.queue_limit = queue_limit
        self.per_user_limit = per_user_limit
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rs-admin")
        self._lock = threading.Lock()
        self._admitted = 0
        self._by_user: dict[str, int] = {}
        self.refused_total = 0

    def admitted(self, user: str | None = None) -> int:
        """Statements admitted and not finished, in all or of ``user``."""
        with self._lock:
            return self._admitted if user is None else self._by_user.get(user, 0)

    def _admit(self, user: str) -> None:
        with self._lock:
            if self._by_user.get(user, 0) >= self.per_user_limit:
                self.refused_total += 1
                raise ObError(
                    "ER_TOO_MANY_USER_CONNECTIONS",
                    f"'{user[:64]}'",
                    detail=f"{self.per_user_limit} statements at once (admin_per_user_limit)",
                )
            if self._admitted >= self.queue_limit:
                self.refused_total += 1
                raise ObError(
                    "ER_CON_COUNT_ERROR",
                    detail=f"{self.queue_limit} statements at once (admin_queue_limit)",
                )
            self._admitted += 1
            self._by_user[user] = self._by_user.get(user, 0) + 1

    def _release(self, user: str) -> None:
        with self._lock:
            self._admitted -= 1
            left = self._by_user[user] - 1
            if left:
                self._by_user[user] = left
            else:
                del self._by_user[user]

    async def run(self, user: str, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on an admin thread for ``user`` and return its result.

        Raises ``ObError``: ``ER_TOO_MANY_USER_CONNECTIONS`` when ``user`` already has
        ``per_user_limit`` statements admitted, ``ER_CON_COUNT_ERROR`` when
        ``queue_limit`` are admitted in all (both at once, nothing run); whatever ``fn``
        raises. ``RuntimeError`` after :meth:`shutdown`.
        """
        self._admit(user)

        def job() -> T:
            try:
                return fn()
            finally:
                self._release(user)

        try:
            future = self._pool.submit(job)
        except RuntimeError:
            self._release(user)
            raise
        return await asyncio.wrap_future(future)

    def shutdown(self) -> None:
        """Stop taking statements; running ones finish on their threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)
