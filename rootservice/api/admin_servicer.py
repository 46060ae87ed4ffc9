"""``obadmin``'s entry point, ``AdminService``: ``ExecuteSql`` parses and executes one
statement on a worker thread (so that neither parsing nor database I/O ever blocks
heartbeats) and answers MySQL-style errors in-band (SPEC.md section 7); ``GetMetrics``
returns the RS's counters as JSON.
"""

from __future__ import annotations

import asyncio
import json

import grpc

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from rootservice.api.dispatch import execute_sql
from rootservice.app import RootService

#: Who may call the admin service: client certificates (a node or RS certificate may not).
CLIENTS = frozenset({Role.CLIENT})

#: Refusals that mean "ask the leader" and carry ``leader_hint``.
NOT_MASTER_NAMES = frozenset({"OB_RS_NOT_MASTER", "OB_NOT_MASTER"})


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
        await self.rs.peer_gate.admit(context, "AdminService.ExecuteSql", CLIENTS)
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
        await self.rs.peer_gate.admit(context, "AdminService.GetMetrics", CLIENTS)
        return obrpc_pb2.MetricsResponse(
            json=json.dumps(self.rs.metrics_snapshot(), sort_keys=True)
        )
