"""How times are stored: microseconds since the epoch in ``*_time`` columns, naive UTC
datetimes in ``gmt_*`` columns derived from them (so that a fake clock drives both)."""

from __future__ import annotations

import datetime as dt


def us_to_datetime(us: int) -> dt.datetime:
    """Microseconds since the epoch -> naive UTC datetime (how gmt_* columns are stored)."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC).replace(tzinfo=None) + dt.timedelta(
        microseconds=us
    )
