"""The agent's gRPC server: ``ObserverService`` (RS -> agent), ``ReplicaService`` (agent ->
agent) and the standard health service.

The RS calls ``RequestHeartbeat`` right after it takes office and on CANCEL DELETE SERVER,
``CheckServerEmpty`` on ADD SERVER / BOOTSTRAP (docs/design/leases.md, docs/design/statements.md and docs/design/ha.md), and
``ApplyReplicas`` to create, re-lead and drop LS replicas (section 9). Followers call their
leader's ``ReplicaService.FetchLog``; an agent building a replica by copy (replica migration)
streams the data file from a member with ``ReplicaService.FetchData``. The health
service (``grpc.health.v1.Health``) reports SERVING for ``""`` and for
``oceanbase.rs.ObserverService`` while the server runs, NOT_SERVING while it shuts down.

Who may call (``agent.peer_gate``): ``ObserverService`` answers RS certificates
only; ``ReplicaService`` answers the RS and the node certificates of the LS's members and
learners (copies the RS announced), and ``FetchLog`` only for the node its ``follower``
names. Refusals are ``UNAUTHENTICATED`` / ``PERMISSION_DENIED`` and
change nothing; the open connections of a certificate revoked later are closed
(``agent.peer_gate.connections``).

Which root service may call (``agent.tokens``): every ``ObserverService`` call carries the
RS's fencing token, and only one that follows the highest token this agent obeyed is acted
on (``ApplyReplicas``, refused in-band) or answered (the others, refused with the same
OceanBase error as a gRPC status): a deposed root service can neither change nor read the
server's state. A node may only speak for itself, and only the RS in office for the
cluster (Kubernetes' NodeRestriction; OceanBase's observer refuses a heartbeat of a lower
RS epoch with ``OB_RS_NOT_MASTER`` in ``ObHeartbeatHandler::handle_heartbeat``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from obcommon.errors import error_to_proto
from obcommon.fencing import FenceToken
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from observer_agent.agent import Agent
from observer_agent.commands import dump_stacks

#: Who may call ``ObserverService``: the root services.
RS_ONLY = frozenset({Role.RS})
#: Who may call ``ReplicaService``: the root services and the other nodes.
RS_OR_NODE = frozenset({Role.RS, Role.NODE})

#: The health-service name of the agent's own service.
OBSERVER_SERVICE_NAME = obrpc_pb2.DESCRIPTOR.services_by_name["ObserverService"].full_name


async def refuse_deposed(
    agent: Agent, context: Any, rs_epoch: int, rs_incarnation: int, what: str
) -> None:
    """Abort ``what`` (an ``ObserverService`` call answered without an in-band error) unless
    its fencing token ``(rs_epoch, rs_incarnation)`` follows the highest this agent obeyed
    (:meth:`observer_agent.fence.TokenKeeper.check`; nothing is written either way).

    A refusal is the error ``ApplyReplicas`` answers in-band (``OB_RS_NOT_MASTER`` for a
    deposed root service or another incarnation of the epoch, ``OB_INVALID_ARGUMENT`` for an
    absurd epoch), sent as the error's gRPC status (``UNAVAILABLE`` / ``INVALID_ARGUMENT``)
    with the trailing metadata ``ob-code`` / ``ob-name`` of the RS's own refusals and the
    token this agent obeys (``ob-rs-epoch`` / ``ob-rs-incarnation``: what its lease requests
    report anyway, so a new leader of a conflicting token learns it from the refusal too),
    message ``"<OB name>: <message>"`` naming both tokens. A 0.1.0 root service, which does not read
    the metadata, sees a failed call. Without a ``context`` (a direct call) the ``ObError``
    is raised instead. A token of epoch 0 is refused by an agent that obeyed any: who
    sends none is no root service in office.
    """
    refused = agent.tokens.check(FenceToken(rs_epoch, rs_incarnation), what)
    if refused is None:
        return
    if context is None:
        raise refused
    highest = agent.tokens.highest
    context.set_trailing_metadata(
        (
            ("ob-code", str(refused.code)),
            ("ob-name", refused.name),
            ("ob-rs-epoch", str(highest.epoch)),
            ("ob-rs-incarnation", str(highest.incarnation)),
        )
    )
    await context.abort(refused.grpc_code(), f"{refused.name}: {refused.message}")


class ObserverServicer(obrpc_pb2_grpc.ObserverServiceServicer):
    """``ObserverService`` backed by an :class:`Agent`."""

    def __init__(self, agent: Agent) -> None:
        """Answer the RS's calls from ``agent``'s state."""
        self.agent = agent
        self._acks: set[asyncio.Future[None]] = set()

    async def RequestHeartbeat(
        self, request: obrpc_pb2.RequestHeartbeatRequest, context: Any
    ) -> obrpc_pb2.LeaseRequest:
        """``ObserverService.RequestHeartbeat`` of obrpc.proto: a freshly built lease request.

        The RS feeds the answer through its receive_hb (docs/design/leases.md). Only the RS
        this agent obeys, or a newer one, is answered (:func:`refuse_deposed`): a deposed
        root service neither reads this server's state nor ends its backoff nor settles a
        command. A new leader whose token conflicts with the agent's learns it from the
        agent's own lease requests, which carry it. The request of an RS let through ends
        the lease loop's backoff
        (:meth:`observer_agent.lease.LeaseDecisions.heartbeat_requested`): after ADD SERVER
        the agent asks for its lease at once.
        """
        await self.agent.peer_gate.admit(context, "ObserverService.RequestHeartbeat", RS_ONLY)
        await refuse_deposed(
            self.agent, context, request.rs_epoch, request.rs_incarnation, "RequestHeartbeat"
        )
        self.agent.lease.heartbeat_requested(FenceToken(request.rs_epoch, request.rs_incarnation))
        if request.command_seq:
            # Applied once past the apply gate (a frozen agent still answers: its heartbeats
            # go on, the lag detector sees the command unapplied).
            task = asyncio.ensure_future(self._ack(request.command_seq))
            self._acks.add(task)
            task.add_done_callback(self._acks.discard)
        return self.agent.build_lease_request()

    async def _ack(self, seq: int) -> None:
        await self.agent.replicas.hold_apply()
        self.agent.lease.commands.applied(seq)

    async def DumpStacks(
        self, request: obrpc_pb2.DumpStacksRequest, context: Any
    ) -> obrpc_pb2.DumpStacksResponse:
        """``ObserverService.DumpStacks``: every thread's Python stack and
        the event loop's tasks (:func:`observer_agent.commands.dump_stacks`), for the RS's
        LAGGING event. RS certificates only, like the other ``ObserverService`` calls; never
        waits for the apply gate (a frozen agent must still answer). A deposed root service
        is refused (:func:`refuse_deposed`): the stacks show the server's state."""
        await self.agent.peer_gate.admit(context, "ObserverService.DumpStacks", RS_ONLY)
        await refuse_deposed(
            self.agent, context, request.rs_epoch, request.rs_incarnation, "DumpStacks"
        )
        return dump_stacks()

    async def CheckServerEmpty(
        self, request: obrpc_pb2.CheckServerEmptyRequest, context: Any
    ) -> obrpc_pb2.CheckServerEmptyResponse:
        """``ObserverService.CheckServerEmpty`` of obrpc.proto, for ADD SERVER and BOOTSTRAP.

        ``is_empty`` = no identity file (an unreadable one counts as not empty); zone, server,
        cluster_id, server_id as kept (docs/design/statements.md). A deposed root service is
        refused (:func:`refuse_deposed`): it may not learn whose server this is.
        """
        await self.agent.peer_gate.admit(context, "ObserverService.CheckServerEmpty", RS_ONLY)
        await refuse_deposed(
            self.agent, context, request.rs_epoch, request.rs_incarnation, "CheckServerEmpty"
        )
        return self.agent.check_server_empty()

    async def ApplyReplicas(
        self, request: obrpc_pb2.ApplyReplicasRequest, context: Any
    ) -> obrpc_pb2.ApplyReplicasResponse:
        """``ObserverService.ApplyReplicas`` of obrpc.proto; answers in-band, never aborts.

        - The fencing token ``(rs_epoch, rs_incarnation)`` is judged first
          (:meth:`observer_agent.fence.TokenKeeper.admit`): an epoch lower than the highest
          obeyed, or equal with another incarnation -> ``error`` ``OB_RS_NOT_MASTER`` naming
          both tokens, nothing applied; an absurd epoch -> ``OB_INVALID_ARGUMENT``. A higher
          token is kept on disk before anything is applied, so no other root service with
          the same epoch is obeyed afterwards, not even after a restart.
        - Each ``upsert``, in order: an absent replica is created (data file built, awaited,
          then in service) as leaderless at term 0, then the spec is applied like for a
          present one. With ``copy_from``, an absent replica is instead built by copy from
          that member, in the background: reported at once with ``in_service`` false,
          ``copy_from`` and ``bytes_copied``, in service once its data is copied and checked
          and its log has caught up (see :mod:`observer_agent.replicas.copy`); a failed copy
          reports ``build_error``, and a later spec with a ``copy_from`` (another source or
          the same) restarts it, as does a different ``copy_from`` while the data is being
          copied (once the data is in place, ``copy_from`` is ignored). A replica being
          built cannot be made leader (``OB_STATE_NOT_MATCH``); ``copy_from`` this server is
          ``OB_INVALID_ARGUMENT``; ``copy_from`` of a present replica in service is ignored.
          A spec with ``term`` lower than the kept term is ignored. Otherwise
          unit_id, member_list, leader, term, paxos_replica_number, replica_type are adopted
          and written to ``meta.json``. ``leader`` == this server: it leads at ``term`` and
          appends every ``log_interval``, but first, when ``catch_up_index`` > its
          ``log_end_index``, it fetches from ``catch_up_from`` (term 0 in the request) until
          it reaches that index, within ``rpc_timeout`` and 80 % of the call's remaining
          deadline; failing that, nothing of the spec is adopted and ``error`` is
          ``OB_TIMEOUT`` naming the LS. ``leader`` another server: follows it. ``leader``
          "": nobody appends. A bad spec -> ``OB_INVALID_ARGUMENT``; the others still apply.
        - Each ``drop``: loops and any copy stopped, directories (with partial copies)
          removed (absent keys are no-ops).
        - ``replicas``: the full report after applying, sorted by (tenant_id, ls_id), with
          its number (``replicas_version``) and this run's ``start_service_time``.

        Requests are applied one at a time; a request the RS stops waiting for is still
        applied to the end.
        """
        await self.agent.peer_gate.admit(context, "ObserverService.ApplyReplicas", RS_ONLY)
        # A test fault holds the call before the epoch is read.
        await self.agent.replicas.hold_apply()
        refused = self.agent.tokens.admit(
            FenceToken(request.rs_epoch, request.rs_incarnation), "ApplyReplicas"
        )
        if refused is not None:
            resp = obrpc_pb2.ApplyReplicasResponse()
            error_to_proto(refused, resp.error)
            self.agent.replicas.report_into(resp)
            resp.start_service_time = self.agent.start_service_time
            return resp
        budget = context.time_remaining() if context is not None else None
        resp = await self.agent.replicas.apply(request, self.agent.highest_epoch, budget)
        self.agent.lease.commands.applied(request.command_seq)
        resp.start_service_time = self.agent.start_service_time
        return resp


class ReplicaServicer(obrpc_pb2_grpc.ReplicaServiceServicer):
    """``ReplicaService`` (agent to agent) backed by an :class:`Agent`'s replicas."""

    def __init__(self, agent: Agent) -> None:
        """Serve the log and the data files of ``agent``'s replicas."""
        self.agent = agent

    async def FetchLog(
        self, request: obrpc_pb2.FetchLogRequest, context: Any
    ) -> obrpc_pb2.FetchLogResponse:
        """``ReplicaService.FetchLog``: see :meth:`ReplicaManager.fetch_log
        <observer_agent.replicas.manager.ReplicaManager.fetch_log>`; errors in-band.
        A node may only fetch for itself (``follower`` = its certificate's name)."""
        allowed = self.agent.replicas.allowed_peers(request.tenant_id, request.ls_id)
        ident = await self.agent.peer_gate.admit(
            context, "ReplicaService.FetchLog", RS_OR_NODE, names=allowed
        )
        if ident is not None and ident.role is Role.NODE and request.follower != ident.name:
            await self.agent.peer_gate.admit(
                context, "ReplicaService.FetchLog", RS_OR_NODE, name=request.follower
            )
        return self.agent.replicas.fetch_log(request)

    async def FetchData(
        self, request: obrpc_pb2.FetchDataRequest, context: Any
    ) -> AsyncIterator[obrpc_pb2.DataChunk]:
        """``ReplicaService.FetchData``: the data file of a replica, streamed to a member
        building it by copy; see :meth:`ReplicaManager.fetch_data
        <observer_agent.replicas.manager.ReplicaManager.fetch_data>`; errors in-band (one chunk)."""
        allowed = self.agent.replicas.allowed_peers(request.tenant_id, request.ls_id)
        await self.agent.peer_gate.admit(
            context, "ReplicaService.FetchData", RS_OR_NODE, names=allowed
        )
        async for chunk in self.agent.replicas.fetch_data(request):
            yield chunk


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
    obrpc_pb2_grpc.add_ReplicaServiceServicer_to_server(ReplicaServicer(agent), server)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = agent.security.add_port(server, addr)
    if not port:
        raise OSError(f"cannot bind the agent's gRPC server to {addr}")
    agent.bind_port(port)
    # The connections of a certificate revoked later are closed, not only its calls refused.
    agent.peer_gate.connections.serve(port)
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
    ``grace_s`` seconds, and stop the replicas' loops (if :meth:`Agent.run` has not)."""
    if agent.health is not None:
        await agent.health.enter_graceful_shutdown()
    await server.stop(grace_s)
    await agent.replicas.stop()
