"""A byte-forwarding TCP proxy for fault tests: put it between a root service and its
PostgreSQL to partition, slow down or heal that one link.

:class:`TcpProxy` runs an asyncio loop in a background thread, listens on ``127.0.0.1``
port 0 and forwards every accepted connection to ``upstream``. It never parses what it
forwards. Modes, switched from any thread:

- ``pass`` (:meth:`TcpProxy.heal`): bytes flow both ways;
- ``cut`` with ``how="blackhole"`` (:meth:`TcpProxy.cut`): packets vanish, as on a network
  that drops them - bytes read on open connections are discarded (both directions), new
  connections are accepted and then left hanging (never connected upstream), so every
  client waits on its own timeouts; at :meth:`heal` the connections that lost bytes are
  closed (their byte streams have holes: like a TCP connection that timed out meanwhile);
- ``cut`` with ``how="reset"``: open connections are reset (RST: ``SO_LINGER`` 0) and new
  ones accepted and reset at once: the peer answers but refuses;
- :meth:`TcpProxy.fail_handshakes` (on top of any mode): the next ``n`` connections are
  accepted, their first bytes (a TLS ClientHello) read, and then closed without an answer:
  the client's handshake fails (``Handshake read failed``), as on a loaded machine whose
  server gave up on it;
- ``delay`` (:meth:`TcpProxy.delay`): every client -> server chunk is held ``delay_s``
  seconds (order kept) before it is sent on; server -> client is not delayed. For psycopg's
  one-write-per-statement traffic this is "the database answers each statement ``delay_s``
  late".

Bounded: at most ``max_conns`` open client connections (more are reset), reads of at most
64 KiB, :meth:`TcpProxy.close` waits at most a few seconds for the loop. Counters in
:attr:`TcpProxy.counters` (``accepted``, ``refused``, ``reset``, ``failed_handshakes``, ``blackholed_bytes``,
``delayed_chunks``, ``forwarded_bytes``). Use it as a context manager, which closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

HOST = "127.0.0.1"
CHUNK = 65536
#: Longest wait for the loop thread to start or stop, in seconds.
THREAD_WAIT_S = 5.0
#: Upstream connect timeout, in seconds.
CONNECT_TIMEOUT_S = 5.0

Mode = Literal["pass", "blackhole", "reset", "delay"]


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with RST instead of FIN (SO_LINGER on, 0 s)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter | None = None
    holed: bool = False  # lost bytes to a blackhole: closed at heal
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``upstream`` (``(host, port)``) with faults on demand.

    ``port`` is the bound port (0 asks the kernel). Raises ``OSError`` when binding fails and
    ``RuntimeError`` when the loop does not start within :data:`THREAD_WAIT_S`.
    """

    def __init__(self, upstream: tuple[str, int], *, port: int = 0, max_conns: int = 256) -> None:
        self.upstream = upstream
        self.max_conns = max_conns
        self.mode: Mode = "pass"
        self.delay_s = 0.0
        self._fail_next = 0
        self.counters: Counter[str] = Counter()
        self._conns: set[_Conn] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(port,), name="tcp-proxy", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(THREAD_WAIT_S):
            raise RuntimeError("tcp proxy loop did not start")
        if self._error is not None:
            raise self._error
        assert self._server is not None
        self.port: int = self._server.sockets[0].getsockname()[1]

    # --- public API (any thread) --------------------------------------------------------

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>`` of the proxy."""
        return f"{HOST}:{self.port}"

    def cut(self, how: Literal["blackhole", "reset"] = "blackhole") -> None:
        """Partition the link (see the module docstring for the two kinds)."""
        self._call(self._set_mode, how)

    def heal(self) -> None:
        """Back to ``pass``; connections that lost bytes to a blackhole are closed."""
        self._call(self._set_mode, "pass")

    def delay(self, seconds: float) -> None:
        """Hold each client -> server chunk ``seconds`` before sending it on."""
        self.delay_s = seconds
        self._call(self._set_mode, "delay")

    def fail_handshakes(self, n: int) -> None:
        """Make the next ``n`` connections fail their handshake: read what the client sends
        first, then close (see the module docstring)."""
        self._fail_next = n

    def open_connections(self) -> int:
        """Client connections currently open through the proxy."""
        return len(self._conns)

    def close(self) -> None:
        """Stop listening, close every connection and stop the loop thread (idempotent)."""
        if not self._thread.is_alive():
            return
        with contextlib.suppress(RuntimeError, TimeoutError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(THREAD_WAIT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(THREAD_WAIT_S)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- loop side ----------------------------------------------------------------------

    def _call(self, fn: object, *args: object) -> None:
        async def run() -> None:
            fn(*args)  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(THREAD_WAIT_S)

    def _run(self, port: int) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._accept, HOST, port)
            )
        except BaseException as e:  # reported to the constructor
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for c in list(self._conns):
            self._drop(c, reset=False)

    def _set_mode(self, mode: Mode) -> None:
        self.mode = mode
        for c in list(self._conns):
            if mode == "reset" or (mode == "pass" and c.holed):
                self._drop(c, reset=True)

    def _drop(self, c: _Conn, *, reset: bool) -> None:
        if c not in self._conns:
            return
        self._conns.discard(c)
        if reset:
            self.counters["reset"] += 1
        for w in (c.client, c.server):
            if w is None:
                continue
            if reset:
                _rst(w)
            else:
                w.close()
        for t in c.tasks:
            if t is not asyncio.current_task():
                t.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        c = _Conn(writer)
        if self.mode == "reset" or len(self._conns) >= self.max_conns:
            self.counters["refused"] += 1
            _rst(writer)
            return
        self.counters["accepted"] += 1
        if self._fail_next > 0:
            self._fail_next -= 1
            self.counters["failed_handshakes"] += 1
            with contextlib.suppress(OSError, ConnectionError):
                await reader.read(CHUNK)
            writer.close()
            return
        self._conns.add(c)
        if self.mode == "blackhole":
            # Hang: never connect upstream; whatever the client sends vanishes.
            c.holed = True
            c.tasks.append(asyncio.current_task())  # type: ignore[arg-type]
            while c in self._conns:
                data = await reader.read(CHUNK)
                if not data:
                    break
                self.counters["blackholed_bytes"] += len(data)
            self._drop(c, reset=False)
            return
        try:
            up_r, up_w = await asyncio.wait_for(
                asyncio.open_connection(*self.upstream), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError):
            self.counters["upstream_failed"] += 1
            self._drop(c, reset=True)
            return
        c.server = up_w
        if c not in self._conns:  # dropped while connecting
            up_w.close()
            return
        c.tasks += [
            asyncio.create_task(self._pump(c, reader, up_w, upstream=True)),
            asyncio.create_task(self._pump(c, up_r, writer, upstream=False)),
        ]

    async def _pump(
        self,
        c: _Conn,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        # Delayed chunks keep their order: each is released at max(arrival + delay, the
        # previous release); a bounded queue of pending sends.
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(maxsize=1024)
        sender = asyncio.create_task(self._send(c, queue, dst)) if upstream else None
        if sender is not None:
            c.tasks.append(sender)
        try:
            while True:
                try:
                    data = await src.read(CHUNK)
                except (OSError, ConnectionError):
                    data = b""
                if not data:
                    break
                if self.mode == "blackhole":
                    c.holed = True
                    self.counters["blackholed_bytes"] += len(data)
                    continue
                if upstream:
                    due = time.monotonic() + (self.delay_s if self.mode == "delay" else 0.0)
                    if self.mode == "delay":
                        self.counters["delayed_chunks"] += 1
                    await queue.put((due, data))
                else:
                    dst.write(data)
                    self.counters["forwarded_bytes"] += len(data)
                    await dst.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            if sender is not None:
                await queue.put(None)
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(sender, self.delay_s + THREAD_WAIT_S)
            self._drop(c, reset=False)

    async def _send(
        self, c: _Conn, queue: asyncio.Queue[tuple[float, bytes] | None], dst: asyncio.StreamWriter
    ) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            due, data = item
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if self.mode == "blackhole":
                c.holed = True
                self.counters["blackholed_bytes"] += len(data)
                continue
            try:
                dst.write(data)
                await dst.drain()
            except (OSError, ConnectionError):
                return
            self.counters["forwarded_bytes"] += len(data)
