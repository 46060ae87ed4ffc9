"""obcommon.security.revocation: serials as written, the list's version,
the set and its listeners, and the open connections closed when their certificate is
revoked (a real event loop; the list changed from another thread as the RS's timer does)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from obcommon.security.revocation import (
    OpenConnections,
    RevokedSerials,
    list_version,
    parse_serial,
)
from tests.support.timescale import scaled


def test_serials_are_read_in_the_forms_tools_print() -> None:
    assert parse_serial("0A1B") == "a1b"
    assert parse_serial("serial=0A1B") == "a1b"  # openssl x509 -serial
    assert parse_serial("0a:1b") == "a1b"  # openssl x509 -text
    assert parse_serial(" 0x00A1B ") == "a1b"
    assert parse_serial("0") == "0"
    assert parse_serial("f" * 40) == "f" * 40
    for bad in ("", "xyz", "1 2", "0x", "f" * 41, "-1"):
        with pytest.raises(ValueError, match="not a certificate serial"):
            parse_serial(bad)


def test_the_version_names_the_set_in_every_process() -> None:
    assert list_version([]) == 0
    v = list_version(["a1", "b2"])
    assert v > 0 and v == list_version(["b2", "a1", "a1"]) and v < 2**63
    assert list_version(["a1"]) not in (0, v)


def test_the_set_changes_whole_and_tells_its_listeners() -> None:
    revoked = RevokedSerials()
    seen: list[frozenset[str]] = []
    revoked.on_change(seen.append)

    def broken(_: frozenset[str]) -> None:
        raise RuntimeError("one listener fails")

    revoked.on_change(broken)
    assert "a1" not in revoked and revoked.state == (frozenset(), 0)
    assert revoked.replace(["a1"])
    assert "a1" in revoked and revoked.version == list_version(["a1"])
    assert not revoked.replace({"a1"})  # unchanged: nobody is told
    assert revoked.replace([])  # a table emptied by hand is followed too
    assert seen == [frozenset({"a1"}), frozenset()]


class Conn:
    """A connection as asyncio's transports and stream writers: close() and is_closing()."""

    def __init__(self) -> None:
        self.closed = False
        self.done = asyncio.Event()

    def close(self) -> None:
        self.closed = True
        self.done.set()

    def is_closing(self) -> bool:
        return self.closed


def test_open_connections_of_a_revoked_certificate_are_closed() -> None:
    revoked = RevokedSerials()
    conns = OpenConnections(revoked)
    a, a2, b, gone = Conn(), Conn(), Conn(), Conn()

    async def main() -> None:
        for serial, conn in (("a1", a), ("a1", a2), ("b2", b), ("c3", gone)):
            conns.add(serial, conn)
        conns.add("a1", a)  # the same connection again (HTTP: one per request)
        gone.close()
        conns.add("b2", b)  # prunes what closed meanwhile
        assert len(conns) == 3
        # The list changes in another thread (the RS's timer, a statement's worker).
        t = threading.Thread(target=revoked.replace, args=({"a1", "zz"},))
        t.start()
        t.join()
        # Closed on this loop soon after; the bound only keeps a broken build from hanging.
        await asyncio.wait_for(asyncio.gather(a.done.wait(), a2.done.wait()), scaled(30))
        assert not b.closed and len(conns) == 1 and conns.closed_total == 2

    asyncio.run(main())


def test_adding_outside_an_event_loop_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        OpenConnections(RevokedSerials()).add("a1", Conn())
