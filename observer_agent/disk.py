"""The data disk's health (SPEC.md section 5: ``server_status`` bit DATA_DISK_ERROR).

:func:`probe_data_disk` does blocking I/O; :class:`DiskHealth` runs it in a daemon thread
every ``disk_probe_interval``, bounded in time (a hung disk counts as failed), and keeps the
result, which every lease request reports. Fault switch: :data:`FAULT_DATA_DISK_ERROR_FILE`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Protocol

from observer_agent.background import describe_exception, in_daemon_thread
from observer_agent.metrics import AgentMetrics

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

#: How long a disk probe may take before the disk counts as hung (failed).
DEFAULT_DISK_PROBE_TIMEOUT_US = 5_000_000


class DiskProbe(Protocol):
    """A blocking probe of the data directory: None when healthy, else a one-line reason
    (:func:`probe_data_disk` is the real one; tests pass slow or failing ones)."""

    def __call__(self, data_dir: Path, /) -> str | None:
        """Probe ``data_dir``; may block, may raise (counted as a failure)."""
        ...


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


class DiskHealth:
    """The data disk's last probe result: :attr:`disk_error` (reason, or None = healthy).

    ``probe`` is the blocking probe of ``data_dir``; ``timeout_us`` (microseconds) bounds one
    probe in a thread; ``log`` is the agent's logger (transitions are logged).
    """

    def __init__(
        self,
        data_dir: Path,
        log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
        probe: DiskProbe = probe_data_disk,
        timeout_us: int = DEFAULT_DISK_PROBE_TIMEOUT_US,
        metrics: AgentMetrics | None = None,
    ) -> None:
        """Healthy until a probe says otherwise; each probe's duration is observed in
        ``metrics.disk_probe_seconds`` (default: a registry of its own)."""
        self.metrics = metrics or AgentMetrics()
        self.data_dir = Path(data_dir)
        self.log = log
        self._probe = probe
        self.timeout_us = timeout_us
        self.disk_error: str | None = None
        self._pending: asyncio.Future[str | None] | None = None

    @property
    def server_status(self) -> int:
        """``server_status`` bits of the lease request: ``DATA_DISK_ERROR`` (0x1) while the
        disk probe fails."""
        return DATA_DISK_ERROR if self.disk_error is not None else 0

    def set_status(self, reason: str | None) -> None:
        """Record a probe result (None = healthy) and log transitions."""
        if reason is not None and self.disk_error is None:
            self.log.warning("data disk error: %s; reporting DATA_DISK_ERROR", reason)
        elif reason is None and self.disk_error is not None:
            self.log.info("data disk recovered (was: %s)", self.disk_error)
        self.disk_error = reason

    def probe_now(self) -> bool:
        """Run one disk probe in the calling thread; True when healthy (tests, start-up)."""
        started = time.monotonic()
        try:
            reason = self._probe(self.data_dir)
        except Exception as e:
            reason = f"disk probe raised {describe_exception(e)}"
        self.metrics.disk_probe_seconds.observe(time.monotonic() - started)
        self.set_status(reason)
        return reason is None

    async def probe_async(self) -> bool:
        """One disk probe in a daemon thread; a probe slower than ``timeout_us``, or one
        still stuck from last time, counts as a failure. True when healthy."""
        timeout_s = self.timeout_us / 1e6
        pending = self._pending
        if pending is not None and not pending.done():
            self.set_status(f"previous disk probe still running after {timeout_s:g}s (hung disk?)")
            return False
        started = time.monotonic()
        fut = in_daemon_thread(lambda: self._probe(self.data_dir), "disk-probe")
        self._pending = fut
        done, _ = await asyncio.wait({fut}, timeout=timeout_s)
        self.metrics.disk_probe_seconds.observe(time.monotonic() - started)
        if not done:
            self.set_status(f"disk probe did not finish within {timeout_s:g}s (hung disk?)")
            return False
        try:
            reason = fut.result()
        except Exception as e:
            reason = f"disk probe raised {describe_exception(e)}"
        self.set_status(reason)
        return reason is None
