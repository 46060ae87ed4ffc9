"""obcommon.security.tls: exactly one of --certs-dir and --insecure, a broken pair refused at
start and ignored on refresh, a rotated pair taken without a restart."""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from obcommon.security import tls
from obcommon.security.certs import CA_CERT, Role, create_cert
from obcommon.security.tls import SecurityConfigError, TransportSecurity
from tests.support.pki import presented_cert
from tests.support.ports import free_port
from tests.unit.obcommon.security.helpers import VALID, make_ca


@pytest.fixture(autouse=True)
def _reload_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Production re-stats the files at most every 0.5 s; the tests look at every call
    # instead of sleeping.
    monkeypatch.setattr(tls, "RELOAD_CHECK_S", 0.0)


def _node_dir(tmp_path: Path, name: str = "127.0.0.1:2882") -> tuple[Path, Path]:
    certs, key = make_ca(tmp_path)
    create_cert(certs, key, Role.NODE, name, VALID)
    return certs, key


def test_from_flags_needs_exactly_one_of_the_two(tmp_path: Path) -> None:
    with pytest.raises(SecurityConfigError) as neither:
        TransportSecurity.from_flags(None, False, Role.RS)
    assert "--certs-dir" in str(neither.value) and "--insecure" in str(neither.value)
    with pytest.raises(SecurityConfigError, match="--certs-dir and --insecure exclude each other"):
        TransportSecurity.from_flags(tmp_path, True, Role.RS)
    sec = TransportSecurity.from_flags(None, True, Role.RS)
    assert sec.insecure and "INSECURE" in sec.describe()
    assert sec.refresh() is False and sec.generation() == 0


def test_from_flags_reads_the_files_at_start(tmp_path: Path) -> None:
    certs, key = make_ca(tmp_path)
    with pytest.raises(SecurityConfigError, match=r"cannot read .*rs\.crt"):
        TransportSecurity.from_flags(certs, False, Role.RS)
    create_cert(certs, key, Role.RS, "127.0.0.1:2882", VALID)
    sec = TransportSecurity.from_flags(certs, False, Role.RS)
    assert not sec.insecure and str(certs) in sec.describe()
    (certs / "rs.crt").write_bytes(b"not a certificate")
    with pytest.raises(SecurityConfigError, match="unreadable certificate or key"):
        TransportSecurity.from_flags(certs, False, Role.RS)


def test_a_mismatched_pair_is_refused_at_start(tmp_path: Path) -> None:
    certs, key = _node_dir(tmp_path)
    # node.key of another node: the pair does not match.
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(certs / CA_CERT, other / CA_CERT)
    create_cert(other, key, Role.NODE, "127.0.0.1:2883", VALID)
    shutil.copy(other / "node.key", certs / "node.key")
    with pytest.raises(SecurityConfigError, match=r"node\.key is not the key of .*node\.crt"):
        TransportSecurity.from_flags(certs, False, Role.NODE)


def test_refresh_ignores_a_broken_pair_and_takes_a_new_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    certs, key = _node_dir(tmp_path)
    sec = TransportSecurity.from_flags(certs, False, Role.NODE)
    first_cert = (certs / "node.crt").read_bytes()
    assert sec.refresh() is False  # nothing changed
    gen = sec.generation()

    # A rotation caught half-way: the new key is there, the certificate is still the old one.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    shutil.copy(certs / CA_CERT, scratch / CA_CERT)
    create_cert(scratch, key, Role.NODE, "127.0.0.1:2882", VALID)
    shutil.copy(scratch / "node.key", certs / "node.key")
    with caplog.at_level(logging.WARNING, logger=tls.__name__):
        assert sec.refresh() is False
    assert "cannot be used yet" in caplog.text and "is not the key of" in caplog.text
    assert sec.generation() == gen
    assert sec._load().cert == first_cert  # the previous pair stays in use

    # The certificate follows: the new pair is taken, and the generation moves.
    shutil.copy(scratch / "node.crt", certs / "node.crt")
    assert sec.refresh() is True
    assert sec.generation() == gen + 1
    assert sec._load().cert == (scratch / "node.crt").read_bytes() != first_cert
    assert sec.refresh() is False  # and only once


def test_for_dir_reads_lazily(tmp_path: Path) -> None:
    certs, key = make_ca(tmp_path)
    sec = TransportSecurity.for_dir(certs, Role.RS)  # no rs.crt yet: no error
    create_cert(certs, key, Role.RS, "127.0.0.1:2882", VALID)
    assert sec.channel_credentials() is not None
    assert TransportSecurity.for_dir(None, Role.RS).insecure


def test_a_server_presents_a_rotated_certificate_without_restart(tmp_path: Path) -> None:
    """A real grpc.aio server on TransportSecurity.add_port: a new TLS connection after the
    files changed gets the new certificate; an aio channel made afterwards still works."""
    certs, key = make_ca(tmp_path)
    create_cert(certs, key, Role.RS, "127.0.0.1:1", VALID)
    create_cert(certs, key, Role.CLIENT, "root", VALID)
    server_sec = TransportSecurity.from_flags(certs, False, Role.RS)
    client_sec = TransportSecurity.from_flags(certs, False, Role.CLIENT, "root")

    async def run() -> tuple[int, int, int]:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
        port = server_sec.add_port(server, "127.0.0.1:0")
        assert port > 0
        await server.start()
        addr = f"127.0.0.1:{port}"
        try:
            before = await asyncio.to_thread(presented_cert, addr, certs, Role.CLIENT, "root")
            # A client of another CA: the server refuses it (the helper sees the refusal).
            other, other_key = make_ca(tmp_path, "other")
            create_cert(other, other_key, Role.CLIENT, "root", VALID)
            shutil.copy(certs / CA_CERT, other / CA_CERT)  # trusts the server, is not trusted
            with pytest.raises(OSError):
                await asyncio.to_thread(presented_cert, addr, other, Role.CLIENT, "root")
            create_cert(certs, key, Role.RS, "127.0.0.1:1", VALID, overwrite=True)
            after = await asyncio.to_thread(presented_cert, addr, certs, Role.CLIENT, "root")
            async with client_sec.aio_channel(addr) as ch:
                resp = await health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(), timeout=5
                )
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
            return before.serial_number, after.serial_number, server_sec.generation()
        finally:
            await server.stop(None)

    before, after, gen = asyncio.run(run())
    assert before != after
    assert after == x509.load_pem_x509_certificate((certs / "rs.crt").read_bytes()).serial_number
    assert gen == 1


def test_channel_cache_reuses_and_reopens_after_rotation_or_forget(tmp_path: Path) -> None:
    certs, key = _node_dir(tmp_path)
    sec = TransportSecurity.from_flags(certs, False, Role.NODE)
    cache = tls.ChannelCache(sec)
    a = cache.get("127.0.0.1:1")
    assert cache.get("127.0.0.1:1") is a and cache.get("127.0.0.1:2") is not a
    cache.forget("127.0.0.1:1")
    b = cache.get("127.0.0.1:1")
    assert b is not a
    # A new pair: every channel of the old one is replaced.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    shutil.copy(certs / CA_CERT, scratch / CA_CERT)
    create_cert(scratch, key, Role.NODE, "127.0.0.1:2882", VALID)
    shutil.copy(scratch / "node.key", certs / "node.key")
    shutil.copy(scratch / "node.crt", certs / "node.crt")
    assert sec.refresh() is True
    c = cache.get("127.0.0.1:1")
    assert c is not b and cache.get("127.0.0.1:1") is c
    cache.close()
    assert cache.get("127.0.0.1:1") is not c
    cache.close()


def _closed(ch: grpc.Channel) -> bool:
    """Whether ``ch`` refuses new calls (a closed channel raises ``ValueError``; an open one
    to a port where nothing listens fails ``UNAVAILABLE``)."""
    try:
        ch.unary_unary("/probe/Probe")(b"", timeout=1)
    except ValueError:
        return True
    except grpc.RpcError:
        return False
    return False


def test_channel_cache_closes_a_held_channel_when_its_last_holder_is_done() -> None:
    """A forget, a rotation or close() while calls hold a channel drops it from the cache at
    once but closes it only after the last of them: a call started on a closed channel would
    raise ValueError instead of failing as an RPC."""
    cache = tls.ChannelCache(TransportSecurity.insecure_mode(Role.RS))
    addr = f"127.0.0.1:{free_port()}"  # nothing listens: an open channel fails UNAVAILABLE
    with cache.use(addr) as a, cache.use(addr) as same:
        assert same is a
        cache.forget(addr)
        assert cache.get(addr) is not a  # later callers get a new one
        assert not _closed(a)
        with cache.use(addr) as b:
            cache.close()
        assert _closed(b)  # its only holder left after the close
        assert not _closed(a)  # still held by ``a``'s holders
    assert _closed(a)
    assert not cache._holders and not cache._dropped
