"""``obadmin``'s entry point, ``AdminService``: ``ExecuteSql`` authenticates the caller
(gRPC metadata ``ob-user`` / ``ob-password``, the client certificate), then parses
and executes one statement, all on a worker thread (so that neither password hashing,
parsing nor database I/O ever blocks heartbeats), and answers MySQL-style errors in-band
(docs/design/statements.md); ``GetMetrics`` returns the RS's counters as JSON.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable

import grpc

from obcommon.errors import ObError, error_to_proto
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from rootservice.api.admission import DEFAULT_USER, Admission
from rootservice.api.dispatch import Forwarder, execute_sql
from rootservice.api.forwarding import FORWARDED_ADDR_KEY, FORWARDED_USER_KEY
from rootservice.app import RootService
from rootservice.auth.principal import Principal, client_host
from rootservice.auth.privileges import SELECT
from rootservice.auth.users import MAX_USER_NAME_CHARS

#: Who may call the admin service: client certificates (a node certificate may not), and RS
#: certificates only to forward a client's statement (see
#: :meth:`AdminServicer.ExecuteSql`). GetMetrics serves clients only.
CLIENTS = frozenset({Role.CLIENT})
CALLERS = frozenset({Role.CLIENT, Role.RS})

USER_KEY = "ob-user"
PASSWORD_KEY = "ob-password"
"""gRPC metadata of the caller's user name and password (absent = None). A value that is
not printable ASCII travels as UTF-8 under the same key with gRPC's ``-bin`` suffix."""

#: Refusals that mean "ask the leader" and carry ``leader_hint``.
NOT_MASTER_NAMES = frozenset({"OB_RS_NOT_MASTER", "OB_NOT_MASTER"})


def client_addr(peer: str) -> str:
    """gRPC's ``context.peer()`` (``ipv4:10.0.0.5:51234``, ``ipv6:[::1]:51234``) ->
    ``10.0.0.5:51234`` / ``[::1]:51234``; other forms (``unix:...``) are kept as they are."""
    scheme, sep, rest = peer.partition(":")
    return rest if sep and scheme in ("ipv4", "ipv6") else peer


def metadata_value(metadata: object, key: str) -> str | None:
    """The value of ``key`` (or of ``key-bin``, UTF-8) in gRPC invocation metadata, None when
    absent or not UTF-8."""
    for item in metadata or ():  # type: ignore[attr-defined]
        k, v = item[0], item[1]
        if k == key and isinstance(v, str):
            return v
        if k == key + "-bin" and isinstance(v, bytes):
            try:
                return v.decode("utf-8")
            except UnicodeDecodeError:
                return None
    return None


def authenticated_execute(
    rs: RootService,
    statement: str,
    user: str | None,
    password: str | None,
    cert_user: str | None,
    addr: str,
    forwarder: Forwarder | None = None,
) -> obrpc_pb2.SqlResponse:
    """Authenticate (:meth:`rootservice.auth.users.Users.authenticate`), then
    :func:`rootservice.api.dispatch.execute_sql` (with ``forwarder``: a standby forwards a
    statement that needs the leader). A refused login answers MySQL's 1045 in-band, and is
    audited (event ``login``) and counted (``logins_refused_total``)."""
    try:
        principal = rs.users.authenticate(user, password, cert_user, addr)
    except ObError as e:
        resp = obrpc_pb2.SqlResponse()
        error_to_proto(e, resp.error)
        if e.name == "ER_ACCESS_DENIED_ERROR":
            rs.metrics.inc("logins_refused_total")
            rs.audit.record(user or cert_user or "", addr, statement, e.name, event="login")
        return resp
    return execute_sql(rs, statement, principal, forwarder=forwarder)


def forwarded_execute(
    rs: RootService, statement: str, principal: Principal, forwarded_by: str
) -> obrpc_pb2.SqlResponse:
    """Run a statement a standby RS forwarded for ``principal`` (the client it
    authenticated; the standby vouches with its RS certificate, as Doris's followers do for
    the master), audited with ``forwarded_by`` (the standby's ``ip:port``). It is never
    forwarded again: a leader that stepped down answers OB_RS_NOT_MASTER."""
    return execute_sql(rs, statement, principal, forwarded_by=forwarded_by)


def refuse_forwarded_identity(
    rs: RootService, statement: str, user: str, addr: str, why: str
) -> obrpc_pb2.SqlResponse:
    """MySQL's 1045 for forwarded-identity metadata from a caller that cannot vouch (a client
    certificate, or anyone in insecure mode), audited (event ``login``) and counted
    (``logins_refused_total``) as a refused login."""
    e = ObError(
        "ER_ACCESS_DENIED_ERROR",
        user.replace("'", "''")[:MAX_USER_NAME_CHARS],
        client_host(addr),
        "NO",
        detail=why,
    )
    resp = obrpc_pb2.SqlResponse()
    error_to_proto(e, resp.error)
    rs.metrics.inc("logins_refused_total")
    rs.audit.record(user, addr, statement, e.name, event="login")
    return resp


def admission_key(cert_user: str | None, user: str | None) -> str:
    """Whom a call counts against in :class:`rootservice.api.admission.Admission`: the
    verified client certificate's user when there is one, not the name the caller claims
    (claiming ``root`` must not use up root's slots); else the claimed user (insecure mode:
    no certificates), else ``root``."""
    return cert_user or user or DEFAULT_USER


class AdminServicer(obrpc_pb2_grpc.AdminServiceServicer):
    """``obadmin``'s entry point: one SQL statement per call (docs/design/statements.md)."""

    def __init__(
        self,
        rs: RootService,
        forwarder: Forwarder | None = None,
        admission: Admission | None = None,
    ) -> None:
        """Serve admin calls for ``rs``; statements run on the threads of ``admission``
        (default: a new one of ``admin_workers``, ``admin_queue_limit``,
        ``admin_per_user_limit``), which the MySQL endpoint shares.
        With ``forwarder`` a standby forwards statements that need the leader."""
        self.rs = rs
        self.forwarder = forwarder
        st = rs.settings
        self.admission = admission or Admission(
            st.admin_workers, st.admin_queue_limit, st.admin_per_user_limit
        )

    async def ExecuteSql(
        self, request: obrpc_pb2.SqlRequest, context: grpc.aio.ServicerContext
    ) -> obrpc_pb2.SqlResponse:  # type: ignore[override]  # noqa: N802
        """``AdminService.ExecuteSql`` of obrpc.proto: authenticate the caller (metadata
        ``ob-user`` / ``ob-password``, the client certificate), then parse and run
        one SQL statement.

        Runs :func:`rootservice.api.dispatch.execute_sql` on the admin threads of
        :class:`rootservice.api.admission.Admission` for :func:`admission_key`, so
        the event loop (and the heartbeats) never wait for parsing or the database and
        background work never waits behind statements; a statement over the admission
        limits gets ``ER_CON_COUNT_ERROR`` / ``ER_TOO_MANY_USER_CONNECTIONS`` at once; every error, MySQL-style
        (docs/design/statements.md), is carried in the response's ``error``, never as a gRPC status. A
        not-master refusal carries the leader's address in ``leader_hint``.

        Forwarding: with a forwarder, a standby sends a statement that needs
        the leader on to it and answers what the leader answered. An RS certificate may call
        only with :data:`rootservice.api.forwarding.FORWARDED_USER_KEY` and
        ``FORWARDED_ADDR_KEY`` (else ``PERMISSION_DENIED``): the principal is built from them
        without a password, the caller vouching for it, and the statement is not forwarded
        again. The same metadata from a client certificate, or in insecure mode, is refused
        with 1045 (nothing vouches for it).
        """
        # A client certificate may call (its CN names the user when no password is given); an
        # RS certificate only to forward a client's statement; no certificate in insecure mode.
        ident = await self.rs.peer_gate.admit(context, "AdminService.ExecuteSql", CALLERS)
        metadata = context.invocation_metadata()
        user = metadata_value(metadata, USER_KEY) or None
        addr = client_addr(context.peer() or "")
        fwd_user = metadata_value(metadata, FORWARDED_USER_KEY)
        fwd_addr = metadata_value(metadata, FORWARDED_ADDR_KEY)
        work: Callable[[], obrpc_pb2.SqlResponse]
        if ident is not None and ident.role is Role.RS:
            if not fwd_user or fwd_addr is None:
                await self.rs.peer_gate.refuse(
                    context,
                    grpc.StatusCode.PERMISSION_DENIED,
                    "wrong_role",
                    f"AdminService.ExecuteSql from {ident} must name the client it forwards "
                    f"({FORWARDED_USER_KEY}, {FORWARDED_ADDR_KEY}); {context.peer()} named none",
                )
            assert fwd_user and fwd_addr is not None  # refuse() aborted otherwise
            key = fwd_user
            work = functools.partial(
                forwarded_execute,
                self.rs,
                request.statement,
                Principal(fwd_user, fwd_addr),
                ident.name,
            )
        elif fwd_user is not None or fwd_addr is not None:
            # Only an RS certificate vouches for a forwarded identity: a client claiming one
            # (or anyone in insecure mode, where nothing can vouch) is refused, not believed.
            key = admission_key(ident.name if ident is not None else None, user)
            work = functools.partial(
                refuse_forwarded_identity,
                self.rs,
                request.statement,
                fwd_user or "",
                addr,
                "forwarded identities are accepted from root service certificates only",
            )
        else:
            cert_user = ident.name if ident is not None else None
            key = admission_key(cert_user, user)
            work = functools.partial(
                authenticated_execute,
                self.rs,
                request.statement,
                user,
                metadata_value(metadata, PASSWORD_KEY),
                cert_user,
                addr,
                self.forwarder,
            )
        try:
            # Logins are checked inside, on the admin threads, so that password hashing is
            # bounded by admission too.
            resp = await self.admission.run(key, work)
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

        Read-only, so the SELECT privilege is enough, as for the HTTP ``/metrics``:
        the client certificate's user must hold it (root does without a table read);
        otherwise ``PERMISSION_DENIED``, counted and logged by the peer gate. In insecure mode
        there is no certificate and every caller may read, as on the other endpoints.
        """
        ident = await self.rs.peer_gate.admit(context, "AdminService.GetMetrics", CLIENTS)
        if ident is not None:
            try:
                privileges = await asyncio.to_thread(self.rs.users.privileges, ident.name)
            except ObError as e:  # the user table cannot be read
                await context.abort(grpc.StatusCode.UNAVAILABLE, e.message)
            if SELECT not in privileges:
                await self.rs.peer_gate.refuse(
                    context,
                    grpc.StatusCode.PERMISSION_DENIED,
                    "no_privilege",
                    f"AdminService.GetMetrics needs the {SELECT} privilege; {ident} has it not",
                )
        return obrpc_pb2.MetricsResponse(
            json=json.dumps(self.rs.metrics_snapshot(), sort_keys=True)
        )
