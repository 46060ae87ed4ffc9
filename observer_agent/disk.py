"""The data disk's health (docs/design/leases.md: ``server_status`` bit DATA_DISK_ERROR).

:func:`probe_data_disk` does blocking I/O; :class:`DiskHealth` runs it in a daemon thread
every ``disk_probe_interval``, bounded in time (a hung disk counts as failed), and keeps the
result, which every lease request reports. Fault switch: :data:`FAULT_DATA_DISK_ERROR_FILE`.

A FULL disk is not a failing disk (as OceanBase: ``OB_SERVER_OUTOF_DISK_SPACE``
is returned to the write that does not fit, the server stays in service): the probe rewrites
its block in place, so it needs no new space once its file exists, and an ``ENOSPC`` /
``EDQUOT`` is reported as healthy. Writes that need space check it first
(:func:`check_free_space`) and turn an ``ENOSPC`` into ``OB_SERVER_OUTOF_DISK_SPACE``
(:func:`os_error_to_ob`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from pathlib import Path
from typing import Protocol

from obcommon.errors import ObError
from observer_agent.background import describe_exception, in_daemon_thread
from observer_agent.metrics import AgentMetrics

#: ``server_status`` bit of a lease request: the data disk failed its probe
#: (OceanBase's ``RSS_DATA_DISK_ERROR`` / ``server_report_status`` DATA_DISK_ERROR).
DATA_DISK_ERROR = 0x1

#: Fault-injection switch for tests and drills: while a file of this name exists in the
#: data directory, the disk probe reports a failure (``server_status`` bit 0x1) without
#: touching the disk. Remove it and the next probe recovers.
FAULT_DATA_DISK_ERROR_FILE = "FAULT_DATA_DISK_ERROR"

#: Fault switch of the lag detector's tests: this file in the data
#: directory holding an integer N makes the probe sleep N ms after its fsync, as a disk whose
#: fsync takes that long would; the latency every lease request reports grows with it.
FAULT_FSYNC_SLOW_FILE = "FAULT_FSYNC_SLOW_MS"

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


def is_out_of_space(e: BaseException) -> bool:
    """True when ``e`` is an ``OSError`` saying the file system is full (``ENOSPC``) or the
    quota is used up (``EDQUOT``)."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def os_error_to_ob(e: OSError, what: str) -> ObError:
    """The ``ObError`` of a failed write ``what`` (a phrase naming the file or the action):
    ``OB_SERVER_OUTOF_DISK_SPACE`` (4184) for a full disk (:func:`is_out_of_space`), else
    ``OB_ERR_SYS``; the detail is ``"<what>: <e>"``."""
    name = "OB_SERVER_OUTOF_DISK_SPACE" if is_out_of_space(e) else "OB_ERR_SYS"
    return ObError(name, detail=f"{what}: {e}")


def free_bytes(data_dir: Path) -> int:
    """Bytes an unprivileged writer may still allocate on the file system of ``data_dir``
    (``statvfs``: ``f_bavail * f_frsize``). Blocking; raises ``OSError``."""
    st = os.statvfs(data_dir)
    return st.f_bavail * st.f_frsize


def check_free_space(data_dir: Path, need: int, what: str) -> None:
    """Raise ``ObError(OB_SERVER_OUTOF_DISK_SPACE)`` when fewer than ``need`` bytes are free on
    the file system of ``data_dir`` (or its nearest existing parent) for ``what`` (a phrase
    for the message). OceanBase checks the same before a migration writes anything
    (``check_space_full(required_size)`` in the storage HA code): refusing up front leaves no
    partial files and names the cause. Blocking; a failing ``statvfs`` is not a refusal (the
    write itself will tell)."""
    path = Path(data_dir)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        free = free_bytes(path)
    except OSError:
        return
    if free < need:
        raise ObError(
            "OB_SERVER_OUTOF_DISK_SPACE",
            detail=f"{what} needs {need} bytes, {free} free on the data disk {data_dir}",
        )


def probe_data_disk(data_dir: Path) -> str | None:
    """One data-disk health probe (blocking; run it in a thread with a timeout).

    Returns None when healthy, else a one-line reason. The probe writes a 4 KiB random block
    at the start of ``data_dir/.disk_probe`` (in place: the file is not truncated, so a full
    disk still has room for it), fsyncs it, reads it back and compares. A full disk
    (``ENOSPC`` / ``EDQUOT``) is healthy: disk full is not disk error. The
    fault-injection file ``data_dir/FAULT_DATA_DISK_ERROR`` makes it fail without I/O. Never
    raises.
    """
    data_dir = Path(data_dir)
    if (data_dir / FAULT_DATA_DISK_ERROR_FILE).exists():
        return f"fault injected ({data_dir / FAULT_DATA_DISK_ERROR_FILE} exists)"
    path = data_dir / DISK_PROBE_FILE
    block = os.urandom(DISK_PROBE_BLOCK)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.pwrite(fd, block, 0) != len(block):
                return f"probe write on {path} was short"
            os.fsync(fd)
            _slow_fsync_fault(data_dir)
            back = os.pread(fd, DISK_PROBE_BLOCK, 0)
        finally:
            os.close(fd)
    except OSError as e:
        if is_out_of_space(e):
            return None
        return f"probe I/O on {path} failed: {e}"
    if back != block:
        return f"probe block read back from {path} differs from what was written"
    return None


def _slow_fsync_fault(data_dir: Path) -> None:
    """Sleep as :data:`FAULT_FSYNC_SLOW_FILE` asks (blocking; no file, no sleep)."""
    try:
        ms = int((data_dir / FAULT_FSYNC_SLOW_FILE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return
    time.sleep(max(0, ms) / 1000)


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
        # The lag detector's figure: the last finished probe's duration
        # and when the one running started (time.monotonic seconds; None: none running).
        self.last_latency_us = 0
        self._running_since: float | None = None

    @property
    def probe_latency_us(self) -> int:
        """The probe latency a lease request reports, microseconds: the longer of the last
        finished probe and the one still running (a hung fsync shows at once, not when it
        ends; PD's slow score and CockroachDB's disk stall detection both time the write in
        flight)."""
        since = self._running_since
        running = int((time.monotonic() - since) * 1e6) if since is not None else 0
        return max(self.last_latency_us, running)

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
        self.last_latency_us = int((time.monotonic() - started) * 1e6)
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
        self._running_since = started
        fut.add_done_callback(lambda _: self._finished(started))
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

    def _finished(self, started: float) -> None:
        """The probe started at ``started`` (time.monotonic) ended (on the loop's thread)."""
        self.last_latency_us = int((time.monotonic() - started) * 1e6)
        if self._running_since == started:
            self._running_since = None
