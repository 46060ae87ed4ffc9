"""The RS's gRPC server: the lease service (:mod:`rootservice.api.lease_servicer`), the admin
service (:mod:`rootservice.api.admin_servicer`) and the standard health service on one port.
:func:`create_server` binds without serving, so tests can bind port 0 and learn the port."""

from __future__ import annotations

import logging
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

log = logging.getLogger(__name__)


async def create_server(
    rs: RootService,
    addr: str | None = None,
    *,
    forwarder: Forwarder | None = None,
    admission: Admission | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Build the RS's gRPC server bound to ``addr`` (default ``rs.settings.rpc_addr``) with
    the lease, admin and standard health services; returns it unstarted with its port.
    ``forwarder`` lets a standby's admin service forward statements to the leader
    (:mod:`rootservice.api.forwarding`; None: it answers OB_RS_NOT_MASTER).
    It listens with mutual TLS (``rs.security``; clients must present a certificate of the
    cluster's CA) or, in insecure mode, in plaintext. ``admission`` is the statements'
    admission shared with the MySQL endpoint (default: one of the admin service's own).

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
    obrpc_pb2_grpc.add_RootServiceServicer_to_server(LeaseServicer(rs), server)
    obrpc_pb2_grpc.add_AdminServiceServicer_to_server(
        AdminServicer(rs, forwarder, admission), server
    )
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    bind = addr or rs.settings.rpc_addr
    port = rs.security.add_port(server, bind)
    if port == 0:
        raise RuntimeError(f"cannot bind {bind}")
    rs.set_rpc_port(port)
    for name in ("", "oceanbase.rs.RootService", "oceanbase.rs.AdminService"):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, port
