"""Maintenance windows: the bounds of ``STOP SERVER ... FOR MAINTENANCE d``
and of DRAIN's ``TIMEOUT d``.

Pure. A window always has an end: ``STOP ... FOR MAINTENANCE`` without a duration is a syntax
error and a duration outside :data:`MAINTENANCE_MIN_US`..:data:`MAINTENANCE_MAX_US` is refused
with OB_INVALID_ARGUMENT, so no server is in maintenance for ever (PD's evict-leader
schedulers left behind by a crashed tool, tiup#369, are what an open-ended state becomes).
"""

from __future__ import annotations

from obcommon.durations import format_duration, parse_duration
from obcommon.errors import ObError

#: Shortest and longest maintenance window, microseconds (1 min .. 7 days).
MAINTENANCE_MIN_US = 60_000_000
MAINTENANCE_MAX_US = 7 * 86_400_000_000

#: DRAIN's default TIMEOUT (10 min) and its range (1 s .. 24 h), microseconds.
DRAIN_DEFAULT_TIMEOUT_US = 600_000_000
DRAIN_MIN_TIMEOUT_US = 1_000_000
DRAIN_MAX_TIMEOUT_US = 86_400_000_000


def checked_duration(text: str, low_us: int, high_us: int, what: str) -> int:
    """``text`` (``"2h"``, ``"90s"``...) as microseconds within ``[low_us, high_us]`` (both
    inclusive). Raises OB_INVALID_ARGUMENT naming ``what`` and the range."""
    try:
        us = parse_duration(text)
    except (ValueError, ObError) as e:
        raise ObError("OB_INVALID_ARGUMENT", f"{what} '{text}'", detail=str(e)) from None
    if not low_us <= us <= high_us:
        raise ObError(
            "OB_INVALID_ARGUMENT",
            f"{what} '{text}'",
            detail=f"it must be between {format_duration(low_us)} and {format_duration(high_us)}",
        )
    return us


#: The shortest window under ``allow_short_timings`` (tests), microseconds.
MAINTENANCE_SHORT_MIN_US = 1_000_000


def maintenance_duration(text: str, *, short: bool = False) -> int:
    """``FOR MAINTENANCE d``: microseconds in [1 min, 7 d] ([1 s, 7 d] when ``short``, the
    RS's ``allow_short_timings``). Raises OB_INVALID_ARGUMENT."""
    low = MAINTENANCE_SHORT_MIN_US if short else MAINTENANCE_MIN_US
    return checked_duration(text, low, MAINTENANCE_MAX_US, "maintenance window")


def drain_timeout(text: str | None) -> int:
    """DRAIN's ``TIMEOUT d`` (None: 10 min): microseconds in [1 s, 24 h]. Raises
    OB_INVALID_ARGUMENT."""
    if text is None:
        return DRAIN_DEFAULT_TIMEOUT_US
    return checked_duration(text, DRAIN_MIN_TIMEOUT_US, DRAIN_MAX_TIMEOUT_US, "drain timeout")


def ended(end_time: int, now: int) -> bool:
    """A window ending at wall ``end_time`` is over at ``now`` (``now >= end_time``; 0: no
    window, never 'ended')."""
    return end_time != 0 and now >= end_time


def floor_mono(end_time: int, now: int, mono: int) -> int:
    """The monotonic instant of the wall-clock ``end_time`` judged at wall ``now`` /
    monotonic ``mono`` (0 for no window): from it on, offline time counts."""
    return mono + (end_time - now) if end_time else 0
