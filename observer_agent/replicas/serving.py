"""Answering peers: ``ReplicaService.FetchLog`` (a leader serving its followers) and
``ReplicaService.FetchData`` (a member serving the data file to an agent building a replica
by copy), docs/design/migration.md.

FetchLog follows a *snapshot rule*: asked for entries the callee already compacted away, it
answers from its first kept entry; a follower whose log ends before that entry restarts its
log there (:func:`observer_agent.replicas.log.merge_fetched`), which is how a copied replica
(or one that fell far behind) joins a leader that compacted past the copy's starting point.

Both answer errors in-band and never raise.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from obcommon.errors import ObError, error_to_proto
from obcommon.proto import obrpc_pb2
from observer_agent.address import LocalServer
from observer_agent.replicas.copy_http import data_path
from observer_agent.replicas.faults import FAULT_SERVE_DATA_ERROR_FILE
from observer_agent.replicas.hosted import HostedReplicas
from observer_agent.replicas.replication import FETCH_MAX_ENTRIES
from observer_agent.replicas.storage import DATA_FILE, describe_ls
from observer_agent.replicas.tasks import run_blocking

#: Bytes per ``DataChunk`` when the request asks for 0, and what a copy asks for by default.
DATA_CHUNK_DEFAULT = 256 * 1024
#: The most bytes one ``DataChunk`` carries: 4 MiB less room for the other fields, so that a
#: chunk fits gRPC's default 4 MiB limit on a received message.
DATA_CHUNK_MAX = (4 << 20) - 4096


class ServeSwitches(Protocol):
    """The fault switch of the serving side (implemented by
    :class:`observer_agent.replicas.faults.FaultSwitches`)."""

    def serve_data_error(self) -> bool:
        """True while ``FetchData`` must answer an error chunk."""
        ...


class ReplicaServing:
    """The server side of ``ReplicaService`` for the replicas in ``hosted``.

    ``me`` gives this agent's ``ip:port`` (named in errors, and compared with leaders);
    ``faults`` tells whether :data:`FAULT_SERVE_DATA_ERROR_FILE` is set; ``log`` is the
    agent's logger. :attr:`bulk_served` counts the data files served whole over the bulk
    path (:mod:`observer_agent.http_data`).
    """

    def __init__(
        self,
        me: LocalServer,
        hosted: HostedReplicas,
        faults: ServeSwitches,
        log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
    ) -> None:
        """Serve from ``hosted`` as it is at each call."""
        self._me = me
        self._hosted = hosted
        self._faults = faults
        self.log = log
        self._data_base_url = ""
        # Data files served over the bulk path, by observer_agent.http_data.
        self.bulk_served = 0

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
        log there (:func:`~observer_agent.replicas.log.merge_fetched`), its data file
        standing for what it skips. A replica built by copy relies on it. Never raises.
        """
        resp = obrpc_pb2.FetchLogResponse()
        key = (request.tenant_id, request.ls_id)
        rep = self._hosted.find(key)
        me = self._me.server
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

    def serve_data_at(self, base_url: str) -> None:
        """Offer the bulk path: a ``FetchData`` asking for ``bulk`` is answered
        with ``data_url`` = ``base_url`` + :func:`data_path` (this agent's HTTP(S) endpoint,
        :mod:`observer_agent.http_data`) instead of the streamed chunks. ``""`` stops it."""
        self._data_base_url = base_url.rstrip("/")

    @property
    def data_base_url(self) -> str:
        """Where the bulk path is offered (``scheme://host:port``), ``""`` when it is not."""
        return self._data_base_url

    async def open_data(self, tenant_id: int, ls_id: int) -> tuple[DataSource, int]:
        """The data file of a replica in service here, opened for reading, and the fd (the
        caller closes it: it keeps the file readable even if the replica is dropped
        meanwhile). Raises ``ObError``: ``OB_ERR_SYS`` while
        :data:`FAULT_SERVE_DATA_ERROR_FILE` exists or when the file cannot be opened,
        ``OB_ENTRY_NOT_EXIST`` when no replica of the LS is here, ``OB_STATE_NOT_MATCH``
        when it is not in service (being built, or not verified since a restart)."""
        key = (tenant_id, ls_id)
        me = self._me.server
        if self._faults.serve_data_error():
            self.log.warning(
                "FetchData of %s refused: fault injected (%s)",
                describe_ls(key),
                FAULT_SERVE_DATA_ERROR_FILE,
            )
            raise ObError(
                "OB_ERR_SYS", detail=f"{me}: fault injected ({FAULT_SERVE_DATA_ERROR_FILE})"
            )
        rep = self._hosted.find(key)
        if rep is None:
            raise ObError("OB_ENTRY_NOT_EXIST", f"{me} hosts no replica of {describe_ls(key)}")
        if not rep.in_service:
            why = "is being built" if rep.build is not None else "is not verified yet"
            raise ObError(
                "OB_STATE_NOT_MATCH", detail=f"the replica of {describe_ls(key)} on {me} {why}"
            )
        m, log = rep.meta, rep.log
        src = DataSource(
            path=rep.dir / DATA_FILE,
            total_size=m.data_size,
            checksum=m.data_checksum,
            log_start_index=log.base_index + 1,
            log_end_index=log.end_index,
            term=m.term,
        )
        try:
            fd = await run_blocking(os.open, src.path, os.O_RDONLY)
        except OSError as e:
            raise ObError("OB_ERR_SYS", detail=f"{me}: cannot read {src.path}: {e}") from None
        return src, fd

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

        Bulk: when ``request.bulk`` is set and this agent serves the data over
        HTTP(S) (:meth:`serve_data_at`), the stream is that first chunk without data and
        with ``data_url``, where the caller GETs the whole file.

        Errors are one chunk with ``error`` set, ending the stream: those of
        :meth:`open_data`, and ``OB_INVALID_ARGUMENT`` for an offset outside
        ``[0, total_size]`` or a negative chunk size, ``OB_ERR_SYS`` when the file cannot be
        read. Never raises.
        """

        def fail(err: ObError) -> obrpc_pb2.DataChunk:
            chunk = obrpc_pb2.DataChunk()
            error_to_proto(err, chunk.error)
            return chunk

        me = self._me.server
        try:
            src, fd = await self.open_data(request.tenant_id, request.ls_id)
        except ObError as e:
            yield fail(e)
            return
        path, total = src.path, src.total_size
        try:
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
                checksum=src.checksum,
                log_start_index=src.log_start_index,
                log_end_index=src.log_end_index,
                term=src.term,
            )
            if request.bulk and self._data_base_url and request.offset == 0:
                chunk.data_url = self._data_base_url + data_path(request.tenant_id, request.ls_id)
                yield chunk
                return
            pos = request.offset
            while True:
                n = min(size, total - pos)
                at = pos
                try:
                    data = await run_blocking(os.pread, fd, n, at)
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


@dataclass(frozen=True)
class DataSource:
    """What a source tells of a data file it serves (the header of ``FetchData``): its
    ``path``, ``total_size`` (bytes), ``checksum`` (crc32 as recorded), the log's
    ``log_start_index`` / ``log_end_index`` and ``term``, taken when it was opened."""

    path: Path
    total_size: int
    checksum: int
    log_start_index: int
    log_end_index: int
    term: int
