"""The destination's side of the bulk data path: the body of ``GET data_url`` on
the source's HTTP(S) endpoint (:mod:`observer_agent.http_data`) written into the copy's temp
file through its :class:`~observer_agent.replicas.copy_stream.DataSink` (order, size, crc32,
the throttle and the slow-copy fault, as on the gRPC stream).

The body is received off the event loop, by the standard library's ``http.client`` on a
blocking socket in a worker thread of its own (one per copy receiving): each piece of up to
:data:`PIECE` bytes is read with ``readinto`` into one preallocated buffer, written and
checksummed in that thread, so decrypting, writing and the crc32 loop in C. Measured with
``tests/bench/tls_bulk_micro.py`` (512 MiB, mutual TLS, the loaded 2-core machine), the
receiving end spent 2.6-2.9 CPU s per GiB with aiohttp on the event loop (asyncio's TLS
decrypts one 16 KiB record per call, with Python around each) and 1.3-1.8 this way. The
throttle (``migration_max_bytes_per_second``) still runs on the loop: the thread waits for
it after each piece (:meth:`DataSink.pace`), so a throttled copy stops reading its socket and
TCP slows the source down.

Mutual TLS with the node certificate
(:meth:`obcommon.security.tls.TransportSecurity.client_ssl_context`: the source's address
checked against its certificate, whose name must also be the source's ``ip:port``, as a gRPC
source's is); plaintext HTTP in insecure mode. One connection per copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from obcommon.proto import obrpc_pb2
from obcommon.security.certs import Role
from obcommon.security.identity import identity_of_der
from obcommon.security.tls import TransportSecurity
from observer_agent.replicas.copy_stream import CopyFailed, DataSink
from observer_agent.replicas.tasks import CLOSE_TIMEOUT_S

#: Most bytes read from the socket into the buffer and handed to one write (and one
#: throttle take) of the temp file.
PIECE = 1 << 20
#: The most bytes of an error answer's body read.
ERROR_BODY = 64 * 1024
#: Copies receiving at once at most (threads of the pool; more wait for one).
MAX_RECEIVERS = 16

#: Headers of the bulk path's answer: the file's size (bytes) and crc32 as recorded.
SIZE_HEADER = "X-OB-Data-Size"
CHECKSUM_HEADER = "X-OB-Data-Checksum"


def data_path(tenant_id: int, ls_id: int) -> str:
    """The path of an LS's data file on the agent's HTTP(S) endpoint."""
    return f"/replica-data/{tenant_id}/{ls_id}"


class BulkHttp:
    """The HTTP(S) client of one agent's copies; ``security`` gives the node certificate
    (plaintext HTTP in insecure mode). The TLS context is rebuilt after a certificate
    rotation; the receiving threads are started on first use; :meth:`close` at stop."""

    def __init__(self, security: TransportSecurity) -> None:
        """No thread and no context yet."""
        self.security = security
        self._pool: ThreadPoolExecutor | None = None
        self._ctx: ssl.SSLContext | None = None
        self._generation = -1
        self._count_lock = threading.Lock()
        self._receiving = 0

    @property
    def receiving(self) -> int:
        """Bodies being received in their worker threads now."""
        with self._count_lock:
            return self._receiving

    def _run(self, receive: _Receive) -> None:
        with self._count_lock:
            self._receiving += 1
        try:
            receive.run()
        finally:
            with self._count_lock:
                self._receiving -= 1

    def _context(self) -> ssl.SSLContext | None:
        generation = self.security.generation()
        if generation != self._generation or self._ctx is None:
            self._ctx = self.security.client_ssl_context()
            self._generation = generation
        return self._ctx

    def _threads(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(MAX_RECEIVERS, thread_name_prefix="bulk-copy")
        return self._pool

    async def fetch(
        self, first: obrpc_pb2.DataChunk, sink: DataSink, src: str, timeout_s: float
    ) -> None:
        """GET ``first.data_url`` from ``src`` (``ip:port``) into ``sink``, whose header is
        ``first``. The answer's ``X-OB-Data-Size`` / ``X-OB-Data-Checksum`` must be the
        header's (a replica replaced between the two calls fails here, not at the end), and
        its ``Content-Length`` the size; connecting and each piece must take at most
        ``timeout_s`` seconds. Cancellable: the receiving thread is stopped (its socket shut
        down) and waited for, bounded, so the sink is never closed under its write. Raises
        :class:`CopyFailed` (one-line reason: the source's refusal or error, a transport
        error, a short body)."""
        ctx = None if self.security.insecure else self._context()
        receive = _Receive(first, sink, src, timeout_s, ctx, asyncio.get_running_loop())
        fut = asyncio.get_running_loop().run_in_executor(self._threads(), self._run, receive)
        # Retrieved even when the copy was cancelled first (its "stopped" failure is moot).
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            receive.stop()
            with contextlib.suppress(BaseException):
                await asyncio.wait({fut}, timeout=CLOSE_TIMEOUT_S)
            raise

    async def close(self) -> None:
        """Let the receiving threads end (their copies were cancelled); never raises. A
        later :meth:`fetch` starts new ones."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class _Receive:
    """One GET of a data file in a worker thread (see :meth:`BulkHttp.fetch`)."""

    def __init__(
        self,
        first: obrpc_pb2.DataChunk,
        sink: DataSink,
        src: str,
        timeout_s: float,
        ctx: ssl.SSLContext | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.first, self.sink, self.src, self.timeout_s = first, sink, src, timeout_s
        self.ctx, self.loop = ctx, loop
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None

    def stop(self) -> None:
        """From the loop: end the receive (a blocked read returns at once)."""
        self._stop.set()
        with self._lock:
            sock = self._conn.sock if self._conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def run(self) -> None:
        """The receive (in the worker thread). Raises :class:`CopyFailed`."""
        url, src, t = self.first.data_url, self.src, self.timeout_s
        parts = urlsplit(url)
        if not parts.hostname or parts.port is None:
            raise CopyFailed(f"{src} answered the data_url {url!r}, which names no host:port")
        conn: http.client.HTTPConnection
        if self.ctx is not None:
            conn = http.client.HTTPSConnection(
                parts.hostname, parts.port, timeout=t, context=self.ctx
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=t)
        with self._lock:
            self._conn = conn
        try:
            if self._stop.is_set():
                raise CopyFailed(f"{src}: the copy was stopped")
            try:
                conn.request("GET", parts.path, headers={"Accept-Encoding": "identity"})
                resp = conn.getresponse()
            except TimeoutError:
                raise CopyFailed(f"{src}: no answer from {url} within {t:g} s") from None
            except (OSError, http.client.HTTPException) as e:
                raise CopyFailed(f"{src}: {url}: {type(e).__name__}: {e}") from None
            self._check_peer(conn, url)
            self._receive(resp, url)
        finally:
            with self._lock:
                self._conn = None
            conn.close()

    def _check_peer(self, conn: http.client.HTTPConnection, url: str) -> None:
        if self.ctx is None:
            return
        sock = conn.sock
        der = sock.getpeercert(binary_form=True) if isinstance(sock, ssl.SSLSocket) else None
        ident = identity_of_der(der) if der else None
        if ident is None or ident.role is not Role.NODE or ident.name != self.src:
            raise CopyFailed(f"{url} presented {ident or 'no certificate'}, not node '{self.src}'")

    def _receive(self, resp: http.client.HTTPResponse, url: str) -> None:
        first, sink, src = self.first, self.sink, self.src
        if resp.status != 200:
            raise CopyFailed(f"{src} answered {_describe_error(resp)}")
        announced = (resp.getheader(SIZE_HEADER), resp.getheader(CHECKSUM_HEADER))
        if announced != (str(first.total_size), str(first.checksum)):
            raise CopyFailed(
                f"{src} serves {announced[0]} bytes of crc32 {announced[1]} at {url}, "
                f"not the {first.total_size} bytes of crc32 {first.checksum} it announced"
            )
        if resp.length != first.total_size:
            raise CopyFailed(
                f"{src} sends a body of {resp.length} bytes at {url}, "
                f"not the {first.total_size} it announced"
            )
        buf = memoryview(bytearray(PIECE))
        while (left := first.total_size - sink.received) > 0:
            if self._stop.is_set():
                raise CopyFailed(f"{src}: the copy was stopped")
            piece = min(left, sink.piece(PIECE))
            try:
                got = resp.readinto(buf[:piece])
            except TimeoutError:
                raise CopyFailed(
                    f"{src} sent nothing for {self.timeout_s:g} s after {sink.received} bytes"
                ) from None
            except http.client.IncompleteRead as e:
                raise CopyFailed(
                    f"{src} ended the body after {sink.received + len(e.partial)} of "
                    f"{first.total_size} bytes"
                ) from None
            except (OSError, http.client.HTTPException) as e:
                raise CopyFailed(f"{src}: {url}: {type(e).__name__}: {e}") from None
            if not got:
                raise CopyFailed(
                    f"{src} ended the body after {sink.received} of {first.total_size} bytes"
                )
            sink.append(sink.received, buf[:got])
            sink.pace(got, self.loop, self._stop)


def _describe_error(resp: http.client.HTTPResponse) -> str:
    """``NAME: message`` of an error answer of the data path (its JSON body), else the
    status line."""
    body: Any = None
    with contextlib.suppress(Exception):
        body = json.loads(resp.read(ERROR_BODY))
    if isinstance(body, dict) and body.get("name"):
        return f"{body['name']}: {body.get('message', '')}"
    return f"HTTP {resp.status} {resp.reason or ''}".strip()
