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

Fault switches (files in DATA_DIR, checked at most once per follower poll):
:data:`FAULT_REPLICATION_STOP_FILE` stops every follower of this agent from fetching;
:data:`FAULT_REPLICATION_DELAY_FILE` holding an integer N makes followers apply only entries
whose ``ts <= now - N ms``.

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from observer_agent.resources import CLOG_DIR
from observer_agent.settings import AgentSettings, parse_host_port
from rootservice.clock import Clock
from rootservice.errors import ObError, error_from_proto, error_to_proto
from rootservice.proto import obrpc_pb2, obrpc_pb2_grpc

REPLICAS_DIR = "replicas"
DATA_FILE = "data"
META_FILE = "meta.json"
LOG_FILE = "log"

#: While this file exists in DATA_DIR, followers on this agent do not fetch (they fall behind).
FAULT_REPLICATION_STOP_FILE = "FAULT_REPLICATION_STOP"
#: This file in DATA_DIR holding an integer N makes followers apply only entries at least
#: N milliseconds old (by their ``ts``): a steady replication lag of about N ms.
FAULT_REPLICATION_DELAY_FILE = "FAULT_REPLICATION_DELAY_MS"

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


def _fsync_dir(directory: Path) -> None:
    # A rename is only durable once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, payload: bytes) -> None:
    """Replace ``path`` with ``payload``: temp file in the same directory, fsync, rename,
    fsync the directory. After a crash the file is the old or the new one, never half of
    one. Raises ``OSError`` (the temp file is removed)."""
    tmp = path.with_name(f".{path.name}.tmp.{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


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
    _fsync_dir(path.parent)
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
    data file as built.
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


class Replica:
    """One hosted replica: its meta, log and in-process state.

    ``in_service`` is True once the data file is built or verified. ``busy`` is set while an
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
        return obrpc_pb2.ReplicaInfo(
            tenant_id=m.tenant_id,
            ls_id=m.ls_id,
            unit_id=m.unit_id,
            role=obrpc_pb2.LEADER if m.leader and m.leader == me else obrpc_pb2.FOLLOWER,
            member_list=list(m.member_list),
            replica_type=m.replica_type,
            paxos_replica_number=m.paxos_replica_number,
            data_size=m.data_size,
            required_size=m.data_size + self.log.size_bytes,
            in_service=self.in_service,
            term=m.term,
            leader=m.leader,
            log_end_index=self.log.end_index,
            log_end_ts=self.log.end_ts,
            data_checksum=m.data_checksum,
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
    """Every replica of one agent: storage, the leader/follower loops, ``ApplyReplicas`` and
    ``FetchLog``.

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
    ) -> None:
        """Nothing is read until :meth:`load`; ``log_keep`` = entries kept by compaction."""
        self.data_dir = Path(data_dir)
        self.settings = settings
        self.clock = clock
        self._server = server
        self.log: Any = log or _logger
        self.log_keep = log_keep
        self._replicas: dict[Key, Replica] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._peer_state: dict[tuple[str, Key], str] = {}
        self._faults = _Faults()
        self._tasks: set[asyncio.Future[Any]] = set()
        self._apply_lock: asyncio.Lock | None = None
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

        Each starts not in service until :meth:`start` has verified its data file. A
        directory without ``meta.json`` is a creation that never finished: it is removed,
        with its log. A log directory without a replica is removed. A replica whose meta or
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
                self._replicas[key] = Replica(meta, d, log)
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
        threads). Must run on the event loop; a no-op when already started."""
        self._stopped = False
        if self._started:
            return
        self._started = True
        for rep in self._replicas.values():
            if not rep.in_service:
                self._spawn(self._verify(rep), f"verify {describe_ls(rep.key)}")
            self._start_loop(rep)

    def _ensure_started(self) -> None:
        if not self._started and not self._stopped:
            self.start()

    async def stop(self) -> None:
        """Cancel every loop and pending apply, close the logs and peer channels; bounded in
        time, never raises, idempotent."""
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
        for rep in self._replicas.values():
            rep.log.close()
        # A later start may run on another event loop; asyncio primitives bind to one.
        self._apply_lock = None
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
        if self._apply_lock is None:
            self._apply_lock = asyncio.Lock()
        errors: list[ObError] = []
        async with self._apply_lock:
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
        rep = self._replicas.get(key)
        if rep is None:
            rep = await self._create(spec, members)
        if spec.term < rep.meta.term:
            self.log.info(
                "replica %s: spec with term %d ignored (term %d kept)",
                describe_ls(key),
                spec.term,
                rep.meta.term,
            )
            return
        me = self._server()
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
            if new != old:
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

    async def _drop(self, key: Key) -> None:
        rep = self._replicas.pop(key, None)
        if rep is not None:
            task, rep.task = rep.task, None
            if task is not None:
                task.cancel()
                await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT_S)
            rep.log.close()
        directory, log_dir = self.replica_dir(key), self.log_path(key).parent

        def remove() -> None:
            for d in (directory, log_dir):
                if d.exists():
                    shutil.rmtree(d)

        try:
            await asyncio.to_thread(remove)
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
        of the switch first; catch-ups send term 0). Otherwise
        ``OB_NOT_MASTER`` in ``error`` (with ``term`` and ``leader`` as known here). Entries
        start at the first one still kept when ``from_index`` was compacted away; at most
        ``min(max_entries, 1000)`` (1000 when 0). Never raises.
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

    # -- loops

    async def _replica_loop(self, rep: Replica) -> None:
        """Lead (append), follow (fetch) or idle, by the kept leader; until cancelled."""
        while True:
            try:
                me = self._server()
                leader = rep.meta.leader
                if rep.busy:
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
    _addresses([a for a in (spec.leader, spec.catch_up_from) if a], bad)
    return members


def _addresses(addrs: Iterable[str], bad: Callable[[str], ObError]) -> tuple[str, ...]:
    out: set[str] = set()
    for a in addrs:
        try:
            host, port = parse_host_port(a)
        except ValueError as e:
            raise bad(str(e)) from None
        out.add(f"{host}:{port}")
    return tuple(sorted(out))
