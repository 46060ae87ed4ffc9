"""Certificate revocation against real ``rootservice`` and ``observer-agent`` processes: a revoked root client certificate is refused on gRPC, MySQL and HTTPS and
the connections open with it (gRPC's too) are closed; a revoked node certificate loses its lease (the
server goes INACTIVE) and the other agents refuse it; a revoked RS certificate is refused by
the agents, in its calls to them and as the server of their lease streams.

One secure cluster (SQLite, one RS, two agents) for the module. The tests run in file order
and each revokes more: the RS certificate's, which cripples the cluster, last.
"""

from __future__ import annotations

import http.client
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import grpc
import pymysql
import pytest
from cryptography import x509

from obcommon.fencing import FenceToken
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import CA_CERT, Role, Validity, cert_file, create_cert, key_file
from obcommon.security.revocation import serial_text
from obcommon.security.tls import TransportSecurity
from sql.client import Credentials, execute
from tests.integration.test_cluster import LEASE, Cluster
from tests.support import pki
from tests.support.agent_probe import obeyed_token
from tests.support.cluster import ProcSet, wait_until
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

assert LEASE == "2s"
#: The longest wait for a condition (a lease to run out, the list to reach an agent): a
#: ceiling for slow machines, not a figure the test checks.
WAIT_S = 60.0


class Revoking(Cluster):
    """The shared :class:`Cluster` with its MySQL and HTTPS ports known."""

    mysql_port = 0
    http_port = 0


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Revoking]:
    """One secure cluster for the module: an RS (SQLite) and two bootstrapped agents."""
    tmp = tmp_path_factory.mktemp("revoke")
    procs = ProcSet(tmp / "logs")
    cl = Revoking(procs, tmp, f"sqlite:///{tmp}/rs.db")
    cl.mysql_port, cl.http_port = free_port(), free_port()
    try:
        cl.start_rs(mysql_addr=f"127.0.0.1:{cl.mysql_port}", http_addr=f"127.0.0.1:{cl.http_port}")
        cl.bootstrap(2)
        yield cl
    finally:
        errors = procs.stop_all()
        assert not errors, errors


@pytest.fixture
def closing() -> Iterator[ExitStack]:
    """Closes what a test registers, failed or not: a subscribed gRPC channel left to the
    garbage collector can hang the interpreter's exit."""
    with ExitStack() as stack:
        yield stack


def _victim(tmp: Path, user: str = "root") -> Path:
    """A directory with ``ca.crt`` and a fresh client certificate of ``user`` signed by the
    session CA: another serial than the one the other tests use."""
    d = tmp / f"victim-{user}"
    d.mkdir()
    (d / CA_CERT).write_bytes((pki.client_certs() / CA_CERT).read_bytes())
    create_cert(d, pki.ca_key(), Role.CLIENT, user, Validity.starting(_now_s(), 86400))
    return d


def _now_s() -> int:
    return int(time.time())


def _serial(path: Path) -> str:
    return serial_text(x509.load_pem_x509_certificate(path.read_bytes()).serial_number)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rootservice.cli", "cert", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _mysql(c: Revoking, d: Path) -> pymysql.Connection:  # type: ignore[type-arg]
    return pymysql.connect(
        host="127.0.0.1",
        port=c.mysql_port,
        user="root",
        password="",
        ssl={
            "ca": str(d / CA_CERT),
            "cert": str(d / cert_file(Role.CLIENT, "root")),
            "key": str(d / key_file(Role.CLIENT, "root")),
        },
        connect_timeout=10,
        read_timeout=10,
    )


def _https(c: Revoking, d: Path) -> http.client.HTTPSConnection:
    ctx = ssl.create_default_context(cafile=str(d / CA_CERT))
    ctx.check_hostname = False
    ctx.load_cert_chain(d / cert_file(Role.CLIENT, "root"), d / key_file(Role.CLIENT, "root"))
    return http.client.HTTPSConnection("127.0.0.1", c.http_port, context=ctx, timeout=10)


def _get(conn: http.client.HTTPSConnection, path: str = "/api/v1/servers") -> int:
    conn.request("GET", path)
    r = conn.getresponse()
    r.read()
    return r.status


def _closed_by_peer(sock: socket.socket | None) -> bool:
    """True once the server has closed the connection (an end of stream or a reset)."""
    if sock is None:
        return True
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except (TimeoutError, ssl.SSLWantReadError):
        return False
    except (ConnectionError, ssl.SSLError, OSError):
        return True


def _mysql_dead(conn: pymysql.Connection) -> bool:  # type: ignore[type-arg]
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM __all_server")
    except pymysql.err.OperationalError as e:
        # 2013 lost connection / 2006 gone away: the server closed it.
        return int(e.args[0]) in (2006, 2013)
    except pymysql.err.InterfaceError:
        return True
    return False


def _execute_on(ch: grpc.Channel, statement: str, creds: Credentials) -> tuple[int, str]:
    """``ExecuteSql`` over the open channel ``ch``: (error code, message), in-band or not."""
    try:
        resp = obrpc_pb2_grpc.AdminServiceStub(ch).ExecuteSql(
            obrpc_pb2.SqlRequest(statement=statement), timeout=30, metadata=creds.metadata()
        )
    except grpc.RpcError as e:
        assert isinstance(e, grpc.Call)
        return e.code().value[0] or -1, e.details() or ""
    return resp.error.code, resp.error.message


def test_revoked_root_client_certificate_is_refused_everywhere(
    c: Revoking, tmp_path: Path, closing: ExitStack
) -> None:
    d = _victim(tmp_path)
    sec = TransportSecurity(d, Role.CLIENT, "root")
    creds = Credentials(security=sec)
    statement = "SELECT count(*) FROM __all_server"
    # Open with the victim's certificate on every front end, and working. The gRPC channel
    # stays open across the revocation; its connectivity is watched from its first call on,
    # so a reconnection (a new TLS handshake, which would be refused anyway) would show.
    grpc_ch = sec.channel(c.rs_addr)
    closing.callback(grpc_ch.close)
    assert _execute_on(grpc_ch, statement, creds) == (0, "")
    states: list[grpc.ChannelConnectivity] = []
    grpc_ch.subscribe(states.append)
    closing.callback(grpc_ch.unsubscribe, states.append)
    wait_until(lambda: states, 10, message="the channel's state")
    my = _mysql(c, d)
    with my.cursor() as cur:
        cur.execute(statement)
        assert cur.fetchall() == ((2,),)
    web = _https(c, d)
    assert _get(web) == 200

    crt = d / cert_file(Role.CLIENT, "root")
    r = _cli(
        "revoke",
        str(crt),
        "--reason",
        "laptop stolen",
        "--certs-dir",
        str(pki.client_certs()),
        "--rs",
        c.rs_addr,
    )
    assert r.returncode == 0, r.stderr
    serial = _serial(crt)
    assert serial in r.stdout

    # gRPC: the connection the channel had is closed by the RS (the channel leaves READY
    # without a call of ours), and its next call, on a new connection, is refused with the
    # reason.
    wait_until(lambda: len(states) > 1, 10, message="gRPC connection of a revoked cert closed")
    assert states[0] is grpc.ChannelConnectivity.READY, states
    assert states[1] is not grpc.ChannelConnectivity.READY, states
    code, message = _execute_on(grpc_ch, statement, creds)
    assert code != 0 and "revoked" in message, (code, message)
    grpc_ch.close()
    # A new channel is refused too.
    resp = execute([c.rs_addr], statement, 30, creds)
    assert resp.error.code != 0 and "revoked" in resp.error.message, resp
    # MySQL and HTTPS: the connections open with it are closed by the RS.
    wait_until(lambda: _mysql_dead(my), 10, message="MySQL connection of a revoked cert closed")
    wait_until(lambda: _closed_by_peer(web.sock), 10, message="HTTPS connection closed")
    # New connections with it are refused (1045; 401), the others are not.
    with pytest.raises(pymysql.err.OperationalError) as e:
        _mysql(c, d).close()
    assert e.value.args[0] == 1045
    assert _get(_https(c, d)) == 401
    assert _get(_https(c, pki.client_certs())) == 200

    # Recorded once, by whom and why; visible to cert list and in the view.
    rows = c.ok(
        f"SELECT COMMON_NAME, REASON, REVOKED_BY FROM DBA_OB_REVOKED_CERTIFICATES WHERE SERIAL = '{serial}'"
    )
    assert rows == [["root", "laptop stolen", "root"]]
    again = c.sql(f"ALTER SYSTEM REVOKE CERTIFICATE SERIAL '{serial.upper()}'")
    assert again.error.code == 0 and again.affected_rows == 0
    ls = _cli("list", "--certs-dir", str(pki.client_certs()), "--rs", c.rs_addr)
    assert ls.returncode == 0, ls.stderr
    assert f"REVOKED\tserial {serial}\troot\t" in ls.stdout
    assert "laptop stolen" in ls.stdout


def test_cert_revoke_fails_clearly_without_a_cluster(tmp_path: Path) -> None:
    down = f"127.0.0.1:{free_port()}"
    # A short deadline: the client retries until it passes, and the
    # default 60 s would only make the test slower.
    r = _cli(
        "revoke", "--serial", "0a", "--certs-dir", str(pki.client_certs()), "--rs", down,
        "--timeout", "2",
    )  # fmt: skip
    assert r.returncode == 1
    assert f"cannot reach the cluster (tried {down})" in r.stderr
    assert "nothing was revoked" in r.stderr
    r = _cli("revoke", "--serial", "xyz", "--certs-dir", str(pki.client_certs()), "--rs", down)
    assert r.returncode == 1 and "not a certificate serial" in r.stderr


def _fetch_log_as(node_certs: Path, name: str, agent: str) -> grpc.RpcError:
    sec = TransportSecurity(node_certs, Role.NODE)
    with sec.channel(agent) as ch, pytest.raises(grpc.RpcError) as e:
        obrpc_pb2_grpc.ReplicaServiceStub(ch).FetchLog(
            obrpc_pb2.FetchLogRequest(tenant_id=1, ls_id=1, follower=name), timeout=5
        )
    return e.value


def _refused_as_revoked(err: grpc.RpcError) -> bool:
    return err.code() == grpc.StatusCode.UNAUTHENTICATED and "revoked" in (err.details() or "")


def test_lease_streams_count_their_tls_handshakes(c: Revoking) -> None:
    """Each lease stream opened with a node certificate is counted once: a resumed TLS
    session (``ob_rs_lease_streams_resumed``) or a full handshake
    (``ob_rs_lease_streams_full_tls``). Agents do not resume sessions
    (obcommon/security/tls.py says why), so the agents' streams and one opened here are full
    handshakes, and none resumed."""
    m = c.metrics()
    full, resumed = m.get("lease_streams_full_tls_total", 0), m.get("lease_streams_resumed_total")
    assert full >= len(c.agents) and resumed in (None, 0), m
    agent = sorted(c.agents)[0]
    sec = TransportSecurity(pki.certs_dir(Role.NODE, agent), Role.NODE)
    release = threading.Event()

    def no_requests() -> Iterator[obrpc_pb2.LeaseRequest]:
        # The stream is counted when it opens, before any request: none is sent (one would
        # renew the agent's lease in its place).
        release.wait(WAIT_S)
        yield from ()

    with sec.channel(c.rs_addr) as ch:
        call = obrpc_pb2_grpc.RootServiceStub(ch).LeaseStream(no_requests(), timeout=WAIT_S)
        try:
            wait_until(
                lambda: c.metrics().get("lease_streams_full_tls_total", 0) == full + 1,
                WAIT_S,
                message="one more lease stream with a full TLS handshake",
            )
        finally:
            release.set()
        assert list(call) == []
    assert c.metrics().get("lease_streams_resumed_total", 0) == 0


def test_revoked_node_certificate_loses_its_lease(c: Revoking, tmp_path: Path) -> None:
    victim, other = sorted(c.agents)
    certs = pki.certs_dir(Role.NODE, victim)
    serial = _serial(certs / cert_file(Role.NODE))
    assert c.statuses()[victim] == "ACTIVE"
    # Before: the other agent refuses this node for another reason (not a member of an LS
    # it does not host), not as revoked.
    assert not _refused_as_revoked(_fetch_log_as(certs, victim, other))

    refused_before = c.metrics().get("peer_refused_revoked_total", 0)
    c.ok(f"ALTER SYSTEM REVOKE CERTIFICATE SERIAL '{serial}' REASON 'decommissioned host'")
    revoked_at = time.time_ns() // 1000

    # Its renewals are refused from now on, so its lease runs out: INACTIVE.
    wait_until(
        lambda: c.statuses()[victim] == "INACTIVE",
        WAIT_S,
        message=f"{victim} INACTIVE after its certificate was revoked",
    )
    # The cause and the order: renewals refused as revoked, none accepted after the
    # statement, and the lease expired after it.
    assert c.metrics().get("peer_refused_revoked_total", 0) > refused_before
    [[expired_at, last_hb]] = c.ok(
        "SELECT event_time, value3 FROM __all_rootservice_event_history "
        f"WHERE event = 'lease_expire' AND value1 = '{victim}'"
    )
    assert int(str(last_hb)) <= revoked_at <= int(str(expired_at)), (last_hb, expired_at)
    # cert list marks the file revoked (a directory with it and the admin's certificate).
    both = tmp_path / "both"
    shutil.copytree(pki.client_certs(), both)
    shutil.copy(certs / cert_file(Role.NODE), both / cert_file(Role.NODE))
    ls = _cli("list", "--certs-dir", str(both), "--rs", c.rs_addr)
    assert ls.returncode == 0, ls.stderr
    assert f"node.crt\tnode\t{victim}\tREVOKED until " in ls.stdout
    assert "client.root.crt\tclient\troot\tvalid until " in ls.stdout
    assert c.statuses()[other] == "ACTIVE"
    # The other agent got the list with its lease answers and refuses the node too.
    wait_until(
        lambda: _refused_as_revoked(_fetch_log_as(certs, victim, other)),
        WAIT_S,
        message="agent-to-agent call with a revoked node certificate refused",
    )


def _heartbeat_on(ch: grpc.Channel) -> grpc.RpcError | None:
    """RequestHeartbeat over ``ch`` with the token the agent obeys (the refusal of a call
    without one names it): None when answered, else the refusal."""
    stub = obrpc_pb2_grpc.ObserverServiceStub(ch)
    token = FenceToken(0, 0)
    for _ in range(2):
        try:
            stub.RequestHeartbeat(
                obrpc_pb2.RequestHeartbeatRequest(
                    rs_epoch=token.epoch, rs_incarnation=token.incarnation
                ),
                timeout=5,
            )
            return None
        except grpc.RpcError as e:
            obeyed = obeyed_token(e)
            if obeyed is None or obeyed == token:
                return e
            token = obeyed
    raise AssertionError("unreachable")


def test_revoked_rs_certificate_is_refused_by_the_agents(c: Revoking, closing: ExitStack) -> None:
    """The agent gets the list with its lease answers: the connection the RS's certificate
    holds to it is closed, and its calls are refused on a new one."""
    live = [a for a in sorted(c.agents) if c.statuses()[a] == "ACTIVE"]
    assert live, c.statuses()
    agent = live[0]
    rs_certs = pki.certs_dir(Role.RS, c.rs_addr)
    ch = TransportSecurity(rs_certs, Role.RS).channel(agent)
    closing.callback(ch.close)
    assert _heartbeat_on(ch) is None  # the RS's certificate works before
    states: list[grpc.ChannelConnectivity] = []
    ch.subscribe(states.append)
    closing.callback(ch.unsubscribe, states.append)
    wait_until(lambda: states, 10, message="the channel's state")
    serial = _serial(rs_certs / cert_file(Role.RS))
    r = _cli(
        "revoke", "--serial", serial, "--certs-dir", str(pki.client_certs()), "--rs", c.rs_addr
    )
    assert r.returncode == 0, r.stderr
    wait_until(
        lambda: len(states) > 1,
        WAIT_S,
        message="the agent closes the open connection of the revoked RS certificate",
    )
    assert states[0] is grpc.ChannelConnectivity.READY, states
    assert states[1] is not grpc.ChannelConnectivity.READY, states
    err = _heartbeat_on(ch)
    assert err is not None and _refused_as_revoked(err), err
    ch.close()
    # The other way: the agents learnt the list from the RS's own answers and check the
    # certificate it serves before trusting another answer of it; they stop renewing there,
    # so their servers expire.
    for a in live:
        wait_until(
            lambda a=a: (
                f"the root service at {c.rs_addr} serves a revoked certificate (serial "
                f"{serial})" in c.agents[a].log_text()
            ),
            WAIT_S,
            message=f"{a} refuses the RS's revoked certificate",
        )
    wait_until(
        lambda: all(c.statuses()[a] == "INACTIVE" for a in live),
        WAIT_S,
        message="the agents' leases expire: they no longer renew with a revoked RS",
    )
