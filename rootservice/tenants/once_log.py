"""Warnings logged once per (subject, log stream) until the condition clears, so that a
background round repeating every ``ls_check_interval`` does not flood the log."""

from __future__ import annotations

import logging
import threading

from rootservice.tenants.vocabulary import LsKey

log = logging.getLogger(__name__)


class OnceLog:
    """A set of (subject, LS) pairs already warned about; shared by the leader coordinator
    and the reconciler (a failed switch and a failed member change of one LS are one
    story)."""

    def __init__(self) -> None:
        """Start with nothing warned about."""
        self._lock = threading.Lock()
        self._warned: set[tuple[str, LsKey]] = set()

    def warn(self, what: str, key: LsKey, msg: str) -> None:
        """Log ``msg`` as a warning unless ``(what, key)`` was already warned about."""
        with self._lock:
            if (what, key) in self._warned:
                return
            self._warned.add((what, key))
        log.warning("%s", msg)

    def cleared(self, what: str, key: LsKey) -> None:
        """The condition of ``(what, key)`` is over: warn again when it comes back."""
        with self._lock:
            self._warned.discard((what, key))
