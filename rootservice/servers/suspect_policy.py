"""The SUSPECT policy: how long a server whose lease expired and came back
gets no new leaders and no copies, with flapping damping.

Pure: every function takes the monotonic microseconds it judges at (the caller reads the
injected :class:`obcommon.clock.Clock`) and returns a new :class:`SuspectState`; nothing here
reads a clock, a lock or a record.

The rule, with ``base`` = ``server_suspect_time`` and ``p`` the server's current suspect time
(``base`` at first, at most :data:`SUSPECT_CAP_US`):

- **Return.** A server whose lease expired (or that was permanently offline) and heartbeats
  again at ``r`` is SUSPECT during ``[r, r + p)``: at ``r + p`` exactly it is a leader and copy
  candidate again. Only a lease expiry is a gap; a late heartbeat within the lease is not.
- **Repeat.** A lease expiry whose last heartbeat ``h`` falls within the *watch window*
  ``[r, r + 2p)`` (the suspect period and one equally long period after it) is a repeat:
  ``p`` doubles (cap :data:`SUSPECT_CAP_US`), so the next return is suspect twice as long.
- **Clean windows.** Gap-free heartbeats after the suspect period halve ``p`` once per full
  window of the current ``p`` (the first window after the suspect period, then one of the
  halved length, ...), down to ``base``. A server that reached the cap and then stays up is
  back at 30 s after about 5 + 5 + 2.5 + 1.25 + 0.6 min.

After CockroachDB's suspect store (cockroach#63999, #67714: ``server.time_after_store_suspect``,
30 s; a suspect store gets no new leases or replicas, keeps its replicas and counts as live for
quorum) with the growth of memberlist's Lifeguard and BGP route-flap damping (RFC 2439: each
flap adds to a penalty that decays with time), so a server down 11 s / up 1 s is suspect the
whole time and never attracts a leader back. OceanBase has no equivalent.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The longest suspect time, microseconds ("cap 5 min").
SUSPECT_CAP_US = 300_000_000


@dataclass(frozen=True, slots=True)
class SuspectState:
    """One server's damping state, monotonic microseconds (0 = unset).

    ``suspect_time_us``: the current ``p`` (0 until the first expiry: ``base``);
    ``returned_mono_us``: start of the current gap-free run (the last return);
    ``until_mono_us``: end of the suspect period (SUSPECT while ``mono < until_mono_us``);
    ``down_since_mono_us``: the last heartbeat before a lease expiry this RS saw, until the
    server returns (0: not down, or its expiry was another RS's: a server the table showed
    INACTIVE comes back without SUSPECT after a failover)."""

    suspect_time_us: int = 0
    returned_mono_us: int = 0
    until_mono_us: int = 0
    down_since_mono_us: int = 0

    def is_suspect(self, mono: int) -> bool:
        """SUSPECT at ``mono``: ``mono < until_mono_us`` (exactly ``until_mono_us`` is not)."""
        return mono < self.until_mono_us


def current_time(state: SuspectState, base: int) -> int:
    """``p`` within ``[base, cap]`` (a changed ``server_suspect_time`` applies at once)."""
    return min(max(state.suspect_time_us, base), max(base, SUSPECT_CAP_US))


def decayed(p: int, run_us: int, base: int) -> int:
    """``p`` after a gap-free run of ``run_us`` since the return: halved once per full clean
    window after the suspect period (window length the ``p`` of the moment), floor ``base``."""
    t = p
    while p > base and run_us - t >= p:
        t += p
        p = max(base, p // 2)
    return p


def on_expiry(state: SuspectState, last_hb_mono: int, base: int) -> SuspectState:
    """The lease of a server expired; its last heartbeat was at ``last_hb_mono``. A repeat
    (``last_hb_mono`` within ``[r, r + 2p)`` of the last return ``r``) doubles ``p`` (cap);
    otherwise ``p`` is what the clean windows of the run left. No longer suspect (not alive)."""
    p = current_time(state, base)
    if state.returned_mono_us:
        run = last_hb_mono - state.returned_mono_us
        p = min(2 * p, max(base, SUSPECT_CAP_US)) if run < 2 * p else decayed(p, run, base)
    return SuspectState(p, 0, 0, last_hb_mono)


def on_return(state: SuspectState, mono: int, base: int) -> SuspectState:
    """A server whose lease had expired heartbeats again at ``mono``: SUSPECT until
    ``mono + p``."""
    p = current_time(state, base)
    return SuspectState(p, mono, mono + p)


def restored(remaining_us: int, mono: int, base: int) -> SuspectState:
    """The state of a server the table shows SUSPECT for ``remaining_us`` more (a new RS leader
    loading ``suspect_end_time``): suspect until ``mono + remaining_us``; ``p`` is taken as that
    remainder within ``[base, cap]`` (the doubling history is the old leader's memory)."""
    p = min(max(remaining_us, base), max(base, SUSPECT_CAP_US))
    return SuspectState(p, mono, mono + remaining_us)
