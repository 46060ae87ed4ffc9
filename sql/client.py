"""``obadmin``'s connection to the root services: one statement through
``AdminService.ExecuteSql`` (obcommon/proto/obrpc.proto), trying each RS of the list and
following the leader hint of an ``OB_RS_NOT_MASTER`` answer; the answer's cells as Python
values. Errors come back as responses carrying an OceanBase error (SPEC.md sections 7, 12).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from obcommon.errors import ERRORS, ObError, RemoteObError, error_to_proto
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role, cert_file
from obcommon.security.tls import SecurityConfigError, TransportSecurity

DEFAULT_TIMEOUT_S = 60.0


NOT_MASTER_CODES = frozenset({ERRORS["OB_RS_NOT_MASTER"].code, ERRORS["OB_NOT_MASTER"].code})
"""Answers that mean "ask another RS": the statement was not executed."""


Value = int | float | str | None


@dataclass(frozen=True)
class Credentials:
    """Who obadmin logs in as (issue 10): ``user`` and ``password`` (None when not given),
    sent as the gRPC metadata ``ob-user`` / ``ob-password`` of every call, and ``security``,
    the client certificate presented over mutual TLS (None: plaintext, ``--insecure``). The
    password is never printed (not even by ``repr``)."""

    user: str | None = None
    password: str | None = None
    security: TransportSecurity | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        shown = None if self.password is None else "***"
        return f"Credentials(user={self.user!r}, password={shown!r})"

    def metadata(self) -> list[tuple[str, str | bytes]]:
        """The call metadata: a value that is not printable ASCII (which gRPC metadata cannot
        carry) goes as UTF-8 under the ``-bin`` key."""
        out: list[tuple[str, str | bytes]] = []
        for key, value in (("ob-user", self.user), ("ob-password", self.password)):
            if value is None:
                continue
            if value.isascii() and value.isprintable():
                out.append((key, value))
            else:
                out.append((key + "-bin", value.encode("utf-8", "surrogatepass")))
        return out


NO_CREDENTIALS = Credentials()


def client_security(certs_dir: Path, user: str | None) -> TransportSecurity:
    """The client certificate obadmin presents from ``certs_dir``: ``client.<user>.crt``
    (``user`` default ``root``, as CockroachDB) or, when there is none and another user's is
    there, the only other one (every call needs *a* client certificate of the cluster; a
    password then says who logs in). Raises ``SecurityConfigError`` naming the files looked
    for, or when the pair cannot be read."""
    wanted = user or "root"
    if (certs_dir / cert_file(Role.CLIENT, wanted)).exists():
        name = wanted
    else:
        others = sorted(certs_dir.glob("client.*.crt"))
        if len(others) != 1:
            found = ", ".join(p.name for p in others) or "none"
            raise SecurityConfigError(
                f"no {cert_file(Role.CLIENT, wanted)} in {certs_dir} (client certificates found: "
                f"{found}); create one with 'rootservice cert create-client {wanted}'"
            )
        name = others[0].name.removeprefix("client.").removesuffix(".crt")
    sec = TransportSecurity.from_flags(certs_dir, False, Role.CLIENT, name)
    return sec


class RsUnreachableError(Exception):
    """No RootService in the list answered: every address refused the connection (gRPC
    ``UNAVAILABLE``). ``addr`` is the last address tried, ``detail`` gRPC's explanation."""

    def __init__(self, addr: str, detail: str) -> None:
        """Record the last address tried and gRPC's explanation of the failure."""
        super().__init__(f"can't connect to RootService on {addr!r}: {detail}")
        self.addr = addr
        self.detail = detail

    def to_sql_text(self) -> str:
        """The line obadmin prints, shaped like the mysql client's ``ERROR 2003 (HY000):
        Can't connect to MySQL server on 'host:port' (111)``."""
        return f"ERROR 2003 (HY000): Can't connect to RootService on '{self.addr}' ({self.detail})"


class _Unavailable(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _error_response(err: ObError) -> obrpc_pb2.SqlResponse:
    resp = obrpc_pb2.SqlResponse()
    error_to_proto(err, resp.error)
    return resp


def _rpc_error_response(e: grpc.RpcError) -> obrpc_pb2.SqlResponse:
    """An RPC that failed after reaching the RS, as an error response (the statement may
    have run, so it is not retried elsewhere)."""
    code = e.code() if isinstance(e, grpc.Call) else None
    details = (e.details() if isinstance(e, grpc.Call) else None) or str(e)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return _error_response(ObError("OB_TIMEOUT"))
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        # The RS's peer gate: this certificate may not use the admin service at all.
        return _error_response(ObError("ER_ACCESS_DENIED_ERROR", detail=details))
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        # gRPC refuses a message above the RS's receive limit before the RS sees it: for the
        # operator that is MySQL's max_allowed_packet error.
        return _error_response(ObError("ER_NET_PACKET_TOO_LARGE"))
    # Unary refusals may carry the OceanBase error in trailing metadata (rootservice/errors.py).
    meta = dict(e.trailing_metadata() or ()) if isinstance(e, grpc.Call) else {}
    ob_code, ob_name = meta.get("ob-code"), meta.get("ob-name")
    if isinstance(ob_code, str) and isinstance(ob_name, str):
        try:
            number = int(ob_code)
        except ValueError:
            number = 0
        if number:
            known = ERRORS.get(ob_name)
            sqlstate = known.sqlstate if known else "HY000"
            return _error_response(RemoteObError(number, ob_name, sqlstate, details))
    return _error_response(ObError("OB_ERR_UNEXPECTED", detail=f"{code}: {details}"))


def _call(
    addr: str, statement: str, timeout_s: float, credentials: Credentials
) -> obrpc_pb2.SqlResponse:
    sec = credentials.security or TransportSecurity.insecure_mode(Role.CLIENT)
    with sec.channel(addr) as channel:
        stub = obrpc_pb2_grpc.AdminServiceStub(channel)
        try:
            response: obrpc_pb2.SqlResponse = stub.ExecuteSql(
                obrpc_pb2.SqlRequest(statement=statement),
                timeout=timeout_s,
                metadata=credentials.metadata(),
            )
        except grpc.RpcError as e:
            if isinstance(e, grpc.Call) and e.code() == grpc.StatusCode.UNAVAILABLE:
                raise _Unavailable(e.details() or "unavailable") from e
            return _rpc_error_response(e)
    return response


def execute(
    rs_addrs: Sequence[str],
    statement: str,
    timeout_s: float,
    credentials: Credentials = NO_CREDENTIALS,
) -> obrpc_pb2.SqlResponse:
    """Run ``statement`` on the leader RS as ``credentials`` and return its ``SqlResponse``
    (which may carry an error: check ``error.code``; a refused login is MySQL's 1045).

    The addresses (``"host:port"``) are tried in order; an address is skipped when it refuses
    the connection (gRPC ``UNAVAILABLE``) or answers ``OB_RS_NOT_MASTER`` / ``OB_NOT_MASTER``.
    The first not-master answer's ``leader_hint`` is tried next, once. ``timeout_s`` bounds
    the whole call; when it runs out the response carries ``OB_TIMEOUT`` and no other RS is
    tried (the statement may be running). When every address only said not-master, the last
    such response is returned.

    Raises :class:`RsUnreachableError` when no address could be reached.
    """
    deadline = time.monotonic() + timeout_s
    pending = [a.strip() for a in rs_addrs if a.strip()]
    tried: set[str] = set()
    hint_followed = False
    not_master: obrpc_pb2.SqlResponse | None = None
    unreachable: RsUnreachableError | None = None
    while pending:
        addr = pending.pop(0)
        if addr in tried:
            continue
        tried.add(addr)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return _error_response(ObError("OB_TIMEOUT"))
        try:
            response = _call(addr, statement, remaining, credentials)
        except _Unavailable as e:
            unreachable = RsUnreachableError(addr, e.detail)
            continue
        if response.error.code not in NOT_MASTER_CODES:
            return response
        not_master = response
        hint = response.leader_hint.strip()
        if hint and not hint_followed and hint not in tried:
            hint_followed = True
            pending.insert(0, hint)
    if not_master is not None:
        return not_master
    if unreachable is None:
        unreachable = RsUnreachableError(",".join(rs_addrs), "no address given")
    raise unreachable


def cell_value(cell: obrpc_pb2.Cell) -> Value:
    """The Python value of a result cell: None for NULL (or an empty cell), else the int,
    float or str set in its ``value`` oneof."""
    kind = cell.WhichOneof("value")
    if kind == "int_value":
        return cell.int_value
    if kind == "double_value":
        return cell.double_value
    if kind == "string_value":
        return cell.string_value
    return None


def result_rows(resp: obrpc_pb2.SqlResponse) -> list[list[Value]]:
    """The rows of a result set as lists of Python values (see :func:`cell_value`)."""
    return [[cell_value(c) for c in row.cells] for row in resp.rows]
