"""The agent's gRPC server: ``ObserverService`` (RS -> agent) and the standard health service.

The RS calls ``RequestHeartbeat`` right after it takes office and on CANCEL DELETE SERVER,
and ``CheckServerEmpty`` on ADD SERVER / BOOTSTRAP (SPEC.md sections 5, 7, 8). The health
service (``grpc.health.v1.Health``) reports SERVING for ``""`` and for
``oceanbase.rs.ObserverService`` while the server runs, NOT_SERVING while it shuts down.
"""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from observer_agent.agent import Agent
from rootservice.proto import obrpc_pb2, obrpc_pb2_grpc

#: The health-service name of the agent's own service.
OBSERVER_SERVICE_NAME = obrpc_pb2.DESCRIPTOR.services_by_name["ObserverService"].full_name


class ObserverServicer(obrpc_pb2_grpc.ObserverServiceServicer):
    """``ObserverService`` backed by an :class:`Agent`."""

    def __init__(self, agent: Agent) -> None:
        """Answer the RS's calls from ``agent``'s state."""
        self.agent = agent

    async def RequestHeartbeat(
        self, request: obrpc_pb2.RequestHeartbeatRequest, context: Any
    ) -> obrpc_pb2.LeaseRequest:
        """``ObserverService.RequestHeartbeat`` of obrpc.proto: a freshly built lease request.

        The RS feeds the answer through its receive_hb (SPEC.md section 5); the request's
        ``rs_epoch`` is not checked here.
        """
        return self.agent.build_lease_request()

    async def CheckServerEmpty(
        self, request: obrpc_pb2.CheckServerEmptyRequest, context: Any
    ) -> obrpc_pb2.CheckServerEmptyResponse:
        """``ObserverService.CheckServerEmpty`` of obrpc.proto, for ADD SERVER and BOOTSTRAP.

        ``is_empty`` = no identity file (an unreadable one counts as not empty); zone, server,
        cluster_id, server_id as kept (SPEC.md section 7).
        """
        return self.agent.check_server_empty()


async def create_server(agent: Agent, addr: str) -> tuple[Any, int]:
    """Build the agent's ``grpc.aio.Server`` bound to ``addr`` (``host:port``, port 0 = any
    free port) without starting it; returns ``(server, bound_port)``.

    Tells the agent its bound port (see :meth:`Agent.bind_port`) and keeps the health
    servicer in ``agent.health``. ``SO_REUSEPORT`` is off so a second agent on the same port
    fails instead of silently sharing it. Raises ``RuntimeError`` / ``OSError`` when the
    address cannot be bound.
    """
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    obrpc_pb2_grpc.add_ObserverServiceServicer_to_server(ObserverServicer(agent), server)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port(addr)
    if not port:
        raise OSError(f"cannot bind the agent's gRPC server to {addr}")
    agent.bind_port(port)
    # Only observable once the server is started, which is when it becomes true.
    for name in ("", OBSERVER_SERVICE_NAME):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    agent.health = health
    return server, port


async def start_server(agent: Agent, addr: str | None = None) -> tuple[Any, int]:
    """:func:`create_server` on ``addr`` (default ``agent.settings.rpc_addr``), start it and
    mark the agent serving; returns ``(server, bound_port)``."""
    server, port = await create_server(agent, addr or agent.settings.rpc_addr)
    await server.start()
    agent.mark_serving()
    return server, port


async def stop_server(agent: Agent, server: Any, grace_s: float = 1.0) -> None:
    """Report NOT_SERVING, then stop ``server`` letting calls in flight finish for up to
    ``grace_s`` seconds."""
    if agent.health is not None:
        await agent.health.enter_graceful_shutdown()
    await server.stop(grace_s)
