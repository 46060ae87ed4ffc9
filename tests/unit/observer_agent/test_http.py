"""The agent's HTTP(S) endpoint (observer_agent.http) on a real port: /healthz,
/readyz with its reasons, /metrics behind a certificate of the cluster CA."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import time
from pathlib import Path

import aiohttp
from cryptography import x509
from prometheus_client import Gauge

from obcommon.clock import FakeClock
from obcommon.proto import obrpc_pb2
from obcommon.security.certs import CA_CERT, Role, Validity, cert_file, create_cert, key_file
from obcommon.security.revocation import serial_of_pem
from observer_agent.agent import Agent
from observer_agent.http import AgentHttp, readiness
from observer_agent.settings import AgentSettings
from tests.support import pki
from tests.support.ports import free_port
from tests.support.timescale import scaled

NODE = "127.0.0.1:2890"


def _agent(tmp_path: Path, **over: object) -> Agent:
    values: dict[str, object] = {
        "rs_list": f"127.0.0.1:{free_port()}",
        "rpc_addr": NODE,
        "sql_port": 2881,
        "zone": "z1",
        "data_dir": tmp_path / "data",
        "http_addr": "127.0.0.1:0",
    }
    values.update(over)
    return Agent(AgentSettings.in_process(**values), FakeClock())  # type: ignore[arg-type]


def _accept(agent: Agent) -> None:
    """A lease response of an RS accepting the agent (as the lease loop would get)."""
    now = agent.clock.now_us()
    resp = obrpc_pb2.LeaseResponse(
        version=1,
        lease_expire_time=now + 10_000_000,
        heartbeat_expire_time=now + 10_000_000,
        server_id=1,
        rs_epoch=1,
        cluster_id="c0ffee",
        rs_server_status=obrpc_pb2.IS_WORKING,
    )
    assert agent.handle_response(resp, "127.0.0.1:2882")


async def _get(url: str, ctx: ssl.SSLContext | bool) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s,
        s.get(url, ssl=ctx) as r,
    ):
        return r.status, dict(r.headers), await r.read()


def test_readiness_reasons(tmp_path: Path) -> None:
    agent = _agent(tmp_path, insecure=True)
    assert readiness(agent) == "not registered with the RS"
    _accept(agent)
    agent.mark_serving()
    assert readiness(agent) is None
    (agent.data_dir / "FAULT_DATA_DISK_ERROR").write_text("drill")
    agent.probe_disk_now()
    assert (readiness(agent) or "").startswith("data disk error: ")
    agent.clock.advance(11_000_000)  # type: ignore[attr-defined]
    assert readiness(agent) == "lease expired"


def test_https_probes_open_metrics_behind_a_cluster_certificate(tmp_path: Path) -> None:
    agent = _agent(tmp_path, certs_dir=pki.certs_dir(Role.NODE, NODE))
    Gauge("test_agent_level", "A level.", registry=agent.metrics.registry).set(7)
    ca = str(pki.root() / "ca" / CA_CERT)

    async def scenario() -> None:
        http = AgentHttp(agent)
        port = await http.start()
        base = f"https://127.0.0.1:{port}"
        anon = ssl.create_default_context(cafile=ca)
        prom = ssl.create_default_context(cafile=ca)
        d = pki.client_certs()
        prom.load_cert_chain(d / cert_file(Role.CLIENT, "root"), d / key_file(Role.CLIENT, "root"))
        try:
            assert (await _get(base + "/healthz", anon))[0] == 200
            status, _, body = await _get(base + "/readyz", anon)
            assert status == 503 and json.loads(body)["ready"] is False
            assert (await _get(base + "/metrics", anon))[0] == 401
            status, headers, body = await _get(base + "/metrics", prom)
            assert status == 200 and b"test_agent_level 7.0" in body
            assert headers["Content-Type"].startswith("text/plain; version=")
            # Revoked (the list an RS sends with lease answers): refused at the next request.
            root_pem = (d / cert_file(Role.CLIENT, "root")).read_bytes()
            agent.peer_gate.revoked.replace([serial_of_pem(root_pem)])
            status, _, body = await _get(base + "/metrics", prom)
            assert status == 401 and b"is revoked" in body
            agent.peer_gate.revoked.replace([])
            assert (await _get(base + "/metrics", prom))[0] == 200
            _accept(agent)
            agent.mark_serving()
            status, _, body = await _get(base + "/readyz", anon)
            assert status == 200 and json.loads(body) == {"ready": True, "reason": ""}
        finally:
            await http.stop()

    asyncio.run(scenario())


def test_insecure_metrics_are_open(tmp_path: Path) -> None:
    agent = _agent(tmp_path, insecure=True)

    async def scenario() -> None:
        http = AgentHttp(agent)
        port = await http.start()
        try:
            assert (await _get(f"http://127.0.0.1:{port}/metrics", False))[0] == 200
        finally:
            await http.stop()

    asyncio.run(scenario())


def _served_serial(port: int) -> int:
    """The serial number of the certificate the endpoint presents to a new connection."""
    ctx = ssl.create_default_context(cafile=str(pki.root() / "ca" / CA_CERT))
    ctx.check_hostname = False
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw) as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_https_follows_a_certificate_rotation(tmp_path: Path) -> None:
    # As the RS's endpoint, the agent's serves a rotated pair without a
    # restart (new connections get it).
    certs = tmp_path / "certs"
    shutil.copytree(pki.certs_dir(Role.NODE, NODE), certs)
    agent = _agent(tmp_path, certs_dir=certs)

    async def scenario() -> None:
        http = AgentHttp(agent)
        port = await http.start()
        loop = asyncio.get_running_loop()
        try:
            before = await asyncio.to_thread(_served_serial, port)
            v = Validity.starting(int(time.time()), 3600)
            new = create_cert(certs, pki.ca_key(), Role.NODE, NODE, v, overwrite=True)
            assert new.serial_number != before
            give_up = loop.time() + scaled(30)
            while await asyncio.to_thread(_served_serial, port) != new.serial_number:
                assert loop.time() < give_up, "the endpoint still presents the old certificate"
                await asyncio.sleep(0.1)
        finally:
            await http.stop()

    asyncio.run(scenario())
