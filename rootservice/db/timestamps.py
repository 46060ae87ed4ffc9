"""How times are stored: microseconds since the epoch in ``*_time`` columns, naive UTC
datetimes in ``gmt_*`` columns derived from them (so that a fake clock drives both)."""

from __future__ import annotations

import datetime as dt


def us_to_datetime(us: int) -> dt.datetime:
    """Microseconds since the epoch -> naive UTC datetime (how gmt_* columns are stored)."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC).replace(tzinfo=None) + dt.timedelta(
        microseconds=us
    )


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC).replace(tzinfo=None)


def datetime_to_us(value: dt.datetime) -> int:
    """Inverse of :func:`us_to_datetime`: a naive UTC ``gmt_*`` value -> microseconds since
    the epoch (an aware datetime is converted to UTC first)."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
