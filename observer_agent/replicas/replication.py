"""Log replication of the hosted replicas (docs/design/migration.md; OceanBase's palf, reduced).

The leader of an LS appends one entry every ``log_interval``; followers pull entries from the
leader with ``ReplicaService.FetchLog`` (agent to agent) every :func:`poll_interval_s` and
compare overlapping entries after every change of leader or term, truncating what differs
from the leader's log (:func:`observer_agent.replicas.log.merge_fetched`). A replica about
to lead first catches up from its predecessor (:meth:`LogReplication.catch_up`). The fault
switches of :mod:`observer_agent.replicas.faults` stop or delay the followers.

Times are integer microseconds since the Unix epoch from the agent's :class:`Clock`; the
asyncio loop's monotonic time is only used for waits and deadlines.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

import grpc

from obcommon.clock import Clock
from obcommon.errors import ObError, error_from_proto
from obcommon.proto import obrpc_pb2
from observer_agent.address import LocalServer
from observer_agent.replicas.faults import ReplicationFaults
from observer_agent.replicas.hosted import HostedReplicas
from observer_agent.replicas.log import Entry, merge_fetched
from observer_agent.replicas.peers import PeerChannels
from observer_agent.replicas.replica import VERIFY_WINDOW_MIN, Replica
from observer_agent.replicas.storage import describe_ls
from observer_agent.settings import AgentSettings

#: ``max_entries`` of one FetchLog call, and the most a leader returns.
FETCH_MAX_ENTRIES = 1000
#: A follower polls its leader every ``min(log_interval, this)`` microseconds.
FOLLOWER_POLL_MAX_US = 200_000
#: How long an idle replica (no leader) sleeps between checks, seconds; a spec wakes it.
IDLE_S = 1.0
#: Shortest catch-up attempt even when the caller's deadline has nearly run out, seconds.
_MIN_CATCH_UP_S = 0.05
#: Pause between failed catch-up fetches, seconds.
_CATCH_UP_RETRY_S = 0.05


def poll_interval_s(settings: AgentSettings) -> float:
    """A follower's fetch period, seconds: ``min(log_interval, 200 ms)``."""
    return min(settings.log_interval, FOLLOWER_POLL_MAX_US) / 1e6


def unchanged(rep: Replica, generation: int) -> Callable[[], bool]:
    """True while ``rep`` keeps ``generation`` and no ApplyReplicas is changing it."""
    return lambda: rep.generation == generation and not rep.busy


class ReplicationSwitches(Protocol):
    """The fault switches followers obey (implemented by
    :class:`observer_agent.replicas.faults.FaultSwitches`)."""

    def replication(self) -> ReplicationFaults:
        """``stop`` (do not fetch) and ``delay_ms`` (apply only entries that old)."""
        ...


class LogReplication:
    """The loop of every hosted replica (lead: append; follow: fetch; else idle), one
    ``FetchLog`` pull merged into a replica's log, and a new leader's catch-up.

    ``me`` gives this agent's ``ip:port``; ``hosted`` the replicas (an answer for a replica
    no longer hosted is dropped); ``peers`` the channels to leaders; ``faults`` the
    replication switches; ``log`` the agent's logger. Loops start only while :attr:`running`
    (set by the manager's start, cleared by its stop).
    """

    def __init__(
        self,
        settings: AgentSettings,
        clock: Clock,
        me: LocalServer,
        hosted: HostedReplicas,
        peers: PeerChannels,
        faults: ReplicationSwitches,
        log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
    ) -> None:
        """Nothing runs until :meth:`start_loop`."""
        self.settings = settings
        self.clock = clock
        self._me = me
        self._hosted = hosted
        self._peers = peers
        self._faults = faults
        self.log = log
        self.running = False
        self._peer_state: dict[tuple[str, tuple[int, int]], str] = {}

    @property
    def poll_interval_s(self) -> float:
        """A follower's fetch period, seconds: ``min(log_interval, 200 ms)``."""
        return poll_interval_s(self.settings)

    def start_loop(self, rep: Replica) -> None:
        """Start the loop of ``rep`` unless it runs. Must run on the event loop."""
        if rep.task is None or rep.task.done():
            rep.wake = asyncio.Event()  # bound to this loop, not to a previous run's
            rep.task = asyncio.get_running_loop().create_task(
                self._replica_loop(rep), name=f"replica {describe_ls(rep.key)}"
            )

    def launch(self, rep: Replica) -> None:
        """:meth:`start_loop` when the loops are :attr:`running` (a replica created while
        the manager is stopped waits for its start)."""
        if self.running:
            self.start_loop(rep)

    async def catch_up(
        self, rep: Replica, spec: obrpc_pb2.ReplicaSpec, client_deadline: float | None
    ) -> None:
        """Fetch the log from ``spec.catch_up_from`` until ``end_index >= catch_up_index``
        and the log agrees with the predecessor's (a divergent tail, e.g. one this node
        wrote as a deposed leader, is cut and replaced by its entries; anything past its
        last index is cut), within ``rpc_timeout`` (and ``client_deadline``, the event
        loop's time in seconds); raises ``ObError(OB_TIMEOUT)`` when the index is not
        reached (a comparison that could not finish is logged, and the node leads). The
        predecessor's log wins over a longer one of an older term, as in OceanBase's palf
        reconfirm (src/logservice/palf/log_reconfirm.cpp, ``handle_prepare_response``: the
        member with the highest accepted proposal id is the source, whatever the others'
        lengths; ``submit_prepare_log_`` names the longer old-term tails "ghost logs")."""
        key = rep.key
        target = spec.catch_up_index
        src = spec.catch_up_from.strip()
        me = self._me.server
        if not src or src == me:
            raise ObError(
                "OB_TIMEOUT",
                detail=f"{describe_ls(key)} cannot become leader: log_end_index "
                f"{rep.log.end_index} < catch_up_index {target} and no catch_up_from",
            )
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + self.settings.rpc_timeout / 1e6
        if client_deadline is not None:
            deadline = min(deadline, client_deadline)
        deadline = max(deadline, now + _MIN_CATCH_UP_S)
        rep.need_verify = True
        rep.verify_window = VERIFY_WINDOW_MIN
        last = "no answer"
        rounds = 0
        while rounds < 100_000 and (rep.log.end_index < target or rep.need_verify):
            rounds += 1
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            before = (rep.log.end_index, rep.need_verify, rep.verify_window)
            # term 0: a catch-up claims no leadership, so the previous leader serves it
            # whatever term it is at (see serving.fetch_log).
            outcome = await self.pull(rep, src, 0, None, remaining, lambda: True)
            if (
                outcome == "ok"
                and (rep.log.end_index, rep.need_verify, rep.verify_window) != before
            ):
                continue
            last = outcome if outcome != "ok" else f"{src} has no newer entry"
            await asyncio.sleep(min(_CATCH_UP_RETRY_S, max(0.0, deadline - loop.time())))
        if rep.log.end_index >= target:
            if rep.need_verify:
                # Availability first, as before the check: it leads with what it has.
                self.log.warning(
                    "replica %s: log not compared with %s's before leading (%s)",
                    describe_ls(key),
                    src,
                    last,
                )
            return
        self.log.warning(
            "replica %s: catch-up from %s stopped at log_end_index %d < %d (%s)",
            describe_ls(key),
            src,
            rep.log.end_index,
            target,
            last,
        )
        raise ObError(
            "OB_TIMEOUT",
            detail=f"{describe_ls(key)} cannot become leader: catch-up from {src} reached "
            f"log_end_index {rep.log.end_index} < catch_up_index {target} ({last})",
        )

    async def _replica_loop(self, rep: Replica) -> None:
        """Lead (append), follow (fetch) or idle, by the kept leader; until cancelled."""
        while True:
            try:
                me = self._me.server
                leader = rep.meta.leader
                if rep.busy or rep.build is not None:
                    # A replica being built is driven by its build task.
                    await self._wait(rep, IDLE_S)
                elif leader == me:
                    if await self._wait(rep, self.settings.log_interval / 1e6):
                        continue  # the spec changed: look again before appending
                    frozen = self._faults.replication().frozen  # Fault
                    if rep.meta.leader == me and not rep.busy and not frozen:
                        self._append_one(rep)
                elif leader:
                    await self._follow_once(rep)
                    await self._wait(rep, self.poll_interval_s)
                else:
                    await self._wait(rep, IDLE_S)
                self._note_problem(rep, "")
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self._note_problem(rep, f"{type(e).__name__}: {e}")
                await asyncio.sleep(self.poll_interval_s)

    def _note_problem(self, rep: Replica, problem: str) -> None:
        if problem == rep.last_problem:
            return
        if problem:
            self.log.error("replica %s: %s", describe_ls(rep.key), problem)
        else:
            self.log.info("replica %s: working again", describe_ls(rep.key))
        rep.last_problem = problem

    @staticmethod
    async def _wait(rep: Replica, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when woken early by a change of the replica."""
        try:
            await asyncio.wait_for(rep.wake.wait(), max(0.0, seconds))
        except TimeoutError:
            return False
        rep.wake.clear()
        return True

    def _append_one(self, rep: Replica) -> None:
        log = rep.log
        # ts never goes back, even if the wall clock steps back: lags are computed from it.
        ts = max(self.clock.now_us(), log.end_ts)
        log.append([(log.end_index + 1, rep.meta.term, ts)])

    async def _follow_once(self, rep: Replica) -> None:
        faults = self._faults.replication()
        if faults.stop:
            return
        leader, term, gen = rep.meta.leader, rep.meta.term, rep.generation
        cutoff = None
        if faults.delay_ms > 0:
            cutoff = self.clock.now_us() - faults.delay_ms * 1000
        outcome = await self.pull(
            rep,
            leader,
            term,
            cutoff,
            self.settings.rpc_timeout / 1e6,
            lambda: rep.generation == gen and not rep.busy,
        )
        if outcome == "stale":
            return
        state = "" if outcome == "ok" else outcome
        # Per peer and LS, and by the kind of failure only: a message carrying indexes or
        # terms would otherwise log every poll.
        kind = state.partition(":")[0]
        where = (leader, rep.key)
        if self._peer_state.get(where, "") != kind:
            if state:
                self.log.warning(
                    "replica %s: cannot fetch the log from %s: %s",
                    describe_ls(rep.key),
                    leader,
                    state,
                )
            elif where in self._peer_state:
                self.log.info("replica %s: fetching from %s again", describe_ls(rep.key), leader)
            self._peer_state[where] = kind

    async def pull(
        self,
        rep: Replica,
        peer: str,
        term: int,
        cutoff_ts: int | None,
        timeout_s: float,
        still_valid: Callable[[], bool],
    ) -> str:
        """One FetchLog from ``peer`` merged into ``rep``'s log; ``"ok"``, ``"stale"`` (the
        replica changed meanwhile: answer dropped) or a one-line reason."""
        log = rep.log
        if rep.need_verify and log.end_index > log.base_index:
            from_index = max(log.base_index + 1, log.end_index - rep.verify_window + 1)
        else:
            from_index = log.end_index + 1
        req = obrpc_pb2.FetchLogRequest(
            tenant_id=rep.meta.tenant_id,
            ls_id=rep.meta.ls_id,
            from_index=from_index,
            max_entries=FETCH_MAX_ENTRIES,
            follower=self._me.server,
            term=term,
        )
        try:
            resp = await self._peers.stub(peer).FetchLog(req, timeout=max(0.01, timeout_s))
        except grpc.aio.AioRpcError as e:
            return f"{e.code().name}: {(e.details() or '').replace(chr(10), ' ')}"
        except (TimeoutError, OSError) as e:
            return f"{type(e).__name__}: {e}"
        if not still_valid() or not self._hosted.hosts(rep):
            return "stale"
        err = error_from_proto(resp.error)
        if err is not None:
            if (
                err.name == "OB_NOT_MASTER"
                and resp.leader
                and resp.leader not in (peer, self._me.server)
                and resp.term > rep.meta.term
            ):
                rep.leader_hint = resp.leader
            elif peer == rep.leader_hint:
                rep.leader_hint = ""  # the hinted leader no longer leads: back to the meta's
            return f"{err.name}: {err.message}"
        entries: list[Entry] = [(e.index, e.term, e.ts) for e in resp.entries]
        if any(e[0] != entries[0][0] + i for i, e in enumerate(entries)):
            return "answer with non-consecutive entries ignored"
        if entries and entries[0][0] < from_index:
            return f"answer starting at {entries[0][0]} before {from_index} ignored"
        end_before = log.end_index
        rep.leader_end_index = resp.end_index
        verified, _ = merge_fetched(
            log, entries, from_index, resp.end_index, rep.need_verify, cutoff_ts
        )
        if rep.need_verify:
            if verified:
                rep.need_verify = False
            else:
                rep.verify_window = min(2 * rep.verify_window, FETCH_MAX_ENTRIES)
        elif resp.end_index < end_before:
            # We were ahead of the leader (a leader change): what we kept is unchecked.
            rep.need_verify = True
        return "ok"
