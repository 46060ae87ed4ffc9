"""Fault switches of the replica layer: files in DATA_DIR that tests and drills create to make
replication or replica migration misbehave on one agent (SPEC.md section 9).

- :data:`FAULT_REPLICATION_STOP_FILE` stops every follower (and copy in its log phase) of
  this agent from fetching;
- :data:`FAULT_REPLICATION_DELAY_FILE` holding an integer N makes followers apply only
  entries whose ``ts <= now - N ms``; both are checked at most once per follower poll
  (:meth:`FaultSwitches.replication`);
- :data:`FAULT_COPY_SLOW_FILE` holding an integer N makes copies on this agent sleep N ms
  after every chunk received (:meth:`FaultSwitches.copy_delay_s`);
- :data:`FAULT_SERVE_DATA_ERROR_FILE` makes this agent answer every ``FetchData`` with an
  error chunk (:meth:`FaultSwitches.serve_data_error`); both checked at every chunk / call;
- :data:`FAULT_APPLY_HOLD_FILE` holding an integer N makes every ``ApplyReplicas`` wait N ms
  before it is looked at (:meth:`FaultSwitches.apply_hold_s`; issue 24: an RS killed while a
  recovery's call is in flight, whose call then arrives after a new RS took office).

A malformed number is ignored (logged once per content).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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


@dataclass
class ReplicationFaults:
    """The replication switches as last read: ``stop`` (followers do not fetch),
    ``delay_ms`` (0 = none, -1 = malformed) and when they were read (the event loop's
    monotonic time, seconds)."""

    stop: bool = False
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
    ) -> None:
        """Nothing is read until asked."""
        self.data_dir = Path(data_dir)
        self.poll_interval_s = poll_interval_s
        self.log = log
        self._replication = ReplicationFaults()
        self._slow_copy_warned = ""

    def replication(self) -> ReplicationFaults:
        """The replication switches, read again when the last read is older than
        ``poll_interval_s``. Must run on the event loop; never raises."""
        now = asyncio.get_running_loop().time()
        f = self._replication
        if now - f.checked_at < self.poll_interval_s:
            return f
        f.checked_at = now
        stop = (self.data_dir / FAULT_REPLICATION_STOP_FILE).exists()
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
        or malformed)."""
        return self._millis_file(FAULT_COPY_SLOW_FILE)

    def apply_hold_s(self) -> float:
        """Seconds :data:`FAULT_APPLY_HOLD_FILE` asks an ``ApplyReplicas`` to wait (0 when
        absent or malformed)."""
        return self._millis_file(FAULT_APPLY_HOLD_FILE)

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
