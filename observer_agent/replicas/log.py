"""The applied log of one replica (docs/design/migration.md; OceanBase's palf log reduced to what
server management and disaster recovery need to observe).

``DATA_DIR/clog/<tenant_id>_<ls_id>/log`` holds the applied log entries ``(index, term, ts)``.
The file is a header record (the last entry compacted away, ``(0, 0, 0)`` at first) followed
by the entries, 24 bytes each; it is compacted to the last :data:`LOG_KEEP_ENTRIES` entries,
``log_end_index`` never moves back because of compaction.

:func:`merge_fetched` merges a leader's answer to ``FetchLog`` into a follower's log,
following the *snapshot rule* (see :mod:`observer_agent.replicas.serving`): a follower whose
log ends before the leader's first kept entry restarts its log there.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from observer_agent.identity import write_atomic

#: Entries kept after a compaction; the file is compacted when it holds twice as many.
LOG_KEEP_ENTRIES = 10_000

_RECORD = struct.Struct("<qqq")

#: ``(index, term, ts)`` of one log entry; ts in microseconds since the epoch.
Entry = tuple[int, int, int]


class ReplicaLog:
    """The applied log of one replica, in memory and in ``path``.

    Entries are ``(index, term, ts)`` with consecutive indexes after ``base_index`` (the last
    index compacted or cut away; its term and ts are kept as ``base_term`` / ``base_ts``).
    Appends are buffered writes without fsync: after a crash the tail may be lost, and the
    follower fetches it again. Rewrites (compaction, truncation) are atomic. Use
    :meth:`open`; ``keep`` is the number of entries a compaction keeps (it runs when the log
    holds ``2 * keep``).
    """

    def __init__(self, path: Path, keep: int = LOG_KEEP_ENTRIES) -> None:
        """An empty log at ``path`` (nothing read or written yet; see :meth:`open`)."""
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.path = path
        self.keep = keep
        self.base_index = 0
        self.base_term = 0
        self.base_ts = 0
        self.entries: list[Entry] = []
        self._fh: Any = None
        # The file misses entries memory has (a failed write): rewrite it whole next time.
        self._dirty = False

    @classmethod
    def open(cls, path: Path, keep: int = LOG_KEEP_ENTRIES) -> ReplicaLog:
        """Load the log at ``path``, creating an empty one if absent.

        A torn last record or a break in the index sequence ends the log there (the rest is
        cut off and the file rewritten). Blocking; raises ``OSError``.
        """
        log = cls(path, keep)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            log._rewrite()
            return log
        n = len(raw) // _RECORD.size
        if n == 0:
            log._rewrite()
            return log
        log.base_index, log.base_term, log.base_ts = _RECORD.unpack_from(raw, 0)
        expect = log.base_index + 1
        for i in range(1, n):
            entry: Entry = _RECORD.unpack_from(raw, i * _RECORD.size)
            if entry[0] != expect:
                break
            log.entries.append(entry)
            expect += 1
        if len(raw) != (1 + len(log.entries)) * _RECORD.size:
            log._rewrite()
        return log

    # -- reading

    @property
    def end_index(self) -> int:
        """Index of the last entry, ``base_index`` when there is none (0 = never any)."""
        return self.base_index + len(self.entries)

    @property
    def end_ts(self) -> int:
        """``ts`` of the last entry (µs), ``base_ts`` when there is none."""
        return self.entries[-1][2] if self.entries else self.base_ts

    @property
    def size_bytes(self) -> int:
        """Bytes of the log file."""
        return (1 + len(self.entries)) * _RECORD.size

    def entry(self, index: int) -> Entry | None:
        """The entry at ``index``, or None when it is compacted away or beyond the end."""
        pos = index - self.base_index - 1
        if 0 <= pos < len(self.entries):
            return self.entries[pos]
        return None

    def read(self, from_index: int, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries from ``from_index`` on (from the first one still
        kept when ``from_index`` was compacted away)."""
        start = max(from_index, self.base_index + 1) - self.base_index - 1
        return self.entries[start : start + max(0, max_entries)]

    # -- writing

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries whose indexes continue the log (``end_index + 1``, ...).

        Raises ``ValueError`` on a gap or an overlap (nothing is appended), ``OSError`` when
        the write fails (memory then still holds the entries, and the next append rewrites
        the whole file so that it has no hole).
        """
        if not entries:
            return
        expect = self.end_index + 1
        for i, e in enumerate(entries):
            if e[0] != expect + i:
                raise ValueError(f"log entry index {e[0]} does not follow {expect + i - 1}")
        self.entries.extend(entries)
        if len(self.entries) >= 2 * self.keep:
            self.compact()
            return
        if self._dirty:
            self._rewrite()
            return
        try:
            if self._fh is None:
                self._fh = open(self.path, "ab")  # noqa: SIM115 - kept open across appends
            self._fh.write(b"".join(_RECORD.pack(*e) for e in entries))
            self._fh.flush()
        except OSError:
            self._dirty = True
            self.close()
            raise

    def compact(self) -> None:
        """Keep only the last ``keep`` entries; ``end_index`` does not change. Raises
        ``OSError``."""
        drop = len(self.entries) - self.keep
        if drop <= 0:
            return
        self.base_index, self.base_term, self.base_ts = self.entries[drop - 1]
        del self.entries[:drop]
        self._rewrite()

    def truncate(self, end_index: int) -> None:
        """Cut every entry after ``end_index``. Below ``base_index`` the log becomes empty
        with ``base_index = end_index`` (term and ts of that entry unknown: 0). Raises
        ``OSError``."""
        if end_index >= self.end_index:
            return
        if end_index >= self.base_index:
            del self.entries[end_index - self.base_index :]
        else:
            self.base_index, self.base_term, self.base_ts = max(0, end_index), 0, 0
            self.entries.clear()
        self._rewrite()

    def rebase(self, base_index: int) -> None:
        """Forget every entry and restart after ``base_index`` (a follower whose leader no
        longer has the entries it misses). Raises ``OSError``."""
        self.base_index, self.base_term, self.base_ts = base_index, 0, 0
        self.entries.clear()
        self._rewrite()

    def close(self) -> None:
        """Close the append handle (the next append reopens it); never raises."""
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()

    def _rewrite(self) -> None:
        self.close()
        self._dirty = True
        header = _RECORD.pack(self.base_index, self.base_term, self.base_ts)
        write_atomic(self.path, header + b"".join(_RECORD.pack(*e) for e in self.entries))
        self._dirty = False


def merge_fetched(
    log: ReplicaLog,
    entries: list[Entry],
    from_index: int,
    leader_end: int,
    verifying: bool,
    cutoff_ts: int | None,
) -> tuple[bool, int]:
    """Merge one FetchLog answer into ``log``; returns ``(verified, appended)``.

    ``entries`` are the leader's from ``from_index`` on (consecutive; they may start later
    when the leader compacted); ``leader_end`` its ``end_index``. Overlapping entries that
    differ from ours are cut, with everything after them; entries past the leader's end are
    cut. ``verified`` is False when the log still has to be compared further back (the
    first compared entry differed). New entries are appended, only those with
    ``ts <= cutoff_ts`` when a cutoff is given. Raises ``OSError``.
    """
    base_before = log.base_index
    if entries and entries[0][0] > log.end_index + 1:
        # The leader no longer has the entries right after ours: restart the log at its first
        # one (the data file is the same on every member; only log history is lost).
        log.rebase(entries[0][0] - 1)
    matched_any = False
    mismatch: int | None = None
    for e in entries:
        if e[0] > log.end_index:
            break
        if e[0] <= log.base_index:
            continue
        if log.entry(e[0]) != e:
            mismatch = e[0]
            break
        matched_any = True
    verified = True
    if mismatch is not None:
        log.truncate(mismatch - 1)
        if verifying and not matched_any and mismatch > base_before + 1:
            # The divergence may start before the window: look further back next time.
            verified = False
    if leader_end < log.end_index:
        log.truncate(leader_end)
        if not matched_any and mismatch is None and log.end_index > log.base_index:
            verified = False
    if not verified or not entries:
        return verified, 0
    start = log.end_index + 1 - entries[0][0]
    if start < 0 or start >= len(entries):
        return verified, 0
    new = entries[start:]
    if cutoff_ts is not None:
        n = 0
        while n < len(new) and new[n][2] <= cutoff_ts:
            n += 1
        new = new[:n]
    log.append(new)
    return verified, len(new)
