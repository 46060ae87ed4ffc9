"""The RS's gRPC server: the lease service (:mod:`rootservice.api.lease_servicer`), the admin
service (:mod:`rootservice.api.admin_servicer`) and the standard health service on one port.
:func:`create_server` binds without serving, so tests can bind port 0 and learn the port.

The health service tells the truth: per service name it follows
:meth:`rootservice.ha.readiness.Readiness.services` (``""`` and ``oceanbase.rs.RootService``
SERVING only when ready; ``oceanbase.rs.AdminService`` also before BOOTSTRAP and on a
standby that forwards), updated by :func:`follow_readiness`. ``liveness`` is SERVING while
the process lives (as ``/healthz``; Kubernetes' gRPC probes name a service per probe)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from obcommon.proto import obrpc_pb2_grpc
from rootservice.api.admin_servicer import AdminServicer
from rootservice.api.admission import Admission
from rootservice.api.dispatch import Forwarder
from rootservice.api.lease_servicer import LeaseServicer
from rootservice.app import RootService
from rootservice.ha.readiness import SERVICES

log = logging.getLogger(__name__)


#: Seconds a new call may wait in gRPC's queue for the server to accept it (gRPC's default
#: is 30; see :func:`create_server`).
MAX_UNREQUESTED_S = 600


async def create_server(
    rs: RootService,
    addr: str | None = None,
    *,
    forwarder: Forwarder | None = None,
    admission: Admission | None = None,
    health: health_aio.HealthServicer | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Build the RS's gRPC server bound to ``addr`` (default ``rs.settings.rpc_addr``) with
    the lease, admin and standard health services; returns it unstarted with its port.
    ``forwarder`` lets a standby's admin service forward statements to the leader
    (:mod:`rootservice.api.forwarding`; None: it answers OB_RS_NOT_MASTER).
    It listens with mutual TLS (``rs.security``; clients must present a certificate of the
    cluster's CA) or, in insecure mode, in plaintext. ``admission`` is the statements'
    admission shared with the MySQL endpoint (default: one of the admin service's own).
    ``health`` is the health servicer to serve (default a new one), which the caller keeps
    up to date with :func:`follow_readiness`; its statuses start from the readiness now.

    ``grpc.server.max_pending_requests`` is raised because gRPC's default (1,000 calls
    waiting to be accepted) drops calls in a reconnect storm of thousands of agents, and
    ``grpc.server_max_unrequested_time_in_server`` to :data:`MAX_UNREQUESTED_S`: gRPC's
    asyncio server accepts one call per round of the event loop, so in a storm on a busy RS
    a new stream waited longer than gRPC's default 30 s and was cancelled (``CANCELLED``),
    its agent retrying at the back of the line (``make bench``, 5,000 agents at a 0.5 s
    period: 3,900 such cancellations); an agent that gives up cancels its own call anyway.
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
        ("grpc.server_max_unrequested_time_in_server", MAX_UNREQUESTED_S),
    ]
    server = grpc.aio.server(options=options)
    obrpc_pb2_grpc.add_RootServiceServicer_to_server(LeaseServicer(rs), server)
    obrpc_pb2_grpc.add_AdminServiceServicer_to_server(
        AdminServicer(rs, forwarder, admission), server
    )
    health = health or health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    bind = addr or rs.settings.rpc_addr
    port = rs.security.add_port(server, bind)
    if port == 0:
        raise RuntimeError(f"cannot bind {bind}")
    rs.set_rpc_port(port)
    # The connections of a certificate revoked later are closed, not only its calls refused.
    rs.peer_gate.connections.serve(port)
    await health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
    await apply_readiness(health, rs.readiness.services())
    return server, port


#: The health-service name that is SERVING while the process lives (liveness probes).
LIVENESS = "liveness"
#: How often :func:`follow_readiness` re-reads the readiness (seconds).
FOLLOW_INTERVAL_S = 0.25


async def apply_readiness(
    health: health_aio.HealthServicer,
    services: dict[str, bool],
    last: dict[str, bool] | None = None,
) -> None:
    """Set each service's status from ``services`` (name -> SERVING); only those that
    differ from ``last`` when given (``last`` is updated)."""
    S = health_pb2.HealthCheckResponse
    for name in SERVICES:
        serving = services.get(name, False)
        if last is not None and last.get(name) is serving:
            continue
        await health.set(name, S.SERVING if serving else S.NOT_SERVING)
        if last is not None:
            last[name] = serving


async def follow_readiness(
    rs: RootService,
    health: health_aio.HealthServicer,
    stop: asyncio.Event,
    also: Callable[[], object] | None = None,
    interval_s: float = FOLLOW_INTERVAL_S,
) -> None:
    """Until ``stop`` is set: every ``interval_s`` refresh the readiness (the database probe
    at most once a second, in a thread) and update the health statuses that changed; then
    call ``also()`` (the HTTP endpoint's certificate reload). Logs changes of ``""``."""
    last: dict[str, bool] = {}
    while not stop.is_set():
        try:
            await rs.readiness.refresh()
            services = rs.readiness.services()
            was = last.get("")
            await apply_readiness(health, services, last)
            if was is not None and was is not services[""]:
                v = rs.readiness.verdict()
                log.info("readiness: %s", "ready" if v.ready else f"not ready: {v.reason}")
            if also is not None:
                also()
        except Exception:  # noqa: BLE001 - the follower must outlive one bad round
            log.exception("readiness round failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
