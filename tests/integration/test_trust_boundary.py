"""The trust boundary against real ``rootservice`` and ``observer-agent`` processes: every refusal is checked together with "nothing changed".

Most tests share one secure cluster (SQLite, one RS, two agents) started once per module;
the tests that prove something about a table (a dead server expiring although forged
renewals keep coming; users, privileges and audit rows) start their own RS on SQLite and on
PostgreSQL. The certificate rotation test changes the shared cluster's files, so it runs
last.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509

from obcommon.errors import ObError
from obcommon.fencing import FenceToken
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import (
    CA_CERT,
    Role,
    Validity,
    cert_file,
    create_ca,
    create_cert,
    key_file,
)
from obcommon.security.tls import TransportSecurity
from observer_agent.fence import load_token
from rootservice.servers.agent_client import AgentClient
from sql.client import Credentials, RsUnreachableError, execute, result_rows
from sql.obadmin import main as obadmin
from tests.integration.test_cluster import LEASE, Cluster
from tests.support import pki
from tests.support.agent_probe import heartbeat_as_rs
from tests.support.cluster import ProcSet, rs_cmd, wait_until
from tests.support.ports import free_port

#: The deadline of a statement whose certificate the RS refuses: a refused handshake looks
#: like a failed one and is retried until the deadline, so keep it short.
REFUSED_S = 2

# One xdist worker runs the whole module (tests/support/xdist_sched.py): its tests share the
# module-scoped cluster below, which would otherwise start once per worker.
pytestmark = pytest.mark.integration

LEASE_S = 2.0
assert LEASE == "2s"
#: Lease expiry is checked every 100 ms; the last renewal may be one heartbeat (0.5 s) old
#: at the kill, and the status is read through SQL: this margin covers all of it.
EXPIRY_MARGIN_S = 2.0


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One secure cluster for the module: an RS (SQLite) and two bootstrapped agents."""
    tmp = tmp_path_factory.mktemp("trust")
    procs = ProcSet(tmp / "logs")
    c = Cluster(procs, tmp, f"sqlite:///{tmp}/rs.db")
    try:
        c.start_rs()
        c.bootstrap(2)
        yield c
    finally:
        errors = procs.stop_all()
        # The rotation test re-issued these under another CA: the session PKI makes them
        # afresh should a later test get one of these ports again.
        for role, name in [(Role.RS, c.rs_addr), *((Role.NODE, a) for a in c.agents)]:
            shutil.rmtree(pki.certs_dir(role, name), ignore_errors=True)
        assert not errors, errors


def _servers(c: Cluster) -> list[list[object]]:
    return c.ok(
        "SELECT svr_ip, svr_port, status, stop_time, build_version FROM __all_server "
        "ORDER BY svr_port"
    )


def _lease(server: str, zone: str = "z1") -> obrpc_pb2.LeaseRequest:
    """A forged renewal: a spoofed build and the data-disk error bit set."""
    now_us = int(time.time() * 1_000_000)
    return obrpc_pb2.LeaseRequest(
        server=server,
        zone=zone,
        sql_port=2881,
        build_version="spoofed",
        start_service_time=now_us,
        current_server_time=now_us,
        server_status=1,
    )


def _renew(ch: grpc.Channel, req: obrpc_pb2.LeaseRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        obrpc_pb2_grpc.RootServiceStub(ch).RenewLease(req, timeout=5)
    return e.value


def _stream(ch: grpc.Channel, req: obrpc_pb2.LeaseRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        list(obrpc_pb2_grpc.RootServiceStub(ch).LeaseStream(iter([req]), timeout=5))
    return e.value


def _certs(tmp: Path, ca_dir: Path, ca_key: Path, role: Role, name: str, v: Validity) -> Path:
    """A certificates directory with ``ca_dir``'s ``ca.crt`` and a pair signed by it."""
    d = tmp / f"{role.value}-{name.replace(':', '_')}"
    d.mkdir(parents=True)
    shutil.copy(ca_dir / CA_CERT, d / CA_CERT)
    create_cert(d, ca_key, role, name, v)
    return d


def _now_s() -> int:
    return int(time.time())


# --------------------------------------------------------------------------- start flags


def test_serve_needs_certs_dir_or_insecure(procs: ProcSet, tmp_path: Path) -> None:
    addr = f"127.0.0.1:{free_port()}"
    db = f"sqlite:///{tmp_path}/rs.db"
    base = [sys.executable, "-m", "rootservice.cli", "serve", "--db", db, "--rpc-addr", addr]
    r = subprocess.run(
        [*base, "--data-dir", str(tmp_path / "d")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2, r.stderr
    assert "--certs-dir" in r.stderr and "--insecure" in r.stderr
    r = subprocess.run(
        [*base, "--data-dir", str(tmp_path / "d"), "--insecure", "--certs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "exclude each other" in r.stderr

    rs = procs.start(rs_cmd(db, addr, tmp_path / "d", insecure=True), "rs-insecure")
    rs.wait_healthy(addr)
    assert "WARNING" in rs.log_text() and "running INSECURE" in rs.log_text()
    # Everyone is root in insecure mode (as CockroachDB's --insecure).
    resp = execute([addr], "SHOW PARAMETERS LIKE 'lease_time'", 30, Credentials())
    assert resp.error.code == 0 and result_rows(resp)


# --------------------------------------------------------------------------- forged leases


# One database: the refusal happens before the lease touches it; the expiry's persistence is
# checked on both by tests/unit/rootservice/servers/test_lease_checker.py.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_forged_lease_is_refused_and_the_dead_server_expires_on_time(
    procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    c = Cluster(procs, tmp_path, db_url)
    c.start_rs()
    victim, other = c.bootstrap(2)
    before = _servers(c)
    refused_before = c.metrics().get("peer_refused_wrong_name_total", 0)

    # A valid node certificate, of another (live, registered) server.
    with pki.channel(c.rs_addr, Role.NODE, other) as ch:
        e = _renew(ch, _lease(victim))
        assert e.code() == grpc.StatusCode.PERMISSION_DENIED
        assert f"needs node '{victim}'" in (e.details() or "")
        assert f"presented node '{other}'" in (e.details() or "")
        e = _stream(ch, _lease(victim))
        assert e.code() == grpc.StatusCode.PERMISSION_DENIED
        assert f"needs node '{victim}'" in (e.details() or "")
    assert c.metrics()["peer_refused_wrong_name_total"] >= refused_before + 2
    assert _servers(c) == before  # no spoofed build, no disk-error stop

    # Kill the victim; the forger keeps renewing for it, every 100 ms.
    outcomes: list[grpc.StatusCode] = []
    stop = threading.Event()

    def forge() -> None:
        with pki.channel(c.rs_addr, Role.NODE, other) as fch:
            stub = obrpc_pb2_grpc.RootServiceStub(fch)
            while not stop.is_set():
                try:
                    stub.RenewLease(_lease(victim), timeout=2)
                    outcomes.append(grpc.StatusCode.OK)
                except grpc.RpcError as err:
                    outcomes.append(err.code())  # type: ignore[attr-defined]
                stop.wait(0.1)

    forger = threading.Thread(target=forge, daemon=True)
    forger.start()
    try:
        c.agents[victim].kill()
        # The forger renews every 100 ms: were one renewal accepted, the victim would never
        # expire. (How soon it expires is the lease checker's business, measured elsewhere.)
        wait_until(
            lambda: c.statuses().get(victim) == "INACTIVE",
            LEASE_S + EXPIRY_MARGIN_S + 5,
            message="killed victim INACTIVE",
        )
        # Forged renewals after the expiry do not bring it back either.
        seen = len(outcomes)
        wait_until(lambda: len(outcomes) >= seen + 5, 10, message="forged renewals go on")
        assert c.statuses()[victim] == "INACTIVE"
    finally:
        stop.set()
        forger.join(10)
    assert len(outcomes) >= 5 and set(outcomes) == {grpc.StatusCode.PERMISSION_DENIED}
    expiries = c.ok(
        "SELECT value1 FROM __all_rootservice_event_history WHERE event = 'lease_expire'"
    )
    assert [r[0] for r in expiries] == [victim]
    assert c.statuses()[other] == "ACTIVE"
    rows = {f"{r[0]}:{r[1]}": r for r in _servers(c)}
    assert rows[victim][4] != "spoofed" and rows[victim][3] == 0
    assert rows[other][3] == 0


def test_client_certificate_cannot_renew_a_lease(shared: Cluster) -> None:
    c = shared
    a1 = sorted(c.agents)[0]
    before = _servers(c)
    with pki.channel(c.rs_addr, Role.CLIENT, "root") as ch:
        for e in (_renew(ch, _lease(a1)), _stream(ch, _lease(a1))):
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "needs a node certificate" in (e.details() or "")
            assert "presented client 'root'" in (e.details() or "")
    # RS certificates are no nodes either.
    with pki.channel(c.rs_addr, Role.RS, c.rs_addr) as ch:
        assert _renew(ch, _lease(a1)).code() == grpc.StatusCode.PERMISSION_DENIED
    assert c.metrics()["peer_refused_wrong_role_total"] >= 3
    assert _servers(c) == before


# --------------------------------------------------------------------------- certificates


def test_certificate_from_another_ca_is_refused(
    shared: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = shared
    a1 = sorted(c.agents)[0]
    before = _servers(c)
    evil_ca, evil_key = tmp_path / "evil-ca", tmp_path / "evil.key"
    v = Validity.starting(_now_s(), 3600)
    create_ca(evil_ca, evil_key, v)
    client = _certs(tmp_path, evil_ca, evil_key, Role.CLIENT, "root", v)
    node = _certs(tmp_path, evil_ca, evil_key, Role.NODE, a1, v)

    creds = Credentials(security=TransportSecurity(client, Role.CLIENT, "root"))
    with pytest.raises(RsUnreachableError):
        execute([c.rs_addr], f"ALTER SYSTEM STOP SERVER '{a1}'", REFUSED_S, creds)
    with TransportSecurity(node, Role.NODE).channel(c.rs_addr) as ch:
        assert _renew(ch, _lease(a1)).code() == grpc.StatusCode.UNAVAILABLE
    # The agents refuse it too (the handshake, before any servicer).
    with TransportSecurity(node, Role.NODE).channel(a1) as ch:
        with pytest.raises(grpc.RpcError) as e:
            obrpc_pb2_grpc.ObserverServiceStub(ch).CheckServerEmpty(
                obrpc_pb2.CheckServerEmptyRequest(), timeout=5
            )
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    rc = obadmin(
        [
            "--certs-dir",
            str(client),
            "--rs",
            c.rs_addr,
            "--timeout",
            str(REFUSED_S),
            "-e",
            f"ALTER SYSTEM STOP SERVER '{a1}'",
        ]
    )
    assert rc == 1 and "ERROR" in capsys.readouterr().err
    assert _servers(c) == before


def test_expired_certificate_is_refused(shared: Cluster, tmp_path: Path) -> None:
    c = shared
    a1 = sorted(c.agents)[0]
    before = _servers(c)
    now = _now_s()
    expired = Validity(now - 7200, now - 60)
    ca_dir = pki.root() / "ca"
    client = _certs(tmp_path, ca_dir, pki.ca_key(), Role.CLIENT, "root", expired)
    node = _certs(tmp_path, ca_dir, pki.ca_key(), Role.NODE, a1, expired)
    creds = Credentials(security=TransportSecurity(client, Role.CLIENT, "root"))
    with pytest.raises(RsUnreachableError):
        execute([c.rs_addr], f"ALTER SYSTEM STOP SERVER '{a1}'", REFUSED_S, creds)
    with TransportSecurity(node, Role.NODE).channel(c.rs_addr) as ch:
        assert _renew(ch, _lease(a1)).code() == grpc.StatusCode.UNAVAILABLE
    assert _servers(c) == before


def test_node_certificate_cannot_administer(
    shared: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = shared
    a1 = sorted(c.agents)[0]
    before = _servers(c)
    with pki.channel(c.rs_addr, Role.NODE, a1) as ch:
        stub = obrpc_pb2_grpc.AdminServiceStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub.ExecuteSql(
                obrpc_pb2.SqlRequest(statement=f"ALTER SYSTEM STOP SERVER '{a1}'"), timeout=5
            )
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # RS certificates may call too, but only to forward a client's statement.
        assert "needs a client or rs certificate" in (e.value.details() or "")
        with pytest.raises(grpc.RpcError) as e:
            stub.GetMetrics(obrpc_pb2.MetricsRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # The node's pair handed to obadmin as if it were root's client certificate.
    node_dir = pki.certs_dir(Role.NODE, a1)
    fake = tmp_path / "fake-client"
    fake.mkdir()
    shutil.copy(node_dir / CA_CERT, fake / CA_CERT)
    shutil.copy(node_dir / cert_file(Role.NODE), fake / cert_file(Role.CLIENT, "root"))
    shutil.copy(node_dir / key_file(Role.NODE), fake / key_file(Role.CLIENT, "root"))
    capsys.readouterr()
    rc = obadmin(
        ["--certs-dir", str(fake), "--rs", c.rs_addr, "-e", f"ALTER SYSTEM STOP SERVER '{a1}'"]
    )
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("ERROR 1045 (28000): Access denied"), err
    assert _servers(c) == before


def test_no_certificate_is_refused(
    shared: Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    c = shared
    a1 = sorted(c.agents)[0]
    before = _servers(c)
    # Plaintext against a TLS port: no connection at all.
    with pytest.raises(RsUnreachableError):
        execute([c.rs_addr], f"ALTER SYSTEM STOP SERVER '{a1}'", REFUSED_S, Credentials())
    # TLS trusting the CA but presenting no certificate: the handshake is refused.
    creds = grpc.ssl_channel_credentials(
        root_certificates=(pki.root() / "ca" / CA_CERT).read_bytes()
    )
    with grpc.secure_channel(c.rs_addr, creds) as ch:
        assert _renew(ch, _lease(a1)).code() == grpc.StatusCode.UNAVAILABLE
    # obadmin with neither flag: a usage error naming both.
    monkeypatch.delenv("OB_CERTS_DIR", raising=False)
    with pytest.raises(SystemExit) as e:
        obadmin(["--rs", c.rs_addr, "-e", f"ALTER SYSTEM STOP SERVER '{a1}'"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--certs-dir" in err and "--insecure" in err
    assert _servers(c) == before


# --------------------------------------------------------------------------- RS -> agent


def _replicas(c: Cluster, agent: str) -> list[tuple[int, int]]:
    """The replicas ``agent`` reports, asked with the RS's certificate (read-only)."""
    req = heartbeat_as_rs(agent)
    return sorted((r.tenant_id, r.ls_id) for r in req.replicas)


def test_agent_serves_only_the_rs_and_members(shared: Cluster) -> None:
    c = shared
    a1, a2 = sorted(c.agents)
    before = _replicas(c, a1)
    spec = obrpc_pb2.ReplicaSpec(
        tenant_id=4242,
        ls_id=1,
        unit_id=1,
        replica_type="FULL",
        member_list=[a2],
        paxos_replica_number=1,
        leader=a2,
        term=2**63 - 1,
    )
    for role, name in ((Role.NODE, a2), (Role.CLIENT, "root")):
        with pki.channel(a1, role, name) as ch:
            stub = obrpc_pb2_grpc.ObserverServiceStub(ch)
            calls = (
                lambda s=stub: s.ApplyReplicas(
                    obrpc_pb2.ApplyReplicasRequest(
                        upsert=[spec], drop=[obrpc_pb2.ReplicaKey(tenant_id=1, ls_id=1)]
                    ),
                    timeout=5,
                ),
                lambda s=stub: s.CheckServerEmpty(obrpc_pb2.CheckServerEmptyRequest(), timeout=5),
                lambda s=stub: s.RequestHeartbeat(obrpc_pb2.RequestHeartbeatRequest(), timeout=5),
            )
            for call in calls:
                with pytest.raises(grpc.RpcError) as e:
                    call()
                assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, name
                assert "needs a rs certificate" in (e.value.details() or "")
                assert f"presented {role.value} '{name}'" in (e.value.details() or "")
    # FetchLog naming another follower than the certificate's node, and FetchData, from a
    # node that is neither a member nor a learner of the LS (a1 hosts no such LS).
    with pki.channel(a1, Role.NODE, a2) as ch:
        with pytest.raises(grpc.RpcError) as e:
            obrpc_pb2_grpc.ReplicaServiceStub(ch).FetchLog(
                obrpc_pb2.FetchLogRequest(tenant_id=1, ls_id=1, follower=a1, max_entries=10),
                timeout=5,
            )
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "needs the rs or a member" in (e.value.details() or "")
        assert f"presented node '{a2}'" in (e.value.details() or "")
        with pytest.raises(grpc.RpcError) as e:
            list(
                obrpc_pb2_grpc.ReplicaServiceStub(ch).FetchData(
                    obrpc_pb2.FetchDataRequest(tenant_id=1, ls_id=1), timeout=5
                )
            )
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # A client certificate may not read data at all.
    with pki.channel(a1, Role.CLIENT, "root") as ch:
        with pytest.raises(grpc.RpcError) as e:
            list(
                obrpc_pb2_grpc.ReplicaServiceStub(ch).FetchData(
                    obrpc_pb2.FetchDataRequest(tenant_id=1, ls_id=1), timeout=5
                )
            )
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _replicas(c, a1) == before
    assert (4242, 1) not in before


def _as_deposed(agent: str, rs_certs: Path, token: FenceToken) -> list[grpc.RpcError]:
    """RequestHeartbeat and CheckServerEmpty as a root service holding ``token`` with the
    RS's certificate: the refusals (an answered call fails the test)."""
    errors = []
    with TransportSecurity(rs_certs, Role.RS).channel(agent) as ch:
        stub = obrpc_pb2_grpc.ObserverServiceStub(ch)
        for call in (
            lambda: stub.RequestHeartbeat(
                obrpc_pb2.RequestHeartbeatRequest(
                    rs_epoch=token.epoch, rs_incarnation=token.incarnation, command_seq=7
                ),
                timeout=5,
            ),
            lambda: stub.CheckServerEmpty(
                obrpc_pb2.CheckServerEmptyRequest(
                    rs_epoch=token.epoch, rs_incarnation=token.incarnation
                ),
                timeout=5,
            ),
        ):
            with pytest.raises(grpc.RpcError) as e:
                call()
            errors.append(e.value)
    return errors


def test_a_deposed_root_service_can_neither_ask_nor_check_an_agent(shared: Cluster) -> None:
    """The RS restarts, so a new term (a higher epoch) leads: the agents' calls from the
    root service of the old term, with its certificate and its fencing token, are refused
    with OB_RS_NOT_MASTER naming both tokens and change nothing; the leader's pass. The
    old term's calls went through the RS's own agent client too (what a deposed RS runs)."""
    c = shared
    a1 = sorted(c.agents)[0]
    data = c.data_dir(a1)
    old = load_token(data)
    assert old.epoch > 0, old
    rs_certs = pki.certs_dir(Role.RS, c.rs_addr)
    before = _replicas(c, a1)
    assert c.rs is not None
    c.rs.stop()
    c.start_rs()
    wait_until(
        lambda: load_token(data).epoch > old.epoch,
        30,
        message="the agent obeys the new term's root service",
    )
    new = load_token(data)
    for e in _as_deposed(a1, rs_certs, old):
        assert isinstance(e, grpc.Call)
        assert e.code() == grpc.StatusCode.UNAVAILABLE
        meta = dict(e.trailing_metadata() or ())
        assert (meta["ob-name"], meta["ob-code"]) == ("OB_RS_NOT_MASTER", "-4638")
        details = e.details() or ""
        assert str(old) in details and str(new) in details, details
        assert "a deposed root service" in details
    # The deposed root service's own client: the agent's error, not a connection failure.
    client = AgentClient(5_000_000, TransportSecurity(rs_certs, Role.RS), lambda: old.incarnation)
    try:
        with pytest.raises(ObError) as refused:
            client.check_server_empty(a1, old.epoch)
        assert refused.value.name == "OB_RS_NOT_MASTER"
        assert f"CheckServerEmpty on server '{a1}'" in refused.value.message
        # The leader's token passes.
        client.incarnation = lambda: new.incarnation
        assert client.check_server_empty(a1, new.epoch).cluster_id
        assert client.request_heartbeat(a1, new.epoch).server == a1
    finally:
        client.close()
    # Nothing changed: the token the agent obeys, its replicas, its servers' status.
    assert load_token(data) == new
    assert _replicas(c, a1) == before
    wait_until(
        lambda: set(c.statuses().values()) == {"ACTIVE"},
        30,
        message="every server ACTIVE under the new term",
    )


# --------------------------------------------------------------------------- users


# One database: users, grants and the audit run on both in tests/unit/rootservice/auth and
# tests/unit/rootservice/api (test_dispatch_users.py, test_statement_log.py).
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_wrong_password_missing_privilege_grant_and_audit(
    procs: ProcSet, tmp_path: Path, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    c = Cluster(procs, tmp_path, db_url)
    c.start_rs()
    # User statements need the leader: on PostgreSQL the RS first wins the election.
    wait_until(lambda: c.metrics().get("state") == "WAIT_BOOTSTRAP", 20, message="RS leads")
    c.ok("CREATE USER 'u' IDENTIFIED BY 'right-pw'")
    c.ok("GRANT SELECT ON *.* TO 'u'")
    lease = c.ok("SHOW PARAMETERS LIKE 'lease_time'")

    def as_u(password: str, statement: str) -> tuple[int, str, str]:
        capsys.readouterr()
        flags = [*pki.obadmin_flags(), "-u", "u", "-p", password]
        rc = obadmin([*flags, "--rs", c.rs_addr, "-e", statement])
        out, err = capsys.readouterr()
        return rc, out, err

    rc, _, err = as_u("wrong-pw", "ALTER SYSTEM SET lease_time = '20s'")
    assert rc == 1
    assert err.startswith("ERROR 1045 (28000): Access denied for user 'u'@"), err
    assert "(using password: YES)" in err
    rc, _, err = as_u("right-pw", "ALTER SYSTEM SET lease_time = '20s'")
    assert rc == 1
    assert err.strip() == (
        "ERROR 1227 (42000): Access denied; you need (at least one of) the ALTER SYSTEM "
        "privilege(s) for this operation"
    )
    assert c.ok("SHOW PARAMETERS LIKE 'lease_time'") == lease  # nothing changed
    rc, out, _ = as_u("right-pw", "SHOW PARAMETERS LIKE 'lease_time'")  # SELECT is granted
    assert rc == 0 and "lease_time" in out
    # GetMetrics is a read: SELECT is enough (u's certificate), no user or no SELECT is not.
    with pki.channel(c.rs_addr, Role.CLIENT, "u") as ch:
        resp = obrpc_pb2_grpc.AdminServiceStub(ch).GetMetrics(
            obrpc_pb2.MetricsRequest(), timeout=10
        )
        assert json.loads(resp.json)["state"] == "WAIT_BOOTSTRAP"

    c.ok("GRANT ALTER SYSTEM ON *.* TO 'u'")
    rc, out, err = as_u("right-pw", "ALTER SYSTEM SET lease_time = '20s'")
    assert (rc, out) == (0, "Query OK, 0 rows affected\n"), err
    assert c.ok("SHOW PARAMETERS LIKE 'lease_time'") != lease

    rows = c.ok(
        "SELECT event, value1, value3, value4 FROM __all_rootservice_event_history "
        "WHERE module = 'audit' AND value1 = 'u' ORDER BY id"
    )
    assert rows == [
        ["login", "u", "ER_ACCESS_DENIED_ERROR", "ALTER SYSTEM SET lease_time = '20s'"],
        [
            "statement",
            "u",
            "ER_SPECIFIC_ACCESS_DENIED_ERROR",
            "ALTER SYSTEM SET lease_time = '20s'",
        ],
        ["statement", "u", "OK", "ALTER SYSTEM SET lease_time = '20s'"],
    ]
    root_rows = c.ok(
        "SELECT value4 FROM __all_rootservice_event_history "
        "WHERE module = 'audit' AND value1 = 'root' AND value3 = 'OK' ORDER BY id"
    )
    assert [r[0] for r in root_rows] == [
        "CREATE USER 'u' IDENTIFIED BY '***'",
        "GRANT SELECT ON *.* TO 'u'",
        "GRANT ALTER SYSTEM ON *.* TO 'u'",
    ]
    # A user without SELECT, and a certificate naming no user, may not read GetMetrics.
    c.ok("CREATE USER 'nosel' IDENTIFIED BY 'pw'")
    for who in ("nosel", "stranger"):
        with pki.channel(c.rs_addr, Role.CLIENT, who) as ch:
            with pytest.raises(grpc.RpcError) as e:
                obrpc_pb2_grpc.AdminServiceStub(ch).GetMetrics(
                    obrpc_pb2.MetricsRequest(), timeout=10
                )
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, who
            assert "needs the SELECT privilege" in (e.value.details() or "")


# --------------------------------------------------------------------------- rotation (last)


def _serial_at(addr: str, client: Path) -> int:
    return pki.presented_cert(addr, client, Role.CLIENT, "root").serial_number


def _stays_active(creds: Credentials, c: Cluster, seconds: float) -> None:
    """Every server ACTIVE at every look for ``seconds`` (longer than a lease, so renewals
    made after the change are what keeps them ACTIVE)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        resp = execute([c.rs_addr], "SELECT svr_port, status FROM __all_server", 10, creds)
        assert resp.error.code == 0, resp.error.message
        assert {r[1] for r in result_rows(resp)} == {"ACTIVE"}, result_rows(resp)
        time.sleep(0.25)


def test_certificate_rotation_without_restart(
    shared: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = shared
    a1, a2 = sorted(c.agents)
    rs_dir = pki.certs_dir(Role.RS, c.rs_addr)
    node_dirs = {a: pki.certs_dir(Role.NODE, a) for a in (a1, a2)}
    old_client = pki.client_certs()
    v = Validity.starting(_now_s(), 86400)

    # 1. New pairs from the same CA: new keys and serials, picked up by new connections.
    old_rs, old_a1 = _serial_at(c.rs_addr, old_client), _serial_at(a1, old_client)
    new_rs = create_cert(rs_dir, pki.ca_key(), Role.RS, c.rs_addr, v, overwrite=True)
    new_a1 = create_cert(node_dirs[a1], pki.ca_key(), Role.NODE, a1, v, overwrite=True)
    assert (new_rs.serial_number, new_a1.serial_number) != (old_rs, old_a1)
    wait_until(
        lambda: _serial_at(c.rs_addr, old_client) == new_rs.serial_number,
        10,
        message="RS presents its new certificate",
    )
    wait_until(
        lambda: _serial_at(a1, old_client) == new_a1.serial_number,
        10,
        message="agent presents its new certificate",
    )
    _stays_active(pki.credentials(), c, LEASE_S + 0.5)
    capsys.readouterr()
    assert (
        obadmin(
            [*pki.obadmin_flags(), "--rs", c.rs_addr, "-e", "SHOW PARAMETERS LIKE 'lease_time'"]
        )
        == 0
    )
    assert "lease_time" in capsys.readouterr().out
    # The agent renewed over a new lease stream presenting its new pair,
    # not over the stream it had opened before the rotation.
    assert "certificates rotated: opening a new lease stream" in c.agents[a1].log_text()

    # 1b. A bad new pair (another CA's) is found at once: the agent's next renewal opens a
    # new stream whose handshake the RS refuses, and its server expires. With renewals kept
    # on the old stream it would stay ACTIVE. A good pair brings it back.
    bad_ca, bad_key = tmp_path / "bad-ca", tmp_path / "bad-ca.key"
    create_ca(bad_ca, bad_key, v)
    bad = _certs(tmp_path, bad_ca, bad_key, Role.NODE, a2, v)
    for name in (cert_file(Role.NODE), key_file(Role.NODE)):
        shutil.copy(bad / name, node_dirs[a2] / name)
    wait_until(
        lambda: c.statuses().get(a2) == "INACTIVE",
        LEASE_S + EXPIRY_MARGIN_S + 10,
        message="the agent with a bad new certificate expires",
    )
    create_cert(node_dirs[a2], pki.ca_key(), Role.NODE, a2, v, overwrite=True)
    wait_until(
        lambda: c.statuses().get(a2) == "ACTIVE",
        LEASE_S + EXPIRY_MARGIN_S + 10,
        message="the agent is back with a good certificate",
    )

    # 2. A new CA. First every process trusts both (new first), then every pair is
    # re-issued by the new CA, then the old CA is dropped: no restart at any step.
    new_ca_dir, new_key = tmp_path / "new-ca", tmp_path / "new-ca.key"
    new_ca = create_ca(new_ca_dir, new_key, v)
    new_pem, old_pem = (
        (new_ca_dir / CA_CERT).read_bytes(),
        (pki.root() / "ca" / CA_CERT).read_bytes(),
    )
    dirs = [(rs_dir, Role.RS, c.rs_addr), *((d, Role.NODE, a) for a, d in node_dirs.items())]
    for d, _, _ in dirs:
        (d / CA_CERT).write_bytes(new_pem + old_pem)
    # A client of the new CA gets through a handshake once the process re-read its ca.crt;
    # only then may a pair of the new CA appear anywhere.
    new_client = _certs(tmp_path, new_ca_dir, new_key, Role.CLIENT, "root", v)
    both = tmp_path / "both-client"
    shutil.copytree(new_client, both)
    (both / CA_CERT).write_bytes(new_pem + old_pem)

    def trusts_new_ca(addr: str) -> x509.Certificate:
        return pki.presented_cert(addr, both, Role.CLIENT, "root")

    for addr in (c.rs_addr, a1, a2):
        wait_until(
            functools.partial(trusts_new_ca, addr),
            10,
            interval_s=0.25,
            message=f"{addr} trusts the new CA",
            ignore=(OSError,),
        )
    for d, role, name in dirs:
        create_cert(d, new_key, role, name, v, overwrite=True)
    wait_until(
        lambda: (
            pki.presented_cert(c.rs_addr, new_client, Role.CLIENT, "root").issuer == new_ca.subject
            and all(
                pki.presented_cert(a, new_client, Role.CLIENT, "root").issuer == new_ca.subject
                for a in (a1, a2)
            )
        ),
        10,
        interval_s=0.25,
        message="RS and agents present certificates of the new CA",
        ignore=(OSError,),
    )
    pki.presented_cert(c.rs_addr, new_client, Role.CLIENT, "root").verify_directly_issued_by(new_ca)

    for d, _, _ in dirs:
        (d / CA_CERT).write_bytes(new_pem)
    new_creds = Credentials(security=TransportSecurity(new_client, Role.CLIENT, "root"))

    def old_refused() -> bool:
        try:
            execute([c.rs_addr], "SELECT 1 FROM __all_server", REFUSED_S, pki.credentials())
        except RsUnreachableError:
            return True
        return False

    wait_until(old_refused, 10, interval_s=0.25, message="the old CA's client refused")
    _stays_active(new_creds, c, LEASE_S + 0.5)
    capsys.readouterr()
    rc = obadmin(
        [
            "--certs-dir",
            str(new_client),
            "--rs",
            c.rs_addr,
            "-e",
            "SHOW PARAMETERS LIKE 'lease_time'",
        ]
    )
    assert rc == 0 and "lease_time" in capsys.readouterr().out
    assert all(p.alive for p in [*c.agents.values(), c.rs] if p is not None)
