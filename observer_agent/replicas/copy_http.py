"""The destination's side of the bulk data path (issue 23): the body of ``GET data_url`` on
the source's HTTP(S) endpoint (:mod:`observer_agent.http_data`) written into the copy's temp
file through its :class:`~observer_agent.replicas.copy_stream.DataSink` (order, size, crc32,
the throttle and the slow-copy fault, as on the gRPC stream).

aiohttp's client, one session per agent kept across copies (connections reused), mutual TLS
with the node certificate (:meth:`obcommon.security.tls.TransportSecurity.client_ssl_context`:
the source's address checked against its certificate, whose name must also be the source's
``ip:port``, as a gRPC source's is). The body is read in pieces of up to :data:`PIECE` bytes
from aiohttp's buffer (:data:`READ_BUFFER` bytes before it pauses the socket), so the thread
hop that writes and checksums a piece is paid per MiB rather than per 256 KiB message.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Any

import aiohttp

from obcommon.proto import obrpc_pb2
from obcommon.security.certs import Role
from obcommon.security.identity import identity_of_der
from obcommon.security.tls import TransportSecurity
from observer_agent.replicas.copy_stream import CopyFailed, DataSink
from observer_agent.replicas.tasks import CLOSE_TIMEOUT_S

#: Most bytes handed to one write (and one throttle take) of the temp file.
PIECE = 1 << 20
#: Bytes aiohttp buffers per connection before it stops reading the socket.
READ_BUFFER = 4 << 20

#: Headers of the bulk path's answer: the file's size (bytes) and crc32 as recorded (issue 23).
SIZE_HEADER = "X-OB-Data-Size"
CHECKSUM_HEADER = "X-OB-Data-Checksum"


def data_path(tenant_id: int, ls_id: int) -> str:
    """The path of an LS's data file on the agent's HTTP(S) endpoint (issue 23)."""
    return f"/replica-data/{tenant_id}/{ls_id}"


class BulkHttp:
    """The HTTP(S) client of one agent's copies; ``security`` gives the node certificate
    (plaintext HTTP in insecure mode). The session is opened on first use on the running
    loop and reopened after a certificate rotation; :meth:`close` at stop."""

    def __init__(self, security: TransportSecurity) -> None:
        """No session yet."""
        self.security = security
        self._session: aiohttp.ClientSession | None = None
        self._generation = -1

    def _current(self) -> aiohttp.ClientSession:
        generation = self.security.generation()
        if self._session is not None and generation == self._generation:
            return self._session
        old, self._session = self._session, None
        if old is not None:
            # New connections must present the new pair; the old ones end with their copies.
            task = asyncio.get_running_loop().create_task(old.close())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        ctx: ssl.SSLContext | bool = self.security.client_ssl_context() or False
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, limit=0),
            read_bufsize=READ_BUFFER,
            auto_decompress=False,
            trust_env=False,
        )
        self._generation = generation
        return self._session

    async def fetch(
        self, first: obrpc_pb2.DataChunk, sink: DataSink, src: str, timeout_s: float
    ) -> None:
        """GET ``first.data_url`` from ``src`` (``ip:port``) into ``sink``, whose header is
        ``first``. The answer's ``X-OB-Data-Size`` / ``X-OB-Data-Checksum`` must be the
        header's (a replica replaced between the two calls fails here, not at the end);
        each piece must come within ``timeout_s`` seconds (connecting too). Raises
        :class:`CopyFailed` (one-line reason: the source's refusal or error, a transport
        error, a short body)."""
        url = first.data_url
        session = self._current()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                resp = await session.get(url, timeout=timeout)
            async with resp:
                self._check_peer(resp, src)
                if resp.status != 200:
                    raise CopyFailed(f"{src} answered {await _describe_error(resp)}")
                announced = (resp.headers.get(SIZE_HEADER), resp.headers.get(CHECKSUM_HEADER))
                if announced != (str(first.total_size), str(first.checksum)):
                    raise CopyFailed(
                        f"{src} serves {announced[0]} bytes of crc32 {announced[1]} at {url}, "
                        f"not the {first.total_size} bytes of crc32 {first.checksum} it announced"
                    )
                while (left := first.total_size - sink.received) > 0:
                    # Whole pieces: a read of what happens to be buffered returns a TLS
                    # record's 16 KiB when the writer keeps up, and the thread hop per piece
                    # then costs more than the bytes (25 MiB/s per copy on the bench).
                    piece = min(left, sink.piece(PIECE))
                    try:
                        data = await asyncio.wait_for(resp.content.readexactly(piece), timeout_s)
                    except TimeoutError:
                        raise CopyFailed(
                            f"{src} sent nothing for {timeout_s:g} s after {sink.received} bytes"
                        ) from None
                    except asyncio.IncompleteReadError as e:
                        raise CopyFailed(
                            f"{src} ended the body after {sink.received + len(e.partial)} of "
                            f"{first.total_size} bytes"
                        ) from None
                    await sink.add(sink.received, data)
                if await resp.content.read(1):
                    raise CopyFailed(f"{src} sent more than the {first.total_size} bytes announced")
        except TimeoutError:
            raise CopyFailed(f"{src}: no answer from {url} within {timeout_s:g} s") from None
        except aiohttp.ClientError as e:
            raise CopyFailed(f"{src}: {url}: {type(e).__name__}: {e}") from None

    def _check_peer(self, resp: aiohttp.ClientResponse, src: str) -> None:
        if self.security.insecure:
            return
        conn = resp.connection
        transport = conn.transport if conn is not None else None
        ssl_object = transport.get_extra_info("ssl_object") if transport else None
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        ident = identity_of_der(der) if der else None
        if ident is None or ident.role is not Role.NODE or ident.name != src:
            raise CopyFailed(f"{resp.url} presented {ident or 'no certificate'}, not node '{src}'")

    async def close(self) -> None:
        """Close the session; never raises. A later :meth:`fetch` opens a new one."""
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.close(), CLOSE_TIMEOUT_S)


async def _describe_error(resp: aiohttp.ClientResponse) -> str:
    """``NAME: message`` of an error answer of the data path (its JSON body), else the
    status line."""
    body: Any = None
    with contextlib.suppress(Exception):
        body = await resp.json(content_type=None)
    if isinstance(body, dict) and body.get("name"):
        return f"{body['name']}: {body.get('message', '')}"
    return f"HTTP {resp.status} {resp.reason or ''}".strip()
