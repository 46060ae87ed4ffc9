"""``obadmin``'s connection to the root services: one statement through
``AdminService.ExecuteSql`` (obcommon/proto/obrpc.proto), trying each RS of the list and
following the leader hint of an ``OB_RS_NOT_MASTER`` answer, retrying a failed connect or
handshake until the deadline (:mod:`sql.connect` states when a statement may be sent again);
the answer's cells as Python values. Errors come back as responses carrying an OceanBase
error (docs/design/statements.md and docs/design/index.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from obcommon.errors import ERRORS, ObError, RemoteObError, error_to_proto
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role, cert_file
from obcommon.security.tls import SecurityConfigError, TransportSecurity
from sql.connect import Attempts, RsUnreachableError, Unreached, is_read_only

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "NOT_MASTER_CODES",
    "NO_CREDENTIALS",
    "Credentials",
    "RsUnreachableError",
    "Value",
    "cell_value",
    "client_security",
    "execute",
    "result_rows",
]

DEFAULT_TIMEOUT_S = 60.0


NOT_MASTER_CODES = frozenset({ERRORS["OB_RS_NOT_MASTER"].code, ERRORS["OB_NOT_MASTER"].code})
"""Answers that mean "ask another RS": the statement was not executed."""


Value = int | float | str | None


@dataclass(frozen=True)
class Credentials:
    """Who obadmin logs in as: ``user`` and ``password`` (None when not given),
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


def _send(
    channel: grpc.Channel, statement: str, timeout_s: float, credentials: Credentials
) -> obrpc_pb2.SqlResponse:
    """``ExecuteSql`` once over a proven ``channel``. Raises :class:`Unreached` only when the
    connection broke (``UNAVAILABLE``) under a read-only statement; a write that lost its
    connection is answered with an error saying it may have run (never re-sent)."""
    stub = obrpc_pb2_grpc.AdminServiceStub(channel)
    try:
        response: obrpc_pb2.SqlResponse = stub.ExecuteSql(
            obrpc_pb2.SqlRequest(statement=statement),
            timeout=timeout_s,
            metadata=credentials.metadata(),
            wait_for_ready=False,
        )
    except grpc.RpcError as e:
        if isinstance(e, grpc.Call) and e.code() == grpc.StatusCode.UNAVAILABLE:
            detail = e.details() or "unavailable"
            if is_read_only(statement):
                raise Unreached(f"connection lost during a read: {detail}") from e
            return _error_response(
                ObError(
                    "OB_ERR_UNEXPECTED",
                    detail=f"the connection broke after the statement was sent ({detail}); "
                    "it may have run: not sent again",
                )
            )
        return _rpc_error_response(e)
    return response


def execute(
    rs_addrs: Sequence[str],
    statement: str,
    timeout_s: float,
    credentials: Credentials = NO_CREDENTIALS,
    **retry: Any,
) -> obrpc_pb2.SqlResponse:
    """Run ``statement`` on the leader RS as ``credentials`` and return its ``SqlResponse``
    (which may carry an error: check ``error.code``; a refused login is MySQL's 1045).

    The addresses (``"host:port"``) are tried in order over proven connections
    (:mod:`sql.connect`: the retry rule); an address is skipped when it cannot be reached or
    answers ``OB_RS_NOT_MASTER`` / ``OB_NOT_MASTER``. The first not-master answer's
    ``leader_hint`` is tried next, once. When every address only said not-master, the last
    such response is returned. When none could be reached, the round starts again after a
    backoff, until ``timeout_s`` seconds have passed: a failed connect or TLS handshake never
    fails a statement whose deadline is not over. ``timeout_s`` bounds the
    whole call; when it runs out while the RS holds the statement the response carries
    ``OB_TIMEOUT`` (the statement may be running). ``retry``: ``clock``, ``sleep``,
    ``policy``, ``rng`` of :class:`sql.connect.Attempts` (tests inject them).

    Raises :class:`RsUnreachableError` (every address tried, and why) when no address could
    be reached before the deadline.
    """
    addrs = [a.strip() for a in rs_addrs if a.strip()]
    attempts = Attempts(timeout_s, **retry)
    not_master: obrpc_pb2.SqlResponse | None = None
    hint_followed = False
    while addrs:
        pending = list(addrs)
        done: set[str] = set()
        while pending:
            addr = pending.pop(0)
            if addr in done:
                continue
            done.add(addr)
            channel = attempts.connect(addr, credentials.security)
            if channel is None:
                continue
            with channel:
                left = attempts.remaining_s()
                if left <= 0:  # nothing was sent: unreachable in time, not a timeout
                    attempts.failed(addr, "connected after the deadline; nothing sent")
                    continue
                try:
                    response = _send(channel, statement, left, credentials)
                except Unreached as e:
                    attempts.failed(addr, e.detail)
                    continue
            if response.error.code not in NOT_MASTER_CODES:
                return response
            not_master = response
            hint = response.leader_hint.strip()
            if hint and not hint_followed and hint not in done:
                hint_followed = True
                pending.insert(0, hint)
        if not_master is not None:
            return not_master
        if not attempts.pause():
            break
    raise attempts.unreachable(rs_addrs)


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
