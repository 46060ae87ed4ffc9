"""``obadmin``'s entry point, ``AdminService``: ``ExecuteSql`` parses and executes one
statement on a worker thread (so that neither parsing nor database I/O ever blocks
heartbeats) and answers MySQL-style errors in-band (SPEC.md section 7); ``GetMetrics``
returns the RS's counters as JSON.
"""

from __future__ import annotations

import functools
import json

import grpc

from obcommon.errors import ObError, error_to_proto
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from rootservice.api.admission import DEFAULT_USER, Admission
from rootservice.api.dispatch import execute_sql
from rootservice.app import RootService

#: Refusals that mean "ask the leader" and carry ``leader_hint``.
NOT_MASTER_NAMES = frozenset({"OB_RS_NOT_MASTER", "OB_NOT_MASTER"})


def metadata_user(context: grpc.aio.ServicerContext) -> str:
    """The user a call names in its ``ob-user`` metadata, else ``root`` (until the users of
    issue 10 item 4 authenticate it; admission only counts by it)."""
    for key, value in context.invocation_metadata() or ():
        if key == "ob-user" and isinstance(value, str) and value:
            return value
    return DEFAULT_USER


class AdminServicer(obrpc_pb2_grpc.AdminServiceServicer):
    """``obadmin``'s entry point: one SQL statement per call (SPEC.md section 7)."""

    def __init__(self, rs: RootService) -> None:
        """Serve admin calls for ``rs``; statements run on the threads of ``admission``
        (``admin_workers``, ``admin_queue_limit``, ``admin_per_user_limit``; issue 10)."""
        self.rs = rs
        st = rs.settings
        self.admission = Admission(st.admin_workers, st.admin_queue_limit, st.admin_per_user_limit)

    async def ExecuteSql(
        self, request: obrpc_pb2.SqlRequest, context: grpc.aio.ServicerContext
    ) -> obrpc_pb2.SqlResponse:  # type: ignore[override]  # noqa: N802
        """``AdminService.ExecuteSql`` of obrpc.proto: parse and run one SQL statement.

        Runs :func:`rootservice.api.dispatch.execute_sql` on the admin threads of
        :class:`rootservice.api.admission.Admission` for the user of :func:`metadata_user`, so
        the event loop (and the heartbeats) never wait for parsing or the database and
        background work never waits behind statements; a statement over the admission
        limits gets ``ER_CON_COUNT_ERROR`` / ``ER_TOO_MANY_USER_CONNECTIONS`` at once; every error, MySQL-style (SPEC.md
        section 7), is carried in the response's ``error``, never as a gRPC status. A
        not-master refusal carries the leader's address in ``leader_hint`` (issue 5).
        """
        user = metadata_user(context)
        try:
            resp = await self.admission.run(
                user, functools.partial(execute_sql, self.rs, request.statement)
            )
        except ObError as e:  # refused by admission: nothing ran
            self.rs.metrics.inc("statements_throttled_total")
            resp = obrpc_pb2.SqlResponse()
            error_to_proto(e, resp.error)
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
