"""The one translation of ``ObError`` into HTTP answers, beside the gRPC one
(:meth:`obcommon.errors.ObError.grpc_code`) and the MySQL one
(:func:`rootservice.api.mysql_results.error_packet`).

An error is JSON ``{"code": <OceanBase / MySQL code, or the HTTP status>, "error":
"<message>"}`` (plus ``leader`` when a standby names the leader). The HTTP status follows
the error's class, i.e. its gRPC status code (one table for both front ends):
INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404,
ALREADY_EXISTS / FAILED_PRECONDITION 409, RESOURCE_EXHAUSTED 429, UNIMPLEMENTED 501,
UNAVAILABLE 503, DEADLINE_EXCEEDED 504, anything else 500.
"""

from __future__ import annotations

from typing import Any

import grpc
from aiohttp import web

from obcommon.errors import ObError

HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}

#: ``WWW-Authenticate`` of a 401 (RFC 7617): browsers then ask for a user and password.
BASIC_CHALLENGE = 'Basic realm="oceanbase", charset="UTF-8"'


#: Errors whose class says less than the HTTP answer should: the caller named a server the
#: cluster does not have (its gRPC class is a failed precondition of the statement).
BY_NAME: dict[str, int] = {"OB_SERVER_NOT_IN_WHITE_LIST": 404}


def http_status(err: ObError) -> int:
    """The HTTP status of ``err``: :data:`BY_NAME`, else by its class (see the module
    docstring)."""
    return BY_NAME.get(err.name) or HTTP_STATUS.get(err.grpc_code(), 500)


def json_error(status: int, message: str, code: int | None = None, **extra: Any) -> web.Response:
    """A JSON error answer: ``{"code": code or status, "error": message, **extra}``; a 401
    carries the Basic challenge."""
    headers = {"WWW-Authenticate": BASIC_CHALLENGE} if status == 401 else None
    body = {"code": code if code is not None else status, "error": message, **extra}
    return web.json_response(body, status=status, headers=headers)


def ob_error_response(err: ObError, **extra: Any) -> web.Response:
    """``err`` as JSON: its MySQL-style code (4630, 1045...), its message (the OB name kept,
    as obadmin prints it) and the status of :func:`http_status`."""
    text = err.to_sql_text()
    message = text.split(": ", 1)[1] if ": " in text else text
    return json_error(http_status(err), message, err.mysql_errno, **extra)
