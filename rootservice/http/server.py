"""The RS's HTTP(S) server: an aiohttp application on the RS's event loop.

Routes (the contract of the status API, /tmp/brief/contract12.md, is restated in
docs/architecture.md "The HTTP front end"):

- ``GET /healthz``: 200 ``{"status": "ok"}`` while the process lives; no credentials.
- ``GET /readyz``: 200 when this RS is the leader in FULL_SERVICE with its database reachable,
  else 503 with the reason (:class:`rootservice.ha.readiness.Readiness`); no credentials.
- ``GET /metrics``: the Prometheus text format of ``rs.metrics.registry``
  (``prometheus_client.generate_latest``, rendered in a worker thread).
- ``GET /api/v1/{cluster,servers,zones,ls_locations,rootservices,jobs,events,health,ha,
  bootstrap,hardware,check_decommission}``: JSON (:class:`rootservice.http.status.ClusterStatus`, in a worker
  thread). A standby answers 503 ``OB_RS_NOT_MASTER`` with ``leader`` for everything but
  ``rootservices`` / ``ha``, which come from the tables every RS reads: its memory holds no
  servers, and showing an empty cluster would lie.
- ``GET /``: the dashboard, ``static/index.html`` (and ``/static/...``), when installed.

TLS with the RS's certificate (``rs.crt`` / ``rs.key``) and the cluster CA, client
certificate optional (:mod:`rootservice.http.auth` for who may read); plaintext only in
insecure mode. After a certificate rotation (:meth:`TransportSecurity.generation`), the
context loads the new pair for the next handshakes (:meth:`HttpServer.reload_tls`, called by
the readiness follower in :mod:`rootservice.cli`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from obcommon.errors import ObError
from obcommon.security.tls import ServerTlsContext
from rootservice.app import RootService
from rootservice.auth.principal import Principal
from rootservice.http.auth import NoCredentials, authenticate
from rootservice.http.errors import json_error, ob_error_response
from rootservice.http.status import EVENTS_DEFAULT, EVENTS_MAX, ClusterStatus
from sql import ast

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"

#: Paths answered without credentials (probes).
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
#: Status API paths a standby answers itself (from the tables); the rest need the leader.
STANDBY_PATHS = frozenset({"/api/v1/rootservices", "/api/v1/ha"})

RS_KEY = web.AppKey("rs", RootService)
#: The authenticated principal of a request (absent on the probes).
PRINCIPAL_KEY = web.RequestKey("ob_principal", Principal)
STATUS_KEY = web.AppKey("status", ClusterStatus)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authentication (all but the probes), then the one ObError -> JSON translation."""
    rs = request.app[RS_KEY]
    try:
        if request.path not in OPEN_PATHS:
            try:
                request[PRINCIPAL_KEY] = await authenticate(rs, request)
            except NoCredentials:
                return json_error(401, "authentication required (client certificate or Basic)")
        return await handler(request)
    except ObError as e:
        extra = {}
        if e.name == "OB_RS_NOT_MASTER":
            extra["leader"] = rs.leader_hint()
        resp = ob_error_response(e, **extra)
        if e.name == "ER_ACCESS_DENIED_ERROR":
            # A refused login ends the connection, as on the MySQL endpoint: a revoked
            # certificate must not keep a connection open.
            resp.force_close()
        return resp
    except web.HTTPException as e:
        if e.status >= 400 and e.content_type != "application/json":
            return json_error(e.status, e.reason)
        raise


async def _blocking(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


def _leader_only(request: web.Request) -> None:
    """A standby (or a stopped RS) answers OB_RS_NOT_MASTER (503, with the leader)."""
    rs = request.app[RS_KEY]
    rs.term.check(need_service=False)


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process answers."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness (:meth:`rootservice.ha.readiness.Readiness.verdict`); the database probe is
    refreshed first when stale (at most once a second, in a thread)."""
    readiness = request.app[RS_KEY].readiness
    await readiness.refresh()
    v = readiness.verdict()
    body: dict[str, Any] = {"ready": v.ready, "reason": v.reason, "leader": v.leader}
    if v.intake:
        # Still ready (the leader serves, only late): the lag is shown, not a 503.
        body["lease_intake"] = v.intake
    return web.json_response(body, status=200 if v.ready else 503)


async def metrics(request: web.Request) -> web.Response:
    """The Prometheus exposition of the RS's registry."""
    data = await _blocking(generate_latest, request.app[RS_KEY].metrics.registry)
    resp = web.Response(body=data)
    resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return resp


def _api(fn: Callable[[ClusterStatus, web.Request], Any], *, leader: bool = True) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        if leader:
            _leader_only(request)
        status = request.app[STATUS_KEY]
        return web.json_response(await _blocking(fn, status, request))

    return handler


def _limit(request: web.Request) -> int:
    raw = request.query.get("limit", str(EVENTS_DEFAULT))
    if not raw.isdigit() or not 1 <= int(raw) <= EVENTS_MAX:
        raise ObError("OB_INVALID_ARGUMENT", f"limit '{raw[:32]}' (1..{EVENTS_MAX})")
    return int(raw)


async def check_decommission(request: web.Request) -> web.Response:
    """``?server=ip:port[&server=...][&plan=1]``: the DELETE SERVER pre-checks, nothing
    changed; ``plan=1`` adds the dry run's rows (EXPLAIN ALTER SYSTEM DELETE SERVER) and
    needs that statement's privilege (ALTER SYSTEM; else 403, MySQL's 1227)."""
    _leader_only(request)
    servers = request.query.getall("server", [])
    if not servers:
        raise ObError("OB_INVALID_ARGUMENT", "server (give ?server=ip:port)")
    plan = request.query.get("plan", "0")
    if plan not in ("0", "1"):
        raise ObError("OB_INVALID_ARGUMENT", f"plan '{plan[:32]}' (0 or 1)")
    if plan == "1":
        # The rows are EXPLAIN ALTER SYSTEM DELETE SERVER's and cost a planner run (a Spark
        # job): the same privilege as that statement, not just the API's SELECT.
        rs = request.app[RS_KEY]
        stmt = ast.ExplainDeleteServer(tuple(servers), None)
        await _blocking(rs.users.check, request[PRINCIPAL_KEY], stmt)
    status = request.app[STATUS_KEY]
    return web.json_response(await _blocking(status.check_decommission, servers, plan == "1"))


async def events(request: web.Request) -> web.Response:
    """``?limit=N`` latest events (1..1000, default 100)."""
    _leader_only(request)
    limit = _limit(request)
    return web.json_response(await _blocking(request.app[STATUS_KEY].events, limit))


async def index(request: web.Request) -> web.StreamResponse:
    """The dashboard page (``static/index.html``), 404 when not installed."""
    page = STATIC_DIR / "index.html"
    if not page.is_file():
        return json_error(404, "the dashboard is not installed")
    return web.FileResponse(page)


def build_app(rs: RootService) -> web.Application:
    """The application of ``rs`` (no listener): routes, authentication, error translation."""
    app = web.Application(middlewares=[_guard])
    app[RS_KEY] = rs
    app[STATUS_KEY] = ClusterStatus(rs)
    r = app.router
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/metrics", metrics)
    r.add_get("/api/v1/cluster", _api(lambda s, _: s.cluster()))
    r.add_get("/api/v1/servers", _api(lambda s, _: s.servers()))
    r.add_get("/api/v1/zones", _api(lambda s, _: s.zones()))
    r.add_get("/api/v1/ls_locations", _api(lambda s, _: s.ls_locations()))
    r.add_get("/api/v1/jobs", _api(lambda s, _: s.jobs()))
    r.add_get("/api/v1/events", events)
    r.add_get("/api/v1/rootservices", _api(lambda s, _: s.root_services(), leader=False))
    r.add_get("/api/v1/ha", _api(lambda s, _: s.root_services(), leader=False))
    r.add_get("/api/v1/health", _api(lambda s, _: s.health()))
    r.add_get("/api/v1/bootstrap", _api(lambda s, _: s.bootstrap()))
    r.add_get("/api/v1/hardware", _api(lambda s, _: s.hardware()))
    r.add_get("/api/v1/planner", _api(lambda s, _: s.planner(), leader=False))
    r.add_get("/api/v1/check_decommission", check_decommission)
    r.add_get("/", index)
    if STATIC_DIR.is_dir():
        r.add_static("/static/", STATIC_DIR)
    return app


class HttpServer:
    """A running HTTP(S) endpoint: :meth:`start` binds, :meth:`stop` closes."""

    def __init__(self, rs: RootService, addr: str | None = None) -> None:
        """The endpoint of ``rs`` on ``addr`` (default ``rs.settings.http_addr``)."""
        self.rs = rs
        self.addr = addr or rs.settings.http_addr
        self.runner = web.AppRunner(build_app(rs), access_log=None, handle_signals=False)
        self.port = 0
        self._tls: ServerTlsContext | None = None

    def reload_tls(self) -> bool:
        """Load the RS's certificate pair again into the serving context when the files
        changed (a rotation); returns True when it did
        (:meth:`obcommon.security.tls.ServerTlsContext.reload`: a pair that cannot be loaded
        is logged and the previous one kept)."""
        return self._tls.reload() if self._tls is not None else False

    @property
    def tls(self) -> bool:
        """True when it serves HTTPS."""
        return not self.rs.security.insecure

    async def start(self) -> int:
        """Listen (in the running loop); records the bound port on the RS and returns it.
        Raises ``OSError`` when the address cannot be bound or the certificates read."""
        host, _, port = self.addr.rpartition(":")
        self._tls = ServerTlsContext(self.rs.security)
        ctx = self._tls.ctx
        await self.runner.setup()
        site = web.TCPSite(
            self.runner, host.strip("[]"), int(port), ssl_context=ctx, reuse_port=False
        )
        try:
            await site.start()
        except BaseException:
            await self.runner.cleanup()
            raise
        server = site._server  # noqa: SLF001 - aiohttp keeps the asyncio server there
        sockets = getattr(server, "sockets", None) or ()
        self.port = int(sockets[0].getsockname()[1]) if sockets else int(port)
        self.rs.set_http_port(self.port)
        log.info(
            "HTTP endpoint on %s://%s (%s)",
            "https" if ctx is not None else "http",
            self.rs.http_addr,
            "client certificate or Basic" if ctx is not None else "INSECURE, no authentication",
        )
        return self.port

    async def stop(self) -> None:
        """Stop listening and close open connections."""
        await self.runner.cleanup()


async def start_http_server(rs: RootService, addr: str | None = None) -> HttpServer:
    """:class:`HttpServer` started on ``addr`` (default ``rs.settings.http_addr``). Raises
    ``OSError`` when it cannot listen."""
    server = HttpServer(rs, addr)
    await server.start()
    return server
