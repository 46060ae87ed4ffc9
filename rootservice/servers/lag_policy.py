"""The lag detector's policy, pure: when a server, a copy or a follower is
lagging, and when a LAGGING server is treated as lease-expired.

Every function takes the monotonic microseconds it judges at (the caller reads the injected
:class:`obcommon.clock.Clock`) and ``timeout`` = ``agent_lag_timeout``; nothing here reads a
clock, a lock or a record.

- **Command.** A server is LAGGING once an RS command it was sent ``s`` stays unapplied (the
  agent's heartbeats report a lower ``applied_command_seq``) until ``s + timeout``: at
  ``s + timeout`` exactly it is, one microsecond earlier it is not (Elasticsearch's
  ``LagDetector`` checks ``appliedVersion < version`` once ``cluster.follower_lag.timeout``
  after the publication, elastic/elasticsearch
  server/src/main/java/org/elasticsearch/cluster/coordination/LagDetector.java).
- **Disk.** A server is LAGGING while its disk probe (a 4 KiB write + fsync, the one running
  included) takes more than :func:`disk_limit_us`: :data:`DISK_LAG_US` (5 s, the issue's
  figure and the agent's own hung-disk timeout), or ``timeout`` when that is shorter, so a
  test's short ``agent_lag_timeout`` shortens it too. Exactly the limit is not lagging.
- **Copy.** A copy is STALLED when its ``bytes_copied`` has not changed for
  :func:`progress_window_us` (``2 x timeout``: the issue's 60 s at the default 30 s); the
  destination then counts as LAGGING.
- **Follower.** A follower is LAGGING when it trails its leader's log by more than
  ``ls_log_sync_threshold`` (the threshold the RS already uses for "in sync") continuously
  for :func:`progress_window_us`.
- **Episode.** A server LAGGING since ``t`` has seen ``1 + (now - t) // timeout`` timeouts;
  at :data:`EXPIRE_AFTER` (``t + 2 x timeout``) it is treated as lease-expired. It stops being
  LAGGING once every condition has been clear for ``timeout`` (a relapse within that
  continues the episode), as TiKV's slow score only recovers after a quiet interval
  (tikv/tikv components/health_controller/src/slow_score.rs, ``DISK_RECOVERY_INTERVALS``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: The disk probe latency above which a server is LAGGING, microseconds (5 s).
DISK_LAG_US = 5_000_000
#: After this many timeouts of one LAGGING episode the server is treated as lease-expired.
EXPIRE_AFTER = 3

#: The reasons, as events and the status API name them.
REASON_COMMAND = "command"
REASON_DISK = "disk"
REASON_COPY = "copy"
REASON_FOLLOWER = "follower"


def disk_limit_us(timeout: int) -> int:
    """The disk-probe latency limit: :data:`DISK_LAG_US`, or ``timeout`` when shorter."""
    return min(DISK_LAG_US, timeout)


def progress_window_us(timeout: int) -> int:
    """How long a copy may make no progress, or a follower trail, before it is lagging:
    ``2 x timeout`` (60 s at the default 30 s)."""
    return 2 * timeout


def command_lagging(sent_mono: int | None, mono: int, timeout: int) -> bool:
    """The oldest unapplied command, sent at ``sent_mono`` (None: none), is overdue at
    ``mono``: ``mono - sent_mono >= timeout``."""
    return sent_mono is not None and mono - sent_mono >= timeout


def disk_lagging(latency_us: int, timeout: int) -> bool:
    """The reported probe latency exceeds :func:`disk_limit_us` (strictly)."""
    return latency_us > disk_limit_us(timeout)


@dataclass(frozen=True, slots=True)
class Progress:
    """A watched figure (a copy's bytes) and since when (monotonic µs) it has that value."""

    value: int
    since_mono: int


def progressed(prev: Progress | None, value: int, mono: int) -> Progress:
    """The watch after ``value`` was reported at ``mono``: restarted when it moved."""
    if prev is None or prev.value != value:
        return Progress(value, mono)
    return prev


def stalled(p: Progress, mono: int, timeout: int) -> bool:
    """No progress for :func:`progress_window_us` by ``mono`` (exactly the window is)."""
    return mono - p.since_mono >= progress_window_us(timeout)


def trailing_since(prev: int | None, trails: bool, mono: int) -> int | None:
    """Since when a follower trails (None: it does not) after a report at ``mono``."""
    if not trails:
        return None
    return prev if prev is not None else mono


def follower_lagging(since: int | None, mono: int, timeout: int) -> bool:
    """A follower trailing since ``since`` is LAGGING at ``mono`` (window inclusive)."""
    return since is not None and mono - since >= progress_window_us(timeout)


@dataclass(frozen=True, slots=True)
class LagState:
    """One server's LAGGING episode (memory only; a new RS leader judges afresh).

    ``since_mono``: when it became LAGGING (None: it is not); ``reasons``: the conditions of
    the last judgement (:data:`REASON_COMMAND` ...); ``clear_since_mono``: when they all
    cleared (None: some still hold); ``timeouts``: timeouts of the episode so far;
    ``expired``: treated as lease-expired (:data:`EXPIRE_AFTER` timeouts reached)."""

    since_mono: int | None = None
    reasons: tuple[str, ...] = ()
    clear_since_mono: int | None = None
    timeouts: int = 0
    expired: bool = False

    @property
    def lagging(self) -> bool:
        """LAGGING now."""
        return self.since_mono is not None


def judge(state: LagState, reasons: tuple[str, ...], mono: int, timeout: int) -> LagState:
    """The episode after a judgement at ``mono`` that found ``reasons`` (empty: all clear).
    A first reason starts an episode (one timeout: each reason already waited its own);
    every further ``timeout`` adds one, and :data:`EXPIRE_AFTER` sets ``expired``. All clear
    for ``timeout`` ends it."""
    if reasons:
        if state.since_mono is None:
            return LagState(mono, reasons, None, 1, EXPIRE_AFTER <= 1)
        n = max(state.timeouts, 1 + (mono - state.since_mono) // timeout)
        return LagState(state.since_mono, reasons, None, n, state.expired or n >= EXPIRE_AFTER)
    if state.since_mono is None:
        return state
    clear = state.clear_since_mono if state.clear_since_mono is not None else mono
    if mono - clear >= timeout:
        return LagState()
    return replace(state, clear_since_mono=clear)
