"""Replica specs and the ApplyReplicas calls that hand them to the agents
(docs/design/servers.md and docs/design/migration.md).

A :class:`obrpc_pb2.ReplicaSpec` is the desired state of one replica on one server: member
list, leader and term, and either the log index to catch up to (a new leader) or the server
to copy from (a replica being built). Every ApplyReplicas answer carries the agent's full
replica report, which is adopted at once as if it came with a heartbeat.

**Learners**. A member serves FetchData / FetchLog only to the RS, the
members and the learners its last spec listed. Every spec lists as learners the servers
reporting a non-member replica *and* the copies this RS announced that have not finished
(:class:`AnnouncedCopies`), so a leader change (whose specs are built here) tells the new
leader of a copy handed out a moment before, even when the destination's report does not
show it yet. An announcement and a leader change of the same LS never interleave
(:attr:`ReplicaApplier.ls_change_lock`): the announcement reads the leader and term after
any switch in progress has ended.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from obcommon.errors import ObError, error_from_proto
from obcommon.proto import obrpc_pb2
from rootservice.ha.store import MetaStore
from rootservice.tenants.ports import ReplicaAgents, ServerDirectory
from rootservice.tenants.reports import LsView, ReplicaReports, effective_members
from rootservice.tenants.topology import LsPlan
from rootservice.tenants.vocabulary import FULL, LsKey


class AnnouncedCopies:
    """The copies this RS announced as learners and has not seen end: ``(LS key, dest
    'ip:port')`` with the monotonic time (µs) of the last announcement. Thread-safe.

    An entry ends when the destination drops the replica through :meth:`ReplicaApplier.apply`,
    when it becomes a member, or when :meth:`prune` finds that the destination has not
    reported the replica for ``forget_after_us`` after the announcement (the copy was never
    started, or the agent restarted and forgot it)."""

    def __init__(self, monotonic_us: Callable[[], int]) -> None:
        """Nothing announced; ``monotonic_us`` is the clock of the announcements."""
        self._now = monotonic_us
        self._lock = threading.Lock()
        self._since: dict[tuple[LsKey, str], int] = {}

    def add(self, key: LsKey, dest: str) -> None:
        """``dest`` copies LS ``key`` (announced now)."""
        with self._lock:
            self._since[(key, dest)] = self._now()

    def discard(self, key: LsKey, dest: str) -> None:
        """The copy of ``key`` to ``dest`` ended (dropped)."""
        with self._lock:
            self._since.pop((key, dest), None)

    def of(self, key: LsKey) -> set[str]:
        """The destinations of the announced copies of ``key``."""
        with self._lock:
            return {d for (k, d) in self._since if k == key}

    def __len__(self) -> int:
        """Announced copies not ended."""
        with self._lock:
            return len(self._since)

    def clear(self) -> None:
        """Forget every announcement (step-down: the next term announces again)."""
        with self._lock:
            self._since.clear()

    def prune(
        self,
        reported: Callable[[LsKey, str], bool],
        is_member: Callable[[LsKey, str], bool],
        forget_after_us: int,
    ) -> int:
        """Forget the copies whose destination is a member (``is_member``) or, once
        ``forget_after_us`` passed since the announcement, does not report the replica
        (``reported``). Returns how many were forgotten."""
        now = self._now()
        with self._lock:
            items = list(self._since.items())
        gone = [
            (key, dest)
            for (key, dest), since in items
            if is_member(key, dest) or (now - since >= forget_after_us and not reported(key, dest))
        ]
        with self._lock:
            for k in gone:
                self._since.pop(k, None)
        return len(gone)


class ReplicaApplier:
    """Builds replica specs and sends them with ApplyReplicas, stamped with this RS's epoch
    (an agent refuses the specs of a deposed RS)."""

    def __init__(
        self,
        store: MetaStore,
        agents: ReplicaAgents,
        servers: ServerDirectory,
        reports: ReplicaReports,
        monotonic_us: Callable[[], int],
    ) -> None:
        """Send through ``agents``; adopt the answers into ``reports`` (on the live record of
        the server in ``servers``); ``monotonic_us`` times the announcements."""
        self.store = store
        self.agents = agents
        self.servers = servers
        self.reports = reports
        self.announced = AnnouncedCopies(monotonic_us)
        #: Held across a leader switch (``LeaderCoordinator``) and across an announcement,
        #: so that neither works from the other's half-done state (a copy handed
        #: out 60 ms before its leader moved was never announced to the new leader).
        self.ls_change_lock = threading.RLock()

    def spec(
        self,
        plan: LsPlan,
        server: str,
        leader: str,
        term: int,
        catch_up_index: int = 0,
        catch_up_from: str = "",
        *,
        members: Sequence[str] | None = None,
        copy_from: str = "",
        learners: Iterable[str] | None = None,
    ) -> obrpc_pb2.ReplicaSpec:
        """The spec of the replica of ``plan`` on ``server``: FULL, following ``leader`` at
        ``term``, with ``members`` (default the planned ones) as its member list and
        ``learners`` (default :meth:`learners`) as the non-members it serves."""
        members = sorted(members if members is not None else plan.members)
        if learners is None:
            learners = self.learners(plan.key, members)
        unit_id = plan.members[server][1] if server in plan.members else 0
        if not unit_id:
            # A replica leaving (its unit moved): keep the unit id it reported.
            r = self.reports.reports().get(server, {}).get(plan.key)
            unit_id = r.unit_id if r is not None else 0
        return obrpc_pb2.ReplicaSpec(
            tenant_id=plan.key[0],
            ls_id=plan.key[1],
            unit_id=unit_id,
            replica_type=FULL,
            member_list=members,
            paxos_replica_number=len(members),
            leader=leader,
            term=term,
            catch_up_index=catch_up_index,
            catch_up_from=catch_up_from,
            copy_from=copy_from,
            learner_list=sorted(set(learners) - {server}),
        )

    def learners(self, key: LsKey, members: Sequence[str]) -> list[str]:
        """The servers reporting a replica of ``key`` that are not in ``members`` and the
        copies of ``key`` announced and not ended (:class:`AnnouncedCopies`): copies being
        built or catching up (the members serve FetchData / FetchLog only to the
        RS, the members and these; a spec that left them out would cut their copy off)."""
        inside = set(members)
        reported = {
            server
            for server, table in self.reports.reports().items()
            if key in table and server not in inside
        }
        return sorted(reported | (self.announced.of(key) - inside))

    def announce_copy(self, plan: LsPlan, view: LsView, dest: str, src: str) -> LsView:
        """Before ``dest`` copies its replica of the LS from ``src`` (or again when its copy
        reports a refusal): record the copy (:attr:`announced`, so every later spec lists
        it) and tell ``src`` and the current leader (who serve the data and the log) that
        ``dest`` is a learner, in specs that change nothing else (current members, leader
        and term). Under :attr:`ls_change_lock`, with the LS's view as it is then (``view``
        only when the reports have none). Returns that view: the copy's spec must name its
        leader and term. Raises ``ObError`` when one of them cannot be told (the copy would
        be refused)."""
        with self.ls_change_lock:
            self.announced.add(plan.key, dest)
            view = self.reports.views().get(plan.key, view)
            self._announce(plan, view, dest, src)
        return view

    def _announce(self, plan: LsPlan, view: LsView, dest: str, src: str) -> None:
        members = effective_members(plan, view)
        learners = {*self.learners(plan.key, members), dest}
        for server in sorted({src, view.leader or src}):
            if server not in view.replicas:
                continue
            self.apply(
                server,
                [
                    self.spec(
                        plan,
                        server,
                        view.leader or "",
                        view.term,
                        members=members,
                        learners=learners,
                    )
                ],
            )

    def copy_spec(self, plan: LsPlan, view: LsView, dest: str, src: str) -> obrpc_pb2.ReplicaSpec:
        """The spec that makes ``dest`` build its replica of the LS by copying from ``src``:
        it follows the current leader at the current term and is not yet a member (the
        member change comes once it is in service and in sync)."""
        return self.spec(
            plan,
            dest,
            view.leader or "",
            view.term,
            members=effective_members(plan, view),
            copy_from=src,
        )

    def apply(
        self,
        server: str,
        upsert: Iterable[obrpc_pb2.ReplicaSpec] = (),
        drop: Iterable[LsKey] = (),
        timeout_us: int | None = None,
    ) -> obrpc_pb2.ApplyReplicasResponse:
        """One ApplyReplicas call; adopts the report it returns. ``timeout_us`` defaults to
        ``rpc_timeout``. Raises ``ObError`` (OB_SERVER_CONNECTION_ERROR, or the agent's own
        refusal)."""
        token = self.store.term.token()
        req = obrpc_pb2.ApplyReplicasRequest(rs_epoch=token.epoch, rs_incarnation=token.incarnation)
        req.upsert.extend(upsert)
        for t, ls in drop:
            req.drop.append(obrpc_pb2.ReplicaKey(tenant_id=t, ls_id=ls))
            self.announced.discard((t, ls), server)
        resp = self.agents.apply_replicas(server, req, timeout_us)
        self._adopt(server, resp)
        err = error_from_proto(resp.error)
        if err is not None:
            raise err
        return resp

    def apply_many(
        self,
        work: dict[str, list[obrpc_pb2.ReplicaSpec]],
        drops: dict[str, list[LsKey]] | None = None,
    ) -> dict[str, ObError]:
        """ApplyReplicas on several servers in parallel; returns the failures by server."""
        drops = drops or {}
        servers = sorted(set(work) | set(drops))
        failures: dict[str, ObError] = {}
        if not servers:
            return failures

        def one(server: str) -> None:
            try:
                self.apply(server, work.get(server, []), drops.get(server, []))
            except ObError as e:
                failures[server] = e

        with ThreadPoolExecutor(
            max_workers=min(16, len(servers)), thread_name_prefix="rs-apply"
        ) as pool:
            list(pool.map(one, servers))
        return failures

    def _adopt(self, server: str, resp: obrpc_pb2.ApplyReplicasResponse) -> None:
        """Take the full report an ApplyReplicas answer carries."""
        self.servers.with_server(
            server,
            lambda s: self.reports.adopt(
                s, list(resp.replicas), resp.replicas_version, resp.start_service_time
            ),
        )
