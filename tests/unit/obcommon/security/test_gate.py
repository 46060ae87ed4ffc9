"""obcommon.security.gate: PeerGate on a real in-process grpc.aio server with mutual TLS: admitted identities, UNAUTHENTICATED without a certificate,
PERMISSION_DENIED for the wrong role, name or membership, counters and the rate-limited log."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509

from obcommon.clock import FakeClock
from obcommon.security import gate as gate_mod
from obcommon.security.certs import Role, create_cert
from obcommon.security.gate import PeerGate, PeerRefused
from obcommon.security.identity import PeerIdentity
from obcommon.security.tls import TransportSecurity
from tests.unit.obcommon.security.helpers import VALID, make_ca

SERVICE = "test.Gated"
METHOD = f"/{SERVICE}/Call"
RS_ADDR = "127.0.0.1:1"


def _serve(gate: PeerGate) -> grpc.GenericRpcHandler:
    """One unary method: the request (JSON) says which roles / name / names to admit; the
    answer is the admitted identity as text."""

    async def call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        want = json.loads(request)
        ident = await gate.admit(
            context,
            "Gated.Call",
            frozenset(Role(r) for r in want["roles"]),
            name=want.get("name"),
            names=want.get("names"),
        )
        return str(ident).encode()

    return grpc.method_handlers_generic_handler(
        SERVICE, {"Call": grpc.unary_unary_rpc_method_handler(call)}
    )


class Pki:
    """A CA in ``tmp`` with one certificates directory per identity."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ca_dir, self.ca_key = make_ca(tmp)

    def security(self, role: Role, name: str) -> TransportSecurity:
        d = self.tmp / f"{role.value}-{name.replace(':', '_')}"
        if not d.exists():
            d.mkdir()
            (d / "ca.crt").write_bytes((self.ca_dir / "ca.crt").read_bytes())
            create_cert(d, self.ca_key, role, name, VALID)
        return TransportSecurity(d, role, name if role is Role.CLIENT else "")


Caller = Callable[[Role | None, str, dict[str, Any]], Awaitable[tuple[grpc.StatusCode, str]]]


def _run(pki: Pki | None, gate: PeerGate, body: Callable[[Caller, str], Awaitable[None]]) -> None:
    """Serve ``gate`` (TLS with the RS certificate of ``pki``, or plaintext when None) and
    run ``body`` with a ``call(role, name, want)`` that dials with that certificate, and the
    server's address."""

    async def main() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((_serve(gate),))
        if pki is None:
            port = server.add_insecure_port("127.0.0.1:0")
        else:
            port = pki.security(Role.RS, RS_ADDR).add_port(server, "127.0.0.1:0")
        await server.start()
        addr = f"127.0.0.1:{port}"

        async def call(
            role: Role | None, name: str, want: dict[str, Any]
        ) -> tuple[grpc.StatusCode, str]:
            if role is None or pki is None:
                ch = grpc.aio.insecure_channel(addr)
            else:
                ch = pki.security(role, name).aio_channel(addr)
            async with ch:
                try:
                    out = await ch.unary_unary(METHOD)(json.dumps(want).encode(), timeout=10)
                except grpc.aio.AioRpcError as e:
                    return e.code(), e.details() or ""
                return grpc.StatusCode.OK, out.decode()

        try:
            await body(call, addr)
        finally:
            await server.stop(None)

    asyncio.run(main())


def test_admitted_identities(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    counted: list[str] = []
    gate = PeerGate(False, counted.append)

    async def body(call: Caller, addr: str) -> None:
        assert await call(Role.NODE, "127.0.0.1:7", {"roles": ["node"], "name": "127.0.0.1:7"}) == (
            grpc.StatusCode.OK,
            "node '127.0.0.1:7'",
        )
        assert await call(Role.CLIENT, "root", {"roles": ["client"]}) == (
            grpc.StatusCode.OK,
            "client 'root'",
        )
        # names binds node certificates only: the RS passes whatever the members are.
        assert await call(Role.RS, RS_ADDR, {"roles": ["rs", "node"], "names": []}) == (
            grpc.StatusCode.OK,
            f"rs '{RS_ADDR}'",
        )
        assert await call(
            Role.NODE, "127.0.0.1:8", {"roles": ["rs", "node"], "names": ["127.0.0.1:8"]}
        ) == (grpc.StatusCode.OK, "node '127.0.0.1:8'")

    _run(pki, gate, body)
    assert gate.refused_total == {} and counted == []


def test_refusals_name_expected_and_presented(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    counted: list[str] = []
    gate = PeerGate(False, counted.append)

    async def body(call: Caller, addr: str) -> None:
        code, msg = await call(Role.CLIENT, "root", {"roles": ["node"]})
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert "Gated.Call needs a node certificate" in msg and "presented client 'root'" in msg

        # A valid node certificate speaking for another node (the forged lease).
        code, msg = await call(Role.NODE, "127.0.0.1:9", {"roles": ["node"], "name": "127.0.0.1:7"})
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert "for '127.0.0.1:7' needs node '127.0.0.1:7'" in msg
        assert "presented node '127.0.0.1:9'" in msg

        code, msg = await call(
            Role.NODE,
            "127.0.0.1:9",
            {"roles": ["rs", "node"], "names": ["127.0.0.1:7", "127.0.0.1:8"]},
        )
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert "needs the rs or a member (127.0.0.1:7, 127.0.0.1:8)" in msg

        code, msg = await call(Role.RS, RS_ADDR, {"roles": ["client"]})
        assert code == grpc.StatusCode.PERMISSION_DENIED and "presented rs" in msg

    _run(pki, gate, body)
    assert gate.refused_total == {"wrong_role": 2, "wrong_name": 1, "not_member": 1}
    assert sorted(counted) == ["not_member", "wrong_name", "wrong_role", "wrong_role"]


def test_no_certificate_is_unauthenticated(tmp_path: Path) -> None:
    # A TLS server never lets a client without a certificate finish the handshake, so the
    # gate's own check is reached through a plaintext server whose gate is not insecure.
    gate = PeerGate(False)

    async def body(call: Caller, addr: str) -> None:
        code, msg = await call(None, "", {"roles": ["rs"]})
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert "Gated.Call needs a certificate of this cluster (rs)" in msg
        assert "presented none" in msg

    _run(None, gate, body)
    assert gate.refused_total == {"no_certificate": 1}


def test_tls_refuses_a_client_without_a_certificate(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    gate = PeerGate(False)

    async def body(call: Caller, addr: str) -> None:
        del call
        # Trusts the CA but presents nothing: the handshake itself fails.
        creds = grpc.ssl_channel_credentials(root_certificates=(pki.ca_dir / "ca.crt").read_bytes())
        async with grpc.aio.secure_channel(addr, creds) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await ch.unary_unary(METHOD)(b'{"roles": ["client"]}', timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE

    _run(pki, gate, body)
    assert gate.refused_total == {}  # never reached the servicer


def test_insecure_gate_admits_everything() -> None:
    gate = PeerGate(True)

    async def body(call: Caller, addr: str) -> None:
        assert await call(None, "", {"roles": ["rs"], "name": "127.0.0.1:7"}) == (
            grpc.StatusCode.OK,
            "None",
        )

    _run(None, gate, body)
    assert gate.refused_total == {}


class _Context:
    """What PeerGate.check reads of a servicer context: the auth context and the peer."""

    def __init__(self, pem: bytes | None) -> None:
        self.pem = pem

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"x509_pem_cert": [self.pem]} if self.pem else {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"


def test_log_is_rate_limited_per_kind_and_counts_stay_exact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    pki = Pki(tmp_path)
    client = (pki.security(Role.CLIENT, "eve").certs_dir or tmp_path) / "client.eve.crt"
    wrong_role = _Context(client.read_bytes())
    counted: list[str] = []
    gate = PeerGate(False, counted.append, clock)

    def refuse(ctx: _Context, **kw: Any) -> PeerRefused:
        with pytest.raises(PeerRefused) as e:
            gate.check(ctx, "RootService.RenewLease", {Role.NODE}, **kw)
        return e.value

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == gate_mod.__name__]

    with caplog.at_level(logging.WARNING, logger=gate_mod.__name__):
        for _ in range(3):
            assert refuse(wrong_role).kind == "wrong_role"
        assert len(lines()) == 1 and "suppressed" not in lines()[0]
        clock.advance(5_000_000)
        refuse(wrong_role)
        e = refuse(_Context(None))  # another kind has its own budget
        assert e.code == grpc.StatusCode.UNAUTHENTICATED
        assert len(lines()) == 2
        clock.advance(4_900_000)  # 9.9 s after the first line: still quiet
        refuse(wrong_role)
        assert len(lines()) == 2
        clock.advance(100_000)  # 10 s: one line with the suppressed count
        refuse(wrong_role)
        assert len(lines()) == 3
        assert "(4 similar suppressed)" in lines()[2]
        assert "RootService.RenewLease needs a node certificate" in lines()[2]
        clock.advance(10_000_000)  # nothing suppressed since: no count shown
        refuse(wrong_role)
        assert len(lines()) == 4 and "suppressed" not in lines()[3]

    assert gate.refused_total == {"wrong_role": 7, "no_certificate": 1}
    assert counted.count("wrong_role") == 7 and counted.count("no_certificate") == 1


def test_check_returns_the_identity_and_none_when_insecure(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    sec = pki.security(Role.NODE, "127.0.0.1:7")
    pem = (sec.certs_dir or tmp_path).joinpath("node.crt").read_bytes()
    assert PeerGate(False).check(_Context(pem), "m", {Role.NODE}, name="127.0.0.1:7") == (
        PeerIdentity(Role.NODE, "127.0.0.1:7")
    )
    assert PeerGate(True).check(_Context(None), "m", {Role.NODE}, name="x") is None


def test_a_revoked_certificate_is_refused_on_a_channel_opened_before(tmp_path: Path) -> None:
    # The list is looked up at every call, so a channel (and its HTTP/2
    # connection) opened before the revocation gets no further call through.
    pki = Pki(tmp_path)
    gate = PeerGate(False)
    victim = pki.security(Role.CLIENT, "root")
    serial = format(
        x509.load_pem_x509_certificate(
            (victim.certs_dir / "client.root.crt").read_bytes()
        ).serial_number,  # type: ignore[operator]
        "x",
    )

    async def body(call: Caller, addr: str) -> None:
        async with victim.aio_channel(addr) as ch:
            rpc = ch.unary_unary(METHOD)
            assert await rpc(b'{"roles": ["client"]}', timeout=10) == b"client 'root'"
            gate.revoked.replace({serial})
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await rpc(b'{"roles": ["client"]}', timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert f"client 'root' (serial {serial})" in (e.value.details() or "")
        assert "is revoked" in (e.value.details() or "")
        # Another certificate of the same user, and other peers, are not.
        assert (await call(Role.NODE, "127.0.0.1:7", {"roles": ["node"]}))[0] == grpc.StatusCode.OK

    _run(pki, gate, body)
    assert gate.refused_total == {"revoked": 1}
