"""Log-stream (LS) replicas hosted by the agent (SPEC.md section 9; OceanBase's ObLS and its
palf log, reduced to what server management and disaster recovery need to observe).

A replica is three things on disk:

- ``DATA_DIR/replicas/<tenant_id>_<ls_id>/data``: ``replica_size`` bytes of pseudo-random
  content seeded from ``(tenant_id, ls_id)``, so every member of an LS holds an identical file
  and reports the same ``data_checksum`` (crc32);
- ``DATA_DIR/replicas/<tenant_id>_<ls_id>/meta.json``: unit_id, member_list, leader, term,
  paxos_replica_number, replica_type (plus data_size and data_checksum), written atomically;
- ``DATA_DIR/clog/<tenant_id>_<ls_id>/log``: the applied log entries ``(index, term, ts)``,
  under ``clog`` so that ``log_disk_in_use`` counts them. The file is a header record (the
  last entry compacted away, ``(0, 0, 0)`` at first) followed by the entries, 24 bytes each;
  it is compacted to the last :data:`LOG_KEEP_ENTRIES` entries, ``log_end_index`` never moves
  back because of compaction.

The leader of an LS appends one entry every ``log_interval``; followers pull entries from the
leader with ``ReplicaService.FetchLog`` (agent to agent) and compare overlapping entries after
every change of leader or term, truncating what differs from the leader's log. The RS drives
membership, leadership and terms with ``ObserverService.ApplyReplicas``
(:meth:`ReplicaManager.apply`).

Replica migration (SPEC.md section 9, "disaster recovery"): a spec with ``copy_from`` for a
replica this agent does not host builds it from that member instead of generating it
(:meth:`ReplicaManager.apply` returns at once; the build goes on in a task):

1. *queued* while :attr:`AgentSettings.max_concurrent_copies` copies already run;
2. *copying*: ``ReplicaService.FetchData`` streams the data file into a temp file in the
   replica's directory; size and crc32 are checked against the stream's first chunk, the
   file is fsynced and renamed to ``data``;
3. *log*: the log is created empty right before the source's first kept entry (the data file
   is the snapshot, older entries are not needed), ``meta.json`` is written (with
   ``copy_from`` and ``catch_up_to`` = the source's ``log_end_index``), and the log is fetched
   from the leader (from the source when the LS has no other leader) until it reaches
   ``catch_up_to``; then ``meta.json`` drops both marks and the replica is in service.

A copy that fails (source unreachable, error chunk, size or checksum mismatch) stops with
``build_error`` reported; the next spec carrying a ``copy_from`` restarts it from scratch.
There is no ``meta.json`` before step 3, so an agent restarted during steps 1-2 finds no
replica (:meth:`ReplicaManager.load` removes the directory); one restarted during step 3
resumes step 3.

FetchLog follows a *snapshot rule*: asked for entries the callee already compacted away, it
answers from its first kept entry; a follower whose log ends before that entry restarts its
log there (:func:`merge_fetched`), which is how a copied replica (or one that fell far
behind) joins a leader that compacted past the copy's starting point.

Fault switches (files in DATA_DIR): :data:`FAULT_REPLICATION_STOP_FILE` stops every follower
(and copy in step 3) of this agent from fetching; :data:`FAULT_REPLICATION_DELAY_FILE`
holding an integer N makes followers apply only entries whose ``ts <= now - N ms`` (both
checked at most once per follower poll); :data:`FAULT_COPY_SLOW_FILE` holding an integer N
makes copies on this agent sleep N ms after every chunk received;
:data:`FAULT_SERVE_DATA_ERROR_FILE` makes this agent answer every ``FetchData`` with an error
chunk (both checked at every chunk / call).

Times are integer microseconds since the Unix epoch from the agent's :class:`Clock`; the
asyncio loop's monotonic time is only used for waits and deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import random
import shutil
import struct
import uuid
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc

from obcommon.addresses import parse_host_port
from obcommon.clock import Clock
from obcommon.errors import ObError, error_from_proto, error_to_proto
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from observer_agent.identity import fsync_dir, write_atomic
from observer_agent.resources import CLOG_DIR
from observer_agent.settings import AgentSettings

REPLICAS_DIR = "replicas"
DATA_FILE = "data"
META_FILE = "meta.json"
LOG_FILE = "log"

#: While this file exists in DATA_DIR, followers on this agent do not fetch (they fall behind).
FAULT_REPLICATION_STOP_FILE = "FAULT_REPLICATION_STOP"
#: This file in DATA_DIR holding an integer N makes followers apply only entries at least
#: N milliseconds old (by their ``ts``): a steady replication lag of about N ms.
FAULT_REPLICATION_DELAY_FILE = "FAULT_REPLICATION_DELAY_MS"

#: While this file exists in DATA_DIR holding an integer N, a copy (replica migration) on this
#: agent sleeps N ms after every data chunk it receives.
FAULT_COPY_SLOW_FILE = "FAULT_COPY_SLOW_MS"
#: While this file exists in DATA_DIR, ``FetchData`` served by this agent answers an error
#: chunk (``OB_ERR_SYS``), as a broken source would.
FAULT_SERVE_DATA_ERROR_FILE = "FAULT_SERVE_DATA_ERROR"

#: Bytes per ``DataChunk`` when the request asks for 0, and what a copy asks for by default.
DATA_CHUNK_DEFAULT = 256 * 1024
#: The most bytes one ``DataChunk`` carries: 4 MiB less room for the other fields, so that a
#: chunk fits gRPC's default 4 MiB limit on a received message.
DATA_CHUNK_MAX = (4 << 20) - 4096

#: Entries kept after a compaction; the file is compacted when it holds twice as many.
LOG_KEEP_ENTRIES = 10_000
#: ``max_entries`` of one FetchLog call, and the most a leader returns.
FETCH_MAX_ENTRIES = 1000
#: A follower polls its leader every ``min(log_interval, this)`` microseconds.
FOLLOWER_POLL_MAX_US = 200_000
#: First look-back (entries) when a follower checks its log against a new leader's.
VERIFY_WINDOW_MIN = 64
#: How long an idle replica (no leader) sleeps between checks, seconds; a spec wakes it.
_IDLE_S = 1.0
#: Bound on cancelling loops and closing channels at stop, seconds.
_CLOSE_TIMEOUT_S = 1.0
#: Shortest catch-up attempt even when the caller's deadline has nearly run out, seconds.
_MIN_CATCH_UP_S = 0.05
#: Pause between failed catch-up fetches, seconds.
_CATCH_UP_RETRY_S = 0.05

_RECORD = struct.Struct("<qqq")
_CHUNK = 1 << 20

#: ``(index, term, ts)`` of one log entry; ts in microseconds since the epoch.
Entry = tuple[int, int, int]
#: ``(tenant_id, ls_id)``.
Key = tuple[int, int]

_logger = logging.getLogger("observer_agent.replicas")


def replica_name(tenant_id: int, ls_id: int) -> str:
    """``"<tenant_id>_<ls_id>"``: the directory name of a replica (data and clog)."""
    return f"{tenant_id}_{ls_id}"


def describe_ls(key: Key) -> str:
    """``"tenant 1001 ls 1"``, for messages."""
    return f"tenant {key[0]} ls {key[1]}"


# ---------------------------------------------------------------------------- data file


def _data_rng(tenant_id: int, ls_id: int) -> random.Random:
    # A str seed is hashed with SHA-512 by random.seed: the same bytes in every process.
    return random.Random(f"ob-ls-replica:{tenant_id}:{ls_id}")


def build_data_file(path: Path, size: int, tenant_id: int, ls_id: int) -> int:
    """Write the data file of replica ``(tenant_id, ls_id)``: ``size`` bytes, identical on
    every member; returns its crc32. Blocking (run it in a thread).

    Written to a unique temp name and renamed, so two builds racing (a cancelled request and
    its retry) never mix their bytes. Raises ``OSError``.
    """
    rng = _data_rng(tenant_id, ls_id)
    crc = 0
    tmp = path.with_name(f".{path.name}.tmp.{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as f:
            left = size
            while left > 0:
                block = rng.randbytes(min(_CHUNK, left))
                crc = zlib.crc32(block, crc)
                f.write(block)
                left -= len(block)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
    return crc


def file_checksum(path: Path) -> tuple[int, int]:
    """``(size in bytes, crc32)`` of a file. Blocking; raises ``OSError``."""
    crc = 0
    size = 0
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            crc = zlib.crc32(block, crc)
            size += len(block)
    return size, crc


# ---------------------------------------------------------------------------- meta


@dataclass(frozen=True)
class ReplicaMeta:
    """What ``meta.json`` keeps of one replica.

    ``member_list`` is sorted ``ip:port`` strings; ``leader`` is "" when the LS has none;
    ``term`` only grows; ``data_size`` (bytes) and ``data_checksum`` (crc32) describe the
    data file as built. ``copy_from`` is non-empty while a replica built by copy has not
    caught up its log yet: it is the member copied, and ``catch_up_to`` the log index to
    reach before the replica is in service (the source's ``log_end_index`` at the copy).
    """

    tenant_id: int
    ls_id: int
    unit_id: int
    member_list: tuple[str, ...]
    leader: str
    term: int
    paxos_replica_number: int
    replica_type: str
    data_size: int
    data_checksum: int
    copy_from: str = ""
    catch_up_to: int = 0

    @property
    def key(self) -> Key:
        """``(tenant_id, ls_id)``."""
        return (self.tenant_id, self.ls_id)

    def to_json(self) -> str:
        """The file's content: one JSON object with every field."""
        d = dataclasses.asdict(self)
        d["member_list"] = list(self.member_list)
        return json.dumps(d, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, raw: str) -> ReplicaMeta:
        """Parse :meth:`to_json`'s output; raises ``ValueError`` / ``KeyError`` / ``TypeError``
        when it is malformed."""
        d = json.loads(raw)
        return cls(
            tenant_id=int(d["tenant_id"]),
            ls_id=int(d["ls_id"]),
            unit_id=int(d["unit_id"]),
            member_list=tuple(sorted(str(m) for m in d["member_list"])),
            leader=str(d["leader"]),
            term=int(d["term"]),
            paxos_replica_number=int(d["paxos_replica_number"]),
            replica_type=str(d["replica_type"]),
            data_size=int(d["data_size"]),
            data_checksum=int(d["data_checksum"]),
            # Absent from files written before replica migration existed.
            copy_from=str(d.get("copy_from", "")),
            catch_up_to=int(d.get("catch_up_to", 0)),
        )


def write_meta(directory: Path, meta: ReplicaMeta) -> None:
    """Write ``directory/meta.json`` atomically (blocking; raises ``OSError``)."""
    write_atomic(directory / META_FILE, meta.to_json().encode("utf-8"))


def read_meta(directory: Path) -> ReplicaMeta:
    """Read ``directory/meta.json``. Raises ``OSError`` (e.g. ``FileNotFoundError``) or
    ``ValueError`` when it is malformed."""
    raw = (directory / META_FILE).read_text(encoding="utf-8")
    try:
        return ReplicaMeta.from_json(raw)
    except (KeyError, TypeError) as e:
        raise ValueError(f"malformed {directory / META_FILE}: {e!r}") from e


# ---------------------------------------------------------------------------- log


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


# ---------------------------------------------------------------------------- one replica


#: Build states of a replica built by copy (see the module doc).
BUILD_QUEUED = "queued"
BUILD_COPYING = "copying"
BUILD_FAILED = "failed"
BUILD_LOG = "log"


@dataclass
class _Build:
    """A replica being built by copy; ``state`` is one of the ``BUILD_*`` values. The data
    file is in place (and ``meta.json`` written) only in :data:`BUILD_LOG`."""

    source: str
    state: str = BUILD_QUEUED
    #: Bytes received by the current attempt (the whole file once in BUILD_LOG).
    bytes_copied: int = 0
    #: The data file's size announced by the source's first chunk, bytes (0 = not known yet).
    total_size: int = 0
    #: The log index to reach before the replica is in service.
    target: int = 0
    error: str = ""
    #: Last problem of the log catch-up, logged once per kind.
    problem: str = ""
    task: asyncio.Task[None] | None = None

    @property
    def data_in_place(self) -> bool:
        """True once the data file is in place (the log is being caught up)."""
        return self.state == BUILD_LOG


class Replica:
    """One hosted replica: its meta, log and in-process state.

    ``in_service`` is True once the data file is built or verified (for a replica built by
    copy: once its log has caught up too). ``build`` is not None while the replica is being
    built by copy (its loop then idles: the build task fetches). ``busy`` is set while an
    ``ApplyReplicas`` changes the replica (its loop then pauses); ``generation`` grows at
    every change of meta, so a fetch started before a change is discarded. ``need_verify``:
    the log must be compared with the leader's before new entries are taken.
    """

    def __init__(self, meta: ReplicaMeta, directory: Path, log: ReplicaLog) -> None:
        """A replica from its meta, its directory (``replicas/<t>_<l>``) and its log."""
        self.meta = meta
        self.dir = directory
        self.log = log
        self.in_service = False
        self.busy = False
        self.generation = 0
        self.need_verify = True
        self.verify_window = VERIFY_WINDOW_MIN
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.last_problem = ""
        self.build: _Build | None = None

    @property
    def key(self) -> Key:
        """``(tenant_id, ls_id)``."""
        return self.meta.key

    def set_meta(self, meta: ReplicaMeta) -> None:
        """Adopt ``meta`` in memory and wake the loop; a new leader or term also asks for the
        log to be checked against the (new) leader's."""
        if (meta.leader, meta.term) != (self.meta.leader, self.meta.term):
            self.need_verify = True
            self.verify_window = VERIFY_WINDOW_MIN
        self.meta = meta
        self.generation += 1
        self.wake.set()

    def info(self, me: str) -> obrpc_pb2.ReplicaInfo:
        """The ``ReplicaInfo`` this agent (``me`` = its ``ip:port``) reports; no I/O."""
        m = self.meta
        b = self.build
        data_size = m.data_size
        if b is not None and not b.data_in_place:
            # meta.data_size is only set once the file is in place; report what is coming.
            data_size = b.total_size
        return obrpc_pb2.ReplicaInfo(
            tenant_id=m.tenant_id,
            ls_id=m.ls_id,
            unit_id=m.unit_id,
            role=obrpc_pb2.LEADER if m.leader and m.leader == me else obrpc_pb2.FOLLOWER,
            member_list=list(m.member_list),
            replica_type=m.replica_type,
            paxos_replica_number=m.paxos_replica_number,
            data_size=data_size,
            required_size=data_size + self.log.size_bytes,
            in_service=self.in_service,
            term=m.term,
            leader=m.leader,
            log_end_index=self.log.end_index,
            log_end_ts=self.log.end_ts,
            data_checksum=m.data_checksum,
            copy_from=b.source if b is not None else "",
            bytes_copied=b.bytes_copied if b is not None else 0,
            build_error=b.error if b is not None else "",
        )


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


# ---------------------------------------------------------------------------- the manager


@dataclass
class _Faults:
    stop: bool = False
    delay_ms: int = 0
    checked_at: float = float("-inf")


class ReplicaManager:
    """Every replica of one agent: storage, the leader/follower loops, ``ApplyReplicas``,
    ``FetchLog``, ``FetchData`` and the builds of replicas by copy (replica migration).

    ``server`` returns the agent's ``ip:port`` (known only once its gRPC server is bound);
    ``log`` is the agent's logger adapter. Call :meth:`load` once (blocking, at start-up),
    :meth:`start` on the event loop (the agent's ``run`` does; :meth:`apply` starts it too),
    and :meth:`stop` at the end.
    """

    def __init__(
        self,
        data_dir: Path,
        settings: AgentSettings,
        clock: Clock,
        server: Callable[[], str],
        log: logging.LoggerAdapter | None = None,  # type: ignore[type-arg]
        *,
        log_keep: int = LOG_KEEP_ENTRIES,
        copy_chunk_size: int = DATA_CHUNK_DEFAULT,
    ) -> None:
        """Nothing is read until :meth:`load`; ``log_keep`` = entries kept by compaction,
        ``copy_chunk_size`` = bytes per chunk a copy asks its source for."""
        self.data_dir = Path(data_dir)
        self.settings = settings
        self.clock = clock
        self._server = server
        self.log: Any = log or _logger
        self.log_keep = log_keep
        self.copy_chunk_size = copy_chunk_size
        self._replicas: dict[Key, Replica] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._peer_state: dict[tuple[str, Key], str] = {}
        self._faults = _Faults()
        self._tasks: set[asyncio.Future[Any]] = set()
        self._apply_lock: asyncio.Lock | None = None
        self._copy_slots: asyncio.Semaphore | None = None
        self._slow_copy_warned = ""
        self._started = False
        self._stopped = False

    # -- paths

    @property
    def replicas_root(self) -> Path:
        """``DATA_DIR/replicas``."""
        return self.data_dir / REPLICAS_DIR

    def replica_dir(self, key: Key) -> Path:
        """``DATA_DIR/replicas/<tenant_id>_<ls_id>`` (data file and meta.json)."""
        return self.replicas_root / replica_name(*key)

    def log_path(self, key: Key) -> Path:
        """``DATA_DIR/clog/<tenant_id>_<ls_id>/log``."""
        return self.data_dir / CLOG_DIR / replica_name(*key) / LOG_FILE

    # -- state

    @property
    def poll_interval_s(self) -> float:
        """A follower's fetch period, seconds: ``min(log_interval, 200 ms)``."""
        return min(self.settings.log_interval, FOLLOWER_POLL_MAX_US) / 1e6

    def get(self, tenant_id: int, ls_id: int) -> Replica | None:
        """The hosted replica of ``(tenant_id, ls_id)``, or None."""
        return self._replicas.get((tenant_id, ls_id))

    def keys(self) -> list[Key]:
        """The hosted replicas' ``(tenant_id, ls_id)``, sorted."""
        return sorted(self._replicas)

    def report(self) -> list[obrpc_pb2.ReplicaInfo]:
        """``ReplicaInfo`` of every hosted replica, sorted by ``(tenant_id, ls_id)``. Memory
        only (the heartbeat path calls it)."""
        me = self._server()
        return [self._replicas[k].info(me) for k in sorted(self._replicas)]

    # -- load / start / stop

    def load(self) -> int:
        """Load the replicas kept in ``DATA_DIR`` (blocking; once, before :meth:`start`);
        returns how many.

        Each starts not in service until :meth:`start` has verified its data file (and, for
        one built by copy whose log had not caught up, until it has). A directory without
        ``meta.json`` is a creation or a copy that never finished: it is removed, with its
        log. A log directory without a replica is removed. A replica whose meta or
        log cannot be read is skipped and logged at ERROR (its files stay for inspection).
        """
        root = self.replicas_root
        names: set[str] = set()
        if root.is_dir():
            for d in sorted(root.iterdir()):
                if not d.is_dir():
                    continue
                key = _parse_name(d.name)
                if key is None:
                    self.log.warning("ignoring unexpected directory %s", d)
                    continue
                names.add(d.name)
                for tmp in d.glob(".*.tmp.*"):
                    # Left by a build or meta write cut short by a crash or a stop.
                    with contextlib.suppress(OSError):
                        tmp.unlink()
                if not (d / META_FILE).exists():
                    self.log.warning(
                        "removing %s: its creation never finished (no %s)", d, META_FILE
                    )
                    shutil.rmtree(d, ignore_errors=True)
                    shutil.rmtree(self.log_path(key).parent, ignore_errors=True)
                    continue
                try:
                    meta = read_meta(d)
                    if meta.key != key:
                        raise ValueError(f"{META_FILE} is for {describe_ls(meta.key)}")
                    log = ReplicaLog.open(self.log_path(key), self.log_keep)
                except (OSError, ValueError) as e:
                    self.log.error("cannot load replica %s: %s", d, e)
                    continue
                rep = Replica(meta, d, log)
                if meta.copy_from:
                    # Copied, but its log had not caught up: resume that after verification.
                    rep.build = _Build(
                        source=meta.copy_from,
                        state=BUILD_LOG,
                        bytes_copied=meta.data_size,
                        total_size=meta.data_size,
                        target=meta.catch_up_to,
                    )
                self._replicas[key] = rep
        clog = self.data_dir / CLOG_DIR
        if clog.is_dir():
            for d in clog.iterdir():
                if d.is_dir() and _parse_name(d.name) is not None and d.name not in names:
                    self.log.warning("removing %s: no replica owns this log", d)
                    shutil.rmtree(d, ignore_errors=True)
        if self._replicas:
            self.log.info(
                "loaded %d replica(s): %s",
                len(self._replicas),
                ", ".join(describe_ls(k) for k in sorted(self._replicas)),
            )
        return len(self._replicas)

    def start(self) -> None:
        """Start the loops of every replica and verify the data files of loaded ones (in
        threads), then resume the log catch-up of copies that had their data in place. Must
        run on the event loop; a no-op when already started."""
        self._stopped = False
        if self._started:
            return
        self._started = True
        for rep in self._replicas.values():
            if not rep.in_service and (rep.build is None or rep.build.data_in_place):
                self._spawn(self._verify(rep), f"verify {describe_ls(rep.key)}")
            self._start_loop(rep)

    def _ensure_started(self) -> None:
        if not self._started and not self._stopped:
            self.start()

    async def stop(self) -> None:
        """Cancel every loop, copy and pending apply, close the logs and peer channels;
        bounded in time, never raises, idempotent.

        Replicas whose copy had not put the data file in place are forgotten and their files
        removed, as a restart would (they have no ``meta.json``); the RS sends them again.
        """
        self._stopped = True
        self._started = False
        tasks = set(self._tasks)
        for rep in self._replicas.values():
            if rep.task is not None:
                tasks.add(rep.task)
                rep.task = None
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_CLOSE_TIMEOUT_S)
        unfinished = [
            k
            for k, r in self._replicas.items()
            if r.build is not None and not r.build.data_in_place
        ]
        for key in unfinished:
            self._replicas.pop(key).log.close()
            self.log.info("replica %s: unfinished copy discarded at stop", describe_ls(key))
        if unfinished:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.to_thread(self._remove_files, unfinished), _CLOSE_TIMEOUT_S
                )
        for rep in self._replicas.values():
            rep.log.close()
            if rep.build is not None:
                rep.build.task = None
        # A later start may run on another event loop; asyncio primitives bind to one.
        self._apply_lock = None
        self._copy_slots = None
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ch.close(grace=None), _CLOSE_TIMEOUT_S)

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _start_loop(self, rep: Replica) -> None:
        if rep.task is None or rep.task.done():
            rep.wake = asyncio.Event()  # bound to this loop, not to a previous run's
            rep.task = asyncio.get_running_loop().create_task(
                self._replica_loop(rep), name=f"replica {describe_ls(rep.key)}"
            )

    async def _verify(self, rep: Replica) -> None:
        path = rep.dir / DATA_FILE
        meta = rep.meta
        try:
            size, crc = await asyncio.to_thread(_checksum_or_missing, path)
            if (size, crc) != (meta.data_size, meta.data_checksum):
                self.log.warning(
                    "replica %s: data file %s is %s (crc32 %s), expected %d bytes crc32 %d; "
                    "rebuilding it",
                    describe_ls(rep.key),
                    path,
                    "missing" if size < 0 else f"{size} bytes",
                    crc,
                    meta.data_size,
                    meta.data_checksum,
                )
                crc = await asyncio.to_thread(
                    build_data_file, path, meta.data_size, meta.tenant_id, meta.ls_id
                )
                if crc != rep.meta.data_checksum:
                    new = dataclasses.replace(rep.meta, data_checksum=crc)
                    await asyncio.to_thread(write_meta, rep.dir, new)
                    rep.set_meta(new)
        except OSError as e:
            self.log.error(
                "replica %s: cannot verify its data file: %s; not in service",
                describe_ls(rep.key),
                e,
            )
            return
        b = rep.build
        if b is not None:
            # Data verified; the log still has to reach the copy's catch_up_to.
            if self._replicas.get(rep.key) is rep and (b.task is None or b.task.done()):
                b.task = self._spawn(self._build_log(rep, b), f"build {describe_ls(rep.key)}")
            return
        rep.in_service = True

    # -- ApplyReplicas

    async def apply(
        self,
        request: obrpc_pb2.ApplyReplicasRequest,
        highest_epoch: int,
        time_budget_s: float | None = None,
    ) -> obrpc_pb2.ApplyReplicasResponse:
        """``ObserverService.ApplyReplicas``: apply ``request``; the answer always carries the
        full report (:meth:`report`).

        Refused with ``OB_RS_NOT_MASTER`` when ``request.rs_epoch < highest_epoch``. Upserts
        then drops, one request at a time; the rules are those of
        ``observer_agent.service.ObserverServicer.ApplyReplicas``. Errors of single specs (``OB_INVALID_ARGUMENT``, ``OB_TIMEOUT`` of a catch-up,
        ``OB_ERR_SYS`` of a failed write) do not stop the others; the first one is returned
        in ``error`` with the others appended to its message. ``time_budget_s`` is what is
        left of the caller's deadline (catch-up stops before it). The work goes on to the
        end if the caller cancels, so a retry finds it done. Never raises.
        """
        resp = obrpc_pb2.ApplyReplicasResponse()
        if request.rs_epoch < highest_epoch:
            err = ObError(
                "OB_RS_NOT_MASTER",
                detail=f"rs_epoch {request.rs_epoch} is lower than {highest_epoch} already seen",
            )
            self.log.warning("ApplyReplicas refused: %s", err.message)
            error_to_proto(err, resp.error)
            resp.replicas.extend(self.report())
            return resp
        loop = asyncio.get_running_loop()
        client_deadline = None
        if time_budget_s is not None:
            client_deadline = loop.time() + 0.8 * max(0.0, time_budget_s)
        work = self._spawn(self._apply_locked(request, client_deadline), "apply replicas")
        try:
            errors: list[ObError] = await asyncio.shield(work)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.log.exception("ApplyReplicas failed")
            errors = [ObError("OB_ERR_UNEXPECTED", detail=f"{type(e).__name__}: {e}")]
        if errors:
            error_to_proto(errors[0], resp.error)
            if len(errors) > 1:
                resp.error.message += "; also: " + "; ".join(
                    f"{e.name}: {e.message}" for e in errors[1:]
                )
        resp.replicas.extend(self.report())
        return resp

    async def _apply_locked(
        self, request: obrpc_pb2.ApplyReplicasRequest, client_deadline: float | None
    ) -> list[ObError]:
        errors: list[ObError] = []
        async with self._lock():
            self._ensure_started()
            for spec in request.upsert:
                try:
                    await self._upsert(spec, client_deadline)
                except ObError as e:
                    errors.append(e)
                except Exception as e:
                    # One bad spec must not keep the others from being applied.
                    self.log.exception(
                        "replica %s: upsert failed", describe_ls((spec.tenant_id, spec.ls_id))
                    )
                    errors.append(
                        ObError(
                            "OB_ERR_UNEXPECTED",
                            detail=f"{describe_ls((spec.tenant_id, spec.ls_id))}: {e!r}",
                        )
                    )
            for key in request.drop:
                try:
                    await self._drop((key.tenant_id, key.ls_id))
                except ObError as e:
                    errors.append(e)
        return errors

    async def _upsert(self, spec: obrpc_pb2.ReplicaSpec, client_deadline: float | None) -> None:
        key = (spec.tenant_id, spec.ls_id)
        members = _check_spec(spec)
        me = self._server()
        source = _normalize(spec.copy_from)
        rep = self._replicas.get(key)
        if source == me and (rep is None or rep.build is not None):
            raise ObError(
                "OB_INVALID_ARGUMENT",
                "ReplicaSpec",
                detail=f"{describe_ls(key)}: copy_from {source} is this server",
            )
        if spec.leader == me and (
            (rep is None and source) or (rep is not None and rep.build is not None)
        ):
            # Its log is not complete: leading would lose acknowledged entries.
            raise ObError(
                "OB_STATE_NOT_MATCH",
                detail=f"{describe_ls(key)} is being built by copy and cannot lead yet",
            )
        if rep is None:
            if source:
                rep = await self._create_by_copy(spec, members, source)
            else:
                rep = await self._create(spec, members)
        elif rep.build is not None and not rep.build.data_in_place and source:
            b = rep.build
            if b.state == BUILD_FAILED or b.source != source:
                await self._restart_copy(rep, source)
        if spec.term < rep.meta.term:
            self.log.info(
                "replica %s: spec with term %d ignored (term %d kept)",
                describe_ls(key),
                spec.term,
                rep.meta.term,
            )
            return
        new = dataclasses.replace(
            rep.meta,
            unit_id=spec.unit_id,
            member_list=members,
            leader=spec.leader,
            term=spec.term,
            paxos_replica_number=spec.paxos_replica_number,
            replica_type=spec.replica_type or rep.meta.replica_type,
        )
        old = rep.meta
        rep.busy = True
        try:
            becomes_leader = spec.leader == me and (old.leader, old.term) != (me, spec.term)
            if becomes_leader and spec.catch_up_index > rep.log.end_index:
                await self._catch_up(rep, spec, client_deadline)
            if rep.build is not None and not rep.build.data_in_place:
                # No meta.json before the data is in place (a restart must find no half
                # replica): the copy writes this meta when it installs the file.
                if new != old:
                    rep.set_meta(new)
            elif new != old:
                try:
                    await asyncio.to_thread(write_meta, rep.dir, new)
                except OSError as e:
                    raise ObError(
                        "OB_ERR_SYS", detail=f"{describe_ls(key)}: cannot write its meta: {e}"
                    ) from None
                rep.set_meta(new)
        finally:
            rep.busy = False
            rep.wake.set()
        if (new.leader, new.term) != (old.leader, old.term):
            if new.leader == me:
                rep.need_verify = False
                role = "leader"
            elif new.leader:
                role = f"follower of {new.leader}"
            else:
                role = "without leader"
            self.log.info(
                "replica %s: %s at term %d (was leader %r term %d), log_end_index %d",
                describe_ls(key),
                role,
                new.term,
                old.leader,
                old.term,
                rep.log.end_index,
            )

    async def _create(self, spec: obrpc_pb2.ReplicaSpec, members: tuple[str, ...]) -> Replica:
        key = (spec.tenant_id, spec.ls_id)
        directory = self.replica_dir(key)
        size = self.settings.replica_size

        def build() -> tuple[ReplicaMeta, ReplicaLog]:
            directory.mkdir(parents=True, exist_ok=True)
            crc = build_data_file(directory / DATA_FILE, size, spec.tenant_id, spec.ls_id)
            # Leaderless at term 0: the spec itself is adopted by the update that follows.
            meta = ReplicaMeta(
                tenant_id=spec.tenant_id,
                ls_id=spec.ls_id,
                unit_id=spec.unit_id,
                member_list=members,
                leader="",
                term=0,
                paxos_replica_number=spec.paxos_replica_number,
                replica_type=spec.replica_type or "FULL",
                data_size=size,
                data_checksum=crc,
            )
            log_path = self.log_path(key)
            # A log left by an earlier replica of this LS is history of another life.
            with contextlib.suppress(FileNotFoundError):
                log_path.unlink()
            log = ReplicaLog.open(log_path, self.log_keep)
            write_meta(directory, meta)
            return meta, log

        try:
            meta, log = await asyncio.to_thread(build)
        except OSError as e:
            raise ObError(
                "OB_ERR_SYS", detail=f"{describe_ls(key)}: cannot create the replica: {e}"
            ) from None
        rep = Replica(meta, directory, log)
        rep.in_service = True
        self._replicas[key] = rep
        self.log.info(
            "replica %s created: %d bytes of data, crc32 %d",
            describe_ls(key),
            size,
            meta.data_checksum,
        )
        if self._started:
            self._start_loop(rep)
        return rep

    # -- building a replica by copy (replica migration)

    def _lock(self) -> asyncio.Lock:
        if self._apply_lock is None:
            self._apply_lock = asyncio.Lock()
        return self._apply_lock

    def _slots(self) -> asyncio.Semaphore:
        if self._copy_slots is None:
            self._copy_slots = asyncio.Semaphore(self.settings.max_concurrent_copies)
        return self._copy_slots

    async def _create_by_copy(
        self, spec: obrpc_pb2.ReplicaSpec, members: tuple[str, ...], source: str
    ) -> Replica:
        """Register an absent replica as being built from ``source`` and start the copy;
        returns at once (nothing but stale files is touched here)."""
        key = (spec.tenant_id, spec.ls_id)
        try:
            # Files of an earlier life of this LS that could not be loaded: a meta.json left
            # there would make a half-copied replica look complete after a restart.
            await asyncio.to_thread(self._remove_files, [key])
        except OSError as e:
            raise ObError(
                "OB_ERR_SYS", detail=f"{describe_ls(key)}: cannot remove old files: {e}"
            ) from None
        # Leaderless at term 0 like a generated replica: the spec is adopted right after.
        meta = ReplicaMeta(
            tenant_id=spec.tenant_id,
            ls_id=spec.ls_id,
            unit_id=spec.unit_id,
            member_list=members,
            leader="",
            term=0,
            paxos_replica_number=spec.paxos_replica_number,
            replica_type=spec.replica_type or "FULL",
            data_size=0,
            data_checksum=0,
        )
        # The log is not opened: nothing of it exists on disk until the data is in place.
        rep = Replica(meta, self.replica_dir(key), ReplicaLog(self.log_path(key), self.log_keep))
        self._replicas[key] = rep
        if self._started:
            self._start_loop(rep)
        self._start_copy(rep, source)
        self.log.info("replica %s: building it by copy from %s", describe_ls(key), source)
        return rep

    def _start_copy(self, rep: Replica, source: str) -> None:
        b = _Build(source=source)
        rep.build = b
        rep.in_service = False
        b.task = self._spawn(self._build_replica(rep, b), f"copy {describe_ls(rep.key)}")

    async def _restart_copy(self, rep: Replica, source: str) -> None:
        """Cancel the copy of ``rep`` (waiting for it to clean up) and start a new one from
        ``source``, from byte 0."""
        old = rep.build
        assert old is not None
        if old.task is not None and not old.task.done():
            old.task.cancel()
            await asyncio.wait({old.task}, timeout=_CLOSE_TIMEOUT_S)
        self._start_copy(rep, source)
        self.log.info(
            "replica %s: copy restarted from %s (the copy from %s was %s%s)",
            describe_ls(rep.key),
            source,
            old.source,
            old.state,
            f": {old.error}" if old.error else "",
        )

    async def _build_replica(self, rep: Replica, b: _Build) -> None:
        """The whole build of ``rep``: wait for a copy slot, copy, install, catch up the log.
        A failure of the copy or the install ends it with ``b.error`` set."""
        key = rep.key
        tmp = rep.dir / f".{DATA_FILE}.copy.tmp.{uuid.uuid4().hex}"
        try:
            async with self._slots():
                b.state = BUILD_COPYING
                first = await self._copy_data(rep, b, tmp)
            installed = await self._install(rep, b, tmp, first)
        except _CopyFailed as e:
            # One line: the RS shows it as the reason of the failed job step.
            b.state, b.error = BUILD_FAILED, " ".join(str(e).split())
            self.log.warning(
                "replica %s: copy from %s failed: %s", describe_ls(key), b.source, b.error
            )
            return
        except Exception as e:
            # Not expected; still a failed copy the RS can retry, not a dead task.
            self.log.exception("replica %s: copy from %s failed", describe_ls(key), b.source)
            b.state, b.error = BUILD_FAILED, f"{type(e).__name__}: {e}"
            return
        finally:
            if not b.data_in_place:
                # Failed or cancelled (drop, new source, stop): no partial file stays. One
                # small unlink, done inline so that it also happens while being cancelled.
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)
        if installed:
            await self._build_log(rep, b)

    async def _copy_data(self, rep: Replica, b: _Build, tmp: Path) -> obrpc_pb2.DataChunk:
        """Stream the data file from ``b.source`` into ``tmp`` (fsynced, closed); returns the
        first chunk (size, checksum, log indexes). Raises :class:`_CopyFailed`."""
        src = b.source
        timeout_s = self.settings.rpc_timeout / 1e6
        req = obrpc_pb2.FetchDataRequest(
            tenant_id=rep.meta.tenant_id,
            ls_id=rep.meta.ls_id,
            offset=0,
            chunk_size=self.copy_chunk_size,
        )
        # No deadline on the whole stream (a copy may take long): each chunk has one instead.
        call = self._stub(src).FetchData(req)
        fh: Any = None
        first: obrpc_pb2.DataChunk | None = None
        received = 0
        crc = 0
        try:
            try:
                fh = await _blocking(_open_for_copy, tmp)
            except OSError as e:
                raise _CopyFailed(f"cannot write {tmp}: {e}") from None
            while True:
                try:
                    chunk = await asyncio.wait_for(call.read(), timeout_s)
                except TimeoutError:
                    raise _CopyFailed(
                        f"{src} sent nothing for {timeout_s:g} s after {received} bytes"
                    ) from None
                except grpc.aio.AioRpcError as e:
                    details = (e.details() or "").replace("\n", " ")
                    raise _CopyFailed(f"{src}: {e.code().name}: {details}") from None
                if chunk is grpc.aio.EOF:
                    break
                assert isinstance(chunk, obrpc_pb2.DataChunk)
                err = error_from_proto(chunk.error)
                if err is not None:
                    raise _CopyFailed(f"{src} answered {err.name}: {err.message}")
                if first is None:
                    if chunk.total_size < 0:
                        raise _CopyFailed(f"{src} announced {chunk.total_size} bytes")
                    first = chunk
                    b.total_size = chunk.total_size
                end = chunk.offset + len(chunk.data)
                if chunk.offset != received or end > first.total_size:
                    raise _CopyFailed(
                        f"{src} sent bytes [{chunk.offset}, {end}) of {first.total_size} "
                        f"when byte {received} was due"
                    )
                data = chunk.data
                try:
                    crc = await _blocking(_write_chunk, fh, data, crc)
                except OSError as e:
                    raise _CopyFailed(f"cannot write {tmp}: {e}") from None
                received = end
                b.bytes_copied = received
                delay_s = self._copy_delay_s()
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
            if first is None:
                raise _CopyFailed(f"{src} ended the stream without any chunk")
            if received != first.total_size:
                raise _CopyFailed(
                    f"{src} ended the stream after {received} of {first.total_size} bytes"
                )
            if crc != first.checksum:
                raise _CopyFailed(
                    f"checksum mismatch: the {received} bytes from {src} have crc32 {crc}, "
                    f"{src} announced {first.checksum}"
                )
            done, fh = fh, None
            try:
                await _blocking(_sync_and_close, done)
            except OSError as e:
                raise _CopyFailed(f"cannot write {tmp}: {e}") from None
            return first
        finally:
            call.cancel()
            if fh is not None:
                # Inline: it only flushes Python's small buffer of an abandoned temp file.
                with contextlib.suppress(OSError):
                    fh.close()

    def _copy_delay_s(self) -> float:
        """Seconds :data:`FAULT_COPY_SLOW_FILE` asks to sleep after a chunk (0 when absent
        or malformed)."""
        path = self.data_dir / FAULT_COPY_SLOW_FILE
        try:
            raw = path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return 0.0
        try:
            return max(0, int(raw)) / 1000
        except ValueError:
            if self._slow_copy_warned != raw:
                self.log.warning("ignoring %s: %r is not an integer", path, raw[:40])
                self._slow_copy_warned = raw
            return 0.0

    async def _install(
        self, rep: Replica, b: _Build, tmp: Path, first: obrpc_pb2.DataChunk
    ) -> bool:
        """Move the copied file into place, create the log right before the source's first
        kept entry and write ``meta.json`` (last: it marks the data complete). Under the
        apply lock, so no ``ApplyReplicas`` writes meta meanwhile. False when the replica
        was dropped or its copy replaced meanwhile. Raises :class:`_CopyFailed`."""
        key = rep.key
        async with self._lock():
            if self._replicas.get(key) is not rep or rep.build is not b:
                return False
            meta = dataclasses.replace(
                rep.meta,
                data_size=first.total_size,
                data_checksum=first.checksum,
                copy_from=b.source,
                catch_up_to=first.log_end_index,
            )
            directory, log_path, keep = rep.dir, self.log_path(key), self.log_keep
            base = max(0, first.log_start_index - 1)

            def install() -> ReplicaLog:
                os.replace(tmp, directory / DATA_FILE)
                fsync_dir(directory)
                # A log left by an earlier replica of this LS is history of another life.
                with contextlib.suppress(FileNotFoundError):
                    log_path.unlink()
                log = ReplicaLog.open(log_path, keep)
                try:
                    # The data file is the snapshot: entries the source compacted away are
                    # not needed, the log starts where the source's does.
                    if base:
                        log.rebase(base)
                    write_meta(directory, meta)
                except BaseException:
                    log.close()
                    raise
                return log

            try:
                log = await _blocking(install)
            except OSError as e:
                raise _CopyFailed(f"cannot install the copied data file: {e}") from None
            rep.log.close()
            rep.log = log
            b.bytes_copied = b.total_size = first.total_size
            b.target = first.log_end_index
            b.state = BUILD_LOG
            rep.set_meta(meta)
        self.log.info(
            "replica %s: %d bytes copied from %s (crc32 %d); catching up its log from index "
            "%d to %d",
            describe_ls(key),
            first.total_size,
            b.source,
            first.checksum,
            base + 1,
            b.target,
        )
        return True

    async def _build_log(self, rep: Replica, b: _Build) -> None:
        """Fetch the log of a copied replica until it reaches ``b.target`` (from the leader
        it follows, or from the source when it knows no other leader), then put it in
        service. Goes on until done, dropped or cancelled."""
        key = rep.key
        while rep.log.end_index < b.target:
            if self._replicas.get(key) is not rep or rep.build is not b:
                return
            leader = rep.meta.leader
            if leader and leader != self._server():
                peer, term = leader, rep.meta.term
            else:
                # A catch-up claims no term (see fetch_log): served if the source leads.
                peer, term = b.source, 0
            before = rep.log.end_index
            if self._check_faults().stop:
                outcome = f"fetching stopped by {FAULT_REPLICATION_STOP_FILE}"
            else:
                gen = rep.generation
                try:
                    outcome = await self._pull(
                        rep,
                        peer,
                        term,
                        None,
                        self.settings.rpc_timeout / 1e6,
                        _unchanged(rep, gen),
                    )
                except OSError as e:
                    outcome = f"{type(e).__name__}: {e}"
            if outcome in ("ok", "stale"):
                self._note_build_problem(rep, b, "", "")
                if rep.log.end_index > before:
                    continue  # more may be waiting: no pause
            else:
                self._note_build_problem(
                    rep,
                    b,
                    f"{peer} {outcome.partition(':')[0]}",
                    f"log catch-up from {peer}: {outcome}",
                )
            await asyncio.sleep(self.poll_interval_s)
        while True:
            async with self._lock():
                if self._replicas.get(key) is not rep or rep.build is not b:
                    return
                meta = dataclasses.replace(rep.meta, copy_from="", catch_up_to=0)
                try:
                    await _blocking(write_meta, rep.dir, meta)
                except OSError as e:
                    self._note_build_problem(rep, b, "meta", f"cannot write its meta: {e}")
                else:
                    rep.set_meta(meta)
                    rep.build = None
                    rep.in_service = True
                    self.log.info(
                        "replica %s: built by copy from %s, in service at log_end_index %d",
                        describe_ls(key),
                        b.source,
                        rep.log.end_index,
                    )
                    return
            await asyncio.sleep(_IDLE_S)

    def _note_build_problem(self, rep: Replica, b: _Build, kind: str, problem: str) -> None:
        # Logged when the kind changes only: a message with indexes would log every poll.
        if kind == b.problem:
            return
        if problem:
            self.log.warning("replica %s (building): %s", describe_ls(rep.key), problem)
        elif b.problem:
            self.log.info("replica %s (building): fetching the log again", describe_ls(rep.key))
        b.problem = kind

    async def _catch_up(
        self, rep: Replica, spec: obrpc_pb2.ReplicaSpec, client_deadline: float | None
    ) -> None:
        """Fetch the log from ``spec.catch_up_from`` until ``end_index >= catch_up_index``,
        within ``rpc_timeout`` (and the caller's deadline); raises ``ObError(OB_TIMEOUT)``."""
        key = rep.key
        target = spec.catch_up_index
        src = spec.catch_up_from.strip()
        me = self._server()
        if not src or src == me:
            raise ObError(
                "OB_TIMEOUT",
                detail=f"{describe_ls(key)} cannot become leader: log_end_index "
                f"{rep.log.end_index} < catch_up_index {target} and no catch_up_from",
            )
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + self.settings.rpc_timeout / 1e6
        if client_deadline is not None:
            deadline = min(deadline, client_deadline)
        deadline = max(deadline, now + _MIN_CATCH_UP_S)
        rep.need_verify = True
        rep.verify_window = VERIFY_WINDOW_MIN
        last = "no answer"
        rounds = 0
        while rounds < 100_000 and (rep.log.end_index < target or rep.need_verify):
            rounds += 1
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            before = (rep.log.end_index, rep.need_verify, rep.verify_window)
            # term 0: a catch-up claims no leadership, so the previous leader serves it
            # whatever term it is at (see fetch_log).
            outcome = await self._pull(rep, src, 0, None, remaining, lambda: True)
            if (
                outcome == "ok"
                and (rep.log.end_index, rep.need_verify, rep.verify_window) != before
            ):
                continue
            last = outcome if outcome != "ok" else f"{src} has no newer entry"
            await asyncio.sleep(min(_CATCH_UP_RETRY_S, max(0.0, deadline - loop.time())))
        if rep.log.end_index >= target:
            return
        self.log.warning(
            "replica %s: catch-up from %s stopped at log_end_index %d < %d (%s)",
            describe_ls(key),
            src,
            rep.log.end_index,
            target,
            last,
        )
        raise ObError(
            "OB_TIMEOUT",
            detail=f"{describe_ls(key)} cannot become leader: catch-up from {src} reached "
            f"log_end_index {rep.log.end_index} < catch_up_index {target} ({last})",
        )

    def _remove_files(self, keys: Iterable[Key]) -> None:
        """Remove the directories (data and clog) of ``keys``; blocking, raises ``OSError``."""
        for key in keys:
            for d in (self.replica_dir(key), self.log_path(key).parent):
                if d.exists():
                    shutil.rmtree(d)

    async def _drop(self, key: Key) -> None:
        rep = self._replicas.pop(key, None)
        if rep is not None:
            tasks = [rep.task, rep.build.task if rep.build is not None else None]
            rep.task = None
            # A copy in progress stops here: its temp file goes with the directory below.
            running = {t for t in tasks if t is not None}
            for t in running:
                t.cancel()
            if running:
                await asyncio.wait(running, timeout=_CLOSE_TIMEOUT_S)
            rep.log.close()
        try:
            await asyncio.to_thread(self._remove_files, [key])
        except OSError as e:
            raise ObError(
                "OB_ERR_SYS", detail=f"{describe_ls(key)}: cannot remove its files: {e}"
            ) from None
        if rep is not None:
            self.log.info("replica %s dropped", describe_ls(key))

    # -- FetchLog (the leader's side)

    def fetch_log(self, request: obrpc_pb2.FetchLogRequest) -> obrpc_pb2.FetchLogResponse:
        """``ReplicaService.FetchLog``: entries from ``request.from_index`` on.

        Served when this server leads the LS at a term >= ``request.term``, or when the
        caller is the leader this replica follows and ``request.term`` is not newer than the
        kept term (a new leader catching up from its predecessor, which may have been told
        of the switch first; catch-ups send term 0). Otherwise, or while the replica here is
        being built by copy, ``OB_NOT_MASTER`` in ``error`` (with ``term`` and ``leader`` as
        known here). At most ``min(max_entries, 1000)`` entries (1000 when 0).

        Snapshot rule: when ``from_index`` was compacted away here, the entries start at the
        first one still kept (``end_index`` says where the log ends); the caller restarts its
        log there (:func:`merge_fetched`), its data file standing for what it skips. A
        replica built by copy relies on it. Never raises.
        """
        resp = obrpc_pb2.FetchLogResponse()
        key = (request.tenant_id, request.ls_id)
        rep = self._replicas.get(key)
        me = self._server()
        if rep is None:
            error_to_proto(
                ObError("OB_NOT_MASTER", detail=f"{me} hosts no replica of {describe_ls(key)}"),
                resp.error,
            )
            return resp
        m = rep.meta
        resp.term = m.term
        resp.leader = m.leader
        if rep.build is not None:
            error_to_proto(
                ObError(
                    "OB_NOT_MASTER",
                    detail=f"the replica of {describe_ls(key)} on {me} is being built by copy",
                ),
                resp.error,
            )
            return resp
        resp.end_index = rep.log.end_index
        leads = m.leader == me and request.term <= m.term
        # The caller is who this replica was told leads, and claims no newer term than it was
        # told of (a catch-up claims term 0). A replica still at an older term must not serve
        # a follower of a newer one: that follower would truncate to this stale log.
        predecessor = (
            bool(request.follower)
            and request.follower != me
            and m.leader == request.follower
            and request.term <= m.term
        )
        if not (leads or predecessor):
            why = (
                f"term {request.term} is newer than {m.term}"
                if m.leader == me
                else f"the leader known here is {m.leader or 'nobody'} at term {m.term}"
            )
            error_to_proto(
                ObError("OB_NOT_MASTER", detail=f"{me} does not lead {describe_ls(key)}: {why}"),
                resp.error,
            )
            return resp
        n = request.max_entries if request.max_entries > 0 else FETCH_MAX_ENTRIES
        for index, term, ts in rep.log.read(request.from_index, min(n, FETCH_MAX_ENTRIES)):
            resp.entries.add(index=index, term=term, ts=ts)
        return resp

    # -- FetchData (the source's side of a copy)

    async def fetch_data(
        self, request: obrpc_pb2.FetchDataRequest
    ) -> AsyncIterator[obrpc_pb2.DataChunk]:
        """``ReplicaService.FetchData``: the replica's data file from ``request.offset`` on,
        in chunks of ``request.chunk_size`` bytes (256 KiB when 0, at most
        :data:`DATA_CHUNK_MAX`), read in a thread.

        Every chunk has ``offset``, ``data`` and ``total_size`` (bytes of the whole file); the
        first one also ``checksum`` (crc32 of the whole file, as recorded when it was built or
        verified: a file damaged since then makes the copy fail its check),
        ``log_start_index`` (first log entry kept here; ``log_end_index + 1`` when none is),
        ``log_end_index`` and ``term``, all taken when the stream starts. An offset equal to
        the size gives one chunk without data.

        Errors are one chunk with ``error`` set, ending the stream: ``OB_ENTRY_NOT_EXIST`` when
        no replica of the LS is here, ``OB_STATE_NOT_MATCH`` when it is not in service
        (being built, or not verified since a restart), ``OB_INVALID_ARGUMENT`` for an
        offset outside ``[0, total_size]`` or a negative chunk size, ``OB_ERR_SYS`` when the
        file cannot be read (or while :data:`FAULT_SERVE_DATA_ERROR_FILE` exists). Never
        raises.
        """
        key = (request.tenant_id, request.ls_id)
        me = self._server()

        def fail(err: ObError) -> obrpc_pb2.DataChunk:
            chunk = obrpc_pb2.DataChunk()
            error_to_proto(err, chunk.error)
            return chunk

        if (self.data_dir / FAULT_SERVE_DATA_ERROR_FILE).exists():
            self.log.warning(
                "FetchData of %s refused: fault injected (%s)",
                describe_ls(key),
                FAULT_SERVE_DATA_ERROR_FILE,
            )
            yield fail(
                ObError(
                    "OB_ERR_SYS", detail=f"{me}: fault injected ({FAULT_SERVE_DATA_ERROR_FILE})"
                )
            )
            return
        rep = self._replicas.get(key)
        if rep is None:
            yield fail(
                ObError("OB_ENTRY_NOT_EXIST", f"{me} hosts no replica of {describe_ls(key)}")
            )
            return
        if not rep.in_service:
            why = "is being built" if rep.build is not None else "is not verified yet"
            yield fail(
                ObError(
                    "OB_STATE_NOT_MATCH",
                    detail=f"the replica of {describe_ls(key)} on {me} {why}",
                )
            )
            return
        m, log = rep.meta, rep.log
        total = m.data_size
        if request.chunk_size < 0 or not 0 <= request.offset <= total:
            yield fail(
                ObError(
                    "OB_INVALID_ARGUMENT",
                    "FetchDataRequest",
                    detail=f"offset {request.offset} must be in [0, {total}] and chunk_size "
                    f"{request.chunk_size} >= 0",
                )
            )
            return
        size = min(request.chunk_size or DATA_CHUNK_DEFAULT, DATA_CHUNK_MAX)
        chunk = obrpc_pb2.DataChunk(
            total_size=total,
            checksum=m.data_checksum,
            log_start_index=log.base_index + 1,
            log_end_index=log.end_index,
            term=m.term,
        )
        path = rep.dir / DATA_FILE
        try:
            # The fd keeps the file readable even if the replica is dropped meanwhile.
            fd = await _blocking(os.open, path, os.O_RDONLY)
        except OSError as e:
            yield fail(ObError("OB_ERR_SYS", detail=f"{me}: cannot read {path}: {e}"))
            return
        try:
            pos = request.offset
            while True:
                n = min(size, total - pos)
                at = pos
                try:
                    data = await _blocking(os.pread, fd, n, at)
                except OSError as e:
                    yield fail(ObError("OB_ERR_SYS", detail=f"{me}: cannot read {path}: {e}"))
                    return
                if len(data) != n:
                    yield fail(
                        ObError(
                            "OB_ERR_SYS",
                            detail=f"{me}: {path} ends before byte {at + n} of {total}",
                        )
                    )
                    return
                chunk.offset = pos
                chunk.data = data
                yield chunk
                pos += n
                if pos >= total:
                    return
                chunk = obrpc_pb2.DataChunk(total_size=total)
        finally:
            os.close(fd)

    # -- loops

    async def _replica_loop(self, rep: Replica) -> None:
        """Lead (append), follow (fetch) or idle, by the kept leader; until cancelled."""
        while True:
            try:
                me = self._server()
                leader = rep.meta.leader
                if rep.busy or rep.build is not None:
                    # A replica being built is driven by its build task.
                    await self._wait(rep, _IDLE_S)
                elif leader == me:
                    if await self._wait(rep, self.settings.log_interval / 1e6):
                        continue  # the spec changed: look again before appending
                    if rep.meta.leader == me and not rep.busy:
                        self._append_one(rep)
                elif leader:
                    await self._follow_once(rep)
                    await self._wait(rep, self.poll_interval_s)
                else:
                    await self._wait(rep, _IDLE_S)
                self._note_problem(rep, "")
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self._note_problem(rep, f"{type(e).__name__}: {e}")
                await asyncio.sleep(self.poll_interval_s)

    def _note_problem(self, rep: Replica, problem: str) -> None:
        if problem == rep.last_problem:
            return
        if problem:
            self.log.error("replica %s: %s", describe_ls(rep.key), problem)
        else:
            self.log.info("replica %s: working again", describe_ls(rep.key))
        rep.last_problem = problem

    @staticmethod
    async def _wait(rep: Replica, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when woken early by a change of the replica."""
        try:
            await asyncio.wait_for(rep.wake.wait(), max(0.0, seconds))
        except TimeoutError:
            return False
        rep.wake.clear()
        return True

    def _append_one(self, rep: Replica) -> None:
        log = rep.log
        # ts never goes back, even if the wall clock steps back: lags are computed from it.
        ts = max(self.clock.now_us(), log.end_ts)
        log.append([(log.end_index + 1, rep.meta.term, ts)])

    def _check_faults(self) -> _Faults:
        now = asyncio.get_running_loop().time()
        f = self._faults
        if now - f.checked_at < self.poll_interval_s:
            return f
        f.checked_at = now
        stop = (self.data_dir / FAULT_REPLICATION_STOP_FILE).exists()
        delay = 0
        delay_path = self.data_dir / FAULT_REPLICATION_DELAY_FILE
        with contextlib.suppress(FileNotFoundError):
            raw = delay_path.read_text(encoding="utf-8", errors="replace").strip()
            try:
                delay = max(0, int(raw))
            except ValueError:
                if f.delay_ms != -1:
                    self.log.warning("ignoring %s: %r is not an integer", delay_path, raw[:40])
                delay = -1  # remembered as "malformed" so the warning is not repeated
        if stop != f.stop:
            if stop:
                self.log.warning(
                    "fault injected: followers stop fetching (%s)", FAULT_REPLICATION_STOP_FILE
                )
            else:
                self.log.info("followers fetch again (%s removed)", FAULT_REPLICATION_STOP_FILE)
        if delay != f.delay_ms:
            if delay > 0:
                self.log.warning(
                    "fault injected: followers lag %d ms behind (%s)", delay, delay_path
                )
            elif f.delay_ms > 0:
                self.log.info("replication delay removed")
        f.stop, f.delay_ms = stop, delay
        return f

    async def _follow_once(self, rep: Replica) -> None:
        faults = self._check_faults()
        if faults.stop:
            return
        leader, term, gen = rep.meta.leader, rep.meta.term, rep.generation
        cutoff = None
        if faults.delay_ms > 0:
            cutoff = self.clock.now_us() - faults.delay_ms * 1000
        outcome = await self._pull(
            rep,
            leader,
            term,
            cutoff,
            self.settings.rpc_timeout / 1e6,
            lambda: rep.generation == gen and not rep.busy,
        )
        if outcome == "stale":
            return
        state = "" if outcome == "ok" else outcome
        # Per peer and LS, and by the kind of failure only: a message carrying indexes or
        # terms would otherwise log every poll.
        kind = state.partition(":")[0]
        where = (leader, rep.key)
        if self._peer_state.get(where, "") != kind:
            if state:
                self.log.warning(
                    "replica %s: cannot fetch the log from %s: %s",
                    describe_ls(rep.key),
                    leader,
                    state,
                )
            elif where in self._peer_state:
                self.log.info("replica %s: fetching from %s again", describe_ls(rep.key), leader)
            self._peer_state[where] = kind

    async def _pull(
        self,
        rep: Replica,
        peer: str,
        term: int,
        cutoff_ts: int | None,
        timeout_s: float,
        still_valid: Callable[[], bool],
    ) -> str:
        """One FetchLog from ``peer`` merged into ``rep``'s log; ``"ok"``, ``"stale"`` (the
        replica changed meanwhile: answer dropped) or a one-line reason."""
        log = rep.log
        if rep.need_verify and log.end_index > log.base_index:
            from_index = max(log.base_index + 1, log.end_index - rep.verify_window + 1)
        else:
            from_index = log.end_index + 1
        req = obrpc_pb2.FetchLogRequest(
            tenant_id=rep.meta.tenant_id,
            ls_id=rep.meta.ls_id,
            from_index=from_index,
            max_entries=FETCH_MAX_ENTRIES,
            follower=self._server(),
            term=term,
        )
        try:
            resp = await self._stub(peer).FetchLog(req, timeout=max(0.01, timeout_s))
        except grpc.aio.AioRpcError as e:
            return f"{e.code().name}: {(e.details() or '').replace(chr(10), ' ')}"
        except (TimeoutError, OSError) as e:
            return f"{type(e).__name__}: {e}"
        if not still_valid() or self._replicas.get(rep.key) is not rep:
            return "stale"
        err = error_from_proto(resp.error)
        if err is not None:
            return f"{err.name}: {err.message}"
        entries: list[Entry] = [(e.index, e.term, e.ts) for e in resp.entries]
        if any(e[0] != entries[0][0] + i for i, e in enumerate(entries)):
            return "answer with non-consecutive entries ignored"
        if entries and entries[0][0] < from_index:
            return f"answer starting at {entries[0][0]} before {from_index} ignored"
        end_before = log.end_index
        verified, _ = merge_fetched(
            log, entries, from_index, resp.end_index, rep.need_verify, cutoff_ts
        )
        if rep.need_verify:
            if verified:
                rep.need_verify = False
            else:
                rep.verify_window = min(2 * rep.verify_window, FETCH_MAX_ENTRIES)
        elif resp.end_index < end_before:
            # We were ahead of the leader (a leader change): what we kept is unchecked.
            rep.need_verify = True
        return "ok"

    def _stub(self, peer: str) -> obrpc_pb2_grpc.ReplicaServiceStub:
        ch = self._channels.get(peer)
        if ch is None:
            ch = grpc.aio.insecure_channel(peer, options=[("grpc.enable_http_proxy", 0)])
            self._channels[peer] = ch
        return obrpc_pb2_grpc.ReplicaServiceStub(ch)


def _unchanged(rep: Replica, generation: int) -> Callable[[], bool]:
    """True while ``rep`` keeps ``generation`` and no ApplyReplicas is changing it."""
    return lambda: rep.generation == generation and not rep.busy


class _CopyFailed(Exception):
    """A copy of a replica's data file failed; the message is the one-line reason reported as
    ``build_error``."""


_T = TypeVar("_T")


def _retrieve(fut: asyncio.Future[Any]) -> None:
    # Mark an abandoned thread's outcome as seen (no "exception never retrieved" warning).
    if not fut.cancelled():
        fut.exception()


async def _blocking(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a thread. When the caller is cancelled meanwhile, wait (bounded) for
    ``fn`` to return before re-raising, so that the cleanup that follows never races the
    thread (an fd closed under a read, a temp file removed under a write)."""
    fut = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    fut.add_done_callback(_retrieve)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await asyncio.wait({fut}, timeout=_CLOSE_TIMEOUT_S)
        raise


def _open_for_copy(tmp: Path) -> Any:
    tmp.parent.mkdir(parents=True, exist_ok=True)
    return open(tmp, "wb")  # noqa: SIM115 - written chunk by chunk, closed by the caller


def _write_chunk(fh: Any, data: bytes, crc: int) -> int:
    fh.write(data)
    return zlib.crc32(data, crc)


def _sync_and_close(fh: Any) -> None:
    try:
        fh.flush()
        os.fsync(fh.fileno())
    finally:
        fh.close()


def _checksum_or_missing(path: Path) -> tuple[int, int]:
    try:
        return file_checksum(path)
    except FileNotFoundError:
        return -1, 0


def _parse_name(name: str) -> Key | None:
    tenant, sep, ls = name.partition("_")
    if not sep or not tenant.isdigit() or not ls.isdigit():
        return None
    return int(tenant), int(ls)


def _check_spec(spec: obrpc_pb2.ReplicaSpec) -> tuple[str, ...]:
    """Validate one spec; returns its member list normalized and sorted. Raises
    ``ObError(OB_INVALID_ARGUMENT)`` naming the LS."""
    key = (spec.tenant_id, spec.ls_id)

    def bad(why: str) -> ObError:
        return ObError("OB_INVALID_ARGUMENT", "ReplicaSpec", detail=f"{describe_ls(key)}: {why}")

    if spec.tenant_id <= 0 or spec.ls_id <= 0:
        raise bad("tenant_id and ls_id must be > 0")
    if spec.term < 0 or spec.paxos_replica_number < 0 or spec.catch_up_index < 0:
        raise bad("term, paxos_replica_number and catch_up_index must be >= 0")
    members = _addresses(spec.member_list, bad)
    _addresses([a for a in (spec.leader, spec.catch_up_from, spec.copy_from) if a.strip()], bad)
    return members


def _normalize(addr: str) -> str:
    """``ip:port`` as :func:`_addresses` writes it; "" for an empty address. The address must
    have passed :func:`_check_spec`."""
    if not addr.strip():
        return ""
    host, port = parse_host_port(addr)
    return f"{host}:{port}"


def _addresses(addrs: Iterable[str], bad: Callable[[str], ObError]) -> tuple[str, ...]:
    out: set[str] = set()
    for a in addrs:
        try:
            host, port = parse_host_port(a)
        except ValueError as e:
            raise bad(str(e)) from None
        out.add(f"{host}:{port}")
    return tuple(sorted(out))
