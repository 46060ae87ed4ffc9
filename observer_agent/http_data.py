"""The bulk data path of replica copies: ``GET /replica-data/{tenant_id}/{ls_id}``
on the agent's HTTP(S) endpoint (:mod:`observer_agent.http`) streams an LS's data file to an
agent building that replica by copy.

``ReplicaService.FetchData`` streams 256 KiB protobuf chunks through gRPC, each one copied
into a message and out of it again on both ends (about 60 MiB/s per copy on the bench
machine); here the file goes out in :data:`PIECE` reads as the body of one HTTP response over
the agent's existing TLS listener. The gRPC call stays the way in: asked with ``bulk``, it
answers the header (size, crc32, log indexes) with ``data_url`` pointing here
(:meth:`observer_agent.replicas.serving.ReplicaServing.fetch_data`), and the copy GETs it
(:mod:`observer_agent.replicas.copy_http`).

Who may GET (ARCHITECTURE section 2a), as for ``FetchData``: the RS and the node
certificates of the LS's members and learners (copies the RS announced), checked by the
agent's :class:`~obcommon.security.gate.PeerGate` on the certificate TLS verified (and one of
the *current* CA: Python's ``ssl`` never forgets a rotated-out CA). Refusals: 401 without a
certificate of the cluster (``UNAUTHENTICATED`` of the gate), 403 for another role or a node that is neither member nor
learner, counted and logged as the gRPC refusals are. In ``--insecure`` mode (plaintext)
everything is served, as there.

Answers: 200 with the file (``Content-Length``; ``X-OB-Data-Size`` and ``X-OB-Data-Checksum``
as recorded, which the copy compares with the header it was given); the errors of
:meth:`~observer_agent.replicas.serving.ReplicaServing.open_data` as JSON
``{"name": ..., "message": ...}`` with 404 (no replica), 409 (not in service) or 500. A file
that ends early cuts the connection (the copy sees a short body).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from aiohttp import web

from obcommon.errors import ObError
from obcommon.security.gate import PeerRefused
from obcommon.security.identity import identity_of_der
from observer_agent.agent import Agent
from observer_agent.replicas.copy_http import CHECKSUM_HEADER, SIZE_HEADER
from observer_agent.replicas.tasks import run_blocking
from observer_agent.service import RS_OR_NODE

#: Bytes read from the file and written to the response at a time.
PIECE = 1 << 20
#: The route (:func:`observer_agent.replicas.copy_http.data_path` gives its paths).
ROUTE = "/replica-data/{tenant_id}/{ls_id}"
METHOD = "ReplicaService.FetchData (HTTPS)"

_STATUS = {"OB_ENTRY_NOT_EXIST": 404, "OB_STATE_NOT_MATCH": 409}


def _error(status: int, name: str, message: str) -> web.Response:
    return web.json_response({"name": name, "message": message}, status=status)


def _peer_cert(request: web.Request) -> bytes | None:
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport else None
    return ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None


def admit(agent: Agent, request: web.Request, tenant_id: int, ls_id: int) -> None:
    """Raise :class:`PeerRefused` unless the peer may read the data of LS
    ``(tenant_id, ls_id)`` here (see the module doc)."""
    if agent.security.insecure:
        return
    der = _peer_cert(request)
    ident = identity_of_der(der) if der and agent.security.issued_by_current_ca(der) else None
    agent.peer_gate.check_identity(
        ident,
        str(request.remote),
        METHOD,
        RS_OR_NODE,
        names=agent.replicas.allowed_peers(tenant_id, ls_id),
    )


def data_handler(agent: Agent) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The handler of :data:`ROUTE` for ``agent``."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await replica_data(agent, request)

    return handler


async def replica_data(agent: Agent, request: web.Request) -> web.StreamResponse:
    """``GET /replica-data/{tenant_id}/{ls_id}`` of ``agent``: the LS's data file (see the
    module doc)."""
    try:
        tenant_id = int(request.match_info["tenant_id"])
        ls_id = int(request.match_info["ls_id"])
    except ValueError:
        return _error(400, "OB_INVALID_ARGUMENT", "tenant_id and ls_id must be integers")
    try:
        admit(agent, request, tenant_id, ls_id)
    except PeerRefused as e:
        unauthenticated = e.code is grpc.StatusCode.UNAUTHENTICATED
        return _error(401 if unauthenticated else 403, e.code.name, e.message)
    try:
        src, fd = await agent.replicas.serving.open_data(tenant_id, ls_id)
    except ObError as e:
        return _error(_STATUS.get(e.name, 500), e.name, e.message)
    # The next piece is read while this one is sent (the file is usually not in the page
    # cache: a replica's data is read once, by its copy), and the kernel is told the reads
    # are sequential (a larger readahead window).
    ahead: asyncio.Future[Any] | None = None
    try:
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        resp = web.StreamResponse(
            headers={
                "Content-Type": "application/octet-stream",
                SIZE_HEADER: str(src.total_size),
                CHECKSUM_HEADER: str(src.checksum),
            }
        )
        resp.content_length = src.total_size
        await resp.prepare(request)
        pos = 0
        ahead = _read_ahead(fd, src.total_size, pos)
        while pos < src.total_size:
            assert ahead is not None
            data: Any = await ahead
            ahead = None
            if not data:
                # Fewer bytes than announced: the connection is cut (raising after prepare),
                # so the copy sees a short body rather than a complete-looking one.
                raise ConnectionError(f"{src.path} ends at byte {pos} of {src.total_size}")
            pos += len(data)
            ahead = _read_ahead(fd, src.total_size, pos)
            await resp.write(data)
        await resp.write_eof()
        agent.replicas.serving.bulk_served += 1
        return resp
    finally:
        if ahead is None:
            os.close(fd)
        else:
            # A read may be in flight on fd (the response failed or was cancelled): the fd is
            # closed once that read has returned, never under it.
            ahead.add_done_callback(lambda f: _close_after(f, fd))


def _close_after(read: asyncio.Future[Any], fd: int) -> None:
    """Close ``fd`` after its read-ahead ``read`` ended (its outcome is not wanted)."""
    if not read.cancelled():
        read.exception()
    os.close(fd)


def _read_ahead(fd: int, total: int, pos: int) -> asyncio.Future[Any] | None:
    """The read of the piece at byte ``pos`` of ``fd`` (``total`` bytes), started in a
    thread; None at the end of the file."""
    if pos >= total:
        return None
    return asyncio.ensure_future(run_blocking(os.pread, fd, min(PIECE, total - pos), pos))
