"""The lag detector (task ``lag_detector``): agents that heartbeat while doing
nothing.

Each round judges, by :mod:`rootservice.servers.lag_policy`, what the agents' heartbeats
report: the oldest RS command each server has not applied (the
:class:`rootservice.servers.command_ledger.CommandLedger` the agent client numbers them in),
its disk-probe latency, each copy's ``bytes_copied`` and each follower's log end against its
leader's. The actions, in order, for a server that becomes LAGGING:

1. an event ``lagging`` (module ``server``) with the reason and, in ``extra_info``, the
   agent's thread and task stacks from ``ObserverService.DumpStacks`` (Elasticsearch's
   ``LagDetector`` fetches the lagging node's hot threads before removing it);
2. it is SUSPECT for placement at once (``ServerStatus.is_suspect``: no new leaders, no copies,
   :mod:`rootservice.tenants.host_health`), and ``__all_server.lagging_time`` is written;
3. its leaders are moved off (:class:`rootservice.servers.admin.LeaderMover`, in the
   background, as STOP SERVER does; PD's evict-slow-store scheduler);
4. at its third timeout (:data:`rootservice.servers.lag_policy.EXPIRE_AFTER`) its heartbeats
   stop renewing its lease (event ``lag_expire``): the lease checker expires it as a silent
   server, with the permanent-offline clock and SUSPECT on return.

A copy that makes no progress for twice ``agent_lag_timeout`` gets an event ``copy_stalled``
and is handed to :meth:`rootservice.balancer.copy_replan.CopyReplan.stalled`: the first time
it is sent again from another healthy member (a stalled source); stalled again after that, or
with no other member to send it from, its unit's destination is re-planned to another server
of the zone (a stalled destination; event ``copy_replanned``). Its watch then starts afresh,
so the resent copy is judged on its own. A follower that trails its leader by more than
``ls_log_sync_threshold`` as long gets ``follower_lagging`` (module ``disaster_recovery``),
once per episode; the followers lagging now are :meth:`LagDetector.lagging_followers`, which
the ``lag_rebuilder`` (:mod:`rootservice.tenants.lag_rebuild`) rebuilds when they stay so.
So that a frozen agent is found without other traffic, a server that hosts replicas and was sent no command for half
``agent_lag_timeout`` is sent a ``RequestHeartbeat`` (a command like any other; a server
hosting nothing is judged on the commands it gets, which keeps thousands of empty agents from
costing a probe each); one also follows, a quarter timeout later, an unapplied command that
nothing followed, because a call whose deadline passed before the agent took it (an agent
paused a moment) is never applied, and only a newer applied number settles it.

A new RS leader judges afresh: episodes are memory only, and ``check_all_server`` clears a
``lagging_time`` the new leader does not confirm.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Protocol

from obcommon.clock import Clock
from obcommon.durations import format_duration
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event
from rootservice.ha.term import Term
from rootservice.servers.command_ledger import CommandLedger
from rootservice.servers.events import log_transition, server_event
from rootservice.servers.lag_policy import (
    REASON_COMMAND,
    REASON_DISK,
    LagState,
    Progress,
    command_lagging,
    disk_lagging,
    disk_limit_us,
    follower_lagging,
    judge,
    progressed,
    stalled,
    trailing_since,
)
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.ports import Background, HeartbeatRequests
from rootservice.servers.status import HB_ALIVE, ServerStatus
from rootservice.servers.whitelist import Whitelist

log = logging.getLogger(__name__)

LsKey = tuple[int, int]
#: Period of the task, microseconds: a command overdue at ``s + agent_lag_timeout`` is found
#: by then plus this (the issue asks within one second).
LAG_CHECK_INTERVAL_US = 500_000
#: Characters of stacks kept in the event's ``extra_info`` (its column holds 4096).
STACKS_CHARS = 4000
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+, in (\S+)', re.M)


class ReplicaProgress(Protocol):
    """The latest replica report of every server
    (:class:`rootservice.tenants.reports.ReplicaReports`)."""

    def reports(self) -> dict[str, dict[LsKey, obrpc_pb2.ReplicaInfo]]:
        """``{server: {(tenant_id, ls_id): ReplicaInfo}}``, a copy."""
        ...


class LeaderMover(Protocol):
    """Moves the leaders off servers (:class:`rootservice.tenants.leaders.LeaderCoordinator`)."""

    def move_leaders_off(self, servers: Iterable[str], /) -> None:
        """Move every leader off ``servers``; raises ``ObError`` on timeout."""
        ...


class StalledCopies(Protocol):
    """What a stalled copy gets (:class:`rootservice.balancer.copy_replan.CopyReplan`)."""

    def stalled(self, key: LsKey, dest: str, /) -> bool:
        """Send the copy of ``key`` to ``dest`` again from another member, or re-plan its
        destination; False when no such copy is in flight."""
        ...


class StackSource(Protocol):
    """``ObserverService.DumpStacks`` (:class:`rootservice.servers.agent_client.AgentClient`)."""

    def dump_stacks(self, server: str, epoch: int, /) -> obrpc_pb2.DumpStacksResponse:
        """The agent's stacks; raises ``ObError``."""
        ...


def condense(dump: obrpc_pb2.DumpStacksResponse, limit: int = STACKS_CHARS) -> str:
    """The stacks of ``dump`` in at most ``limit`` characters: one line per event-loop task
    and per thread, its innermost six function names (``outer > ... > inner``); identical
    lines counted once with ``N x``. Tasks first (an agent's work runs there)."""
    lines: list[str] = []
    for block in dump.event_loop.split("Stack for ")[1:]:
        names = _FRAME.findall(block)
        lines.append("task: " + " > ".join(names[-6:]))
    for t in dump.threads:
        names = _FRAME.findall(t.stack)
        lines.append(f"thread {t.name}: " + " > ".join(names[-6:]))
    counts: dict[str, int] = {}
    for line in lines:
        counts[line] = counts.get(line, 0) + 1
    text = "\n".join(f"{n} x {line}" if n > 1 else line for line, n in counts.items())
    return text[:limit]


class LagDetector:
    """``run_once()`` -> servers whose LAGGING state changed.

    ``ledger`` holds the unapplied commands; ``replicas`` the reports; ``leaders`` moves the
    leaders off a LAGGING server and ``stacks`` reads its stacks, both through
    ``background``; ``heartbeats`` sends the probe commands (in the background too)."""

    name = "lag_detector"

    def __init__(
        self,
        whitelist: Whitelist,
        persist: PersistQueue,
        term: Term,
        clock: Clock,
        settings: RsSettings,
        ledger: CommandLedger,
        replicas: ReplicaProgress,
        leaders: LeaderMover,
        stacks: StackSource,
        heartbeats: HeartbeatRequests,
        background: Background,
        copies: StalledCopies,
    ) -> None:
        """Judge ``whitelist``'s servers against ``settings.agent_lag_timeout`` (read every
        round)."""
        self.whitelist = whitelist
        self.persist = persist
        self.term = term
        self.clock = clock
        self.settings = settings
        self.ledger = ledger
        self.replicas = replicas
        self.leaders = leaders
        self.stacks = stacks
        self.heartbeats = heartbeats
        self.background = background
        self.copies = copies
        self._copies: dict[tuple[LsKey, str], Progress] = {}
        self._trailing: dict[tuple[LsKey, str], int] = {}
        self._reported: set[tuple[str, LsKey, str]] = set()
        self._lagging: dict[tuple[LsKey, str], int] = {}

    def clear(self) -> None:
        """Forget every watch (step down); the records' episodes go with the whitelist."""
        self._copies.clear()
        self._trailing.clear()
        self._reported.clear()
        self._lagging = {}

    def lagging_followers(self) -> dict[tuple[LsKey, str], int]:
        """The followers LAGGING at the last round: ``{((tenant_id, ls_id), server): when
        it became LAGGING}`` (monotonic µs of the round that wrote its ``follower_lagging``
        event; the episode lasts while the key stays). A copy; thread-safe."""
        return dict(self._lagging)

    def run_once(self) -> int:
        """One round (see the module): judge every alive server (and those this detector
        expired), start and end episodes, report stalled copies and lagging followers, send
        probes. Nothing while this RS may not act."""
        if not self.term.may_act():
            return 0
        mono, now = self.clock.monotonic_us(), self.clock.now_us()
        timeout = self.settings.agent_lag_timeout
        disk_limit = disk_limit_us(timeout)
        hosting = self._replica_progress(mono, now, timeout)
        started: list[tuple[ServerStatus, str]] = []
        probes: list[str] = []
        n = 0
        # Read once: a command issued during the round is judged in the next one. Asking the
        # ledger per server took its lock 10,000 times a round at 10,000 servers.
        pending = self.ledger.pending_servers()
        with self.whitelist.lock:
            for key, s in self.whitelist.records.items():
                if s.hb_status is not HB_ALIVE and not s.lag.expired:
                    if s.lag.lagging:
                        self._end(s, now, "its lease expired")
                        n += 1
                    if key in pending:
                        self.ledger.forget(key)
                    continue
                if (
                    s.lag.since_mono is None
                    and key not in hosting
                    and s.disk_probe_latency_us <= disk_limit
                    and key not in pending
                ):
                    # No episode, no reason to start one, nothing to probe: the judgement
                    # below would change nothing. Most servers of a large cluster, every round.
                    continue
                reasons, why = self._reasons(key, s, mono, now, timeout)
                before = s.lag
                s.lag = judge(before, reasons, mono, timeout)
                if s.lag.lagging and not before.lagging:
                    s.lagging_time = now
                    self.persist.mark(key)
                    started.append((s, why))
                    n += 1
                elif before.lagging and not s.lag.lagging:
                    self._end(s, now, f"clear for {format_duration(timeout)}")
                    n += 1
                elif s.lag.expired and not before.expired:
                    ev = server_event(now, "lag_expire", s, ("timeouts", s.lag.timeouts))
                    self.persist.add_event(ev)
                    log_transition(ev, "LAGGING for three timeouts: treated as lease-expired")
                last = self.ledger.last_issued(key)
                idle = last is None or mono - last >= timeout // 2
                # A call that ran out of time before the agent took it is never applied: a
                # newer command, once applied, settles it (an applied number covers every
                # lower one), so one is sent a quarter timeout after it when none followed.
                oldest = self.ledger.oldest_unapplied(key)
                alone = oldest is not None and last == oldest and mono - oldest >= timeout // 4
                # A server past its third timeout too: its recovery is an applied command.
                if (s.is_alive() or s.lag.expired) and (idle or alone) and key in hosting:
                    probes.append(key)
        for s, why in started:
            self._started(s, why, now)
        if probes:
            self.background(lambda: self.heartbeats.request_heartbeats(probes))
        return n

    def _reasons(
        self, key: str, s: ServerStatus, mono: int, now: int, timeout: int
    ) -> tuple[tuple[str, ...], str]:
        reasons: list[str] = []
        why: list[str] = []
        oldest = self.ledger.oldest_unapplied(key)
        if command_lagging(oldest, mono, timeout):
            assert oldest is not None
            reasons.append(REASON_COMMAND)
            # The send time on the wall clock too, for operators (and the real-process test),
            # from the round's own reading (``now`` pairs with ``mono``): a second reading
            # made it up to the time between the two later, and the event (stamped ``now``)
            # then showed less than the timeout since "sent at" (a CI run: 72 us short).
            sent = now - (mono - oldest)
            why.append(f"a command sent at {sent} unapplied for {format_duration(mono - oldest)}")
        if disk_lagging(s.disk_probe_latency_us, timeout):
            reasons.append(REASON_DISK)
            why.append(f"disk probe {format_duration(s.disk_probe_latency_us)}")
        return tuple(reasons), ", ".join(why)

    def _end(self, s: ServerStatus, now: int, why: str) -> None:
        s.lag = LagState()
        s.lagging_time = 0
        self.persist.mark(s.key)
        ev = server_event(now, "lagging_end", s)
        self.persist.add_event(ev)
        log_transition(ev, why)

    def _started(self, s: ServerStatus, why: str, now: int) -> None:
        """Actions 1 and 3 of a new episode, in the background: the event with the stacks,
        then the leaders off."""
        key, reasons, epoch = s.key, ",".join(s.lag.reasons), self.term.epoch

        def act() -> None:
            try:
                stacks = condense(self.stacks.dump_stacks(key, epoch))
            except ObError as e:
                stacks = f"DumpStacks failed: {e.message}"[:STACKS_CHARS]
            ev = server_event(now, "lagging", s, ("reason", reasons), ("detail", why))
            ev.extra_info = stacks
            self.persist.add_event(ev)
            log_transition(ev, f"{why}: no new leaders or copies, leaders moved off")
            try:
                self.leaders.move_leaders_off([key])
            except ObError as e:
                log.warning("moving the leaders off LAGGING %s: %s", key, e.message)

        self.background(act)

    def _replica_progress(self, mono: int, now: int, timeout: int) -> set[str]:
        """Watch copies and followers in the reports; one event per stalled copy and per
        lagging follower (again only after it recovered). Returns the servers that report
        replicas."""
        reports = self.replicas.reports()
        leaders: dict[LsKey, obrpc_pb2.ReplicaInfo] = {}
        for reps in reports.values():
            for key, r in reps.items():
                cur = leaders.get(key)
                if r.role == obrpc_pb2.LEADER and (cur is None or r.term > cur.term):
                    leaders[key] = r
        copies: dict[tuple[LsKey, str], Progress] = {}
        trailing: dict[tuple[LsKey, str], int] = {}
        found: set[tuple[str, LsKey, str]] = set()
        threshold = self.settings.ls_log_sync_threshold
        for server, reps in reports.items():
            for key, r in reps.items():
                if r.copy_from and not r.in_service:
                    p = progressed(self._copies.get((key, server)), r.bytes_copied, mono)
                    copies[(key, server)] = p
                    if stalled(p, mono, timeout):
                        found.add(("copy_stalled", key, server))
                    continue
                lead = leaders.get(key)
                if lead is None or r.role == obrpc_pb2.LEADER or not r.in_service:
                    continue
                trails = lead.log_end_ts - r.log_end_ts > threshold
                since = trailing_since(self._trailing.get((key, server)), trails, mono)
                if since is not None:
                    trailing[(key, server)] = since
                    if follower_lagging(since, mono, timeout):
                        found.add(("follower_lagging", key, server))
        self._copies, self._trailing = copies, trailing
        # Replaced whole (never mutated): another thread's read sees one round or the next.
        # A follower keeps the round that reported it while its episode lasts.
        self._lagging = {
            k: self._lagging.get(k, mono)
            for k, since in trailing.items()
            if follower_lagging(since, mono, timeout)
        }
        for event, key, server in sorted(found - self._reported):
            self.persist.add_event(
                Event(
                    now,
                    "disaster_recovery",
                    event,
                    (("tenant_id", key[0]), ("ls_id", key[1]), ("server", server)),
                )
            )
            log.warning("LS %d.%d on %s: %s", key[0], key[1], server, event.replace("_", " "))
            if event == "copy_stalled" and self.copies.stalled(key, server):
                # Sent again from another member (a stalled source or stream) or re-planned
                # to another destination: what is reported next is that new attempt, judged
                # from its first report (it may start from the same byte count), so a copy
                # that stalls again is reported again.
                self._copies.pop((key, server), None)
        self._reported = found
        return {server for server, reps in reports.items() if reps}
