"""Imported by Python at start-up (``sitecustomize``) in the processes a test runs under
Debian's libfaketime (``tests/integration/test_wall_clock_jump.py`` puts this directory on
their ``PYTHONPATH``); never by the test process itself.

libfaketime 0.9.10 with ``FAKETIME_DONT_FAKE_MONOTONIC=1`` fails Python 3.11's
``time.sleep`` (``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)``) with EINVAL, while
``select``, ``threading`` waits and asyncio work. So ``time.sleep`` is replaced by a
``select`` wait measured on the (real) monotonic clock; nothing else changes.
"""

from __future__ import annotations

import select
import time


def _sleep(secs: float) -> None:
    """``time.sleep(secs)`` on ``select``; raises ValueError for a negative length."""
    if secs < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + secs
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
