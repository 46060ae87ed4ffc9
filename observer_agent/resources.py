"""What a data node reports about itself: resources and data-disk health (SPEC.md section 5).

Both functions here do blocking I/O (psutil, the file system) and are meant to run off the
event loop, in a thread, so a slow or hung disk never delays a heartbeat. The agent calls
them periodically (``resource_refresh_interval``, ``disk_probe_interval``) and puts the last
result in every lease request.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from obcommon.proto import obrpc_pb2

#: ``server_status`` bit of a lease request: the data disk failed its probe
#: (OceanBase's ``RSS_DATA_DISK_ERROR`` / ``server_report_status`` DATA_DISK_ERROR).
DATA_DISK_ERROR = 0x1

#: Fault-injection switch for tests and drills: while a file of this name exists in the
#: data directory, the disk probe reports a failure (``server_status`` bit 0x1) without
#: touching the disk. Remove it and the next probe recovers.
FAULT_DATA_DISK_ERROR_FILE = "FAULT_DATA_DISK_ERROR"

#: The file the probe writes, fsyncs and reads back.
DISK_PROBE_FILE = ".disk_probe"
DISK_PROBE_BLOCK = 4096

#: Share of the data disk reported as log disk when ``--log-disk-size`` is not given.
DEFAULT_LOG_DISK_PERCENT = 30

CLOG_DIR = "clog"


def dir_bytes_used(path: Path) -> int:
    """Sum of the sizes in bytes of the regular files under ``path`` (0 if it is absent).

    Files that vanish during the walk are skipped: the log may be recycled under our feet.
    """
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_size
    return total


def collect_resource_info(
    data_dir: Path,
    log_disk_size: int | None,
    *,
    cpu_count: float | None = None,
    memory_limit: int | None = None,
) -> obrpc_pb2.ResourceInfo:
    """The node's ``ObServerResourceInfo`` from psutil (blocking; run it in a thread).

    ``cpu_total`` = ``cpu_count`` or the logical CPUs; ``mem_total`` = ``memory_limit`` or
    the total memory, bytes, and ``mem_in_use`` = total minus available memory, capped at
    ``mem_total``; ``data_disk_total`` / ``data_disk_in_use`` = the file system of
    ``data_dir``, bytes; ``log_disk_total`` = ``log_disk_size`` or 30 % of the data disk;
    ``log_disk_in_use`` = bytes under ``data_dir/clog`` (the replicas' logs live there). The
    overrides exist because the RS places units by these capacities, and tests need small,
    known ones. The ``*_assigned`` fields are 0: no unit is placed by the agent. Raises
    ``OSError`` when ``data_dir`` is unusable.
    """
    vm = psutil.virtual_memory()
    disk = psutil.disk_usage(str(data_dir))
    log_total = log_disk_size if log_disk_size else disk.total * DEFAULT_LOG_DISK_PERCENT // 100
    mem_total = memory_limit if memory_limit else vm.total
    return obrpc_pb2.ResourceInfo(
        cpu_total=float(cpu_count) if cpu_count else float(psutil.cpu_count() or 1),
        cpu_assigned=0.0,
        mem_total=mem_total,
        mem_assigned=0,
        mem_in_use=min(mem_total, max(0, vm.total - vm.available)),
        log_disk_total=log_total,
        log_disk_assigned=0,
        log_disk_in_use=dir_bytes_used(Path(data_dir) / CLOG_DIR),
        data_disk_total=disk.total,
        data_disk_assigned=0,
        data_disk_in_use=disk.used,
    )


def probe_data_disk(data_dir: Path) -> str | None:
    """One data-disk health probe (blocking; run it in a thread with a timeout).

    Returns None when healthy, else a one-line reason. The probe writes a 4 KiB random block
    to ``data_dir/.disk_probe``, fsyncs it, reads it back and compares. The fault-injection
    file ``data_dir/FAULT_DATA_DISK_ERROR`` makes it fail without I/O. Never raises.
    """
    data_dir = Path(data_dir)
    if (data_dir / FAULT_DATA_DISK_ERROR_FILE).exists():
        return f"fault injected ({data_dir / FAULT_DATA_DISK_ERROR_FILE} exists)"
    path = data_dir / DISK_PROBE_FILE
    block = os.urandom(DISK_PROBE_BLOCK)
    try:
        with open(path, "wb") as f:
            f.write(block)
            f.flush()
            os.fsync(f.fileno())
        with open(path, "rb") as f:
            back = f.read(DISK_PROBE_BLOCK + 1)
    except OSError as e:
        return f"probe I/O on {path} failed: {e}"
    if back != block:
        return f"probe block read back from {path} differs from what was written"
    return None
