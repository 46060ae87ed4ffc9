"""The data phase of a copy (replica migration, SPEC.md section 9): a member's data file
received over ``ReplicaService.FetchData`` into a temp file, every chunk checked against the
first one's announced size and the whole file against its crc32."""

from __future__ import annotations

import asyncio
import contextlib
import os
import zlib
from pathlib import Path
from typing import Any, Protocol

import grpc

from obcommon.errors import error_from_proto
from obcommon.proto import obrpc_pb2
from observer_agent.disk import is_out_of_space, os_error_to_ob
from observer_agent.replicas.replica import Build
from observer_agent.replicas.tasks import run_blocking


class CopySlowdown(Protocol):
    """The fault switch that slows copies down (implemented by
    :class:`observer_agent.replicas.faults.FaultSwitches`)."""

    def copy_delay_s(self) -> float:
        """Seconds to sleep after each chunk received (0 = none)."""
        ...


class ChunkThrottle(Protocol):
    """The agent's copy bandwidth limit (implemented by
    :class:`observer_agent.replicas.bandwidth.CopyBandwidth`)."""

    async def take(self, n: int) -> None:
        """Wait until ``n`` more received bytes may pass (at once when unlimited)."""
        ...


class CopyFailed(Exception):
    """A copy of a replica's data file failed; the message is the one-line reason reported as
    ``build_error``."""


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
) -> obrpc_pb2.DataChunk:
    """Read the ``FetchData`` stream ``call`` from ``src`` (``ip:port``) into ``tmp`` (created,
    fsynced and closed); returns the first chunk (size, checksum, log indexes).

    The first chunk's announced ``total_size`` must be within ``[0, max_size]`` bytes (the
    expected replica size: a source announcing more is refused before anything is written,
    issue 10: an attacker's source made an agent copy 64 MiB), and no chunk may reach past
    it (more bytes than announced are refused at the chunk that brings them).

    Progress goes to ``b.total_size`` / ``b.bytes_copied`` (bytes). Each chunk must come
    within ``timeout_s`` seconds; ``throttle`` (the agent's ``migration_max_bytes_per_second``,
    issue 13 item 6) holds the next read back until the chunk's bytes may pass, so the
    stream's flow control slows the source down too; ``faults`` may ask for a pause after
    each. The wait for the throttle is not part of a chunk's ``timeout_s``. The call is
    cancelled when this returns or raises. Raises :class:`CopyFailed` (one-line reason);
    ``tmp`` is left for the caller to remove.
    """
    fh: Any = None
    first: obrpc_pb2.DataChunk | None = None
    received = 0
    crc = 0
    try:
        try:
            fh = await run_blocking(_open_for_copy, tmp)
        except OSError as e:
            raise CopyFailed(write_failed(tmp, e)) from None
        while True:
            try:
                chunk = await asyncio.wait_for(call.read(), timeout_s)
            except TimeoutError:
                raise CopyFailed(
                    f"{src} sent nothing for {timeout_s:g} s after {received} bytes"
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
            if first is None:
                if not 0 <= chunk.total_size <= max_size:
                    raise CopyFailed(
                        f"{src} announced {chunk.total_size} bytes, expected 0..{max_size} "
                        "(the replica size)"
                    )
                first = chunk
                b.total_size = chunk.total_size
            # Read once: every read of a bytes field of a upb message copies the bytes.
            data = chunk.data
            end = chunk.offset + len(data)
            if chunk.offset != received or end > first.total_size:
                raise CopyFailed(
                    f"{src} sent bytes [{chunk.offset}, {end}) of {first.total_size} "
                    f"when byte {received} was due"
                )
            try:
                crc = await run_blocking(_write_chunk, fh, data, crc)
            except OSError as e:
                raise CopyFailed(write_failed(tmp, e)) from None
            received = end
            b.bytes_copied = received
            if throttle is not None:
                await throttle.take(len(data))
            delay_s = faults.copy_delay_s()
            if delay_s > 0:
                await asyncio.sleep(delay_s)
        if first is None:
            raise CopyFailed(f"{src} ended the stream without any chunk")
        if received != first.total_size:
            raise CopyFailed(f"{src} ended the stream after {received} of {first.total_size} bytes")
        if crc != first.checksum:
            raise CopyFailed(
                f"checksum mismatch: the {received} bytes from {src} have crc32 {crc}, "
                f"{src} announced {first.checksum}"
            )
        done, fh = fh, None
        try:
            await run_blocking(_sync_and_close, done)
        except OSError as e:
            raise CopyFailed(write_failed(tmp, e)) from None
        return first
    finally:
        call.cancel()
        if fh is not None:
            # Inline: it only flushes Python's small buffer of an abandoned temp file.
            with contextlib.suppress(OSError):
                fh.close()


def write_failed(tmp: Path, e: OSError) -> str:
    """The one-line reason of a failed write of ``tmp``: led by ``OB_SERVER_OUTOF_DISK_SPACE``
    when the data disk is full (issue 14 item 7: the RS shows the cause, not an errno)."""
    if is_out_of_space(e):
        return str(os_error_to_ob(e, f"cannot write {tmp}"))
    return f"cannot write {tmp}: {e}"


def _open_for_copy(tmp: Path) -> Any:
    tmp.parent.mkdir(parents=True, exist_ok=True)
    return open(tmp, "wb")  # noqa: SIM115 - written chunk by chunk, closed by the caller


def _write_chunk(fh: Any, data: bytes, crc: int) -> int:
    fh.write(data)
    return zlib.crc32(data, crc)


def _sync_and_close(fh: Any) -> None:
    try:
        fh.flush()
        os.fsync(fh.fileno())
    finally:
        fh.close()
