"""The audit trail of admin statements: one log line on the ``rootservice.audit``
logger and one ``__all_rootservice_event_history`` row (module ``audit``) per statement that
is not a read, and per refused login or privilege, with the user, the client address, the
statement (passwords masked, truncated) and the outcome (``OK`` or the error's name).
"""

from __future__ import annotations

import logging
import re

from obcommon.clock import Clock
from rootservice.db import event_repo
from rootservice.db.event_repo import Event
from rootservice.ha.store import MetaStore

log = logging.getLogger("rootservice.audit")

MAX_STATEMENT_CHARS = 512
"""How much of a statement an audit record keeps."""

# IDENTIFIED BY followed by a quoted string (MySQL escapes and doubled quotes), an
# unterminated one (masked to the end), or a bare word. The quoted forms are "unrolled
# loops" (see rootservice.api.admission._TOKEN): the naive alternation holds the GIL for
# hundreds of milliseconds on a long literal.
_PASSWORD = re.compile(
    r"""(IDENTIFIED\s+BY\s+)(?:'[^'\\]*(?:(?:\\[\s\S]|'')[^'\\]*)*'"""
    r"""|"[^"\\]*(?:(?:\\[\s\S]|"")[^"\\]*)*"|['"][\s\S]*|\S+)""",
    re.IGNORECASE,
)


def redact(statement: str, limit: int = MAX_STATEMENT_CHARS) -> str:
    """``statement`` with every password after ``IDENTIFIED BY`` replaced by ``'***'`` and
    cut to ``limit`` characters (masked first, so a cut never reveals half a password)."""
    # Only the part that can be kept is masked (bounded time on a 4 MiB statement); a
    # password cut there is unterminated, and masked to the end.
    masked = _PASSWORD.sub(r"\1'***'", statement[: 2 * limit])
    return masked if len(masked) <= limit else masked[:limit] + "..."


#: Seconds a statement's audit record may take, its wait for the write lock included;
#: past it the record is not stored (logged, counted in ``Audit.failures``).
AUDIT_WRITE_BOUND_S = 5.0


class Audit:
    """Writes audit records through ``store`` (an unfenced transaction of its own: a standby
    records the statements it refuses too) stamped by ``clock``."""

    def __init__(self, store: MetaStore, clock: Clock) -> None:
        """Record into ``store``'s event history, at ``clock``'s time."""
        self.store = store
        self.clock = clock
        self.failures = 0

    def record(
        self,
        user: str,
        client_addr: str,
        statement: str,
        outcome: str,
        event: str = "statement",
        *,
        forwarded_by: str = "",
        log_line: bool = True,
    ) -> None:
        """Log and store one record. ``outcome`` is ``"OK"`` or an error name
        (``ER_ACCESS_DENIED_ERROR``...); ``event`` is ``statement`` or ``login`` (a refused
        login); ``forwarded_by`` is the ``ip:port`` of the standby RS that forwarded the
        statement for the client (a fifth pair ``forwarded_by``), "" when the
        client called this RS itself. ``log_line`` False skips the log line (the statement path
        logs its own, :func:`rootservice.api.dispatch.log_statement`). Never raises: a failed event write is logged (and counted in
        :attr:`failures`) and the statement's own outcome stands."""
        text = redact(statement)
        if log_line:
            via = f" forwarded_by={forwarded_by}" if forwarded_by else ""
            log.info(
                "%s user=%r client=%s%s outcome=%s statement=%r",
                event,
                user,
                client_addr,
                via,
                outcome,
                text,
                extra={"user": user, "client": client_addr, "outcome": outcome, "event": event},
            )
        try:
            # Bounded: the statement's answer waits for this row, and on a slow database
            # other writes may hold the tables for long (test_db_faults saw an answer given
            # up by its client at 25 s after an 8 s statement); the log line above stays.
            with self.store.txn(fenced=False, wait_s=AUDIT_WRITE_BOUND_S) as conn:
                event_repo.insert_events(
                    conn,
                    [
                        Event(
                            self.clock.now_us(),
                            "audit",
                            event,
                            (
                                ("user", user),
                                ("client_addr", client_addr),
                                ("outcome", outcome),
                                ("statement", text),
                                *((("forwarded_by", forwarded_by),) if forwarded_by else ()),
                            ),
                        )
                    ],
                    self.store.rs_addr,
                )
        except Exception:  # noqa: BLE001 - auditing must not fail the statement
            self.failures += 1
            log.exception("audit record not written to the event history (user=%r)", user)
