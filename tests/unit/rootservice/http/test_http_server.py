"""The RS's HTTP(S) endpoint (rootservice.http) on a real port against an
in-process RootService: HTTPS with the test PKI and who may read (no credentials, a foreign
CA, a node certificate, a user without SELECT, Basic and certificate users with SELECT),
/metrics, /readyz telling the truth, the status API's shapes and errors."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa
from prometheus_client import Counter

from obcommon.clock import FakeClock
from obcommon.security.certs import CA_CERT, Role, Validity, cert_file, create_ca, create_cert
from obcommon.security.certs import key_file as key_name
from rootservice.app import RootService
from rootservice.config import RsSettings
from rootservice.db import job_repo
from rootservice.ha.readiness import SERVICE_ADMIN, SERVICE_ALL, SERVICE_LEASE
from rootservice.http.server import HttpServer
from tests.support import pki
from tests.support.harness import A, D, heartbeat_all, make_rs
from tests.support.ports import free_port

RS_ADDR = "127.0.0.1:2881"  # the harness RS's address (its certificate's name)

Scenario = Callable[[str, RootService], Awaitable[None]]


def _client_ssl(certs: Path | None, role: Role | None = None, user: str = "") -> ssl.SSLContext:
    """Trust the test CA; present ``role``'s pair from ``certs`` when given."""
    ctx = ssl.create_default_context(cafile=str(pki.root() / "ca" / CA_CERT))
    if certs is not None and role is not None:
        ctx.load_cert_chain(certs / cert_file(role, user), certs / key_name(role, user))
    return ctx


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def _get(
    url: str, ctx: ssl.SSLContext | bool, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    timeout = aiohttp.ClientTimeout(total=20)
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.get(url, ssl=ctx, headers=headers) as r,
    ):
        return r.status, dict(r.headers), await r.read()


def _serve(rs: RootService, scenario: Scenario) -> None:
    async def run() -> None:
        server = HttpServer(rs, "127.0.0.1:0")
        await server.start()
        scheme = "https" if server.tls else "http"
        try:
            await scenario(f"{scheme}://127.0.0.1:{server.port}", rs)
        finally:
            await server.stop()

    asyncio.run(run())


@pytest.fixture
def tls_rs(tmp_path: Path) -> RootService:
    rs = make_rs(f"sqlite:///{tmp_path}/rs.db", tmp_path, certs_dir=pki.certs_dir(Role.RS, RS_ADDR))
    heartbeat_all(rs)
    return rs


def test_https_who_may_read(tls_rs: RootService, tmp_path: Path) -> None:
    rs = tls_rs
    rs.users.create_user("alice", "alice-pw")
    rs.users.grant("alice", ("SELECT",))
    rs.users.create_user("bob", "bob-pw")  # no privilege
    # A CA of another cluster, with a root client certificate of its own.
    other = tmp_path / "other"
    validity = Validity.starting(int(time.time()), 3600)
    create_ca(other, tmp_path / "other-ca.key", validity)
    create_cert(other, tmp_path / "other-ca.key", Role.CLIENT, "root", validity)
    refused_before = rs.metrics.snapshot().get("logins_refused_total", 0)

    async def scenario(base: str, rs: RootService) -> None:
        url = base + "/api/v1/servers"
        anon = _client_ssl(None)
        # Probes need nothing.
        assert (await _get(base + "/healthz", anon))[0] == 200
        assert (await _get(base + "/readyz", anon))[0] == 200
        # No credentials: 401 with the Basic challenge.
        status, headers, body = await _get(url, anon)
        assert status == 401 and headers["WWW-Authenticate"].startswith('Basic realm="oceanbase"')
        assert json.loads(body)["code"] == 401
        # A certificate of another CA fails the handshake.
        with pytest.raises(aiohttp.ClientError):
            await _get(url, _client_ssl(other, Role.CLIENT, "root"))
        # A node certificate names no user.
        node = pki.certs_dir(Role.NODE, A)
        assert (await _get(url, _client_ssl(node, Role.NODE)))[0] == 401
        # Wrong password: 401, counted and audited.
        status, _, body = await _get(url, anon, _basic("alice", "nope"))
        assert status == 401 and json.loads(body)["code"] == 1045
        # A user without SELECT, by password or by certificate: 403.
        status, _, body = await _get(url, anon, _basic("bob", "bob-pw"))
        assert status == 403 and json.loads(body)["code"] == 1227
        bob = pki.certs_dir(Role.CLIENT, "bob")
        assert (await _get(url, _client_ssl(bob, Role.CLIENT, "bob")))[0] == 403
        # SELECT is enough: Basic, a user's certificate, root's certificate.
        status, _, body = await _get(url, anon, _basic("alice", "alice-pw"))
        assert status == 200 and {s["server"] for s in json.loads(body)} >= {A, D}
        # ...but not for the dry run's rows, which need EXPLAIN DELETE SERVER's ALTER SYSTEM.
        plan = f"{base}/api/v1/check_decommission?server={A}&plan=1"
        status, _, body = await _get(plan, anon, _basic("alice", "alice-pw"))
        assert status == 403 and json.loads(body)["code"] == 1227
        alice = pki.certs_dir(Role.CLIENT, "alice")
        assert (await _get(url, _client_ssl(alice, Role.CLIENT, "alice")))[0] == 200
        root = pki.client_certs()
        assert (await _get(url, _client_ssl(root, Role.CLIENT, "root")))[0] == 200

    _serve(rs, scenario)
    assert rs.metrics.snapshot().get("logins_refused_total", 0) == refused_before + 1
    # The audit records are written off the loop by the RS's executor.
    rs.executor.shutdown(wait=True)
    with rs.store.read() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT event, value1, value3 FROM __all_rootservice_event_history"
                " WHERE module = 'audit'"
            )
        ).all()
    assert ("login", "alice", "ER_ACCESS_DENIED_ERROR") in rows
    assert ("statement", "bob", "ER_SPECIFIC_ACCESS_DENIED_ERROR") in rows


def test_metrics_renders_the_registry(tls_rs: RootService) -> None:
    c = Counter("test_things", "Things counted by the test.", registry=tls_rs.metrics.registry)
    c.inc(3)

    async def scenario(base: str, rs: RootService) -> None:
        root = _client_ssl(pki.client_certs(), Role.CLIENT, "root")
        status, headers, body = await _get(base + "/metrics", root)
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=")
        assert b"test_things_total 3.0" in body
        assert (await _get(base + "/metrics", _client_ssl(None)))[0] == 401

    _serve(tls_rs, scenario)


def _insecure_rs(db_url: str, tmp_path: Path, **kw: Any) -> RootService:
    return make_rs(db_url, tmp_path, insecure=True, **kw)


def test_cluster_snapshot_has_the_contracts_shape(db_url: str, tmp_path: Path) -> None:
    rs = _insecure_rs(db_url, tmp_path)
    heartbeat_all(rs)
    now = rs.clock.now_us()
    with rs.store.txn() as conn:
        job_id = job_repo.create_job(conn, "DELETE_SERVER", "127.0.0.1", 3004, now, ("x", 1))
        info = json.dumps({"units_moved": 1, "eta": "2m", "stalled": ""})
        job_repo.set_job_progress(conn, job_id, 40, info, now)

    async def scenario(base: str, rs: RootService) -> None:
        status, _, body = await _get(base + "/api/v1/cluster", False)
        assert status == 200
        doc = json.loads(body)
        assert set(doc) == {
            "now_us",
            "self",
            "state",
            "root_services",
            "zones",
            "servers",
            "jobs",
            "events",
            "intake",
            "lease_intake",
            "self_suspicion",
        }
        assert doc["state"] == "FULL_SERVICE" and doc["self"] == rs.rpc_addr
        # The lease allowance and self-suspicion (rootservice/servers/).
        assert doc["intake"]["allowance_us"] == 0
        assert doc["self_suspicion"]["suspected"] is False
        assert doc["lease_intake"] == {
            "behind": False,
            "lag_us": 0,
            "waiting": 0,
            "waiting_first": 0,
            "abandoned_first": 0,
            "saturated": False,
            "paced": 0,
            "paced_total": 0,
        }
        ha = doc["root_services"]
        assert ha["leader"] == rs.rpc_addr and ha["epoch"] >= 1
        assert ha["members"][0]["addr"] == rs.rpc_addr and ha["members"][0]["role"] == "leader"
        zones = {z["zone"]: z for z in doc["zones"]}
        assert zones["z1"]["servers"] == 2 and zones["z1"]["active_servers"] == 2
        servers = {s["server"]: s for s in doc["servers"]}
        a = servers[A]
        assert a["status"] == "ACTIVE" and a["heartbeat_status"] == "alive"
        assert a["last_heartbeat_age_us"] == 0 and a["resources"]["cpu_capacity"] == 2.0
        assert a["resources"]["mem_capacity"] == 8 << 30 and a["disk_status"] == "NORMAL"
        assert set(a) >= {"leader_count", "replica_count", "stop_time_us", "admin_status", "id"}
        job = next(j for j in doc["jobs"] if j["job_id"] == job_id)
        assert job["server"] == D and job["progress"] == 40 and job["eta"] == "2m"
        assert job["stalled"] == "" and job["extra_info"]["units_moved"] == 1
        assert all(
            set(e) == {"event_time_us", "module", "event", "values", "rs"} for e in doc["events"]
        )
        times = [e["event_time_us"] for e in doc["events"]]
        assert times == sorted(times, reverse=True)
        # The parts alone, and the Doris actions.
        for part in ("servers", "zones", "rootservices", "jobs", "hardware"):
            assert (await _get(f"{base}/api/v1/{part}", False))[0] == 200
        _, _, body = await _get(base + "/api/v1/health", False)
        assert json.loads(body) == {"total_servers": 4, "online_servers": 4}
        _, _, body = await _get(base + "/api/v1/bootstrap", False)
        assert json.loads(body) == {"bootstrapped": True, "cluster_id": "c0ffee"}
        _, _, body = await _get(base + "/api/v1/events?limit=2", False)
        assert len(json.loads(body)) <= 2
        for bad in ("0", "1001", "x"):
            status, _, body = await _get(f"{base}/api/v1/events?limit={bad}", False)
            assert status == 400 and json.loads(body)["code"] == 1210
        # check_decommission changes nothing.
        status, _, body = await _get(f"{base}/api/v1/check_decommission?server={A}", False)
        assert status == 200 and json.loads(body) == {"ok": True, "reason": ""}
        # plan=1 adds the dry run's rows (none: A hosts no unit, the planner is not asked)
        status, _, body = await _get(f"{base}/api/v1/check_decommission?server={A}&plan=1", False)
        assert status == 200 and json.loads(body) == {"ok": True, "reason": "", "plan": []}
        status, _, body = await _get(f"{base}/api/v1/check_decommission?server={A}&plan=x", False)
        assert status == 400 and json.loads(body)["code"] == 1210
        status, _, body = await _get(base + "/api/v1/check_decommission?server=1.2.3.4:5", False)
        assert status == 404 and json.loads(body)["code"] == 4630
        assert (await _get(base + "/api/v1/check_decommission", False))[0] == 400
        status, _, body = await _get(base + "/api/v1/nothing", False)
        assert status == 404 and json.loads(body)["code"] == 404

    _serve(rs, scenario)
    s = rs.whitelist.get(A)
    assert s is not None and s.admin_status.value == "NORMAL"


def test_readyz_waiting_for_bootstrap(db_url: str, tmp_path: Path) -> None:
    rs = _insecure_rs(db_url, tmp_path, seed=False)
    assert rs.term.state.value == "WAIT_BOOTSTRAP"

    async def scenario(base: str, rs: RootService) -> None:
        status, _, body = await _get(base + "/readyz", False)
        assert status == 503 and json.loads(body)["reason"] == "waiting for BOOTSTRAP"
        assert (await _get(base + "/healthz", False))[0] == 200

    _serve(rs, scenario)
    # The admin service takes BOOTSTRAP; the rest is not ready.
    assert rs.readiness.services() == {
        SERVICE_ALL: False,
        SERVICE_LEASE: False,
        SERVICE_ADMIN: True,
    }


def test_readyz_database_unreachable(db_url: str, tmp_path: Path) -> None:
    rs = _insecure_rs(db_url, tmp_path)
    heartbeat_all(rs)
    assert rs.readiness.probe(force=True) is None
    assert rs.readiness.verdict().ready
    # The database goes away (nothing listens where the engine now points); the lease is
    # still held by the term, but the probe tells.
    rs.store.engine = sa.create_engine(
        f"postgresql+psycopg://rs:x@127.0.0.1:{free_port()}/none?connect_timeout=2"
    )
    rs.clock.advance(1_000_000)

    async def scenario(base: str, rs: RootService) -> None:
        status, _, body = await _get(base + "/readyz", False)
        doc = json.loads(body)
        assert status == 503 and doc["reason"].startswith("database unreachable: ")
        # The status API answers the tables' part with 503 as well.
        status, _, body = await _get(base + "/api/v1/jobs", False)
        assert status == 503 and json.loads(body)["code"] == 4015

    _serve(rs, scenario)
    assert not any(rs.readiness.services().values())


def test_standby_says_where_the_leader_is(db_url: str, tmp_path: Path) -> None:
    if db_url.startswith("sqlite"):
        pytest.skip("a standby needs PostgreSQL: SQLite mode runs one root service")
    leader = _insecure_rs(db_url, tmp_path)
    clock = FakeClock()
    standby = RootService(
        RsSettings(data_dir=tmp_path, db_url=db_url, rpc_addr="127.0.0.1:2999", insecure=True),
        clock,
        start_scheduler=False,
        background=lambda fn: fn(),
    )
    standby.open()
    standby.start()
    assert standby.term.state.value == "NOT_MASTER"

    async def scenario(base: str, rs: RootService) -> None:
        status, _, body = await _get(base + "/readyz", False)
        doc = json.loads(body)
        assert status == 503 and doc["reason"] == f"standby; the leader is {leader.rpc_addr}"
        status, _, body = await _get(base + "/api/v1/cluster", False)
        assert status == 503 and json.loads(body)["leader"] == leader.rpc_addr
        # The root services come from the tables: the standby answers them itself.
        status, _, body = await _get(base + "/api/v1/rootservices", False)
        members = {m["addr"]: m["role"] for m in json.loads(body)["members"]}
        assert members == {leader.rpc_addr: "leader", "127.0.0.1:2999": "standby"}

    _serve(standby, scenario)
    # In insecure mode a standby cannot forward: nothing is SERVING.
    assert not any(standby.readiness.services().values())


def test_ca_rotation_drops_the_old_ca_for_user_certificates(tmp_path: Path) -> None:
    """After ``ca.crt`` is replaced by a new CA, a user certificate of the old CA still
    completes the HTTPS handshake (Python's ssl cannot drop a loaded CA) but names no user
    any more: 401, where it was 200 before the rotation."""
    certs = tmp_path / "rs-certs"
    shutil.copytree(pki.certs_dir(Role.RS, RS_ADDR), certs)
    rs = make_rs(f"sqlite:///{tmp_path}/rs.db", tmp_path, certs_dir=certs)
    heartbeat_all(rs)
    root_certs = pki.certs_dir(Role.CLIENT, "root")

    async def scenario(base: str, rs: RootService) -> None:
        url = base + "/api/v1/servers"
        old_root = _client_ssl(root_certs, Role.CLIENT, "root")
        assert (await _get(url, old_root))[0] == 200
        # The new CA replaces the old one in ca.crt (rs.crt, of the old CA, stays: the
        # client still trusts the server).
        new = tmp_path / "new-ca"
        create_ca(new, tmp_path / "new-ca.key", Validity.starting(int(time.time()), 3600))
        shutil.copy(new / CA_CERT, certs / CA_CERT)
        rs.security._checked_at = 0.0  # skip the 0.5 s re-read throttle
        status, _, body = await _get(url, _client_ssl(root_certs, Role.CLIENT, "root"))
        assert status == 401, body
        # Basic authentication is unaffected by the CA.
        rs.users.create_user("carol", "carol-pw")
        rs.users.grant("carol", ("SELECT",))
        assert (await _get(url, _client_ssl(None), _basic("carol", "carol-pw")))[0] == 200

    _serve(rs, scenario)
