"""Any RS answers: a standby forwards a statement that needs the leader to
the leader's ExecuteSql with the client's identity; the leader's admin service accepts a
forwarded identity from an RS certificate only, never from a client certificate or in
insecure mode; a forwarded statement is not forwarded again; an unreachable leader is
OB_RS_NOT_MASTER with the hint, at once.

Two real RootService objects on one database (the standby lost the election to the leader),
each behind its real gRPC server with mutual TLS (the session's test PKI), called through
real gRPC channels."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from obcommon.clock import FakeClock
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2, obrpc_pb2_grpc
from obcommon.security.certs import Role
from rootservice.api.dispatch import LeaderRefusal, run_statement
from rootservice.api.forwarding import (
    FORWARDED_ADDR_KEY,
    FORWARDED_USER_KEY,
    GrpcForwarder,
    forwarded_metadata,
    forwarder_for,
)
from rootservice.api.grpc_server import create_server
from rootservice.app import RootService
from rootservice.auth.principal import Principal
from rootservice.config import RsSettings
from rootservice.ha.term import RsState
from tests.support import pki
from tests.support.harness import ROOT, S, events, seed_cluster
from tests.support.ports import free_port


@dataclass
class Pair:
    leader: RootService
    standby: RootService

    @property
    def leader_addr(self) -> str:
        return self.leader.rpc_addr

    @property
    def standby_addr(self) -> str:
        return self.standby.rpc_addr


def _build(db_url: str, tmp_path: Path, addr: str, clock: FakeClock, secure: bool) -> RootService:
    settings = RsSettings(
        data_dir=tmp_path,
        db_url=db_url,
        rpc_addr=addr,
        rpc_timeout="200ms",
        certs_dir=pki.certs_dir(Role.RS, addr) if secure else None,
        insecure=not secure,
    )
    rs = RootService(
        settings,
        clock,
        start_scheduler=False,
        sleep=lambda seconds: clock.advance(int(seconds * S)),
        background=lambda fn: fn(),
    )
    rs.open()
    return rs


def make_pair(db_url: str, tmp_path: Path, *, secure: bool = True) -> Pair:
    """A leader in service (a seeded, bootstrapped cluster) and a standby that lost the
    election to it on the same database, as ``RootService.start`` leaves one."""
    clock = FakeClock()
    leader = _build(db_url, tmp_path, f"127.0.0.1:{free_port()}", clock, secure)
    leader.start()
    seed_cluster(leader)
    leader.identity.bootstrapped = True
    leader.office.do_restart()
    standby = _build(db_url, tmp_path, f"127.0.0.1:{free_port()}", clock, secure)
    assert not standby.election.run_once()
    standby.term.state = RsState.NOT_MASTER
    assert standby.leader_hint() == leader.rpc_addr
    return Pair(leader, standby)


@pytest.fixture
def pair(db_url: str, tmp_path: Path) -> Iterator[Pair]:
    p = make_pair(db_url, tmp_path)
    yield p
    p.standby.shutdown()
    p.leader.shutdown()


def serve(rss: list[RootService], body: Callable[[], Any], *, forward: bool = True) -> Any:
    """Run each RS behind its gRPC server (each with its forwarder when ``forward``) while
    ``body`` runs on a thread (it makes blocking gRPC calls); returns ``body()``."""

    async def scenario() -> Any:
        servers = []
        forwarders = []
        for rs in rss:
            fw = forwarder_for(rs) if forward else None
            if fw is not None:
                forwarders.append(fw)
            server, _ = await create_server(rs, forwarder=fw)
            await server.start()
            servers.append(server)
        try:
            return await asyncio.to_thread(body)
        finally:
            for server in servers:
                await server.stop(0)
            for fw in forwarders:
                fw.close()

    return asyncio.run(scenario())


def call(
    addr: str,
    statement: str,
    *,
    role: Role = Role.CLIENT,
    name: str = "root",
    metadata: tuple[tuple[str, Any], ...] = (),
) -> obrpc_pb2.SqlResponse:
    with pki.channel(addr, role, name) as ch:
        return obrpc_pb2_grpc.AdminServiceStub(ch).ExecuteSql(  # type: ignore[no-any-return]
            obrpc_pb2.SqlRequest(statement=statement), timeout=20, metadata=metadata
        )


def audit_rows(rs: RootService) -> list[dict[str, str]]:
    return [
        {r[f"name{i}"]: r[f"value{i}"] for i in range(1, 7) if r[f"name{i}"]}
        | {"event": r["event"]}
        for r in events(rs)
        if r["module"] == "audit"
    ]


def zone_names(rs: RootService) -> list[str]:
    result = run_statement(rs, "SELECT zone FROM __all_zone ORDER BY zone", ROOT)
    return [row[0] for row in result.rows]


def test_the_standby_forwards_a_statement_and_answers_the_leaders_result_or_error(
    pair: Pair,
) -> None:
    def body() -> None:
        ok = call(pair.standby_addr, "ALTER SYSTEM ADD ZONE 'z9'")
        assert ok.error.code == 0, ok.error.message
        assert ok.affected_rows == 1 and not ok.leader_hint
        # The leader ran it: the zone is in the tables (read by the standby too).
        assert "z9" in zone_names(pair.standby)
        # The leader's refusal is the standby's answer, number and name as the leader sent.
        again = call(pair.standby_addr, "ALTER SYSTEM ADD ZONE 'z9'")
        direct = call(pair.leader_addr, "ALTER SYSTEM ADD ZONE 'z9'")
        assert direct.error.code != 0
        assert (again.error.code, again.error.name, again.error.sqlstate) == (
            direct.error.code,
            direct.error.name,
            direct.error.sqlstate,
        )
        # Reads are answered by the standby itself, privilege refusals too.
        shown = call(pair.standby_addr, "SHOW PARAMETERS LIKE 'rpc_timeout'")
        assert shown.error.code == 0 and shown.is_result_set

    serve([pair.leader, pair.standby], body)
    standby_counts = pair.standby.metrics.snapshot()
    assert standby_counts.get("statements_forwarded_total") == 2
    # The leader audits the forwarded statements: the client's user and address, and which
    # RS forwarded them; the standby records nothing of its own for them.
    forwarded = [r for r in audit_rows(pair.leader) if r.get("forwarded_by")]
    assert [(r["user"], r["outcome"], r["forwarded_by"]) for r in forwarded] == [
        ("root", "OK", pair.standby_addr),
        ("root", forwarded[1]["outcome"], pair.standby_addr),
    ]
    assert forwarded[1]["outcome"] != "OK"
    assert all(r["client_addr"].startswith("127.0.0.1:") for r in forwarded)
    assert all(r["client_addr"] != pair.standby_addr for r in forwarded)


def test_the_leader_accepts_a_forwarded_identity_from_an_rs_certificate_only(
    pair: Pair,
) -> None:
    client = Principal("root", "10.9.8.7:4242")
    headers = forwarded_metadata(client)

    def body() -> None:
        # An RS certificate naming the client: runs as that client, no password needed.
        ok = call(
            pair.leader_addr,
            "ALTER SYSTEM ADD ZONE 'z7'",
            role=Role.RS,
            name=pair.standby_addr,
            metadata=headers,
        )
        assert ok.error.code == 0, ok.error.message
        # An RS certificate naming no client: refused by the peer gate, nothing runs.
        with pytest.raises(grpc.RpcError) as refused:
            call(pair.leader_addr, "ALTER SYSTEM ADD ZONE 'z8'", role=Role.RS, name="x:1")
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert FORWARDED_USER_KEY in (refused.value.details() or "")
        half = ((FORWARDED_USER_KEY, "root"),)
        with pytest.raises(grpc.RpcError) as refused_half:
            call(
                pair.leader_addr, "ALTER SYSTEM ADD ZONE 'z8'", role=Role.RS, name="x:1",
                metadata=half,
            )  # fmt: skip
        assert refused_half.value.code() is grpc.StatusCode.PERMISSION_DENIED
        # A client certificate claiming to forward someone: 1045, nothing runs.
        alice = Principal("alice", "10.0.0.1:1")
        claimed = call(
            pair.leader_addr, "ALTER SYSTEM ADD ZONE 'z8'", metadata=forwarded_metadata(alice)
        )
        assert (claimed.error.code, claimed.error.sqlstate) == (-1045, "28000")
        assert "root service certificates only" in claimed.error.message
        # The loop guard: a forwarded statement reaching a standby is not forwarded again.
        looped = call(
            pair.standby_addr,
            "ALTER SYSTEM ADD ZONE 'z8'",
            role=Role.RS,
            name=pair.leader_addr,
            metadata=headers,
        )
        assert looped.error.name == "OB_RS_NOT_MASTER"
        assert looped.leader_hint == pair.leader_addr

    serve([pair.leader, pair.standby], body)
    zones = zone_names(pair.leader)
    assert "z7" in zones and "z8" not in zones
    assert pair.standby.metrics.snapshot().get("statements_forwarded_total", 0) == 0
    rows = audit_rows(pair.leader)
    assert {
        "user": "root",
        "client_addr": client.client_addr,
        "outcome": "OK",
        "statement": "ALTER SYSTEM ADD ZONE 'z7'",
        "forwarded_by": pair.standby_addr,
        "event": "statement",
    } in rows
    assert any(
        r["event"] == "login" and r["user"] == "alice" and r["outcome"] == "ER_ACCESS_DENIED_ERROR"
        for r in rows
    )
    assert pair.leader.metrics.snapshot().get("peer_refused_wrong_role_total") == 2


def test_an_unreachable_leader_is_not_master_with_the_hint_without_waiting(pair: Pair) -> None:
    # Nothing listens at the leader's address: the standby answers OB_RS_NOT_MASTER, not
    # the deadline error a forward still waiting at rpc_timeout (200 ms) would give.
    forwarder = forwarder_for(pair.standby)
    assert isinstance(forwarder, GrpcForwarder)
    try:
        with pytest.raises(ObError) as refused:
            run_statement(pair.standby, "ALTER SYSTEM ADD ZONE 'z6'", ROOT, forwarder=forwarder)
        assert refused.value.name == "OB_RS_NOT_MASTER"
        assert not isinstance(refused.value, LeaderRefusal)
        assert pair.leader_addr in refused.value.message
    finally:
        forwarder.close()
    # Through the admin service the refusal carries the leader's address as today.
    resp = serve([pair.standby], lambda: call(pair.standby_addr, "ALTER SYSTEM ADD ZONE 'z6'"))
    assert resp.error.name == "OB_RS_NOT_MASTER" and resp.leader_hint == pair.leader_addr
    assert pair.standby.metrics.snapshot().get("statements_refused_total") == 2


def test_a_standby_without_a_forwarder_answers_not_master_as_before(pair: Pair) -> None:
    resp = serve(
        [pair.leader, pair.standby],
        lambda: call(pair.standby_addr, "ALTER SYSTEM ADD ZONE 'z6'"),
        forward=False,
    )
    assert resp.error.name == "OB_RS_NOT_MASTER" and resp.leader_hint == pair.leader_addr
    assert "z6" not in zone_names(pair.leader)


def test_insecure_mode_neither_forwards_nor_accepts_a_forwarded_identity(
    db_url: str, tmp_path: Path
) -> None:
    p = make_pair(db_url, tmp_path, secure=False)
    try:
        # Nothing can vouch for a client without certificates: no forwarder is built...
        assert forwarder_for(p.standby) is None
        with pytest.raises(ValueError, match="insecure"):
            GrpcForwarder(p.standby.security, lambda: S, lambda: S)

        def body() -> tuple[obrpc_pb2.SqlResponse, obrpc_pb2.SqlResponse]:
            with grpc.insecure_channel(p.standby_addr) as ch:
                standby_answer = obrpc_pb2_grpc.AdminServiceStub(ch).ExecuteSql(
                    obrpc_pb2.SqlRequest(statement="ALTER SYSTEM ADD ZONE 'z6'"), timeout=20
                )
            # ...and the leader refuses forwarded identities from anyone.
            with grpc.insecure_channel(p.leader_addr) as ch:
                claimed = obrpc_pb2_grpc.AdminServiceStub(ch).ExecuteSql(
                    obrpc_pb2.SqlRequest(statement="ALTER SYSTEM ADD ZONE 'z6'"),
                    timeout=20,
                    metadata=((FORWARDED_USER_KEY, "root"), (FORWARDED_ADDR_KEY, "10.0.0.1:1")),
                )
            return standby_answer, claimed

        standby_answer, claimed = serve([p.leader, p.standby], body)
        assert standby_answer.error.name == "OB_RS_NOT_MASTER"
        assert standby_answer.leader_hint == p.leader_addr
        assert claimed.error.code == -1045
        assert "z6" not in zone_names(p.leader)
    finally:
        p.standby.shutdown()
        p.leader.shutdown()


def test_forwarded_metadata_carries_non_ascii_names_as_utf8() -> None:
    assert forwarded_metadata(Principal("root", "10.0.0.1:5")) == (
        (FORWARDED_USER_KEY, "root"),
        (FORWARDED_ADDR_KEY, "10.0.0.1:5"),
    )
    assert forwarded_metadata(Principal("é", "[::1]:5"))[0] == (
        FORWARDED_USER_KEY + "-bin",
        "é".encode(),
    )
