"""What a partition scenario saw, and the checks run over it after the heal.

A :class:`History` holds, with wall-clock microseconds since the epoch:

- **status samples**: every server's ``__all_server.status`` as the RS leader showed it,
  polled by :class:`StatusRecorder` from the test's controller (which reaches the RS through
  every fault);
- **statements**: each one the scenario sent, when, and its answer (OK, an OceanBase error
  name, or ``"HANG"`` when no answer came by its deadline);
- **faults**: when each server's link to the RS leader was cut (any fault that drops its
  packets one way or the other: a request/response protocol over TCP needs both directions,
  so a one-way cut is a cut) and when it was healed.

:func:`check` returns what is wrong, as sentences (empty: nothing):

- a server shown INACTIVE at a sample taken while its link to the RS was whole and had been
  whole for the last ``lease_time`` plus one check (a false expiry: the agent could reach the
  leader);
- a server cut from the RS for longer than ``lease_time`` plus one check and ``slack_us``
  that no sample during the cut shows INACTIVE (a missed expiry);
- a server not ACTIVE in the last sample (after the heal and the scenario's wait);
- a statement answered neither OK nor with an OceanBase error (``HANG``, or an answer with
  no error name);
- a statement answered OK whose effect :attr:`Statement.in_effect` says is missing at the
  end (an acknowledged change lost).

The checker is pure: tests/unit/support/test_history.py feeds it histories with each of these
planted and sees each reported.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Statement:
    """One statement sent during a scenario: ``sent_us``, ``text``, ``answer`` (``"OK"``,
    the OceanBase error name, ``"HANG"``) and, for a change, ``in_effect``: a check run
    after the heal that says whether its effect is there."""

    sent_us: int
    text: str
    answer: str
    in_effect: Callable[[], bool] | None = None


@dataclass
class History:
    """Samples ``(at_us, {server: status})``, statements, and per server its cut intervals
    ``[(from_us, to_us or None)]`` from the RS leader."""

    samples: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    cuts: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)

    def cut(self, server: str, at_us: int) -> None:
        """``server``'s link to the RS was cut at ``at_us``."""
        self.cuts.setdefault(server, []).append((at_us, None))

    def healed(self, at_us: int) -> None:
        """Every open cut ended at ``at_us``."""
        for server, spans in self.cuts.items():
            self.cuts[server] = [(a, b if b is not None else at_us) for a, b in spans]


def _whole_since(spans: list[tuple[int, int | None]], t: int, window_us: int) -> bool:
    """True when no cut of ``spans`` overlaps ``[t - window_us, t]``."""
    lo = t - window_us
    return all(not (a <= t and (b is None or b >= lo)) for a, b in spans)


def check(h: History, *, lease_us: int, check_us: int, slack_us: int) -> list[str]:
    """What is wrong in ``h`` (see the module doc); ``lease_us`` is the RS's ``lease_time``,
    ``check_us`` its checker period, ``slack_us`` what the controller's polling and a loaded
    machine may add to a missed-expiry bound (a false expiry gets no slack: it is wrong
    whenever it happens)."""
    problems: list[str] = []
    window = lease_us + check_us
    for at, statuses in h.samples:
        for server, status in sorted(statuses.items()):
            if status == "INACTIVE" and _whole_since(h.cuts.get(server, []), at, window):
                problems.append(
                    f"{server} shown INACTIVE at {at} though its link to the RS was whole "
                    f"since {at - window} (a false expiry)"
                )
    for server, spans in sorted(h.cuts.items()):
        for a, b in spans:
            end = b if b is not None else (h.samples[-1][0] if h.samples else a)
            if end - a <= window + slack_us:
                continue
            seen = any(st.get(server) == "INACTIVE" for at, st in h.samples if a <= at <= end)
            if not seen:
                problems.append(
                    f"{server} cut from the RS from {a} to {end} ({(end - a) / 1e6:.1f} s) "
                    "and never shown INACTIVE (a missed expiry)"
                )
    if h.samples:
        last_at, last = h.samples[-1]
        for server, status in sorted(last.items()):
            if status != "ACTIVE":
                problems.append(f"{server} is {status} at the end ({last_at})")
    for s in h.statements:
        if s.answer == "HANG" or not s.answer:
            problems.append(f"{s.text!r} sent at {s.sent_us}: no clear answer ({s.answer!r})")
        elif s.answer == "OK" and s.in_effect is not None and not s.in_effect():
            problems.append(f"{s.text!r} answered OK at {s.sent_us} but is not in effect")
    return problems


class StatusRecorder:
    """Polls ``read()`` (``{server: status}``; an exception is a missed sample) every
    ``interval_s`` on a thread into ``history.samples`` until :meth:`stop`."""

    def __init__(
        self, history: History, read: Callable[[], dict[str, str]], interval_s: float = 0.2
    ) -> None:
        self.history = history
        self.read = read
        self.interval_s = interval_s
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-recorder", daemon=True)

    def start(self) -> StatusRecorder:
        """Start polling; returns self."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                statuses = self.read()
                self.history.samples.append((time.time_ns() // 1000, statuses))
            except Exception:  # the RS may be busy: a missed sample, counted
                self.errors += 1
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        """Stop polling and wait for the thread (bounded: one read's timeout)."""
        self._stop.set()
        self._thread.join(timeout=30)
