"""The agent's check of the RS's own certificate (observer_agent/rs_certificate.py) against a
real TLS listener serving an RS certificate of the test PKI: no probe while the list is
empty, one probe per version of the list, a refusal naming the serial."""

from __future__ import annotations

import asyncio
from pathlib import Path

from obcommon.clock import FakeClock
from obcommon.security.certs import Role, cert_file
from obcommon.security.revocation import RevokedSerials, serial_of_pem
from obcommon.security.tls import TransportSecurity
from observer_agent.rs_certificate import FAILED_PROBE_RETRY_US, RsCertificateCheck
from tests.support import pki
from tests.support.ports import free_port


def _rs_and_node() -> tuple[int, str, Path, str, TransportSecurity]:
    """A free port, its RS address, the RS's certificate directory and serial there, and a
    node's transport security of the same test PKI."""
    port = free_port()
    addr = f"127.0.0.1:{port}"
    rs_dir = pki.certs_dir(Role.RS, addr)
    serial = serial_of_pem((rs_dir / cert_file(Role.RS)).read_bytes())
    node = TransportSecurity(pki.certs_dir(Role.NODE, "127.0.0.1:1"), Role.NODE)
    return port, addr, rs_dir, serial, node


def test_one_probe_per_list_version_and_a_refusal_naming_the_serial() -> None:
    port, addr, rs_dir, serial, node = _rs_and_node()
    revoked = RevokedSerials()
    check = RsCertificateCheck(node, revoked)

    async def scenario() -> None:
        ctx = TransportSecurity(rs_dir, Role.RS).server_ssl_context()
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port, ssl=ctx)
        async with server:
            assert await check.refusal(addr, 5) is None and check.checks == 0
            assert check.current(addr)
            revoked.replace(["abc"])
            assert not check.current(addr)
            assert await check.refusal(addr, 5) is None and check.checks == 1
            assert check.current(addr)
            assert await check.refusal(addr, 5) is None and check.checks == 1
            revoked.replace(["abc", serial])
            assert not check.current(addr)  # a new list: judged again
            why = await check.refusal(addr, 5)
            assert why is not None and f"serial {serial}" in why and addr in why
            assert check.checks == 2
            # Nobody listening: no verdict (the stream attempt fails on its own).
            gone = f"127.0.0.1:{free_port()}"
            assert await check.refusal(gone, 1) is None

    asyncio.run(scenario())


def test_insecure_mode_gives_no_verdict() -> None:
    revoked = RevokedSerials()
    revoked.replace(["abc"])
    check = RsCertificateCheck(TransportSecurity.insecure_mode(Role.NODE), revoked)
    assert asyncio.run(check.refusal(f"127.0.0.1:{free_port()}", 1)) is None
    assert check.checks == 1


def test_a_probe_without_a_handshake_is_retried_once_its_answer_lapses() -> None:
    # The RS is down when first probed (no verdict, the stream attempt fails on its own),
    # then comes back serving a revoked certificate: judged again after
    # FAILED_PROBE_RETRY_US, not trusted until the list next changes.
    port, addr, rs_dir, serial, node = _rs_and_node()
    revoked = RevokedSerials()
    revoked.replace(["abc", serial])
    clock = FakeClock()
    check = RsCertificateCheck(node, revoked, clock)

    async def scenario() -> None:
        assert await check.refusal(addr, 1) is None and check.checks == 1
        ctx = TransportSecurity(rs_dir, Role.RS).server_ssl_context()
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port, ssl=ctx)
        async with server:
            # Within the retry time the non-answer stands: no probe per lease round.
            clock.advance(FAILED_PROBE_RETRY_US - 1)
            assert check.current(addr)
            assert await check.refusal(addr, 5) is None and check.checks == 1
            clock.advance(1)
            assert not check.current(addr)
            why = await check.refusal(addr, 5)
            assert why is not None and f"serial {serial}" in why and check.checks == 2
            # A verdict from a handshake does not lapse.
            clock.advance(10 * FAILED_PROBE_RETRY_US)
            assert check.current(addr)

    asyncio.run(scenario())
