"""The data phase of a copy (replica migration, docs/design/migration.md): a member's data file
received over ``ReplicaService.FetchData`` (or, when the source offers it, the bulk HTTP(S)
path of :mod:`observer_agent.replicas.copy_http`) into a temp file, every piece
checked against the first chunk's announced size and the whole file against its crc32."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import grpc

from obcommon.errors import error_from_proto
from obcommon.proto import obrpc_pb2
from observer_agent.disk import is_out_of_space, os_error_to_ob
from observer_agent.replicas.faults import FREEZE_POLL_S
from observer_agent.replicas.replica import Build
from observer_agent.replicas.tasks import run_blocking

#: The fewest bytes :meth:`DataSink.piece` asks for under a limit.
MIN_PIECE = 16 * 1024
#: Piece size while the slow-copy fault is set: the default ``FetchData`` chunk.
FAULT_PIECE = 256 * 1024
#: How often a thread waiting for the throttle looks whether its copy was stopped, seconds.
PACE_POLL_S = 0.2


class CopySlowdown(Protocol):
    """The fault switch that slows copies down (implemented by
    :class:`observer_agent.replicas.faults.FaultSwitches`)."""

    def copy_delay_s(self) -> float:
        """Seconds to sleep after each chunk received (0 = none)."""
        ...

    def copy_stalled(self) -> bool:
        """True while copies must receive nothing more."""
        ...


class ChunkThrottle(Protocol):
    """The agent's copy bandwidth limit (implemented by
    :class:`observer_agent.replicas.bandwidth.CopyBandwidth`)."""

    async def take(self, n: int) -> None:
        """Wait until ``n`` more received bytes may pass (at once when unlimited)."""
        ...

    @property
    def burst(self) -> float:
        """Bytes let through at once after an idle spell (0 when unlimited)."""
        ...


class CopyFailed(Exception):
    """A copy of a replica's data file failed; the message is the one-line reason reported as
    ``build_error``."""


class DataSink:
    """The temp file ``tmp`` a copy from ``src`` (``ip:port``) writes into, on either path
    (the ``FetchData`` stream or the bulk HTTP(S) body): every piece appended in order, the
    crc32 kept, progress in ``b.bytes_copied`` (bytes), no byte past ``first.total_size``
    (the header: size and checksum announced by the source).

    Each :meth:`add` waits for ``throttle`` (the agent's ``migration_max_bytes_per_second``) before it returns, so the reader holds back and the transport's flow
    control slows the source down too; ``faults`` may ask for a pause after each piece.
    Errors raise :class:`CopyFailed` (one-line reason); :meth:`close` after a failure leaves
    ``tmp`` for the caller to remove.
    """

    def __init__(
        self,
        src: str,
        tmp: Path,
        b: Build,
        faults: CopySlowdown,
        throttle: ChunkThrottle | None,
    ) -> None:
        """Nothing opened until :meth:`open`."""
        self.src = src
        self.tmp = tmp
        self._b = b
        self._faults = faults
        self._throttle = throttle
        self._fh: Any = None
        self.first: obrpc_pb2.DataChunk | None = None
        self.received = 0
        self._crc = 0

    async def open(self) -> None:
        """Create ``tmp`` in its replica's directory, which must exist. Raises
        :class:`CopyFailed`."""
        try:
            self._fh = await run_blocking(_open_for_copy, self.tmp)
        except OSError as e:
            raise CopyFailed(write_failed(self.tmp, e)) from None

    def start(self, first: obrpc_pb2.DataChunk, max_size: int) -> None:
        """Take the source's header; its ``total_size`` must be within ``[0, max_size]``
        bytes (the expected replica size: a source announcing more is refused before
        anything is written). Raises :class:`CopyFailed`."""
        if not 0 <= first.total_size <= max_size:
            raise CopyFailed(
                f"{self.src} announced {first.total_size} bytes, expected 0..{max_size} "
                "(the replica size)"
            )
        self.first = first
        self._b.total_size = first.total_size

    def piece(self, most: int) -> int:
        """Bytes to read at a time, at most ``most``: under a limit no more than its burst
        (and at least :data:`MIN_PIECE`), so a throttled copy moves smoothly rather than a
        large piece every many seconds."""
        if self._faults.copy_delay_s() > 0 or self._faults.copy_stalled():
            # The slow-copy fault pauses after each piece; its tests size replicas in
            # FetchData chunks (a 1M replica stays visible for 4 pauses), so keep its pieces
            # that size on the bulk path too rather than one pause per MiB.
            most = min(most, FAULT_PIECE)
        burst = self._throttle.burst if self._throttle is not None else 0
        return most if not burst else max(MIN_PIECE, min(most, int(burst)))

    async def add(self, offset: int, data: bytes) -> None:
        """Append ``data``, which must start at byte ``offset`` = the bytes received so far
        and not reach past the announced size. Raises :class:`CopyFailed`."""
        await run_blocking(self.append, offset, data)
        if self._throttle is not None:
            await self._throttle.take(len(data))
        delay_s = self._faults.copy_delay_s()
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        while self._faults.copy_stalled():
            await asyncio.sleep(FREEZE_POLL_S)

    def append(self, offset: int, data: bytes | memoryview) -> None:
        """Blocking (a worker thread): write ``data``, which must start at byte ``offset`` =
        the bytes received so far and not reach past the announced size, and update the crc32
        and the progress. Raises :class:`CopyFailed`."""
        assert self.first is not None
        end = offset + len(data)
        if offset != self.received or end > self.first.total_size:
            raise CopyFailed(
                f"{self.src} sent bytes [{offset}, {end}) of {self.first.total_size} "
                f"when byte {self.received} was due"
            )
        try:
            self._crc = _write_chunk(self._fh, data, self._crc)
        except OSError as e:
            raise CopyFailed(write_failed(self.tmp, e)) from None
        self.received = end
        self._b.bytes_copied = end

    def pace(self, n: int, loop: asyncio.AbstractEventLoop, stop: threading.Event) -> None:
        """Blocking (a worker thread), after :meth:`append` of ``n`` bytes: wait for the
        throttle (on ``loop``, where it runs; skipped while unlimited) and the slow-copy
        fault's pause. Returns early once ``stop`` is set."""
        if self._throttle is not None and self._throttle.burst:
            fut = asyncio.run_coroutine_threadsafe(self._throttle.take(n), loop)
            while not stop.is_set():
                try:
                    fut.result(timeout=PACE_POLL_S)
                    break
                except concurrent.futures.TimeoutError:
                    continue
            else:
                fut.cancel()
        delay_s = self._faults.copy_delay_s()
        if delay_s > 0:
            stop.wait(delay_s)
        while self._faults.copy_stalled() and not stop.is_set():
            stop.wait(FREEZE_POLL_S)

    async def finish(self) -> obrpc_pb2.DataChunk:
        """Check the size and the crc32 against the header, fsync and close ``tmp``; returns
        the header. Raises :class:`CopyFailed`."""
        first, src, received = self.first, self.src, self.received
        if first is None:
            raise CopyFailed(f"{src} ended the stream without any chunk")
        if received != first.total_size:
            raise CopyFailed(f"{src} ended the stream after {received} of {first.total_size} bytes")
        if self._crc != first.checksum:
            raise CopyFailed(
                f"checksum mismatch: the {received} bytes from {src} have crc32 {self._crc}, "
                f"{src} announced {first.checksum}"
            )
        done, self._fh = self._fh, None
        try:
            await run_blocking(_sync_and_close, done)
        except OSError as e:
            raise CopyFailed(write_failed(self.tmp, e)) from None
        return first

    def close(self) -> None:
        """Close ``tmp`` if still open (a failed or cancelled copy)."""
        fh, self._fh = self._fh, None
        if fh is not None:
            # Inline: it only flushes Python's small buffer of an abandoned temp file.
            with contextlib.suppress(OSError):
                fh.close()


#: How the body of a bulk answer is fetched: ``(header with data_url, sink)``, adding every
#: byte to the sink (:func:`observer_agent.replicas.copy_http.fetch_bulk`).
BulkFetch = Callable[[obrpc_pb2.DataChunk, DataSink], Awaitable[None]]


async def receive_data_file(
    call: Any,
    src: str,
    tmp: Path,
    b: Build,
    timeout_s: float,
    faults: CopySlowdown,
    max_size: int,
    *,
    throttle: ChunkThrottle | None = None,
    bulk: BulkFetch | None = None,
) -> obrpc_pb2.DataChunk:
    """Read the ``FetchData`` stream ``call`` from ``src`` (``ip:port``) into ``tmp`` (created,
    fsynced and closed); returns the first chunk (size, checksum, log indexes).

    The first chunk's announced ``total_size`` must be within ``[0, max_size]`` bytes (the
    expected replica size: a source announcing more is refused before anything is written: an attacker's source made an agent copy 64 MiB), and no chunk may reach past
    it (more bytes than announced are refused at the chunk that brings them). When the first
    chunk carries ``data_url`` (the request asked for ``bulk``) the bytes come from
    ``bulk`` instead of the stream; a ``data_url`` without ``bulk`` fails the copy.

    Progress goes to ``b.total_size`` / ``b.bytes_copied`` (bytes). Each chunk must come
    within ``timeout_s`` seconds; ``throttle`` holds the next read back until the chunk's
    bytes may pass (:class:`DataSink`); ``faults`` may ask for a pause after each. The wait
    for the throttle is not part of a chunk's ``timeout_s``. The call is cancelled when this
    returns or raises. Raises :class:`CopyFailed` (one-line reason); ``tmp`` is left for the
    caller to remove.
    """
    sink = DataSink(src, tmp, b, faults, throttle)
    try:
        await sink.open()
        while True:
            try:
                chunk = await asyncio.wait_for(call.read(), timeout_s)
            except TimeoutError:
                raise CopyFailed(
                    f"{src} sent nothing for {timeout_s:g} s after {sink.received} bytes"
                ) from None
            except grpc.aio.AioRpcError as e:
                details = (e.details() or "").replace("\n", " ")
                raise CopyFailed(f"{src}: {e.code().name}: {details}") from None
            if chunk is grpc.aio.EOF:
                break
            assert isinstance(chunk, obrpc_pb2.DataChunk)
            err = error_from_proto(chunk.error)
            if err is not None:
                raise CopyFailed(f"{src} answered {err.name}: {err.message}")
            if sink.first is None:
                sink.start(chunk, max_size)
                if chunk.data_url:
                    if bulk is None:
                        raise CopyFailed(f"{src} answered a data_url that was not asked for")
                    call.cancel()
                    await bulk(chunk, sink)
                    break
            # Read once: every read of a bytes field of a upb message copies the bytes.
            await sink.add(chunk.offset, chunk.data)
        return await sink.finish()
    finally:
        call.cancel()
        sink.close()


def write_failed(tmp: Path, e: OSError) -> str:
    """The one-line reason of a failed write of ``tmp``: led by ``OB_SERVER_OUTOF_DISK_SPACE``
    when the data disk is full (the RS shows the cause, not an errno)."""
    if is_out_of_space(e):
        return str(os_error_to_ob(e, f"cannot write {tmp}"))
    return f"cannot write {tmp}: {e}"


def _open_for_copy(tmp: Path) -> Any:
    # The directory is not created here: the build made it, and a drop that removed it
    # meanwhile must win (see ``ReplicaCopier._build_replica``).
    return open(tmp, "wb")  # noqa: SIM115 - written chunk by chunk, closed by the caller


def _write_chunk(fh: Any, data: bytes | memoryview, crc: int) -> int:
    fh.write(data)
    return zlib.crc32(data, crc)


def _sync_and_close(fh: Any) -> None:
    try:
        fh.flush()
        os.fsync(fh.fileno())
    finally:
        fh.close()
