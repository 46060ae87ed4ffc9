"""The permanent-offline clock as cumulative offline time in a sliding window: a server is permanently offline once it has been offline for
``server_permanent_offline_time`` in total within the last :func:`window_us`.

Pure: every function takes the monotonic microseconds it judges at; the spans are the
caller's (``ServerStatus.offline_spans``).

An offline span runs from the last heartbeat before a lease expiry to the heartbeat that
brought the server back (a gap shorter than the lease is not offline: the RS never sees it).
The window is ``2 x server_permanent_offline_time``: a server offline more than half of the
time over that window is more harm than use, while one with short outages below half never
gets there. A single outage reaches the limit after exactly ``server_permanent_offline_time``
as before (the old clock restarted at every heartbeat, so a server down 11 s and up 1 s never
reached it, and its replicas were never rebuilt); a flapper down a share ``d > 1/2`` of the
time reaches it after ``server_permanent_offline_time / d`` of flapping (down 11 s / up 1 s:
1.09 x the limit).

OceanBase's ``ObServerManager`` measures ``now - last_hb_time`` only; HDFS's and Elasticsearch's
flapping detectors count failures in a window the same way.

One declaration per episode of being gone (:func:`episode_over`): OceanBase's
``ObServerManager::check_servers`` (src/rootserver/ob_server_manager.cpp) writes the event
``permanent_offline`` once, on the change of a server's heartbeat status into it, and a
heartbeat clears the status. Here a flapper returns between outages, so each outage would
change the status again: the declaration stands instead until the server has been back long
enough that its offline total within the window fell below the limit; its outages until then
are the same episode (permanently offline again at once, without a new event).
"""

from __future__ import annotations

Span = tuple[int, int]
"""An offline span ``(start, end)``, monotonic microseconds, ``start <= end``."""


def window_us(limit_us: int) -> int:
    """The sliding window for ``server_permanent_offline_time`` = ``limit_us``: twice it."""
    return 2 * limit_us


def offline_in_window(
    spans: tuple[Span, ...], open_start: int | None, now: int, limit_us: int
) -> int:
    """Microseconds offline within ``(now - window, now]``: the closed ``spans`` and, unless
    ``open_start`` is None (the server is up), the outage still open since ``open_start``."""
    left = now - window_us(limit_us)
    total = sum(max(0, min(end, now) - max(start, left)) for start, end in spans)
    if open_start is not None:
        total += max(0, now - max(open_start, left))
    return total


def due_at(spans: tuple[Span, ...], open_start: int, now: int, limit_us: int) -> int:
    """The earliest monotonic time at which the open outage (since ``open_start``) can bring
    the total to ``limit_us``: ``now`` when it is there already, else ``now`` plus what is
    missing (the total grows at most one microsecond per microsecond, so this is a lower
    bound: the lease checker re-judges an entry when it pops it)."""
    return now + max(0, limit_us - offline_in_window(spans, open_start, now, limit_us))


def closed(spans: tuple[Span, ...], start: int, end: int, limit_us: int) -> tuple[Span, ...]:
    """``spans`` with the outage ``[start, end]`` added and the spans that ended before the
    window at ``end`` dropped (at most window / lease_time spans are kept)."""
    left = end - window_us(limit_us)
    return (*(sp for sp in spans if sp[1] > left), (start, end))


def episode_over(spans: tuple[Span, ...], at: int, limit_us: int) -> bool:
    """Whether a permanent-offline declaration's episode of being gone is over at monotonic
    ``at`` (the start of a new outage): the closed outages ``spans`` within the window
    before ``at`` add up to less than ``limit_us``, so the server must be offline for the
    limit again to be declared again."""
    return offline_in_window(spans, None, at, limit_us) < limit_us
