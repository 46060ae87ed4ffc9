"""gRPC front of the RS: thin servicers over :class:`rootservice.app.RootService`.

``LeaseStream`` is the agents' heartbeat path (one long-lived bidirectional stream per agent,
refusals in-band so the stream survives them); ``RenewLease`` is the same as a unary call,
refusals as gRPC status with ``ob-code`` / ``ob-name`` (and ``ob-leader-hint``) trailing
metadata. A standby, or a leader whose own lease is no longer safely held, answers every
lease request and admin statement with ``OB_RS_NOT_MASTER`` and the leader's address as
``leader_hint`` (issue 5). ``ExecuteSql``
parses and executes one statement on a worker thread so that neither parsing nor database
I/O ever blocks heartbeats. :func:`create_server` binds without serving, so tests can bind
port 0 and learn the port.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from obcommon.errors import ObError, error_to_proto
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from rootservice.api.dispatch import execute_sql
from rootservice.app import RootService

log = logging.getLogger(__name__)

#: Refusals that mean "ask the leader" and carry ``leader_hint``.
NOT_MASTER_NAMES = frozenset({"OB_RS_NOT_MASTER", "OB_NOT_MASTER"})


class RootServiceServicer(obrpc_pb2_grpc.RootServiceServicer):
    """Lease renewal (SPEC.md section 5) -> ``HeartbeatIntake.receive_hb``."""

    def __init__(self, rs: RootService) -> None:
        """Serve leases for ``rs``; handling times go to its ``hb_handle_us`` latency window."""
        self.rs = rs
        self._hb_window = rs.metrics.window("hb_handle_us")

    def _handle(self, req: obrpc_pb2.LeaseRequest) -> obrpc_pb2.LeaseResponse:
        t0 = time.perf_counter_ns()
        try:
            why = self.rs.term.guard()
            if why is not None:
                # A leader past its safety margin must not grant leases, even before the
                # watchdog has stepped it down.
                raise ObError("OB_RS_NOT_MASTER", detail=why)
            resp = self.rs.heartbeats.receive_hb(req)
            # Plain attributes, not Metrics.inc: only the event-loop thread counts these, so
            # the heartbeat path takes no lock for them.
            self.rs.heartbeats_total += 1
        except ObError as e:
            self.rs.heartbeats_refused_total += 1
            resp = obrpc_pb2.LeaseResponse(seq=req.seq, rs_epoch=self.rs.store.epoch)
            error_to_proto(e, resp.error)
            if e.name == "OB_RS_NOT_MASTER":
                resp.leader_hint = self.rs.leader_hint()
        self._hb_window.record((time.perf_counter_ns() - t0) // 1000)
        return resp

    async def RenewLease(
        self, request: obrpc_pb2.LeaseRequest, context: grpc.aio.ServicerContext
    ) -> obrpc_pb2.LeaseResponse:  # type: ignore[override]  # noqa: N802
        """``RootService.RenewLease`` of obrpc.proto: one lease request, one lease response.

        Runs ``HeartbeatIntake.receive_hb`` (SPEC.md section 5). A refusal (``ObError``) aborts
        the call with the error's gRPC status, message ``"<OB name>: <message>"`` and trailing
        metadata ``ob-code`` / ``ob-name``.
        """
        resp = self._handle(request)
        if resp.error.code:
            context.set_trailing_metadata(
                (
                    ("ob-code", str(resp.error.code)),
                    ("ob-name", resp.error.name),
                    ("ob-leader-hint", resp.leader_hint),
                )
            )
            code = (
                ObError(resp.error.name).grpc_code() if resp.error.name else grpc.StatusCode.UNKNOWN
            )
            await context.abort(code, f"{resp.error.name}: {resp.error.message}")
        return resp

    async def LeaseStream(  # type: ignore[override]  # noqa: N802
        self,
        request_iterator: AsyncIterator[obrpc_pb2.LeaseRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[obrpc_pb2.LeaseResponse]:
        """``RootService.LeaseStream`` of obrpc.proto: one lease response per request on the stream.

        Each request goes through ``HeartbeatIntake.receive_hb`` (SPEC.md section 5); a refusal
        is carried in-band in the response's ``error`` (with this RS's epoch), so the stream
        stays open.
        """
        async for req in request_iterator:
            yield self._handle(req)


class AdminServicer(obrpc_pb2_grpc.AdminServiceServicer):
    """``obadmin``'s entry point: one SQL statement per call (SPEC.md section 7)."""

    def __init__(self, rs: RootService) -> None:
        """Serve admin calls for ``rs``; statements run on ``rs.executor``."""
        self.rs = rs

    async def ExecuteSql(
        self, request: obrpc_pb2.SqlRequest, context: grpc.aio.ServicerContext
    ) -> obrpc_pb2.SqlResponse:  # type: ignore[override]  # noqa: N802
        """``AdminService.ExecuteSql`` of obrpc.proto: parse and run one SQL statement.

        Runs :func:`rootservice.api.dispatch.execute_sql` on ``rs.executor`` so the event loop (and the
        heartbeats) never wait for parsing or the database; every error, MySQL-style (SPEC.md
        section 7), is carried in the response's ``error``, never as a gRPC status. A
        not-master refusal carries the leader's address in ``leader_hint`` (issue 5).
        """
        loop = asyncio.get_running_loop()
        resp = await loop.run_in_executor(self.rs.executor, execute_sql, self.rs, request.statement)
        if resp.error.name in NOT_MASTER_NAMES and not resp.leader_hint:
            resp.leader_hint = self.rs.leader_hint()
        return resp

    async def GetMetrics(
        self, request: obrpc_pb2.MetricsRequest, context: grpc.aio.ServicerContext
    ) -> obrpc_pb2.MetricsResponse:  # type: ignore[override]  # noqa: N802
        """``AdminService.GetMetrics`` of obrpc.proto: ``RootService.metrics_snapshot()`` as JSON.

        The response's ``json`` holds counters, latency-window summaries (microseconds), server
        counts, RS state and epoch, with sorted keys.
        """
        return obrpc_pb2.MetricsResponse(
            json=json.dumps(self.rs.metrics_snapshot(), sort_keys=True)
        )


async def create_server(rs: RootService, addr: str | None = None) -> tuple[grpc.aio.Server, int]:
    """Build the RS's gRPC server bound to ``addr`` (default ``rs.settings.rpc_addr``) with
    the lease, admin and standard health services; returns it unstarted with its port.

    ``grpc.server.max_pending_requests`` is raised because gRPC's default (1,000 calls
    waiting to be accepted) drops calls in a reconnect storm of thousands of agents.
    Raises ``RuntimeError`` when the address cannot be bound.
    """
    limit = rs.settings.grpc_max_pending_requests
    options: list[tuple[str, Any]] = [
        ("grpc.server.max_pending_requests", limit),
        ("grpc.server.max_pending_requests_hard_limit", limit * 2),
        ("grpc.max_receive_message_length", rs.settings.max_statement_bytes + 1024 * 1024),
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 5000),
    ]
    server = grpc.aio.server(options=options)
    obrpc_pb2_grpc.add_RootServiceServicer_to_server(RootServiceServicer(rs), server)
    obrpc_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(rs), server)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    bind = addr or rs.settings.rpc_addr
    port = server.add_insecure_port(bind)
    if port == 0:
        raise RuntimeError(f"cannot bind {bind}")
    rs.set_rpc_port(port)
    for name in ("", "oceanbase.rs.RootService", "oceanbase.rs.AdminService"):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, port
