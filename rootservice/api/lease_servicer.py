"""The agents' lease path (docs/design/leases.md): ``RootService.LeaseStream`` (one long-lived
bidirectional stream per agent, refusals in-band so the stream survives them) and
``RootService.RenewLease`` (the same as a unary call, refusals as gRPC status with
``ob-code`` / ``ob-name`` / ``ob-leader-hint`` trailing metadata), both into
:meth:`rootservice.servers.heartbeat.HeartbeatIntake.receive_hb`.

A standby, or a leader whose own lease is no longer safely held, answers every lease
request with ``OB_RS_NOT_MASTER`` and the leader's address as ``leader_hint``.

Only a node certificate naming the request's ``server`` may renew that server's lease
(a node may only speak for itself, as Kubernetes' NodeRestriction); anything else
is refused by ``rs.peer_gate`` before the request is looked at, so a forged renewal or disk
error bit changes nothing.

First requests, and every request while the event loop is saturated or renewals wait, are
not handled in the stream's own task: each goes into the RS's lease queue
(:class:`rootservice.servers.lease_queue.LeaseQueue`, ``rs.lease_queue``) the moment it is
read, and one worker on the event loop handles the queue fairly (renewals of admitted
streams before first requests), so the RS sees its own backlog and no stream waits behind
an admission storm. A renewal that would be the only one of the next turn is handled at
once instead (``LeaseQueue.take_now``): the same answer, without a future and a
wake-up per heartbeat.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import partial

import grpc

from obcommon.errors import ObError, error_to_proto
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from obcommon.security.identity import session_resumed
from rootservice.app import RootService
from rootservice.servers.lease_bounds import StreamChecks

#: Who may renew a lease: the agents, each for its own server only.
NODES = frozenset({Role.NODE})


class LeaseServicer(obrpc_pb2_grpc.RootServiceServicer):
    """Lease renewal (docs/design/leases.md) -> ``HeartbeatIntake.receive_hb``."""

    def __init__(self, rs: RootService) -> None:
        """Serve leases for ``rs``; handling times go to its ``hb_handle_us`` latency window."""
        self.rs = rs
        self._hb_window = rs.metrics.window("hb_handle_us")
        self._queue = rs.lease_queue
        # Collaborators made once with the RS and never replaced, bound here because every
        # heartbeat reads them.
        self._fence = rs.fence
        self._term = rs.term
        self._revoked = rs.peer_gate.revoked
        self._receive_hb = rs.heartbeats.receive_hb
        self._clock = rs.clock
        # The event loop every lease stream is served on (the queue's turns run on it).
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _answer(
        self,
        req: obrpc_pb2.LeaseRequest,
        checks: StreamChecks | None,
        first: bool,
        paced: bool = True,
    ) -> obrpc_pb2.LeaseResponse:
        """``req`` through the lease queue: its answer once a turn of the queue handled it
        (the queue's turns are started on this event loop by the first request). ``paced``
        False: never held by the queue's pacing (the request carries news)."""
        queue = self._queue
        loop = self._loop
        if loop is None:
            # Looked up only here: asyncio.get_running_loop() makes a getpid() system call
            # (its fork check), which a native profile at 5,000 agents found on every request.
            loop = self._loop = asyncio.get_running_loop()
            queue.start(loop)
        fut: asyncio.Future[obrpc_pb2.LeaseResponse] = loop.create_future()
        queue.submit(
            req.server,
            # Dated on the wall clock as it arrives: judged as of then, whatever the clock
            # does while it waits.
            partial(self._handle, req, checks, arrived_us=self._clock.now_us()),
            fut.set_result,
            first,
            fut.set_exception,
            # A first request whose stream ended is not handled (see LeaseQueue).
            fut.done if first else None,
            paced,
        )
        return await fut

    def _handle(
        self,
        req: obrpc_pb2.LeaseRequest,
        checks: StreamChecks | None = None,
        waited_us: int = 0,
        arrived_us: int | None = None,
    ) -> obrpc_pb2.LeaseResponse:
        """``receive_hb(req, checks, waited_us, arrived_us)`` with the term guard, the
        counters and the handling time; a refusal becomes the response's ``error``."""
        t0 = time.perf_counter_ns()
        # Every epoch an agent of this cluster obeyed, seen by standbys too: a take-office
        # starts above it.
        if (
            req.rs_epoch > self._fence.highest_known
            and req.cluster_id
            and req.cluster_id == self.rs.identity.cluster_id
        ):
            self._fence.note_epoch(req.rs_epoch, req.server)
        try:
            why = self._term.guard()
            if why is not None:
                # A leader past its safety margin must not grant leases, even before the
                # watchdog has stepped it down.
                raise ObError("OB_RS_NOT_MASTER", detail=why)
            resp = self._receive_hb(req, checks, waited_us, arrived_us)
            # The revocation list rides on accepted answers: its version
            # always, the serials only when the agent's version is another.
            serials, version = self._revoked.state
            resp.revocation_version = version
            if req.revocation_version != version:
                resp.revoked_serials.extend(sorted(serials))
            # Plain attributes, not Metrics.inc: only the event-loop thread counts these, so
            # the heartbeat path takes no lock for them.
            self.rs.heartbeats_total += 1
        except ObError as e:
            self.rs.heartbeats_refused_total += 1
            refused = self.rs.heartbeats_refused
            refused[e.name] = refused.get(e.name, 0) + 1
            token = self.rs.term.token()
            resp = obrpc_pb2.LeaseResponse(
                seq=req.seq, rs_epoch=token.epoch, rs_incarnation=token.incarnation
            )
            error_to_proto(e, resp.error)
            if e.name == "OB_RS_NOT_MASTER":
                resp.leader_hint = self.rs.leader_hint()
        self._hb_window.record((time.perf_counter_ns() - t0) // 1000)
        return resp

    async def RenewLease(
        self, request: obrpc_pb2.LeaseRequest, context: grpc.aio.ServicerContext
    ) -> obrpc_pb2.LeaseResponse:  # type: ignore[override]  # noqa: N802
        """``RootService.RenewLease`` of obrpc.proto: one lease request, one lease response.

        Runs ``HeartbeatIntake.receive_hb`` (docs/design/leases.md). A refusal (``ObError``) aborts
        the call with the error's gRPC status, message ``"<OB name>: <message>"`` and trailing
        metadata ``ob-code`` / ``ob-name``.
        """
        await self.rs.peer_gate.admit(context, "RootService.RenewLease", NODES, name=request.server)
        if self._queue.take_now(request.server, False):
            resp = self._handle(request, None)
        else:
            resp = await self._answer(request, None, False)
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

        Each request goes through ``HeartbeatIntake.receive_hb`` (docs/design/leases.md); a refusal
        is carried in-band in the response's ``error`` (with this RS's epoch), so the stream
        stays open. The peer's certificate is read once per stream; a request for any server
        but the one it names ends the stream with ``PERMISSION_DENIED``, and the first request
        after its certificate is revoked with ``UNAUTHENTICATED`` (a set lookup per request).
        The bounds of the fields an agent resends unchanged are checked once per stream and
        again when one changes (``StreamChecks``).
        """
        gate = self.rs.peer_gate
        ident = await gate.admit(context, "RootService.LeaseStream", NODES)
        checks = StreamChecks()
        answer = self._answer
        # The common case without a coroutine per heartbeat: a renewal handled at once.
        take_now = self._queue.take_now
        handle = self._handle
        first = True
        # The stream's last server_status: a request that changes it (a disk error, a
        # clean stop) is news, answered without the queue's pacing.
        status = -1
        if ident is not None:
            # Once per stream, off the per-heartbeat path: how many reconnects resumed TLS.
            resumed = session_resumed(context)
            self.rs.metrics.inc(
                "lease_streams_resumed_total" if resumed else "lease_streams_full_tls_total"
            )
        async for req in request_iterator:
            server = req.server
            if ident is not None and (server != ident.name or gate.is_revoked(ident)):
                await gate.admit(context, "RootService.LeaseStream", NODES, name=server)
            if take_now(server, first):
                yield handle(req, checks)
            else:
                yield await answer(req, checks, first, req.server_status == status)
            first = False
            status = req.server_status
