"""The fault proxy of tests/support/tcp_proxy.py against a real echo server on 127.0.0.1:
pass, blackhole (hangs, then closed at heal), reset, delay (order kept), counters, close."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.support.cluster import wait_until
from tests.support.tcp_proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            try:
                while data := conn.recv(4096):
                    conn.sendall(data)
            except OSError:
                pass

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    yield srv.getsockname()
    stop.set()
    t.join(5)
    srv.close()


def roundtrip(port: int, payload: bytes, timeout_s: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(payload)
        return s.recv(4096)


def test_pass_blackhole_heal(echo: tuple[str, int]) -> None:
    with TcpProxy(echo) as p:
        assert roundtrip(p.port, b"hello") == b"hello"
        held = socket.create_connection(("127.0.0.1", p.port), timeout=2)
        held.sendall(b"a")
        assert held.recv(10) == b"a"
        p.cut("blackhole")
        held.sendall(b"lost")
        with pytest.raises(TimeoutError):
            held.settimeout(0.3)
            held.recv(10)
        # New connections are accepted but hang.
        with pytest.raises(TimeoutError):
            roundtrip(p.port, b"x", timeout_s=0.3)
        assert p.counters["blackholed_bytes"] >= 4
        p.heal()
        # The connection that lost bytes is closed; new ones work.
        held.settimeout(2)
        with pytest.raises((ConnectionError, OSError)):
            if held.recv(10) == b"":
                raise ConnectionResetError("closed")
        held.close()
        assert roundtrip(p.port, b"again") == b"again"


def test_reset_refuses_and_resets(echo: tuple[str, int]) -> None:
    with TcpProxy(echo) as p:
        held = socket.create_connection(("127.0.0.1", p.port), timeout=2)
        held.sendall(b"a")
        assert held.recv(10) == b"a"
        p.cut("reset")
        with pytest.raises(ConnectionResetError):
            held.recv(10)
        held.close()
        with pytest.raises((ConnectionError, OSError)):
            if roundtrip(p.port, b"x") == b"":
                raise ConnectionResetError("closed")
        assert p.counters["refused"] >= 1 and p.counters["reset"] >= 1
        p.heal()
        assert roundtrip(p.port, b"ok") == b"ok"


def test_delay_holds_client_chunks_in_order(echo: tuple[str, int]) -> None:
    with TcpProxy(echo) as p:
        # Held for an hour: nothing comes back while the echo server would answer at once.
        p.delay(3600)
        with socket.create_connection(("127.0.0.1", p.port), timeout=3) as s:
            s.sendall(b"0")
            wait_until(lambda: p.counters["delayed_chunks"] == 1, 5)
            s.settimeout(0.5)
            with pytest.raises(TimeoutError):
                s.recv(10)
        p.delay(0.3)
        with socket.create_connection(("127.0.0.1", p.port), timeout=3) as s:
            s.sendall(b"1")
            s.sendall(b"2")
            got = b""
            while len(got) < 2:
                got += s.recv(10)
        assert got == b"12"
        assert p.counters["delayed_chunks"] >= 2
    assert p.open_connections() == 0
