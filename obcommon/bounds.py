"""Bounds shared by the RS and the agents on what crosses the trust boundary: terms and epochs, and how a refused value is quoted in an error.

Terms (``ReplicaSpec.term``, ``ReplicaInfo.term``) and RS epochs grow by one per election or
leader switch, so a value far above the last one seen is forged or corrupt, never
legitimate. The ceiling is 2^53 so that every term stays exact as a JSON number and as a
double, and so that ``term + 1`` can never overflow the int64 of the protocol (one
``ApplyReplicas`` with term 2^63-1 broke the LS reconciler on every round).
"""

from __future__ import annotations

MAX_TERM = 1 << 53
"""The largest term or epoch accepted anywhere (2^53)."""

MAX_TERM_JUMP = 1_000_000
"""The most a term or an epoch may jump above the last one seen: a million leader switches
or elections at once is never legitimate."""

QUOTE_CHARS = 64
"""How many characters of a refused string value an error message quotes."""


def quote(value: object) -> str:
    """``value`` as an error message shows it: ``repr`` truncated to :data:`QUOTE_CHARS`
    characters with ``...`` appended when cut (so NUL bytes and control characters show
    escaped and a 4 MiB value does not end up in a log line)."""
    text = repr(value)
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "..."


def check_term(field: str, value: int, seen: int) -> str:
    """The reason ``value`` of ``field`` is refused given ``seen`` (the highest value known
    to the caller, 0 when none), or "" when accepted: accepted are ``0 <= value <=
    min(MAX_TERM, seen + MAX_TERM_JUMP)``."""
    bound = min(MAX_TERM, max(seen, 0) + MAX_TERM_JUMP)
    if 0 <= value <= bound:
        return ""
    if value < 0:
        return f"{field} {value} is negative"
    return (
        f"{field} {value} is above {bound} (the highest seen, {seen}, plus {MAX_TERM_JUMP}, "
        f"at most 2^53)"
    )
