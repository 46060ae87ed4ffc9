"""``obadmin --wait-job N``: follow a root-service job (``DBA_OB_ROOTSERVICE_JOBS``) with a
progress bar until it ends (SPEC.md section 9).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TextIO

from sql.client import NO_CREDENTIALS, Credentials, execute, result_rows
from sql.formatting import format_response


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
    poll_s: float = 0.5,
    deadline_s: float = 3600.0,
    credentials: Credentials = NO_CREDENTIALS,
) -> int:
    """Poll ``DBA_OB_ROOTSERVICE_JOBS`` for ``job_id`` until it leaves INPROGRESS, drawing a
    progress bar on ``out`` (redrawn in place on a terminal, one line per change otherwise).
    Returns 0 for SUCCESS, 1 for CANCELED / FAILED / an unknown job / an error, 3 when
    ``deadline_s`` seconds pass first. Every poll is sent with ``credentials``."""
    tty = out.isatty()
    last = ""
    for _ in range(int(deadline_s / poll_s) + 1):
        resp = execute(
            rs_addrs,
            "SELECT job_status, progress, extra_info FROM DBA_OB_ROOTSERVICE_JOBS "
            f"WHERE job_id = {int(job_id)}",
            timeout_s,
            credentials,
        )
        if resp.error.code:
            out.write(f"\n{format_response(resp)}\n")
            return 1
        rows = result_rows(resp)
        if not rows:
            out.write(f"no job {job_id}\n")
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
        time.sleep(poll_s)
    out.write(f"\njob {job_id} still INPROGRESS after {deadline_s:.0f} s\n")
    return 3
