"""A full data disk is not a disk error: the probe stays healthy on ENOSPC,
writes that need room are refused up front with OB_SERVER_OUTOF_DISK_SPACE, and a copy that
runs out of space says so. ENOSPC comes from the kernel's ``/dev/full`` (every write to it
fails with ENOSPC), free space from the real file system of ``tmp_path``; the whole-agent
behaviour on a real full tmpfs is in tests/integration/test_disk_full.py."""

from __future__ import annotations

import errno
import os
import zlib
from pathlib import Path

import grpc
import pytest

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from observer_agent.disk import (
    DISK_PROBE_FILE,
    FAULT_DATA_DISK_ERROR_FILE,
    check_free_space,
    free_bytes,
    is_out_of_space,
    os_error_to_ob,
    probe_data_disk,
)
from observer_agent.replicas.copy_stream import CopyFailed, receive_data_file, write_failed
from observer_agent.replicas.replica import Build
from tests.unit.observer_agent.helpers import run

DEV_FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not DEV_FULL.exists(), reason="no /dev/full on this host")


def _enospc() -> OSError:
    """A real ENOSPC from the kernel."""
    try:
        with open(DEV_FULL, "wb", buffering=0) as f:
            f.write(b"x")
    except OSError as e:
        return e
    raise AssertionError("a write to /dev/full succeeded")


@needs_dev_full
def test_enospc_is_out_of_space_and_maps_to_4184() -> None:
    e = _enospc()
    assert e.errno == errno.ENOSPC and is_out_of_space(e)
    err = os_error_to_ob(e, "cannot write x")
    assert (err.name, err.code) == ("OB_SERVER_OUTOF_DISK_SPACE", -4184)
    assert "cannot write x" in err.message
    other = os_error_to_ob(PermissionError(errno.EACCES, "denied"), "cannot write y")
    assert other.name == "OB_ERR_SYS" and not is_out_of_space(PermissionError())
    assert not is_out_of_space(ValueError())


@needs_dev_full
def test_probe_of_a_full_disk_is_healthy_but_a_failing_one_is_not(tmp_path: Path) -> None:
    assert probe_data_disk(tmp_path) is None
    # The probe's block lands on a device that is always full: healthy (disk full is not
    # disk error, as OceanBase)...
    (tmp_path / DISK_PROBE_FILE).unlink()
    os.symlink(DEV_FULL, tmp_path / DISK_PROBE_FILE)
    assert probe_data_disk(tmp_path) is None
    # ...while a real failure or the fault switch still is an error.
    (tmp_path / DISK_PROBE_FILE).unlink()
    os.symlink(tmp_path / "no-such-dir" / "x", tmp_path / DISK_PROBE_FILE)
    assert "probe I/O" in (probe_data_disk(tmp_path) or "")
    (tmp_path / FAULT_DATA_DISK_ERROR_FILE).write_text("x")
    assert "fault injected" in (probe_data_disk(tmp_path) or "")


def test_probe_rewrites_its_block_in_place(tmp_path: Path) -> None:
    """No truncation: once the file exists the probe needs no new room on the disk."""
    path = tmp_path / DISK_PROBE_FILE
    path.write_bytes(b"\0" * 8192)
    assert probe_data_disk(tmp_path) is None
    assert path.stat().st_size == 8192


def test_check_free_space_refuses_what_does_not_fit(tmp_path: Path) -> None:
    free = free_bytes(tmp_path)
    check_free_space(tmp_path, 0, "nothing")
    check_free_space(tmp_path / "not" / "yet", 1, "a byte")  # nearest existing parent
    with pytest.raises(ObError) as ei:
        check_free_space(tmp_path, free + (1 << 40), "the copy of tenant 1 ls 1")
    assert ei.value.name == "OB_SERVER_OUTOF_DISK_SPACE"
    assert "the copy of tenant 1 ls 1 needs" in ei.value.message


class _ScriptedCall:
    """A stand-in for grpc's stream call object (a library class): the chunks of a source."""

    def __init__(self, chunks: list[obrpc_pb2.DataChunk]) -> None:
        self.chunks = chunks
        self.cancelled = False

    async def read(self) -> object:
        return self.chunks.pop(0) if self.chunks else grpc.aio.EOF

    def cancel(self) -> None:
        self.cancelled = True


class _NoSlowdown:
    def copy_delay_s(self) -> float:
        return 0.0

    def copy_stalled(self) -> bool:
        return False


@needs_dev_full
def test_a_copy_that_runs_out_of_space_names_the_cause(tmp_path: Path) -> None:
    data = b"y" * 64
    call = _ScriptedCall(
        [obrpc_pb2.DataChunk(offset=0, data=data, total_size=64, checksum=zlib.crc32(data))]
    )
    tmp = tmp_path / ".data.copy.tmp"
    os.symlink(DEV_FULL, tmp)  # every byte written to it hits ENOSPC

    async def scenario() -> str:
        try:
            await receive_data_file(call, "src", tmp, Build(source="src"), 1.0, _NoSlowdown(), 64)
        except CopyFailed as e:
            return str(e)
        return ""

    reason = run(scenario())
    assert call.cancelled
    assert reason.startswith("OB_SERVER_OUTOF_DISK_SPACE: Server out of disk space"), reason
    assert str(tmp) in reason
    assert write_failed(tmp, PermissionError(errno.EACCES, "denied")).startswith("cannot write")
