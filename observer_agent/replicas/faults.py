"""Fault switches of the replica layer: files in DATA_DIR that tests and drills create to make
replication or replica migration misbehave on one agent (docs/design/migration.md).

- :data:`FAULT_REPLICATION_STOP_FILE` stops every follower (and copy in its log phase) of
  this agent from fetching;
- :data:`FAULT_REPLICATION_DELAY_FILE` holding an integer N makes followers apply only
  entries whose ``ts <= now - N ms``; both are checked at most once per follower poll
  (:meth:`FaultSwitches.replication`);
- :data:`FAULT_COPY_SLOW_FILE` holding an integer N makes copies on this agent sleep N ms
  after every chunk received (:meth:`FaultSwitches.copy_delay_s`; the file is read at most
  every :data:`FREEZE_POLL_S`, as :data:`FAULT_COPY_STALL_FILE`);
- :data:`FAULT_SERVE_DATA_ERROR_FILE` makes this agent answer every ``FetchData`` with an
  error chunk (:meth:`FaultSwitches.serve_data_error`), checked at every call;
- :data:`FAULT_APPLY_HOLD_FILE` holding an integer N makes every ``ApplyReplicas`` wait N ms
  before it is looked at (:meth:`FaultSwitches.apply_hold_s`: an RS killed while a
  recovery's call is in flight, whose call then arrives after a new RS took office).

The lag detector's switches, each while the file exists and with the
heartbeats going on: :data:`FAULT_APPLY_FREEZE_FILE` (RS commands are received but not
applied, :meth:`FaultSwitches.apply_frozen`), :data:`FAULT_LOG_FREEZE_FILE` (no replica on
this agent appends or fetches log: ``ReplicationFaults.frozen``) and
:data:`FAULT_COPY_STALL_FILE` (copies receive no more bytes, :meth:`FaultSwitches.copy_stalled`).
The slow-fsync switch is the disk probe's (:data:`observer_agent.disk.FAULT_FSYNC_SLOW_FILE`).

A malformed number is ignored (logged once per content).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: While this file exists in DATA_DIR, followers on this agent do not fetch (they fall behind).
FAULT_REPLICATION_STOP_FILE = "FAULT_REPLICATION_STOP"
#: This file in DATA_DIR holding an integer N makes followers apply only entries at least
#: N milliseconds old (by their ``ts``): a steady replication lag of about N ms.
FAULT_REPLICATION_DELAY_FILE = "FAULT_REPLICATION_DELAY_MS"

#: While this file exists in DATA_DIR holding an integer N, a copy (replica migration) on this
#: agent sleeps N ms after every data chunk it receives.
FAULT_COPY_SLOW_FILE = "FAULT_COPY_SLOW_MS"
#: While this file exists in DATA_DIR, ``FetchData`` served by this agent answers an error
#: chunk (``OB_ERR_SYS``), as a broken source would.
FAULT_SERVE_DATA_ERROR_FILE = "FAULT_SERVE_DATA_ERROR"
#: This file in DATA_DIR holding an integer N makes every ``ApplyReplicas`` wait N ms before
#: its epoch is checked.
FAULT_APPLY_HOLD_FILE = "FAULT_APPLY_HOLD_MS"
#: While this file exists in DATA_DIR, RS commands wait unapplied.
FAULT_APPLY_FREEZE_FILE = "FAULT_APPLY_FREEZE"
#: While this file exists in DATA_DIR, leaders on this agent append nothing and followers
#: fetch nothing: every replica's log end stands still.
FAULT_LOG_FREEZE_FILE = "FAULT_LOG_FREEZE"
#: While this file exists in DATA_DIR, copies on this agent receive no more bytes.
FAULT_COPY_STALL_FILE = "FAULT_COPY_STALL"
#: How often a frozen or stalled wait looks at its switch again, seconds.
FREEZE_POLL_S = 0.1


@dataclass
class ReplicationFaults:
    """The replication switches as last read: ``stop`` (followers do not fetch),
    ``delay_ms`` (0 = none, -1 = malformed), ``frozen`` (the log freeze: leaders do not
    append either; implies ``stop``) and when they were read (the event loop's monotonic
    time, seconds)."""

    stop: bool = False
    frozen: bool = False
    delay_ms: int = 0
    checked_at: float = float("-inf")


class FaultSwitches:
    """Reads the fault files of the agent whose data directory is ``data_dir``.

    ``poll_interval_s`` (seconds) is how long :meth:`replication` keeps the switches it read;
    ``log`` is the agent's logger (switches turning on and off are logged).
    """

    def __init__(
        self,
        data_dir: Path,
        poll_interval_s: float,
        log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Nothing is read until asked. ``monotonic`` (seconds) dates the copy switches' reads
        (:meth:`_copy_switches`; tests pass a fake)."""
        self._monotonic = monotonic
        self.data_dir = Path(data_dir)
        self.poll_interval_s = poll_interval_s
        self.log = log
        self._replication = ReplicationFaults()
        self._slow_copy_warned = ""
        # (monotonic seconds when to read again, copy delay s, copy stalled): _copy_switches.
        self._copy_read: tuple[float, float, bool] = (float("-inf"), 0.0, False)

    def replication(self) -> ReplicationFaults:
        """The replication switches, read again when the last read is older than
        ``poll_interval_s``. Must run on the event loop; never raises."""
        now = asyncio.get_running_loop().time()
        f = self._replication
        if now - f.checked_at < self.poll_interval_s:
            return f
        f.checked_at = now
        frozen = (self.data_dir / FAULT_LOG_FREEZE_FILE).exists()
        stop = frozen or (self.data_dir / FAULT_REPLICATION_STOP_FILE).exists()
        if frozen != f.frozen:
            self.log.warning(
                "fault %s: the log is %s", FAULT_LOG_FREEZE_FILE, "frozen" if frozen else "thawed"
            )
        f.frozen = frozen
        delay = 0
        delay_path = self.data_dir / FAULT_REPLICATION_DELAY_FILE
        with contextlib.suppress(FileNotFoundError):
            raw = delay_path.read_text(encoding="utf-8", errors="replace").strip()
            try:
                delay = max(0, int(raw))
            except ValueError:
                if f.delay_ms != -1:
                    self.log.warning("ignoring %s: %r is not an integer", delay_path, raw[:40])
                delay = -1  # remembered as "malformed" so the warning is not repeated
        if stop != f.stop:
            if stop:
                self.log.warning(
                    "fault injected: followers stop fetching (%s)", FAULT_REPLICATION_STOP_FILE
                )
            else:
                self.log.info("followers fetch again (%s removed)", FAULT_REPLICATION_STOP_FILE)
        if delay != f.delay_ms:
            if delay > 0:
                self.log.warning(
                    "fault injected: followers lag %d ms behind (%s)", delay, delay_path
                )
            elif f.delay_ms > 0:
                self.log.info("replication delay removed")
        f.stop, f.delay_ms = stop, delay
        return f

    def copy_delay_s(self) -> float:
        """Seconds :data:`FAULT_COPY_SLOW_FILE` asks to sleep after a chunk (0 when absent
        or malformed), as read at most :data:`FREEZE_POLL_S` ago (:meth:`_copy_switches`)."""
        return self._copy_switches()[0]

    def apply_hold_s(self) -> float:
        """Seconds :data:`FAULT_APPLY_HOLD_FILE` asks an ``ApplyReplicas`` to wait (0 when
        absent or malformed)."""
        return self._millis_file(FAULT_APPLY_HOLD_FILE)

    def apply_frozen(self) -> bool:
        """True while :data:`FAULT_APPLY_FREEZE_FILE` exists."""
        return (self.data_dir / FAULT_APPLY_FREEZE_FILE).exists()

    async def hold_apply(self) -> None:
        """Wait as :data:`FAULT_APPLY_HOLD_FILE` and :data:`FAULT_APPLY_FREEZE_FILE` ask (no
        wait without the files): an RS command held for the file's seconds, or received and
        not applied until thawed (the lag detector's fault)."""
        hold = self.apply_hold_s()
        if hold > 0:
            self.log.warning("ApplyReplicas held %.1fs by a fault file", hold)
            await asyncio.sleep(hold)
        if self.apply_frozen():
            self.log.warning("RS command frozen by a fault file")
            while self.apply_frozen():
                await asyncio.sleep(FREEZE_POLL_S)

    def copy_stalled(self) -> bool:
        """True while :data:`FAULT_COPY_STALL_FILE` exists (as seen at most
        :data:`FREEZE_POLL_S` ago, :meth:`_copy_switches`)."""
        return self._copy_switches()[1]

    def _copy_switches(self) -> tuple[float, bool]:
        """``(copy delay in seconds, copy stalled)``, read from the files again when the last
        read is older than :data:`FREEZE_POLL_S`. A copy asks at every piece it receives,
        three times per MiB, from its receiving thread: an ``open`` and a ``stat`` each time
        cost the destination 0.3 CPU s per 2 GiB copied (py-spy of ``make bench-empty``).
        Safe from any thread (the snapshot is one tuple, replaced whole)."""
        now = self._monotonic()
        due, delay, stalled = self._copy_read
        if now < due:
            return delay, stalled
        delay = self._millis_file(FAULT_COPY_SLOW_FILE)
        stalled = (self.data_dir / FAULT_COPY_STALL_FILE).exists()
        self._copy_read = (now + FREEZE_POLL_S, delay, stalled)
        return delay, stalled

    def _millis_file(self, name: str) -> float:
        path = self.data_dir / name
        try:
            raw = path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return 0.0
        try:
            return max(0, int(raw)) / 1000
        except ValueError:
            if self._slow_copy_warned != raw:
                self.log.warning("ignoring %s: %r is not an integer", path, raw[:40])
                self._slow_copy_warned = raw
            return 0.0

    def serve_data_error(self) -> bool:
        """True while :data:`FAULT_SERVE_DATA_ERROR_FILE` exists."""
        return (self.data_dir / FAULT_SERVE_DATA_ERROR_FILE).exists()
