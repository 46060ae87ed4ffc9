"""A failed connect or TLS handshake does not fail a statement whose deadline is not over, and
a statement that may have run is never sent twice (sql/connect.py).

A real gRPC server with mutual TLS (the session's PKI: an RS certificate, the root client's)
serves a fake AdminService behind :class:`tests.support.tcp_proxy.TcpProxy`, which makes the
first handshakes fail by closing the connection after the ClientHello, as the loaded
machine of the issue did (``Handshake read failed (Endpoint closing)``).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from obcommon.security.tls import TransportSecurity
from sql.client import execute
from sql.connect import PROBE_SERVICE, RsUnreachableError, connect, is_read_only
from sql.obadmin import main
from tests.support import pki
from tests.support.tcp_proxy import TcpProxy

STATEMENT = "ALTER SYSTEM STOP SERVER '127.0.0.1:2882'"


class Admin(obrpc_pb2_grpc.AdminServiceServicer):
    """Records each statement; ``drop_first`` answers the first ones with ``UNAVAILABLE``
    after receiving them (the connection broke after the statement was sent)."""

    def __init__(self, drop_first: int = 0) -> None:
        self.received: list[str] = []
        self.drop_first = drop_first

    def ExecuteSql(  # noqa: N802
        self, request: obrpc_pb2.SqlRequest, context: grpc.ServicerContext
    ) -> obrpc_pb2.SqlResponse:
        self.received.append(request.statement)
        if len(self.received) <= self.drop_first:
            context.abort(grpc.StatusCode.UNAVAILABLE, "Socket closed")
        return obrpc_pb2.SqlResponse(affected_rows=1)


@contextmanager
def tls_rs(admin: Admin) -> Iterator[TcpProxy]:
    """``admin`` and the health service over mutual TLS, reached through a proxy."""
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    obrpc_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)
    checks = health.HealthServicer()
    checks.set(PROBE_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    sec = TransportSecurity(pki.certs_dir(Role.RS, "127.0.0.1:1"), Role.RS)
    port = sec.add_port(server, "127.0.0.1:0")
    server.start()
    try:
        with TcpProxy(("127.0.0.1", port)) as proxy:
            yield proxy
    finally:
        server.stop(grace=None)


def test_failed_handshakes_are_retried_and_the_statement_runs_once() -> None:
    admin = Admin()
    with tls_rs(admin) as proxy:
        proxy.fail_handshakes(3)
        resp = execute([proxy.address], STATEMENT, 30, pki.credentials())
        failed = proxy.counters["failed_handshakes"]
    assert resp.error.code == 0 and resp.affected_rows == 1
    assert failed == 3
    assert admin.received == [STATEMENT]


def test_obadmin_survives_failed_handshakes(capsys: pytest.CaptureFixture[str]) -> None:
    admin = Admin()
    with tls_rs(admin) as proxy:
        proxy.fail_handshakes(2)
        rc = main([*pki.obadmin_flags(), "--rs", proxy.address, "-e", STATEMENT])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out == "Query OK, 1 row affected\n"
    assert admin.received == [STATEMENT]


def test_giving_up_at_the_deadline_names_every_address() -> None:
    admin = Admin()
    with tls_rs(admin) as proxy, TcpProxy(("127.0.0.1", 1)) as other:
        proxy.fail_handshakes(10_000)
        other.fail_handshakes(10_000)
        addrs = [other.address, proxy.address]
        with pytest.raises(RsUnreachableError) as info:
            execute(addrs, STATEMENT, 1, pki.credentials())
    assert admin.received == []
    assert info.value.addrs == addrs and info.value.attempts >= 2
    text = info.value.to_sql_text()
    assert text.startswith("ERROR 2003 (HY000): Can't connect to RootService on ")
    assert all(f"'{a}'" in text for a in addrs), text


def test_a_write_whose_connection_broke_after_sending_is_not_sent_again() -> None:
    admin = Admin(drop_first=1)
    with tls_rs(admin) as proxy:
        resp = execute([proxy.address], STATEMENT, 30, pki.credentials())
    assert resp.error.name == "OB_ERR_UNEXPECTED"
    assert "it may have run: not sent again" in resp.error.message
    assert admin.received == [STATEMENT]


def test_a_read_whose_connection_broke_is_sent_again() -> None:
    admin = Admin(drop_first=1)
    query = "/* poll */ SELECT job_status FROM DBA_OB_ROOTSERVICE_JOBS"
    with tls_rs(admin) as proxy:
        resp = execute([proxy.address], query, 30, pki.credentials())
    assert resp.error.code == 0
    assert admin.received == [query, query]


def test_connect_retries_for_reads_too() -> None:
    with tls_rs(Admin()) as proxy:
        proxy.fail_handshakes(2)
        addr, channel = connect([proxy.address], 30, pki.security())
        with channel:
            status = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=PROBE_SERVICE), timeout=5
            )
    assert addr == proxy.address and status.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    ("statement", "reads"),
    [
        ("SELECT 1", True),
        ("  show parameters", True),
        ("/* c */ DESC __all_server", True),
        ("-- note\nEXPLAIN SELECT 1", True),
        ("help alter", True),
        ("ALTER SYSTEM STOP SERVER 'x'", False),
        ("SELECTED", False),
        ("/* SELECT */ DELETE FROM t", False),
        ("CREATE USER u", False),
        ("", False),
    ],
)
def test_which_statements_may_be_sent_again(statement: str, reads: bool) -> None:
    assert is_read_only(statement) is reads
