"""One hosted replica in memory: its meta, its log, its loop's state and, while it is built by
copy (replica migration, docs/design/migration.md), its build state.

Build states of a replica built by copy (see :mod:`observer_agent.replicas.copy`):

1. :data:`BUILD_QUEUED` while ``max_concurrent_copies`` copies already run;
2. :data:`BUILD_COPYING` while the data file streams from the source;
3. :data:`BUILD_LOG` once the data file is in place and ``meta.json`` written: the log is
   being caught up;
4. :data:`BUILD_FAILED` when the copy or the install failed (``error`` says why).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from obcommon.proto import obrpc_pb2
from observer_agent.replicas.log import ReplicaLog
from observer_agent.replicas.storage import Key, ReplicaMeta

#: First look-back (entries) when a follower checks its log against a new leader's.
VERIFY_WINDOW_MIN = 64

#: Build states of a replica built by copy (see the module doc).
BUILD_QUEUED = "queued"
BUILD_COPYING = "copying"
BUILD_FAILED = "failed"
BUILD_LOG = "log"


@dataclass
class Build:
    """A replica being built by copy; ``state`` is one of the ``BUILD_*`` values. The data
    file is in place (and ``meta.json`` written) only in :data:`BUILD_LOG`."""

    source: str
    state: str = BUILD_QUEUED
    #: Bytes received by the current attempt (the whole file once in BUILD_LOG).
    bytes_copied: int = 0
    #: The data file's size announced by the source's first chunk, bytes (0 = not known yet).
    total_size: int = 0
    #: The log index to reach before the replica is in service.
    target: int = 0
    error: str = ""
    #: Last problem of the log catch-up, logged once per kind.
    problem: str = ""
    #: The last refusal of the log catch-up (``"<peer> <reason>"``, "" once a fetch is
    #: served), reported as ``catch_up_error`` so the RS announces the copy again.
    catch_up_error: str = ""
    #: Peers that refused the log catch-up since the last served fetch: the next fetch asks
    #: another member, so a copy refused by a former leader finds the current one.
    refused: set[str] = field(default_factory=set)
    #: The peer that served the last fetch of the log catch-up ("" = none yet).
    served_by: str = ""
    #: ``Replica.generation`` when ``refused`` was last reset.
    refused_generation: int = -1
    task: asyncio.Task[None] | None = None

    @property
    def data_in_place(self) -> bool:
        """True once the data file is in place (the log is being caught up)."""
        return self.state == BUILD_LOG


class Replica:
    """One hosted replica: its meta, log and in-process state.

    ``in_service`` is True once the data file is built or verified (for a replica built by
    copy: once its log has caught up too). ``build`` is not None while the replica is being
    built by copy (its loop then idles: the build task fetches). ``busy`` is set while an
    ``ApplyReplicas`` changes the replica (its loop then pauses); ``generation`` grows at
    every change of meta, so a fetch started before a change is discarded. ``need_verify``:
    the log must be compared with the leader's before new entries are taken.
    """

    def __init__(self, meta: ReplicaMeta, directory: Path, log: ReplicaLog) -> None:
        """A replica from its meta, its directory (``replicas/<t>_<l>``) and its log."""
        self.meta = meta
        self.dir = directory
        self.log = log
        self.in_service = False
        # Non-members the RS said are copying this LS: with the members, the only
        # nodes this replica serves FetchData / FetchLog to.
        self.learners: frozenset[str] = frozenset()
        self.busy = False
        self.generation = 0
        self.need_verify = True
        self.verify_window = VERIFY_WINDOW_MIN
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.last_problem = ""
        self.build: Build | None = None
        # The leader's last log index as of the last FetchLog answer (0 = none yet): the
        # agent's log lag of this LS is how far ``log.end_index`` is behind it.
        self.leader_end_index = 0
        # The leader a peer named in an OB_NOT_MASTER answer at a newer term than ``meta``
        # knows ("" = none): a replica being built by copy asks it for the log, as the RS
        # tells a building replica nothing of a leader change (a copy handed
        # out 20 ms before its LS's leader moved asked the old leader forever).
        self.leader_hint = ""

    @property
    def key(self) -> Key:
        """``(tenant_id, ls_id)``."""
        return self.meta.key

    def set_meta(self, meta: ReplicaMeta) -> None:
        """Adopt ``meta`` in memory and wake the loop; a new leader or term also asks for the
        log to be checked against the (new) leader's."""
        if (meta.leader, meta.term) != (self.meta.leader, self.meta.term):
            self.need_verify = True
            self.verify_window = VERIFY_WINDOW_MIN
            self.leader_hint = ""
        self.meta = meta
        self.generation += 1
        self.wake.set()

    def role(self, me: str) -> str:
        """``leader`` or ``follower`` as :meth:`info` reports it, or ``learner`` while the
        replica is being built by copy (not a member yet: OceanBase's learner), for the
        ``ob_agent_replicas`` gauge."""
        if self.build is not None:
            return "learner"
        return "leader" if self.meta.leader and self.meta.leader == me else "follower"

    def log_lag(self, me: str) -> int:
        """Log entries this replica is behind its leader (0 for the leader itself, and
        before the first answer of the leader)."""
        if self.leader_end_index <= 0 or self.role(me) == "leader":
            return 0
        return max(0, self.leader_end_index - self.log.end_index)

    def info(self, me: str) -> obrpc_pb2.ReplicaInfo:
        """The ``ReplicaInfo`` this agent (``me`` = its ``ip:port``) reports; no I/O."""
        m = self.meta
        b = self.build
        data_size = m.data_size
        if b is not None and not b.data_in_place:
            # meta.data_size is only set once the file is in place; report what is coming.
            data_size = b.total_size
        return obrpc_pb2.ReplicaInfo(
            tenant_id=m.tenant_id,
            ls_id=m.ls_id,
            unit_id=m.unit_id,
            role=obrpc_pb2.LEADER if m.leader and m.leader == me else obrpc_pb2.FOLLOWER,
            member_list=list(m.member_list),
            replica_type=m.replica_type,
            paxos_replica_number=m.paxos_replica_number,
            data_size=data_size,
            required_size=data_size + self.log.size_bytes,
            in_service=self.in_service,
            term=m.term,
            leader=m.leader,
            log_end_index=self.log.end_index,
            log_end_ts=self.log.end_ts,
            log_base_index=self.log.base_index,
            data_checksum=m.data_checksum,
            copy_from=b.source if b is not None else "",
            bytes_copied=b.bytes_copied if b is not None else 0,
            build_error=b.error if b is not None else "",
            catch_up_error=b.catch_up_error if b is not None else "",
        )
