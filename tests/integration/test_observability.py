"""The HTTP(S) endpoints of real ``rootservice`` and ``observer-agent`` processes:
readiness before and after BOOTSTRAP on /readyz and on the gRPC health service per name,
/metrics and /api/v1/cluster over HTTPS with the test PKI, the agent's /readyz and /metrics.
Plain stdlib HTTPS (urllib + ssl); every wait is bounded."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from grpc_health.v1 import health_pb2

from obcommon.security.certs import CA_CERT, Role, cert_file, key_file
from sql.obadmin import main as obadmin
from tests.support import pki
from tests.support.cluster import ProcSet, health_status, rs_cmd, wait_until
from tests.support.ports import free_port

S = health_pb2.HealthCheckResponse


def _ctx(client: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.root() / "ca" / CA_CERT))
    if client:
        d = pki.client_certs()
        ctx.load_cert_chain(d / cert_file(Role.CLIENT, "root"), d / key_file(Role.CLIENT, "root"))
    return ctx


def _get(url: str, client: bool = True) -> tuple[int, str, bytes]:
    """(status, content type, body) of one HTTPS GET (10 s bound)."""
    try:
        with urllib.request.urlopen(url, context=_ctx(client), timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def _json(url: str, client: bool = True) -> tuple[int, Any]:
    status, _, body = _get(url, client)
    return status, json.loads(body)


def test_rs_and_agent_over_https(procs: ProcSet, tmp_path: Path) -> None:
    rs_addr = f"127.0.0.1:{free_port()}"
    rs_http = f"127.0.0.1:{free_port()}"
    rs = procs.start(
        rs_cmd(f"sqlite:///{tmp_path}/rs.db", rs_addr, tmp_path / "rs", http_addr=rs_http), "rs"
    )
    rs.wait_healthy(rs_addr, timeout_s=30)
    base = f"https://{rs_http}"
    # Waiting for BOOTSTRAP: alive, not ready; the admin service takes BOOTSTRAP.
    assert _json(base + "/healthz", client=False) == (200, {"status": "ok"})
    status, doc = wait_until(
        lambda: (lambda r: r if r[1]["reason"] == "waiting for BOOTSTRAP" else None)(
            _json(base + "/readyz", client=False)
        ),
        20,
        message="readyz says waiting for BOOTSTRAP",
    )
    assert status == 503 and doc["ready"] is False
    wait_until(
        lambda: health_status(rs_addr, service="oceanbase.rs.AdminService") == S.SERVING,
        20,
        message="AdminService SERVING before BOOTSTRAP",
    )
    assert health_status(rs_addr) == S.NOT_SERVING
    assert health_status(rs_addr, service="oceanbase.rs.RootService") == S.NOT_SERVING
    assert _get(base + "/api/v1/cluster", client=False)[0] == 401

    node, agent_http = procs.start_agent_with_http(rs_addr, tmp_path / "n1")
    statement = f"ALTER SYSTEM BOOTSTRAP REGION 'r1' ZONE 'z1' SERVER '{node}'"
    assert obadmin([*pki.obadmin_flags(), "--rs", rs_addr, "-e", statement]) == 0

    # Ready: /readyz and the gRPC health of every name agree.
    wait_until(lambda: _get(base + "/readyz", client=False)[0] == 200, 30, message="RS ready")
    wait_until(lambda: health_status(rs_addr) == S.SERVING, 10, message="gRPC '' SERVING")
    assert health_status(rs_addr, service="oceanbase.rs.RootService") == S.SERVING
    assert health_status(rs_addr, service="liveness") == S.SERVING

    status, ctype, body = _get(base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=")
    cluster = wait_until(
        lambda: (lambda d: d if d["servers"] and d["servers"][0]["status"] == "ACTIVE" else None)(
            _json(base + "/api/v1/cluster")[1]
        ),
        30,
        message="the server ACTIVE in /api/v1/cluster",
    )
    assert cluster["state"] == "FULL_SERVICE" and cluster["self"] == rs_addr
    assert cluster["servers"][0]["server"] == node
    assert cluster["root_services"]["leader"] == rs_addr
    assert cluster["events"] and cluster["events"][0]["rs"] == rs_addr

    # The agent's endpoint: ready once its lease is accepted; /metrics needs a certificate.
    agent_base = f"https://{agent_http}"
    wait_until(lambda: _get(agent_base + "/readyz", client=False)[0] == 200, 30)
    assert _get(agent_base + "/metrics", client=False)[0] == 401
    status, ctype, _ = _get(agent_base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=")
