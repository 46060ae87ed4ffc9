"""The ``ReplicaManager``: every LS replica one agent hosts (docs/design/migration.md), composed of
the parts of :mod:`observer_agent.replicas`.

It loads the replicas kept in DATA_DIR at start-up, starts and stops their loops, verifies
their data files, applies ``ObserverService.ApplyReplicas`` one request at a time, answers
``ReplicaService.FetchLog`` / ``FetchData``, and reports every replica in each lease request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from obcommon.bounds import check_term
from obcommon.clock import Clock
from obcommon.errors import ObError, error_to_proto
from obcommon.proto import obrpc_pb2
from obcommon.security.certs import Role
from obcommon.security.tls import TransportSecurity
from observer_agent.address import LocalServer
from observer_agent.replicas.apply import SpecApplier
from observer_agent.replicas.bandwidth import CopyBandwidth
from observer_agent.replicas.copy import ReplicaCopier
from observer_agent.replicas.faults import FaultSwitches
from observer_agent.replicas.hosted import HostedReplicas
from observer_agent.replicas.log import LOG_KEEP_ENTRIES, ReplicaLog
from observer_agent.replicas.peers import PeerChannels
from observer_agent.replicas.replica import BUILD_LOG, Build, Replica
from observer_agent.replicas.replication import LogReplication, poll_interval_s
from observer_agent.replicas.serving import DATA_CHUNK_DEFAULT, ReplicaServing
from observer_agent.replicas.storage import (
    DATA_FILE,
    META_FILE,
    ReplicaPaths,
    build_data_file,
    checksum_or_missing,
    describe_ls,
    parse_name,
    read_meta,
    write_meta,
)
from observer_agent.replicas.tasks import CLOSE_TIMEOUT_S, TaskSet
from observer_agent.settings import AgentSettings

_logger = logging.getLogger("observer_agent.replicas")


def absurd_terms(
    request: obrpc_pb2.ApplyReplicasRequest,
    hosted: HostedReplicas,
    log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
) -> ObError | None:
    """``OB_INVALID_ARGUMENT`` naming the first spec whose ``term`` jumps more than
    :data:`~obcommon.bounds.MAX_TERM_JUMP` above the term kept for its replica (0 for
    an absent one) or exceeds 2^53, else None. Checked for the whole request before any
    spec is applied, so such a request changes nothing (one ApplyReplicas with
    term 2^63-1 broke the RS's LS reconciler until restart). ``hosted`` is the agent's
    replicas: call under their lock; ``log`` hears the refusal."""
    for spec in request.upsert:
        key = (spec.tenant_id, spec.ls_id)
        rep = hosted.find(key)
        why = check_term("term", spec.term, rep.meta.term if rep is not None else 0)
        if why:
            log.warning("ApplyReplicas refused: %s: %s", describe_ls(key), why)
            return ObError("OB_INVALID_ARGUMENT", f"ReplicaSpec of {describe_ls(key)}: {why}")
    return None


class ReplicaManager:
    """Every replica of one agent: storage, the leader/follower loops, ``ApplyReplicas``,
    ``FetchLog``, ``FetchData`` and the builds of replicas by copy (replica migration).

    ``me`` gives the agent's ``ip:port`` (known only once its gRPC server is bound);
    ``log`` is the agent's logger adapter. Call :meth:`load` once (blocking, at start-up),
    :meth:`start` on the event loop (the agent's ``run`` does; :meth:`apply` starts it too),
    and :meth:`stop` at the end.
    """

    def __init__(
        self,
        data_dir: Path,
        settings: AgentSettings,
        clock: Clock,
        me: LocalServer,
        log: logging.LoggerAdapter | None = None,  # type: ignore[type-arg]
        *,
        log_keep: int = LOG_KEEP_ENTRIES,
        copy_chunk_size: int = DATA_CHUNK_DEFAULT,
        security: TransportSecurity | None = None,
        copy_bandwidth: CopyBandwidth | None = None,
    ) -> None:
        """Nothing is read until :meth:`load`; ``log_keep`` = entries kept by compaction,
        ``copy_chunk_size`` = bytes per chunk a copy asks its source for,
        ``copy_bandwidth`` = the limit every copy shares (default: one of its own,
        unlimited until its rate is set)."""
        self.copy_bandwidth = copy_bandwidth or CopyBandwidth()
        self.paths = ReplicaPaths(data_dir)
        self.settings = settings
        self._me = me
        self.log: logging.Logger | logging.LoggerAdapter = log or _logger  # type: ignore[type-arg]
        self._log_keep = log_keep
        self._hosted = HostedReplicas()
        # The number of the last report built (LeaseRequest / ApplyReplicasResponse
        # .replicas_version): the RS orders the reports of both RPCs by it.
        self._report_version = 0
        self._peers = PeerChannels(
            security or TransportSecurity.for_dir(settings.certs_dir, Role.NODE)
        )
        self._tasks = TaskSet()
        self._faults = FaultSwitches(self.paths.data_dir, poll_interval_s(settings), self.log)
        self._replication = LogReplication(
            settings, clock, me, self._hosted, self._peers, self._faults, self.log
        )
        self._copier = ReplicaCopier(
            settings,
            me,
            self.paths,
            self._hosted,
            self._peers,
            self._faults,
            self._replication,
            self._tasks,
            self.log,
            self.copy_bandwidth,
            log_keep=log_keep,
            chunk_size=copy_chunk_size,
        )
        self._applier = SpecApplier(
            settings,
            me,
            self.paths,
            self._hosted,
            self._replication,
            self._copier,
            self.log,
            log_keep=log_keep,
        )
        self._serving = ReplicaServing(me, self._hosted, self._faults, self.log)
        self._started = False
        self._stopped = False

    # -- state

    def allowed_peers(self, tenant_id: int, ls_id: int) -> frozenset[str]:
        """The nodes that may fetch this LS's data and log here: its members and
        learners; none when this agent hosts no replica of it."""
        rep = self.get(tenant_id, ls_id)
        if rep is None:
            return frozenset()
        return frozenset(rep.meta.member_list) | rep.learners

    def get(self, tenant_id: int, ls_id: int) -> Replica | None:
        """The hosted replica of ``(tenant_id, ls_id)``, or None."""
        return self._hosted.find((tenant_id, ls_id))

    def keys(self) -> list[tuple[int, int]]:
        """The hosted replicas' ``(tenant_id, ls_id)``, sorted."""
        return self._hosted.sorted_keys()

    def roles(self) -> dict[str, int]:
        """Hosted replicas by role (``leader``, ``follower``, ``learner``: every role
        present, at 0 when none; :meth:`observer_agent.replicas.replica.Replica.role`)."""
        out = {"leader": 0, "follower": 0, "learner": 0}
        for rep in self._hosted.all():
            out[rep.role(self._me.server)] += 1
        return out

    def log_lags(self) -> list[tuple[int, int, int]]:
        """``(tenant_id, ls_id, entries behind the leader)`` of every hosted replica."""
        me = self._me.server
        return [(*rep.key, rep.log_lag(me)) for rep in self._hosted.all()]

    def copied_bytes(self) -> int:
        """Bytes received by copies so far (only grows)."""
        return self._copier.copied_bytes()

    def copies_running(self) -> int:
        """Copies receiving a data file now."""
        return self._copier.copies_running()

    def bulk_receiving(self) -> int:
        """Bulk-path bodies being received in their worker threads now."""
        return self._peers.http.receiving

    def report(self) -> list[obrpc_pb2.ReplicaInfo]:
        """``ReplicaInfo`` of every hosted replica, sorted by ``(tenant_id, ls_id)``. Memory
        only (the heartbeat path calls it)."""
        return self._hosted.report(self._me.server)

    def report_into(self, msg: obrpc_pb2.LeaseRequest | obrpc_pb2.ApplyReplicasResponse) -> None:
        """Put the report (:meth:`report`) in ``msg.replicas`` and its number, one above the
        last report's, in ``msg.replicas_version``: the RS ignores a lease request built
        before an ApplyReplicas answer it has taken. Memory only."""
        self._report_version += 1
        msg.replicas_version = self._report_version
        msg.replicas.extend(self.report())

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
        root = self.paths.replicas_root
        names: set[str] = set()
        if root.is_dir():
            for d in sorted(root.iterdir()):
                if not d.is_dir():
                    continue
                key = parse_name(d.name)
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
                    shutil.rmtree(self.paths.log_path(key).parent, ignore_errors=True)
                    continue
                try:
                    meta = read_meta(d)
                    if meta.key != key:
                        raise ValueError(f"{META_FILE} is for {describe_ls(meta.key)}")
                    log = ReplicaLog.open(self.paths.log_path(key), self._log_keep)
                except (OSError, ValueError) as e:
                    self.log.error("cannot load replica %s: %s", d, e)
                    continue
                rep = Replica(meta, d, log)
                if meta.copy_from:
                    # Copied, but its log had not caught up: resume that after verification.
                    rep.build = Build(
                        source=meta.copy_from,
                        state=BUILD_LOG,
                        bytes_copied=meta.data_size,
                        total_size=meta.data_size,
                        target=meta.catch_up_to,
                    )
                self._hosted.add(rep)
        clog = self.paths.clog_root
        if clog.is_dir():
            for d in clog.iterdir():
                if d.is_dir() and parse_name(d.name) is not None and d.name not in names:
                    self.log.warning("removing %s: no replica owns this log", d)
                    shutil.rmtree(d, ignore_errors=True)
        if len(self._hosted):
            self.log.info(
                "loaded %d replica(s): %s",
                len(self._hosted),
                ", ".join(describe_ls(k) for k in self._hosted.sorted_keys()),
            )
        return len(self._hosted)

    def start(self) -> None:
        """Start the loops of every replica and verify the data files of loaded ones (in
        threads), then resume the log catch-up of copies that had their data in place. Must
        run on the event loop; a no-op when already started."""
        self._stopped = False
        if self._started:
            return
        self._started = True
        self._replication.running = True
        for rep in self._hosted.all():
            if not rep.in_service and (rep.build is None or rep.build.data_in_place):
                self._tasks.spawn(self._verify(rep), f"verify {describe_ls(rep.key)}")
            self._replication.start_loop(rep)

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
        self._replication.running = False
        tasks = self._tasks.running()
        for rep in self._hosted.all():
            if rep.task is not None:
                tasks.add(rep.task)
                rep.task = None
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S)
        unfinished = [
            r.key for r in self._hosted.all() if r.build is not None and not r.build.data_in_place
        ]
        for key in unfinished:
            dropped = self._hosted.pop(key)
            assert dropped is not None
            dropped.log.close()
            self.log.info("replica %s: unfinished copy discarded at stop", describe_ls(key))
        if unfinished:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.to_thread(self.paths.remove_files, unfinished), CLOSE_TIMEOUT_S
                )
        for rep in self._hosted.all():
            rep.log.close()
            if rep.build is not None:
                rep.build.task = None
        # A later start may run on another event loop; asyncio primitives bind to one.
        self._hosted.forget_lock()
        self._copier.forget_slots()
        await self._peers.close()

    async def _verify(self, rep: Replica) -> None:
        path = rep.dir / DATA_FILE
        meta = rep.meta
        try:
            size, crc = await asyncio.to_thread(checksum_or_missing, path)
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
        if rep.build is not None:
            # Data verified; the log still has to reach the copy's catch_up_to.
            self._copier.resume(rep)
            return
        rep.in_service = True

    async def check_files(self) -> list[tuple[int, int]]:
        """Forget every in-service replica whose directory or ``meta.json`` vanished while
        the agent ran (``rm -r DATA_DIR/replicas/<ls>``), returning their
        ``(tenant_id, ls_id)``.

        Such a replica's data is gone: reporting it from memory would keep the RS from
        rebuilding it (it would count as a healthy member). It is dropped as an
        ``ApplyReplicas`` drop would (loop stopped, log removed), logged at ERROR, and no
        longer reported, so the RS's ``replica_rebuilder`` copies it back from a healthy
        member. Replicas being built or verified are left alone (their directory may not
        exist yet). Never raises: a failed drop is logged and tried again next time."""
        gone = [
            rep.key
            for rep in self._hosted.all()
            if rep.in_service and rep.build is None and not (rep.dir / META_FILE).is_file()
        ]
        if not gone:
            return []
        dropped: list[tuple[int, int]] = []
        async with self._hosted.lock():
            for key in gone:
                rep = self._hosted.find(key)
                if rep is None or rep.build is not None or (rep.dir / META_FILE).is_file():
                    continue
                self.log.error(
                    "replica %s: its files vanished from %s; forgetting it so the RS rebuilds "
                    "it from a healthy member",
                    describe_ls(key),
                    rep.dir,
                )
                try:
                    await self._applier.drop(key)
                except ObError as e:
                    self.log.error("replica %s: %s", describe_ls(key), e.message)
                    continue
                dropped.append(key)
        return dropped

    # -- ApplyReplicas

    async def hold_apply(self) -> None:
        """Wait as the apply fault files ask (:meth:`FaultSwitches.hold_apply
        <observer_agent.replicas.faults.FaultSwitches.hold_apply>`): every RS command passes
        here before it is applied."""
        await self._faults.hold_apply()

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
        ``observer_agent.service.ObserverServicer.ApplyReplicas``. Errors of single specs
        (``OB_INVALID_ARGUMENT``, ``OB_TIMEOUT`` of a catch-up, ``OB_ERR_SYS`` of a failed
        write) do not stop the others; the first one is returned
        in ``error`` with the others appended to its message. ``time_budget_s`` is what is
        left of the caller's deadline (catch-up stops before it). The work goes on to the
        end if the caller cancels, so a retry finds it done. Never raises.
        """
        resp = obrpc_pb2.ApplyReplicasResponse()
        # An epoch jumping absurdly above the highest seen is forged or corrupt:
        # refused before anything, like a lower one.
        why = check_term("rs_epoch", request.rs_epoch, highest_epoch)
        if why:
            err = ObError("OB_INVALID_ARGUMENT", f"ApplyReplicas: {why}")
            self.log.warning("ApplyReplicas refused: %s", err.message)
            error_to_proto(err, resp.error)
            self.report_into(resp)
            return resp
        if request.rs_epoch < highest_epoch:
            err = ObError(
                "OB_RS_NOT_MASTER",
                detail=f"rs_epoch {request.rs_epoch} is lower than {highest_epoch} already seen",
            )
            self.log.warning("ApplyReplicas refused: %s", err.message)
            error_to_proto(err, resp.error)
            self.report_into(resp)
            return resp
        loop = asyncio.get_running_loop()
        client_deadline = None
        if time_budget_s is not None:
            client_deadline = loop.time() + 0.8 * max(0.0, time_budget_s)
        work = self._tasks.spawn(self._apply_locked(request, client_deadline), "apply replicas")
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
        self.report_into(resp)
        return resp

    async def _apply_locked(
        self, request: obrpc_pb2.ApplyReplicasRequest, client_deadline: float | None
    ) -> list[ObError]:
        errors: list[ObError] = []
        async with self._hosted.lock():
            refused = absurd_terms(request, self._hosted, self.log)
            if refused is not None:
                return [refused]
            self._ensure_started()
            for spec in request.upsert:
                try:
                    await self._applier.upsert(spec, client_deadline)
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
                    await self._applier.drop((key.tenant_id, key.ls_id))
                except ObError as e:
                    errors.append(e)
        return errors

    # -- ReplicaService (answering peers)

    def fetch_log(self, request: obrpc_pb2.FetchLogRequest) -> obrpc_pb2.FetchLogResponse:
        """``ReplicaService.FetchLog``: see :meth:`ReplicaServing.fetch_log
        <observer_agent.replicas.serving.ReplicaServing.fetch_log>`; never raises."""
        return self._serving.fetch_log(request)

    def fetch_data(self, request: obrpc_pb2.FetchDataRequest) -> AsyncIterator[obrpc_pb2.DataChunk]:
        """``ReplicaService.FetchData``: see :meth:`ReplicaServing.fetch_data
        <observer_agent.replicas.serving.ReplicaServing.fetch_data>`; never raises."""
        return self._serving.fetch_data(request)

    @property
    def serving(self) -> ReplicaServing:
        """The source side of copies, for the HTTP(S) data path (:mod:`observer_agent.http_data`): :meth:`ReplicaServing.open_data` and :meth:`ReplicaServing.serve_data_at`."""
        return self._serving
