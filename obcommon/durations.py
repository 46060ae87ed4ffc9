"""Durations as OceanBase writes them (``100ms``, ``10s``, ``5m``, ``1h``), held as integer
microseconds: the one duration grammar of the RS settings, ``ALTER SYSTEM SET`` and the agent's
flags (docs/design/index.md#configuration)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_UNITS_US = {
    "us": 1,
    "ms": 1_000,
    "s": 1_000_000,
    "m": 60_000_000,
    "h": 3_600_000_000,
    "d": 86_400_000_000,
}
_DURATION_RE = re.compile(r"^\s*(\d{1,15})\s*(us|ms|s|m|h|d)\s*$", re.IGNORECASE)


def parse_duration(value: str | int) -> int:
    """``"10s"`` -> 10_000_000 (microseconds). Integers are taken as microseconds already.

    Units: us, ms, s, m, h, d (case-insensitive). A string without a unit is refused, since
    an operator who writes ``lease_time = 10`` almost never means 10 microseconds.
    Raises ``ValueError`` with a readable message on anything else.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"duration must not be negative: {value}")
        return value
    m = _DURATION_RE.match(str(value))
    if not m:
        raise ValueError(f"not a duration: {value!r} (write e.g. 100ms, 10s, 5m, 1h)")
    return int(m.group(1)) * _UNITS_US[m.group(2).lower()]


def format_duration(us: int) -> str:
    """10_000_000 -> ``"10s"``: the largest unit that divides ``us`` exactly."""
    for unit in ("d", "h", "m", "s", "ms"):
        if us and us % _UNITS_US[unit] == 0:
            return f"{us // _UNITS_US[unit]}{unit}"
    return f"{us}us"


#: Microseconds, from an int or a duration word (see :func:`parse_duration`).
Duration = Annotated[int, BeforeValidator(parse_duration)]
