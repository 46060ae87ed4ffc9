"""Scheduling paused while RECOVER LS / FORCE DELETE SERVER change member lists ("scheduling stops while it runs").

The balancer, the lost-replica checker, the LS reconciler and the replica rebuilder are
given a :class:`PausableGate` instead of the term: their rounds do nothing while a
:class:`SchedulingPause` is held, so no leader election, copy or member change of theirs
interleaves with a recovery's. The pause lives in memory: an RS that takes office starts
unpaused, and a recovery it resumes holds the pause again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class SchedulingPause:
    """A counted pause with the reasons of its holders. Thread-safe."""

    def __init__(self) -> None:
        """Not paused."""
        self._lock = threading.Lock()
        self._holders: list[str] = []

    @contextmanager
    def hold(self, reason: str) -> Iterator[None]:
        """Pause scheduling for the ``with`` block (nested and concurrent holds add up);
        released however the block ends."""
        with self._lock:
            self._holders.append(reason)
        try:
            yield
        finally:
            with self._lock:
                self._holders.remove(reason)

    def paused(self) -> str:
        """Why scheduling is paused ("" when it is not): the holders' reasons."""
        with self._lock:
            return "; ".join(self._holders)


class ActGate(Protocol):
    """The term's answer to "may a background round act now"
    (:meth:`rootservice.ha.term.Term.may_act`)."""

    def may_act(self) -> bool:
        """This RS leads, its lease safely held and its whitelist in service."""
        ...


class PausableGate:
    """``term.may_act()`` and not paused: what the scheduling tasks ask each round."""

    def __init__(self, term: ActGate, pause: SchedulingPause) -> None:
        """Ask ``term``, then ``pause``."""
        self.term = term
        self.pause = pause

    def may_act(self) -> bool:
        """The term lets this RS act and no recovery holds the pause."""
        return not self.pause.paused() and self.term.may_act()
