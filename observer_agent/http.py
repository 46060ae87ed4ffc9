"""The agent's HTTP(S) endpoint: ``/metrics`` (the Prometheus text format of
``agent.metrics.registry``), ``/healthz`` and ``/readyz``, served by aiohttp on the agent's
event loop at ``--http-addr`` (default ``127.0.0.1:8088``, OceanBase obagent's monitor port).

- ``/healthz``: 200 while the process lives; no credentials (a probe).
- ``/readyz``: 200 when the agent is registered with the RS, serving, its lease not expired
  and its data disk healthy; else 503 ``{"ready": false, "reason": ...}``; no credentials.
- ``/replica-data/{tenant_id}/{ls_id}``: an LS's data file for an agent copying it, the bulk
  path of replica copies (:mod:`observer_agent.http_data`); the RS's or a member's
  or an announced learner's node certificate.
- ``/metrics``: HTTPS with the node's certificate (``node.crt`` / ``node.key``) and the
  cluster CA; the caller must present a certificate of that CA (agents have no users: any
  role of the cluster's PKI - a Prometheus server gets a client certificate). Plaintext and
  open only with ``--insecure``.

After a certificate rotation the endpoint serves the new pair at the next handshakes, as the
RS's does: :class:`AgentHttp` looks for new files every
:data:`RELOAD_EVERY_S` (:class:`obcommon.security.tls.ServerTlsContext`), and ``/metrics``
accepts only a certificate of the current ``ca.crt``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from obcommon.security.identity import identity_of_der
from obcommon.security.tls import RELOAD_CHECK_S, ServerTlsContext
from observer_agent.agent import Agent
from observer_agent.http_data import ROUTE, data_handler

log = logging.getLogger(__name__)

AGENT_KEY = web.AppKey("agent", Agent)

#: How often, in seconds, the endpoint looks for rotated certificate files (the files are
#: stat'ed at most every ``RELOAD_CHECK_S`` anyway).
RELOAD_EVERY_S = max(RELOAD_CHECK_S, 1.0)


def readiness(agent: Agent) -> str | None:
    """Why the agent is not ready (None: ready): not registered, not serving, lease expired
    (``lease_expire_time`` passed on the agent's clock), data disk error."""
    if not agent.registered:
        refusal = agent.last_refusal
        return "not registered with the RS" + (f": {refusal.name}" if refusal else "")
    if not agent.serving:
        return "registered but not serving yet"
    if agent.lease_expire_time <= agent.clock.now_us():
        return "lease expired"
    disk = agent.disk_error
    if disk is not None:
        return f"data disk error: {disk}"
    return None


def _metrics_refusal(request: web.Request, agent: Agent) -> str | None:
    """Why the peer may not read /metrics (None: it may): no certificate of the current
    cluster CA, or a revoked one (the list the RS sends with lease answers)."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    # CERT_OPTIONAL verified whatever was sent against every CA the context ever loaded (it
    # cannot drop one): after a CA rotation only the current ca.crt counts.
    if not der or not agent.security.issued_by_current_ca(der):
        return "a client certificate of the cluster CA is required"
    ident = identity_of_der(der)
    if ident is not None and agent.peer_gate.is_revoked(ident):
        return f"the certificate of {ident} (serial {ident.serial}) is revoked"
    return None


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status)


async def healthz(request: web.Request) -> web.Response:
    """Liveness."""
    return _json(200, {"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness (:func:`readiness`)."""
    why = readiness(request.app[AGENT_KEY])
    return _json(200 if why is None else 503, {"ready": why is None, "reason": why or ""})


async def metrics(request: web.Request) -> web.Response:
    """The registry in the Prometheus text format; 401 without a cluster certificate or with
    a revoked one."""
    agent = request.app[AGENT_KEY]
    why = None if agent.security.insecure else _metrics_refusal(request, agent)
    if why is not None:
        return _json(401, {"code": 401, "error": why})
    data = await asyncio.to_thread(generate_latest, agent.metrics.registry)
    resp = web.Response(body=data)
    resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return resp


def build_app(agent: Agent) -> web.Application:
    """The application of ``agent`` (no listener)."""
    app = web.Application()
    app[AGENT_KEY] = agent
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get(ROUTE, data_handler(agent))
    return app


class AgentHttp:
    """The running endpoint of ``agent`` on ``addr`` (default ``settings.http_addr``)."""

    def __init__(self, agent: Agent, addr: str | None = None) -> None:
        """Not listening until :meth:`start`."""
        self.agent = agent
        self.addr = addr or agent.settings.http_addr
        self.runner = web.AppRunner(build_app(agent), access_log=None, handle_signals=False)
        self.port = 0
        self.tls: ServerTlsContext | None = None
        self._follower: asyncio.Task[None] | None = None

    def reload_tls(self) -> bool:
        """Load the node's certificate pair again when the files changed (a rotation); True
        when it did (:meth:`ServerTlsContext.reload`)."""
        return self.tls.reload() if self.tls is not None else False

    async def _follow_rotation(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_EVERY_S)
            try:
                self.reload_tls()
            except Exception:  # noqa: BLE001 - the follower must outlive one bad look
                log.exception("HTTP certificate reload failed")

    async def start(self) -> int:
        """Listen in the running loop; returns the bound port. Raises ``OSError``."""
        host, _, port = self.addr.rpartition(":")
        self.tls = ServerTlsContext(self.agent.security)
        ctx = self.tls.ctx
        await self.runner.setup()
        site = web.TCPSite(self.runner, host.strip("[]"), int(port), ssl_context=ctx)
        try:
            await site.start()
        except BaseException:
            await self.runner.cleanup()
            raise
        server = site._server  # noqa: SLF001 - aiohttp keeps the asyncio server there
        sockets = getattr(server, "sockets", None) or ()
        self.port = int(sockets[0].getsockname()[1]) if sockets else int(port)
        if ctx is not None:
            self._follower = asyncio.ensure_future(self._follow_rotation())
        self._offer_data(host.strip("[]"), "https" if ctx is not None else "http")
        log.info(
            "HTTP endpoint on %s://%s:%d",
            "https" if ctx is not None else "http",
            host,
            self.port,
        )
        return self.port

    def _offer_data(self, host: str, scheme: str) -> None:
        # Copies fetch data files here at the host peers already reach this agent
        # at and its certificate names: its RPC address's. A listener on another host (the
        # default 127.0.0.1 beside a routable RPC address) is not offered: peers elsewhere
        # would reach their own loopback, and their copies stream over gRPC instead.
        rpc_host = self.agent.server.rpartition(":")[0].strip("[]")
        if host not in ("", "0.0.0.0", "::", rpc_host):
            log.info(
                "copies from this agent stream over gRPC: the HTTP endpoint's host %s is not "
                "its RPC host %s",
                host,
                rpc_host,
            )
            return
        url_host = f"[{rpc_host}]" if ":" in rpc_host else rpc_host
        self.agent.replicas.serving.serve_data_at(f"{scheme}://{url_host}:{self.port}")

    async def stop(self) -> None:
        """Stop following rotations and listening (copies stop being offered the bulk path
        first)."""
        self.agent.replicas.serving.serve_data_at("")
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        await self.runner.cleanup()
