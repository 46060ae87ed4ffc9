"""Capacities as OceanBase writes them (``'4G'``, ``512M``, ``1073741824``), converted to bytes.

The one size grammar of the product: resource units (``MEMORY_SIZE``, ``LOG_DISK_SIZE``, kept
as written by the parser and converted by the tenant layer, which turns the
:class:`ValueError` into the OceanBase error for a bad argument) and the agent's size flags
(``--replica-size``, ``--log-disk-size``, ``--memory-limit``).
"""

from __future__ import annotations

import math
import re

MAX_SIZE = 2**63 - 1
"""The largest capacity accepted: an int64, as OceanBase stores capacities."""

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30

_MULTIPLIERS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}

# Digits with an optional fraction, then an optional K/M/G/T/P and an optional B (bytes):
# 1073741824, 4G, 4gb, 512MB, 1.5G, .5T, 100B. ASCII digits only.
_SIZE = re.compile(
    r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?P<unit>[kmgtp]?)b?", re.ASCII | re.IGNORECASE
)

# Fraction digits past this many cannot change the rounded-down byte count: a multiplier is at
# most 2**50, so any exact multiple of 1/multiplier has at most 50 decimal places.
_MAX_FRACTION_DIGITS = 64

_SHOWN_CHARS = 40


def _shown(value: object) -> str:
    """``repr(value)`` for an error message, cut short when long."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def parse_size(value: str | int | float) -> int:
    """Convert an OceanBase capacity to a number of bytes.

    ``value`` is an int (bytes), a finite float (bytes, rounded down) or a string: digits
    with an optional decimal fraction, optionally followed by one of the binary multipliers
    K, M, G, T, P (1024**1 ... 1024**5) and an optional B, case-insensitive, surrounding
    blanks ignored: ``'1073741824'``, ``'4G'``, ``'512mb'``, ``'1.5G'``, ``'100B'``. A
    fractional byte count is rounded down.

    Raises :class:`ValueError`, with the offending value in the message, for anything else:
    another type (bool included), a negative size, a malformed string (``'4 G'``, ``'0x10'``,
    ``'4Q'``, ``''``), NaN or infinity, or a size above :data:`MAX_SIZE` (``2**63 - 1``).
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(
            f"invalid size {_shown(value)}: expected a number of bytes or a string such as '4G'"
        )
    if isinstance(value, int):
        size = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"invalid size {_shown(value)}: not a finite number")
        size = math.floor(value)
    else:
        size = _parse_size_string(value)
    if size < 0:
        raise ValueError(f"invalid size {_shown(value)}: a size must not be negative")
    if size > MAX_SIZE:
        raise ValueError(
            f"invalid size {_shown(value)}: larger than the maximum of {MAX_SIZE} bytes"
        )
    return size


def _parse_size_string(text: str) -> int:
    """Bytes in a size string; may be over :data:`MAX_SIZE` (the caller checks)."""
    stripped = text.strip()
    negative = stripped.startswith("-")
    match = _SIZE.fullmatch(stripped[1:] if negative else stripped)
    if match is None or not (match.group("int") or match.group("frac")):
        raise ValueError(
            f"invalid size {_shown(text)}: expected digits with an optional K, M, G, T or P suffix "
            "(optionally followed by B), such as '4G' or '512MB'"
        )
    if negative:
        raise ValueError(f"invalid size {_shown(text)}: a size must not be negative")
    multiplier = _MULTIPLIERS[match.group("unit").lower()]
    integer = match.group("int").lstrip("0") or "0"
    # Refuse before int(): Python will not convert a string of over 4300 digits.
    if len(integer) > 19:
        raise ValueError(
            f"invalid size {_shown(text)}: larger than the maximum of {MAX_SIZE} bytes"
        )
    fraction = (match.group("frac") or "")[:_MAX_FRACTION_DIGITS].rstrip("0")
    scale = 10 ** len(fraction)
    return (int(integer) * scale + int(fraction or "0")) * multiplier // scale


def format_size(n: int) -> str:
    """4_194_304 -> ``"4M"``: the largest binary unit that divides ``n`` (bytes) exactly; the
    inverse of :func:`parse_size` for whole units."""
    for unit, mult in (("P", 2**50), ("T", 2**40), ("G", GIB), ("M", MIB), ("K", KIB)):
        if n and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)
