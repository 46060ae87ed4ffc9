"""``obadmin --wait-job N``: follow a root-service job (``DBA_OB_ROOTSERVICE_JOBS``) with a
progress bar until it ends (docs/design/migration.md), through RS failover and transient errors.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from obcommon.clock import Clock, SystemClock
from obcommon.errors import ERRORS, error_from_proto
from sql.client import NO_CREDENTIALS, Credentials, RsUnreachableError, execute, result_rows
from sql.formatting import format_response

TRANSIENT_CODES = frozenset(
    ERRORS[name].code for name in ("OB_RS_NOT_MASTER", "OB_NOT_MASTER", "OB_TIMEOUT")
)
"""Answers after which ``--wait-job`` keeps polling: no leader yet (failover in progress) or a
poll that ran out of time (gRPC ``DEADLINE_EXCEEDED``). gRPC ``UNAVAILABLE`` from every
address arrives as :class:`RsUnreachableError`."""

DEFAULT_INTERVAL_S = 1.0


def progress_line(job_id: int, status: str, progress: int, extra: str, width: int = 30) -> str:
    """One progress line of a rootservice job: ``job 7 [#########.....]  45% units 1/2 ...``.

    ``extra`` is the job's ``extra_info`` (JSON written by the RS's balancer, or "")."""
    filled = max(0, min(width, progress * width // 100))
    bar = "#" * filled + "." * (width - filled)
    parts = [f"job {job_id} [{bar}] {progress:3d}% {status}"]
    try:
        info = json.loads(extra) if extra else {}
    except ValueError:
        info = {}
    if info:
        parts.append(
            f"units {info.get('units_moved', 0)}/{info.get('units_total', 0)}"
            f" replicas {info.get('replicas_moved', 0)}/{info.get('replicas_total', 0)}"
            f" copied {info.get('copied', '0')}"
        )
        if info.get("eta"):
            parts.append(f"eta {info['eta']}")
        if info.get("stalled"):
            parts.append(f"STALLED: {info['stalled']}")
    return "  ".join(parts)


def wait_job(
    rs_addrs: Sequence[str],
    job_id: int,
    timeout_s: float,
    out: TextIO,
    interval_s: float = DEFAULT_INTERVAL_S,
    deadline_s: float = 3600.0,
    credentials: Credentials = NO_CREDENTIALS,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Poll ``DBA_OB_ROOTSERVICE_JOBS`` for ``job_id`` every ``interval_s`` seconds until it
    leaves INPROGRESS, drawing a progress bar on ``out`` (redrawn in place on a terminal, one
    line per change otherwise). Every poll tries each address of ``rs_addrs`` (a new
    connection each time, following leader hints: :func:`sql.client.execute`), bounded by
    ``timeout_s``, the time left and ``max(2 * interval_s, 2)`` seconds.

    When no RS answers, or the answer is transient (:data:`TRANSIENT_CODES`), one line says
    the RS is lost and polling goes on; one line says when an RS answers again.

    Returns 0 for SUCCESS, 1 for CANCELED / FAILED / an unknown job / any other error, 3 when
    ``deadline_s`` seconds (on ``clock``'s monotonic time; ``sleep`` waits, both injected so
    tests need not wait) pass first. Every poll is sent with ``credentials``.
    """
    clock = clock or SystemClock()
    start_us = clock.monotonic_us()
    deadline_us = start_us + int(deadline_s * 1_000_000)
    tty = out.isatty()
    last = ""
    lost = False
    statement = (
        "SELECT job_status, progress, extra_info FROM DBA_OB_ROOTSERVICE_JOBS "
        f"WHERE job_id = {int(job_id)}"
    )

    def say(line: str) -> None:
        # A message between progress redraws gets a line of its own.
        out.write(("\n" if tty and last else "") + line + "\n")
        out.flush()

    while True:
        poll_us = clock.monotonic_us()
        left_s = (deadline_us - poll_us) / 1_000_000
        if left_s <= 0:
            break
        per_poll_s = min(timeout_s, left_s, max(2 * interval_s, 2.0))
        problem = ""
        try:
            resp = execute(rs_addrs, statement, per_poll_s, credentials, clock=clock, sleep=sleep)
        except RsUnreachableError as e:
            problem = e.to_sql_text()
        else:
            err = error_from_proto(resp.error)
            if err is not None and err.code in TRANSIENT_CODES:
                problem = err.to_sql_text()
            elif err is not None:
                say(format_response(resp))
                return 1
        if problem:
            if not lost:
                say(f"lost the RootService, retrying every {interval_s:g} s: {problem}")
                lost = True
        else:
            if lost:
                say("RootService answers again")
                lost = False
                last = ""  # redraw the bar
            rows = result_rows(resp)
            if not rows:
                say(f"no job {job_id}")
                return 1
            status, progress, extra = rows[0]
            line = progress_line(job_id, str(status), int(progress or 0), str(extra or ""))
            if line != last:
                out.write(("\r" + line + "\033[K") if tty else line + "\n")
                out.flush()
                last = line
            if status != "INPROGRESS":
                if tty:
                    out.write("\n")
                return 0 if status == "SUCCESS" else 1
        # The next poll starts one interval after this one started (never in the past).
        spent_s = (clock.monotonic_us() - poll_us) / 1_000_000
        sleep(max(0.0, min(interval_s - spent_s, (deadline_us - clock.monotonic_us()) / 1e6)))
    say(f"job {job_id} still INPROGRESS after {deadline_s:g} s")
    return 3
