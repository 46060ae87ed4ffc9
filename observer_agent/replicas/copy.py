"""Building a replica by streaming it from a member: replica migration (docs/design/migration.md,
"disaster recovery").

A spec with ``copy_from`` for a replica this agent does not host builds it from that member
instead of generating it (``ApplyReplicas`` returns at once; the build goes on in a task):

1. *queued* while :attr:`AgentSettings.max_concurrent_copies` copies already run;
2. *copying*: ``ReplicaService.FetchData`` (asked for ``bulk``) gives the data file's size,
   crc32 and log position, and either streams the file or, when the source serves HTTP(S),
   names the URL of the bulk path (:mod:`observer_agent.replicas.copy_http`); the
   bytes go into a temp file in the replica's directory; size and crc32 are checked against
   that first chunk, the file is fsynced and renamed to ``data``;
3. *log*: the log is created empty right before the source's first kept entry (the data file
   is the snapshot, older entries are not needed), ``meta.json`` is written (with
   ``copy_from`` and ``catch_up_to`` = the source's ``log_end_index``), and the log is fetched
   from the leader (from the source when the LS has no other leader) until it reaches
   ``catch_up_to``; then ``meta.json`` drops both marks and the replica is in service.

A copy that fails (source unreachable, error chunk, size or checksum mismatch) stops with
``build_error`` reported; the next spec carrying a ``copy_from`` restarts it from scratch.
There is no ``meta.json`` before step 3, so an agent restarted during steps 1-2 finds no
replica (the manager's ``load`` removes the directory); one restarted during step 3 resumes
step 3 (:meth:`ReplicaCopier.resume`).

:data:`~observer_agent.replicas.faults.FAULT_COPY_SLOW_FILE` slows copies down,
:data:`~observer_agent.replicas.faults.FAULT_REPLICATION_STOP_FILE` stops step 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from observer_agent.address import LocalServer
from observer_agent.disk import check_free_space, is_out_of_space, os_error_to_ob
from observer_agent.identity import fsync_dir
from observer_agent.replicas.copy_stream import (
    ChunkThrottle,
    CopyFailed,
    receive_data_file,
    write_failed,
)
from observer_agent.replicas.faults import FAULT_REPLICATION_STOP_FILE, ReplicationFaults
from observer_agent.replicas.hosted import HostedReplicas
from observer_agent.replicas.log import LOG_KEEP_ENTRIES, ReplicaLog
from observer_agent.replicas.peers import PeerChannels
from observer_agent.replicas.replica import (
    BUILD_COPYING,
    BUILD_FAILED,
    BUILD_LOG,
    Build,
    Replica,
)
from observer_agent.replicas.replication import IDLE_S, unchanged
from observer_agent.replicas.serving import DATA_CHUNK_DEFAULT
from observer_agent.replicas.storage import (
    DATA_FILE,
    ReplicaMeta,
    ReplicaPaths,
    describe_ls,
    write_meta,
)
from observer_agent.replicas.tasks import CLOSE_TIMEOUT_S, TaskSet, run_blocking
from observer_agent.settings import AgentSettings


class LogPuller(Protocol):
    """What a copy needs of log replication (implemented by
    :class:`observer_agent.replicas.replication.LogReplication`)."""

    @property
    def poll_interval_s(self) -> float:
        """Pause between two fetches of a follower, seconds."""
        ...

    def launch(self, rep: Replica) -> None:
        """Start the loop of a new replica if the loops run."""
        ...

    async def pull(
        self,
        rep: Replica,
        peer: str,
        term: int,
        cutoff_ts: int | None,
        timeout_s: float,
        still_valid: Callable[[], bool],
    ) -> str:
        """One ``FetchLog`` from ``peer`` merged into ``rep``'s log; ``"ok"``, ``"stale"``
        or a one-line reason."""
        ...


class CopyFaults(Protocol):
    """The fault switches a copy obeys (implemented by
    :class:`observer_agent.replicas.faults.FaultSwitches`)."""

    def copy_delay_s(self) -> float:
        """Seconds to sleep after each chunk received (0 = none)."""
        ...

    def copy_stalled(self) -> bool:
        """True while copies must receive nothing more."""
        ...

    def replication(self) -> ReplicationFaults:
        """The replication switches (``stop`` halts the log catch-up)."""
        ...


class ReplicaCopier:
    """The builds of replicas by copy on one agent (see the module doc).

    ``settings`` gives ``rpc_timeout`` (per chunk), ``max_concurrent_copies`` and
    ``replica_size`` (the most bytes a source may announce); ``me`` this agent's ``ip:port``; ``paths`` where replicas live; ``hosted`` the replicas (a build
    whose replica was dropped or replaced stops); ``peers`` the channels to sources and
    leaders; ``faults`` the copy and replication switches; ``replication`` pulls the log in
    step 3; ``tasks`` keeps the build tasks (cancelled at stop); ``log`` the agent's logger;
    ``bandwidth`` the bytes-per-second limit all copies of this agent share.
    ``log_keep`` is the entries a compaction of the new log keeps, ``chunk_size`` the bytes
    per chunk asked of the source.
    """

    def __init__(
        self,
        settings: AgentSettings,
        me: LocalServer,
        paths: ReplicaPaths,
        hosted: HostedReplicas,
        peers: PeerChannels,
        faults: CopyFaults,
        replication: LogPuller,
        tasks: TaskSet,
        log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
        bandwidth: ChunkThrottle,
        *,
        log_keep: int = LOG_KEEP_ENTRIES,
        chunk_size: int = DATA_CHUNK_DEFAULT,
    ) -> None:
        """No copy runs until :meth:`create`."""
        self._bandwidth = bandwidth
        self.settings = settings
        self._me = me
        self._paths = paths
        self._hosted = hosted
        self._peers = peers
        self._faults = faults
        self._replication = replication
        self._tasks = tasks
        self.log = log
        self._log_keep = log_keep
        self._chunk_size = chunk_size
        self._copy_slots: asyncio.Semaphore | None = None
        # Bytes received by the finished copy attempts, and the running attempts (by id):
        # :meth:`copied_bytes` adds both, so the total only grows. The lock
        # because /metrics is rendered in a worker thread: it must never see an attempt
        # moved half-way from one to the other (a counter going down reads as a reset).
        self._copied_done = 0
        self._running: dict[int, Build] = {}
        self._count_lock = threading.Lock()

    def _slots(self) -> asyncio.Semaphore:
        if self._copy_slots is None:
            self._copy_slots = asyncio.Semaphore(self.settings.max_concurrent_copies)
        return self._copy_slots

    def forget_slots(self) -> None:
        """Drop the copy throttle: a later start may run on another event loop, and asyncio
        primitives bind to one."""
        self._copy_slots = None

    async def create(
        self, spec: obrpc_pb2.ReplicaSpec, members: tuple[str, ...], source: str
    ) -> Replica:
        """Register an absent replica as being built from ``source`` and start the copy;
        returns at once (nothing but stale files is touched here). ``members`` is the
        normalised member list. Raises ``ObError(OB_ERR_SYS)`` when old files cannot be
        removed."""
        key = (spec.tenant_id, spec.ls_id)
        try:
            # Files of an earlier life of this LS that could not be loaded: a meta.json left
            # there would make a half-copied replica look complete after a restart.
            await asyncio.to_thread(self._paths.remove_files, [key])
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
        rep = Replica(
            meta,
            self._paths.replica_dir(key),
            ReplicaLog(self._paths.log_path(key), self._log_keep),
        )
        self._hosted.add(rep)
        self._replication.launch(rep)
        self.start(rep, source)
        self.log.info("replica %s: building it by copy from %s", describe_ls(key), source)
        return rep

    def start(self, rep: Replica, source: str) -> None:
        """Start a new copy of ``rep`` from ``source`` (from byte 0); it is no longer in
        service until the build ends. Must run on the event loop."""
        b = Build(source=source)
        rep.build = b
        rep.in_service = False
        b.task = self._tasks.spawn(self._build_replica(rep, b), f"copy {describe_ls(rep.key)}")

    def resume(self, rep: Replica) -> None:
        """Resume step 3 of ``rep``'s build (its data file is in place and verified: a
        restart happened during step 3) unless it runs or ``rep`` is no longer hosted."""
        b = rep.build
        assert b is not None
        if self._hosted.hosts(rep) and (b.task is None or b.task.done()):
            b.task = self._tasks.spawn(self.build_log(rep, b), f"build {describe_ls(rep.key)}")

    async def restart(self, rep: Replica, source: str) -> None:
        """Cancel the copy of ``rep`` (waiting for it to clean up) and start a new one from
        ``source``, from byte 0."""
        old = rep.build
        assert old is not None
        if old.task is not None and not old.task.done():
            old.task.cancel()
            await asyncio.wait({old.task}, timeout=CLOSE_TIMEOUT_S)
        self.start(rep, source)
        self.log.info(
            "replica %s: copy restarted from %s (the copy from %s was %s%s)",
            describe_ls(rep.key),
            source,
            old.source,
            old.state,
            f": {old.error}" if old.error else "",
        )

    async def _build_replica(self, rep: Replica, b: Build) -> None:
        """The whole build of ``rep``: wait for a copy slot, copy, install, catch up the log.
        A failure of the copy or the install ends it with ``b.error`` set."""
        key = rep.key
        tmp = rep.dir / f".{DATA_FILE}.copy.tmp.{uuid.uuid4().hex}"
        try:
            # On the loop, before the first await: a drop cancels this task and then removes
            # the directory, so a worker thread still opening ``tmp`` afterwards fails
            # instead of creating the directory again (a replica nobody hosts, on disk for
            # good). One mkdir; not worth a thread.
            try:
                rep.dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise CopyFailed(write_failed(tmp, e)) from None
            async with self._slots():
                b.state = BUILD_COPYING
                # Apart from "building it by copy": a queued copy starts here.
                self.log.info("replica %s: copying its data from %s", describe_ls(key), b.source)
                await self._check_room(rep)
                first = await self._copy_data(rep, b, tmp)
            installed = await self._install(rep, b, tmp, first)
        except CopyFailed as e:
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
                # The replica's directory too when nothing else is in it: a refused or
                # failed copy leaves nothing behind on the disk.
                with contextlib.suppress(OSError):
                    rep.dir.rmdir()
        if installed:
            await self.build_log(rep, b)

    async def _check_room(self, rep: Replica) -> None:
        """Refuse the copy before anything is written when the data disk has less room than
        a replica (``replica_size``): OceanBase's "cannot migrate in" check, with its error
        ``OB_SERVER_OUTOF_DISK_SPACE``. Raises :class:`CopyFailed`."""
        try:
            await run_blocking(
                check_free_space,
                self._paths.data_dir,
                self.settings.replica_size,
                f"the copy of {describe_ls(rep.key)}",
            )
        except ObError as e:
            raise CopyFailed(str(e)) from None

    async def _copy_data(self, rep: Replica, b: Build, tmp: Path) -> obrpc_pb2.DataChunk:
        """Stream the data file from ``b.source`` into ``tmp`` (fsynced, closed); returns the
        first chunk (size, checksum, log indexes). Raises :class:`CopyFailed`."""
        src = b.source
        timeout_s = self.settings.rpc_timeout / 1e6
        req = obrpc_pb2.FetchDataRequest(
            tenant_id=rep.meta.tenant_id,
            ls_id=rep.meta.ls_id,
            offset=0,
            chunk_size=self._chunk_size,
            bulk=True,
        )
        # No deadline on the whole stream (a copy may take long): each chunk has one instead.
        call = self._peers.stub(src).FetchData(req)
        with self._count_lock:
            b.bytes_copied = 0
            self._running[id(b)] = b
        try:
            return await receive_data_file(
                call,
                src,
                tmp,
                b,
                timeout_s,
                self._faults,
                self.settings.replica_size,
                throttle=self._bandwidth,
                bulk=lambda first, sink: self._peers.http.fetch(first, sink, src, timeout_s),
            )
        finally:
            with self._count_lock:
                del self._running[id(b)]
                self._copied_done += b.bytes_copied

    def copied_bytes(self) -> int:
        """Bytes received by every copy attempt of this process so far (the running ones
        included): the ``ob_agent_copied_bytes_total`` counter."""
        with self._count_lock:
            return self._copied_done + sum(b.bytes_copied for b in self._running.values())

    def copies_running(self) -> int:
        """Copy attempts receiving a data file now."""
        return len(self._running)

    async def _install(self, rep: Replica, b: Build, tmp: Path, first: obrpc_pb2.DataChunk) -> bool:
        """Move the copied file into place, create the log right before the source's first
        kept entry and write ``meta.json`` (last: it marks the data complete). Under the
        apply lock, so no ``ApplyReplicas`` writes meta meanwhile. False when the replica
        was dropped or its copy replaced meanwhile. Raises :class:`CopyFailed`."""
        key = rep.key
        async with self._hosted.lock():
            if not self._hosted.hosts(rep) or rep.build is not b:
                return False
            meta = dataclasses.replace(
                rep.meta,
                data_size=first.total_size,
                data_checksum=first.checksum,
                copy_from=b.source,
                catch_up_to=first.log_end_index,
            )
            directory, log_path, keep = rep.dir, self._paths.log_path(key), self._log_keep
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
                log = await run_blocking(install)
            except OSError as e:
                raise CopyFailed(
                    str(os_error_to_ob(e, "cannot install the copied data file"))
                    if is_out_of_space(e)
                    else f"cannot install the copied data file: {e}"
                ) from None
            rep.log.close()
            rep.log = log
            b.bytes_copied = b.total_size = first.total_size
            b.target = first.log_end_index
            b.state = BUILD_LOG
            rep.set_meta(meta)
        self.log.info(
            "replica %s: %d bytes copied from %s over %s (crc32 %d); catching up its log from "
            "index %d to %d",
            describe_ls(key),
            first.total_size,
            b.source,
            first.data_url.partition(":")[0] if first.data_url else "the FetchData stream",
            first.checksum,
            base + 1,
            b.target,
        )
        return True

    async def build_log(self, rep: Replica, b: Build) -> None:
        """Fetch the log of a copied replica until it reaches ``b.target`` (from the leader
        it follows, or from the source when it knows no other leader), then put it in
        service. Goes on until done, dropped or cancelled."""
        key = rep.key
        while rep.log.end_index < b.target:
            if not self._hosted.hosts(rep) or rep.build is not b:
                return
            peer, term = log_peer(rep, b, self._me.server)
            before = rep.log.end_index
            if self._faults.replication().stop:
                outcome = f"fetching stopped by {FAULT_REPLICATION_STOP_FILE}"
            else:
                gen = rep.generation
                try:
                    outcome = await self._replication.pull(
                        rep,
                        peer,
                        term,
                        None,
                        self.settings.rpc_timeout / 1e6,
                        unchanged(rep, gen),
                    )
                except OSError as e:
                    outcome = f"{type(e).__name__}: {e}"
            if outcome in ("ok", "stale"):
                self._note_build_problem(rep, b, "", "")
                if outcome == "ok":
                    b.refused.discard(peer)
                    b.served_by = peer
                    b.catch_up_error = ""
                if rep.log.end_index > before:
                    continue  # more may be waiting: no pause
            else:
                if not self._faults.replication().stop:
                    # A refusal or an unreachable peer (not the test switch): ask another
                    # member next, and tell the RS, which announces the copy again.
                    b.refused.add(peer)
                    if b.served_by == peer:
                        b.served_by = ""
                    b.catch_up_error = f"{peer} {outcome}"[:CATCH_UP_ERROR_CHARS]
                self._note_build_problem(
                    rep,
                    b,
                    f"{peer} {outcome.partition(':')[0]}",
                    f"log catch-up from {peer}: {outcome}",
                )
            await asyncio.sleep(self._replication.poll_interval_s)
        while True:
            async with self._hosted.lock():
                if not self._hosted.hosts(rep) or rep.build is not b:
                    return
                meta = dataclasses.replace(rep.meta, copy_from="", catch_up_to=0)
                try:
                    await run_blocking(write_meta, rep.dir, meta)
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
            await asyncio.sleep(IDLE_S)

    def _note_build_problem(self, rep: Replica, b: Build, kind: str, problem: str) -> None:
        # Logged when the kind changes only: a message with indexes would log every poll.
        if kind == b.problem:
            return
        if problem:
            self.log.warning("replica %s (building): %s", describe_ls(rep.key), problem)
        elif b.problem:
            self.log.info("replica %s (building): fetching the log again", describe_ls(rep.key))
        b.problem = kind


#: At most this many characters of a catch-up refusal are reported (the RS's bound on
#: ``ReplicaInfo.catch_up_error`` is larger).
CATCH_UP_ERROR_CHARS = 200


def log_peer(rep: Replica, b: Build, me: str) -> tuple[str, int]:
    """Whom a copy in its log phase asks for the log next, as ``(peer 'ip:port', term)``.

    In order: the newer leader a peer named (``rep.leader_hint``, term 0); the peer that
    served the last fetch; the leader the spec names (at its term); then, term 0, the
    members, the source, in address order; each skipped once it refused. A catch-up
    claims no term (``serving.fetch_log``): whoever leads serves it, so after a refusal by
    a former leader (it lost the copy from its learners, or no longer leads) the copy finds
    the current leader by asking the others (OceanBase's learners likewise fetch
    from any member that serves them). When every candidate refused, the refusals are
    forgotten and the round starts again from the spec's leader, as they are when a new
    spec changes the replica (its ``generation``: the RS may just have announced it)."""
    if b.refused_generation != rep.generation:
        b.refused.clear()
        b.served_by = ""
        b.refused_generation = rep.generation
    if rep.leader_hint and rep.leader_hint not in b.refused:
        return rep.leader_hint, 0
    leader = rep.meta.leader
    if b.served_by and b.served_by != me and b.served_by not in b.refused:
        return b.served_by, rep.meta.term if b.served_by == leader else 0
    if leader and leader != me and leader not in b.refused:
        return leader, rep.meta.term
    others = sorted({*rep.meta.member_list, b.source} - {me, leader, ""} - b.refused)
    if others:
        return others[0], 0
    b.refused.clear()
    if leader and leader != me:
        return leader, rep.meta.term
    return b.source, 0
