"""What the balancer needs from the layers below it, as consumer protocols (docs/design/migration.md).

The balancer classes take these at construction, never the whole server manager or LS
manager: :class:`Whitelist` (the servers package's whitelist), :class:`EventSink` (its
persist queue), :class:`Waker` (the task registry's wake-up by task name), :class:`Gate`
(:class:`rootservice.ha.term.Term`), :class:`Store` (:class:`rootservice.ha.store.MetaStore`),
:class:`LayoutVersion` (the tenant layer's cache version of the layout) and the log-stream
views of the tenant layer (:class:`LsLayout`, :class:`ReplicaReports`, :class:`LsStatus`,
:class:`ReplicaWork`,
:class:`MetaCache`; today all :class:`rootservice.tenants.balancer_view.BalancerView`), the
tenant layer's unit placement (:class:`UnitRooms`) and, between the balancer's own parts, the
copies in flight as the re-plan of a destination sees them (:class:`CopyLedger`) and that
re-plan as the balancer round runs it (:class:`Replanner`).

The value types the tenant layer hands back (:data:`LsKey`, :class:`LsPlan`,
:class:`LsView`, :class:`Topology`) are imported here only, so the rest of the package names
them through this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set
from contextlib import AbstractContextManager
from typing import Any, Protocol

import sqlalchemy as sa

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.db.event_repo import Event
from rootservice.db.unit_repo import Unit
from rootservice.servers.status import ServerStatus
from rootservice.tenants.placement import Placement
from rootservice.tenants.reports import LsView
from rootservice.tenants.topology import LsPlan, Topology
from rootservice.tenants.vocabulary import LsKey

__all__ = [
    "CopyLedger",
    "EventSink",
    "Gate",
    "LayoutVersion",
    "LsKey",
    "LsLayout",
    "LsPlan",
    "LsStatus",
    "LsView",
    "MetaCache",
    "ReplicaReports",
    "ReplicaWork",
    "ReadStore",
    "Replanner",
    "Reports",
    "Store",
    "Topology",
    "UnitRooms",
    "Waker",
    "Whitelist",
]

#: Replica reports by server (``'ip:port'``), then by ``(tenant_id, ls_id)``.
Reports = dict[str, dict[LsKey, obrpc_pb2.ReplicaInfo]]


class Whitelist(Protocol):
    """The servers the RS knows (docs/design/servers.md#the-three-statuses), keyed ``'ip:port'``."""

    def get(self, server: str) -> ServerStatus | None:
        """The server's status, or None when it is not in the whitelist."""
        ...

    def snapshot(self) -> list[ServerStatus]:
        """Every whitelisted server (copies or live objects: read only)."""
        ...

    def has_servers_to_empty(self) -> bool:
        """Some server is DELETING or permanently offline (a cheap flag check)."""
        ...


class EventSink(Protocol):
    """Queues ``__all_rootservice_event_history`` rows written later, off the caller's path."""

    def add_event(self, event: Event) -> None:
        """Queue one event row."""
        ...


class Waker(Protocol):
    """Runs a registered background task now, by its name (a no-op for unknown names)."""

    def __call__(self, name: str) -> None:
        """Wake task ``name`` (e.g. ``"empty_server_checker"``)."""
        ...


class UpgradeHold(Protocol):
    """The cluster's upgrade mode, met by :class:`rootservice.upgrade.versions.Versions`."""

    def in_upgrade_mode(self) -> bool:
        """True between ALTER SYSTEM BEGIN UPGRADE and END UPGRADE (hold re-replication)."""
        ...


class Gate(Protocol):
    """The term's answer to "may a background round act now" (docs/design/ha.md#taking-office)."""

    def may_act(self) -> bool:
        """This RS is the leader, its lease safely held and its whitelist in service
        (:meth:`rootservice.ha.term.Term.may_act`)."""
        ...


class Store(Protocol):
    """The epoch-fenced metadata store (docs/design/ha.md#fenced-writes)."""

    @property
    def rs_addr(self) -> tuple[str, int]:
        """This RS's ``(ip, port)``, written in event rows."""
        ...

    def txn(self) -> AbstractContextManager[sa.Connection]:
        """A fenced transaction, committed on exit; raises ``ObError`` when the epoch moved."""
        ...

    def read(self) -> AbstractContextManager[sa.Connection]:
        """A read-only connection."""
        ...


class ReadStore(Protocol):
    """Read-only access to the metadata store (the dry run of DELETE SERVER writes nothing)."""

    def read(self) -> AbstractContextManager[sa.Connection]:
        """A read-only connection (unfenced: what the tables say now)."""
        ...


class LayoutVersion(Protocol):
    """The cache version of the tenant layout: raising it makes the tenant layer re-read
    ``__all_unit`` and the LS tables at the next :meth:`LsLayout.topology`."""

    version: int


class LsLayout(Protocol):
    """The desired layout of log streams and what the reports show of them."""

    def topology(self) -> Topology:
        """The desired layout (cached); raises ``ObError(OB_ERR_SYS)`` when the database fails."""
        ...

    def views(self) -> dict[LsKey, LsView]:
        """Every LS the layout names or some server reports, with its current leader."""
        ...


class ReplicaReports(Protocol):
    """The latest replica reports of the servers (from their heartbeats)."""

    def reports(self) -> Reports:
        """A shallow copy of the latest reports by server."""
        ...


class LsStatus(LsLayout, ReplicaReports, Protocol):
    """The layout's views (with their leaders) and the replica reports: what the jobs'
    stall reasons read."""


class ReplicaWork(LsLayout, ReplicaReports, Protocol):
    """Replica work handed to the agents (ApplyReplicas)."""

    def members(self, plan: LsPlan, view: LsView) -> list[str]:
        """The LS's effective Paxos members (``'ip:port'``, sorted)."""
        ...

    def copy_spec(self, plan: LsPlan, view: LsView, dest: str, src: str) -> obrpc_pb2.ReplicaSpec:
        """The spec that makes ``dest`` build its replica by copying from ``src``."""
        ...

    def announce_copy(self, plan: LsPlan, view: LsView, dest: str, src: str) -> LsView:
        """Make ``dest`` a learner on ``src`` and the current leader before it copies;
        returns the LS's view as of then (the copy's spec names its leader and term);
        raises ``ObError``."""
        ...

    def apply(
        self, server: str, upsert: Iterable[obrpc_pb2.ReplicaSpec] = (), drop: Iterable[LsKey] = ()
    ) -> Any:
        """One ApplyReplicas call to ``server``; raises ``ObError``."""
        ...

    def apply_many(
        self,
        work: dict[str, list[obrpc_pb2.ReplicaSpec]],
        drops: dict[str, list[LsKey]] | None = None,
    ) -> dict[str, ObError]:
        """ApplyReplicas to several servers at once; returns the failures by server."""
        ...


class MetaCache(Protocol):
    """The tenant layer's cache of ``__all_ls_meta_table``."""

    def forget_meta(self) -> None:
        """Re-read ``__all_ls_meta_table`` at the next sync (someone else deleted rows)."""
        ...


class UnitRooms(Protocol):
    """Unit placement on the servers' rooms (:class:`rootservice.tenants.rooms.ServerRooms`)."""

    def place(self, conn: sa.Connection, units: Sequence[Unit], *, avoid: Set[str]) -> Placement:
        """Where ``units`` would go if they left their servers, never to ``avoid``
        (``'ip:port'``) nor back to their own; failures in the result."""
        ...


class CopyLedger(Protocol):
    """The copies in flight as the re-plan of a destination sees them
    (:class:`rootservice.balancer.copy_tasks.CopyTasks`), keyed ``(ls key, dest)``."""

    def stall_count(self, key: LsKey, dest: str, /) -> int | None:
        """Times the copy was marked stalled; None when no such copy is in flight."""
        ...

    def other_source(self, key: LsKey, dest: str, /) -> str | None:
        """A healthy member the copy was not sent from yet, or None."""
        ...

    def restart_stalled(self, key: LsKey, dest: str, /) -> bool:
        """Send the copy again from another member at the next hand-out; False when no such
        copy is in flight."""
        ...

    def involving(self, server: str, /) -> int:
        """Copies in flight from, to or replacing a replica on ``server``."""
        ...

    def keys_to(self, dest: str, /) -> set[LsKey]:
        """The log streams with a copy in flight to ``dest``."""
        ...

    def cancel_to(self, dests: set[str], keys: Set[LsKey] | None = None) -> dict[str, list[LsKey]]:
        """Forget the copies to ``dests`` (of ``keys`` only, when given); returns the
        replicas to drop there, by destination."""
        ...

    def drop(self, drops: dict[str, list[LsKey]]) -> None:
        """Drop replicas by server (ApplyReplicas); failures are logged."""
        ...


class Replanner(Protocol):
    """The re-plan of copy destinations as the balancer round runs it
    (:class:`rootservice.balancer.copy_replan.CopyReplan`)."""

    def run(self) -> int:
        """Re-plan what is due; returns the units sent elsewhere. Raises ``ObError`` when a
        transaction fails."""
        ...

    def clear(self) -> None:
        """Forget everything (step-down)."""
        ...
