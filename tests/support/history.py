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
  end (an acknowledged change lost);
- the fencing checks, over the terms root services took (:attr:`History.took`: who took
  which fencing token ``(epoch, incarnation)`` when) and the tokens agents obeyed
  (:attr:`History.obeyed`), both read from the processes' logs by :func:`read_logs`: a token
  taken twice or an epoch taken with two incarnations (a doubled fencing token), two root
  services acting at once (a term lasts from its take-office until that RS steps down, is
  killed - :meth:`History.ended` - or takes another term), an agent that obeyed two
  incarnations of one epoch or a lower epoch after a higher one, and an agent that obeyed a
  token no root service took;
- the log stream checks (:func:`check_ls_terms`), over the leaders seen (:attr:`History.leaders`:
  ``__all_ls_meta_table``'s LEADER rows with their ``proposal_id``, polled by
  :class:`LeaderRecorder`) and the members' logs read after the heal
  (:func:`read_replica_logs`: every ``(index, term, ts)`` of each replica's ``clog`` file):
  two servers leading one log stream in one term; a log whose terms go down along its
  indexes; two logs that hold different entries at one index (after the heal every member
  must have dropped a divergent tail); and an entry of term ``t`` appended after a term
  above ``t`` began (its ``ts`` later than the first sign of that term: a LEADER row or an
  entry of it): a deposed leader's write that a member kept.

The checker is pure: tests/unit/support/test_history.py feeds it histories with each of these
planted and sees each reported.
"""

from __future__ import annotations

import datetime as dt
import re
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self


@dataclass
class Statement:
    """One statement sent during a scenario: ``sent_us``, ``text``, ``answer`` (``"OK"``,
    the OceanBase error name, ``"HANG"``) and, for a change, ``in_effect``: a check run
    after the heal that says whether its effect is there."""

    sent_us: int
    text: str
    answer: str
    in_effect: Callable[[], bool] | None = None


@dataclass(frozen=True)
class Took:
    """Root service ``rs`` took office (or raised its epoch) with the fencing token
    ``(epoch, incarnation)`` at ``at_us``."""

    at_us: int
    rs: str
    epoch: int
    incarnation: int


@dataclass(frozen=True)
class Obeyed:
    """Agent ``agent`` obeyed the root service of ``(epoch, incarnation)`` from ``at_us``."""

    at_us: int
    agent: str
    epoch: int
    incarnation: int


@dataclass(frozen=True)
class LeaderSeen:
    """``server`` was shown leading log stream ``ls`` (``"tenant_ls"``) in ``term`` at
    ``at_us``."""

    at_us: int
    ls: str
    term: int
    server: str


#: One replica log entry, ``(index, term, ts)`` (observer_agent/replicas/log.py).
Entry = tuple[int, int, int]


@dataclass
class History:
    """Samples ``(at_us, {server: status})``, statements, per server its cut intervals
    ``[(from_us, to_us or None)]`` from the RS leader, the terms taken (:class:`Took`), the
    tokens obeyed (:class:`Obeyed`), when each RS's term ended (``(at_us, rs)``: it
    stepped down or was killed), the log stream leaders seen (:class:`LeaderSeen`) and the
    members' logs at the end (``{(server, ls): [entry, ...]}`` by index)."""

    samples: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    cuts: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)
    took: list[Took] = field(default_factory=list)
    obeyed: list[Obeyed] = field(default_factory=list)
    ends: list[tuple[int, str]] = field(default_factory=list)
    leaders: list[LeaderSeen] = field(default_factory=list)
    logs: dict[tuple[str, str], list[Entry]] = field(default_factory=dict)

    def ended(self, rs: str, at_us: int) -> None:
        """``rs`` stopped acting at ``at_us`` (killed: it logs no step-down)."""
        self.ends.append((at_us, rs))

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
        if s.answer.startswith("HANG") or not s.answer:
            problems.append(f"{s.text!r} sent at {s.sent_us}: no clear answer ({s.answer!r})")
        elif s.answer == "OK" and s.in_effect is not None and not s.in_effect():
            problems.append(f"{s.text!r} answered OK at {s.sent_us} but is not in effect")
    return problems + check_fencing(h) + check_ls_terms(h)


def _tok(epoch: int, incarnation: int) -> str:
    return f"epoch {epoch} (incarnation {incarnation:x})"


def check_fencing(h: History) -> list[str]:
    """The fencing checks of the module doc over ``h.took``, ``h.obeyed`` and ``h.ends``."""
    problems: list[str] = []
    by_epoch: dict[int, list[Took]] = {}
    for t in sorted(h.took, key=lambda t: t.at_us):
        by_epoch.setdefault(t.epoch, []).append(t)
    for epoch, takes in sorted(by_epoch.items()):
        if len(takes) > 1:
            who = ", ".join(f"{t.rs} {_tok(t.epoch, t.incarnation)} at {t.at_us}" for t in takes)
            problems.append(
                f"epoch {epoch} taken {len(takes)} times: {who} (a doubled fencing token)"
            )
    # Each term, from its take-office to its RS's next end or take.
    terms: list[tuple[int, int | None, Took]] = []
    for t in h.took:
        later = [a for a, rs in h.ends if rs == t.rs and a >= t.at_us]
        later += [o.at_us for o in h.took if o.rs == t.rs and o.at_us > t.at_us]
        terms.append((t.at_us, min(later) if later else None, t))
    terms.sort(key=lambda x: x[0])
    for i, (a1, b1, t1) in enumerate(terms):
        for a2, b2, t2 in terms[i + 1 :]:
            if t1.rs != t2.rs and (b1 is None or a2 < b1) and (b2 is None or a1 < b2):
                problems.append(
                    f"{t1.rs} ({_tok(t1.epoch, t1.incarnation)}) and {t2.rs} "
                    f"({_tok(t2.epoch, t2.incarnation)}) both acted from {a2} to "
                    f"{b1 if b1 is not None else 'the end'} (two root services at once)"
                )
    taken = {(t.epoch, t.incarnation) for t in h.took}
    for agent in sorted({o.agent for o in h.obeyed}):
        seen: dict[int, int] = {}
        top = 0
        for o in sorted((o for o in h.obeyed if o.agent == agent), key=lambda o: o.at_us):
            here = _tok(o.epoch, o.incarnation)
            if o.epoch in seen and seen[o.epoch] != o.incarnation:
                problems.append(
                    f"{agent} obeyed {here} at {o.at_us} after "
                    f"{_tok(o.epoch, seen[o.epoch])}: two root services with one epoch"
                )
            elif o.epoch < top:
                problems.append(f"{agent} obeyed {here} at {o.at_us} after epoch {top}")
            seen.setdefault(o.epoch, o.incarnation)
            top = max(top, o.epoch)
            if taken and (o.epoch, o.incarnation) not in taken:
                problems.append(f"{agent} obeyed {here} at {o.at_us}, a token no RS took")
    return problems


def check_ls_terms(h: History) -> list[str]:
    """The log stream checks of the module doc over ``h.leaders`` and ``h.logs``."""
    problems: list[str] = []
    led: dict[tuple[str, int], dict[str, int]] = {}
    began: dict[tuple[str, int], int] = {}
    for s in sorted(h.leaders, key=lambda s: s.at_us):
        led.setdefault((s.ls, s.term), {}).setdefault(s.server, s.at_us)
        began.setdefault((s.ls, s.term), s.at_us)
    for (ls, term), who in sorted(led.items()):
        if len(who) > 1:
            names = ", ".join(f"{srv} (seen at {at})" for srv, at in sorted(who.items()))
            problems.append(f"LS {ls} term {term} led by {len(who)} servers: {names}")
    for (_, ls), entries in h.logs.items():
        for _, term, ts in entries:
            k = (ls, term)
            began[k] = min(began.get(k, ts), ts)
    by_index: dict[tuple[str, int], dict[Entry, str]] = {}
    for (server, ls), entries in sorted(h.logs.items()):
        prev: Entry | None = None
        for e in entries:
            if prev is not None and e[1] < prev[1]:
                problems.append(
                    f"{server} LS {ls}: entry {e[0]} has term {e[1]} after term {prev[1]} "
                    f"at entry {prev[0]} (terms go down along the log)"
                )
            prev = e
            by_index.setdefault((ls, e[0]), {}).setdefault(e, server)
        problems += _deposed_entries(server, ls, entries, began)
    for (ls, index), variants in sorted(by_index.items()):
        if len(variants) > 1:
            what = "; ".join(
                f"{srv} has (term {e[1]}, ts {e[2]})" for e, srv in sorted(variants.items())
            )
            problems.append(f"LS {ls} entry {index} differs between members: {what}")
    return problems


def _deposed_entries(
    server: str, ls: str, entries: list[Entry], began: Mapping[tuple[str, int], int]
) -> list[str]:
    # The earliest start of any term above t, for each term t of this log stream.
    starts = sorted((term, at) for (l2, term), at in began.items() if l2 == ls)
    out: list[str] = []
    for index, term, ts in entries:
        later = [(t2, at) for t2, at in starts if t2 > term and at < ts]
        if later:
            t2, at = min(later, key=lambda x: x[1])
            out.append(
                f"{server} LS {ls}: entry {index} of term {term} written at {ts}, after term "
                f"{t2} began at {at} (a deposed leader's entry kept)"
            )
            break  # the first one says it; the rest of that tail follows from it
    return out


_RECORD = struct.Struct("<qqq")


def read_replica_log(path: Path) -> list[Entry]:
    """The entries of one replica's log file (observer_agent/replicas/log.py: a header
    record, then ``(index, term, ts)`` records of 24 bytes); a torn last record (the agent
    is appending) is left out. Raises ``OSError``."""
    raw = path.read_bytes()
    n = len(raw) // _RECORD.size
    return [_RECORD.unpack_from(raw, i * _RECORD.size) for i in range(1, n)]


def read_replica_logs(h: History, data_dirs: Mapping[str, Path]) -> None:
    """Add to ``h.logs`` every replica log under each server's data directory
    (``{server: data dir}``; ``clog/<tenant>_<ls>/log``)."""
    for server, d in data_dirs.items():
        for path in sorted((d / "clog").glob("*/log")):
            h.logs[(server, path.parent.name)] = read_replica_log(path)


_STAMP = r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})Z .*?"
_TOKEN = r"epoch (\d+) \(incarnation ([0-9a-f]+)\)"
_WON = re.compile(_STAMP + r"won the RS lease with " + _TOKEN, re.M)
_RAISED = re.compile(_STAMP + r"raised the epoch from .*? to " + _TOKEN, re.M)
_STEPPED = re.compile(_STAMP + r"stepping down from epoch (\d+)", re.M)
_OBEYING = re.compile(_STAMP + r"obeying the root service of " + _TOKEN, re.M)


def _us(stamp: str) -> int:
    t = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=dt.UTC)
    return int(t.timestamp()) * 1_000_000 + t.microsecond


def read_logs(h: History, rs_logs: Mapping[str, str], agent_logs: Mapping[str, str]) -> None:
    """Add to ``h`` what the text logs say (``{name: log text}``, lines stamped in UTC as
    obcommon/logs.py writes them): each RS's take-offices (``won the RS lease with <token>``,
    ``raised the epoch from <token> to <token>``) and step-downs (``stepping down from epoch
    N``), each agent's ``obeying the root service of <token>``."""
    for rs, text in rs_logs.items():
        for rx in (_WON, _RAISED):
            for m in rx.finditer(text):
                h.took.append(Took(_us(m[1]), rs, int(m[2]), int(m[3], 16)))
        h.ends += [(_us(m[1]), rs) for m in _STEPPED.finditer(text)]
    for agent, text in agent_logs.items():
        for m in _OBEYING.finditer(text):
            h.obeyed.append(Obeyed(_us(m[1]), agent, int(m[2]), int(m[3], 16)))


class _Poller:
    """Calls :meth:`_poll` every ``interval_s`` on a thread until :meth:`stop`; an exception
    is a missed sample, counted in ``errors`` (the database or the RS may be cut off from
    the controller)."""

    name = "poller"

    def __init__(self, history: History, interval_s: float) -> None:
        self.history = history
        self.interval_s = interval_s
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> Self:
        """Start polling; returns self."""
        self._thread.start()
        return self

    def _poll(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll()
            except Exception:  # a missed sample, counted
                self.errors += 1
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        """Stop polling and wait for the thread (bounded: one read's timeout)."""
        self._stop.set()
        self._thread.join(timeout=30)


class StatusRecorder(_Poller):
    """Polls ``read()`` (``{server: status}``) every ``interval_s`` into
    ``history.samples`` until :meth:`stop`."""

    name = "status-recorder"

    def __init__(
        self, history: History, read: Callable[[], dict[str, str]], interval_s: float = 0.2
    ) -> None:
        super().__init__(history, interval_s)
        self.read = read

    def _poll(self) -> None:
        statuses = self.read()
        self.history.samples.append((time.time_ns() // 1000, statuses))


class LeaderRecorder(_Poller):
    """Polls ``read()`` (the leaders shown now: ``(ls, term, server)`` triples) every
    ``interval_s`` into ``history.leaders`` until :meth:`stop`."""

    name = "leader-recorder"

    def __init__(
        self,
        history: History,
        read: Callable[[], Iterable[tuple[str, int, str]]],
        interval_s: float = 0.2,
    ) -> None:
        super().__init__(history, interval_s)
        self.read = read

    def _poll(self) -> None:
        rows = list(self.read())
        at = time.time_ns() // 1000
        self.history.leaders += [LeaderSeen(at, ls, term, srv) for ls, term, srv in rows]
