"""What a data node reports about its resources (docs/design/leases.md).

:func:`collect_resource_info` does blocking I/O (psutil, the file system) and is meant to run
off the event loop, in a thread, so a slow or hung disk never delays a heartbeat: the
:class:`ResourceMonitor` runs it in a daemon thread every ``resource_refresh_interval`` and
keeps the last result, which every lease request carries. The data disk's health is
:mod:`observer_agent.disk`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import psutil

from obcommon.proto import obrpc_pb2
from observer_agent.background import describe_exception, in_daemon_thread
from observer_agent.settings import AgentSettings

#: How long a resource refresh may take before it is abandoned (the last values are kept).
DEFAULT_RESOURCE_TIMEOUT_US = 5_000_000

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


class ResourceMonitor:
    """The node's last ``ResourceInfo`` (:attr:`info`, empty until the first refresh).

    ``settings`` gives ``data_dir`` and the ``cpu_count`` / ``memory_limit`` /
    ``log_disk_size`` overrides; ``timeout_us`` (microseconds) bounds one refresh in a
    thread; ``log`` is the agent's logger.
    """

    def __init__(
        self,
        settings: AgentSettings,
        log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
        timeout_us: int = DEFAULT_RESOURCE_TIMEOUT_US,
    ) -> None:
        """Nothing is sampled until a refresh."""
        self.settings = settings
        self.data_dir = Path(settings.data_dir)
        self.timeout_us = timeout_us
        self.log = log
        self.info = obrpc_pb2.ResourceInfo()
        self._pending: asyncio.Future[obrpc_pb2.ResourceInfo] | None = None

    def _collect(self) -> obrpc_pb2.ResourceInfo:
        s = self.settings
        return collect_resource_info(
            self.data_dir, s.log_disk_size, cpu_count=s.cpu_count, memory_limit=s.memory_limit
        )

    def refresh(self) -> None:
        """Refresh :attr:`info` from psutil in the calling thread (raises ``OSError``);
        ``cpu_count`` / ``memory_limit`` / ``log_disk_size`` settings override capacities."""
        self.info = self._collect()

    async def refresh_async(self) -> bool:
        """Refresh :attr:`info` in a daemon thread, bounded by ``timeout_us``; on failure
        keep the last values. True when refreshed."""
        pending = self._pending
        if pending is not None and not pending.done():
            self.log.warning("previous resource refresh is still running; skipped")
            return False
        fut = in_daemon_thread(self._collect, "resource-refresh")
        self._pending = fut
        done, _ = await asyncio.wait({fut}, timeout=self.timeout_us / 1e6)
        if not done:
            self.log.warning("resource refresh did not finish in time; keeping the last values")
            return False
        try:
            self.info = fut.result()
        except Exception as e:
            self.log.warning("resource refresh failed: %s", describe_exception(e))
            return False
        return True
