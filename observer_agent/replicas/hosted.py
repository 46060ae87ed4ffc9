"""The replicas an agent hosts, by ``(tenant_id, ls_id)``, and the lock that serialises the
changes to them (``ApplyReplicas``, and the steps of a copy that write ``meta.json``); the
report of every lease request comes from here (docs/design/leases.md and docs/design/migration.md)."""

from __future__ import annotations

import asyncio

from obcommon.proto import obrpc_pb2
from observer_agent.replicas.replica import Replica
from observer_agent.replicas.storage import Key


class HostedReplicas:
    """The hosted replicas in memory. Loops, copies and RPC answers look a replica up here;
    one that is no longer here (dropped, or replaced by a new copy) must not be touched:
    :meth:`hosts` tells."""

    def __init__(self) -> None:
        """No replica; the lock is created on first use (on the running loop)."""
        self._replicas: dict[Key, Replica] = {}
        self._lock: asyncio.Lock | None = None

    def find(self, key: Key) -> Replica | None:
        """The replica of ``key``, or None."""
        return self._replicas.get(key)

    def hosts(self, rep: Replica) -> bool:
        """True while ``rep`` itself (not a later replica of its LS) is hosted."""
        return self._replicas.get(rep.key) is rep

    def add(self, rep: Replica) -> None:
        """Host ``rep`` (replacing any replica of its LS)."""
        self._replicas[rep.key] = rep

    def pop(self, key: Key) -> Replica | None:
        """Stop hosting the replica of ``key``; returns it, or None."""
        return self._replicas.pop(key, None)

    def sorted_keys(self) -> list[Key]:
        """The hosted ``(tenant_id, ls_id)``, sorted."""
        return sorted(self._replicas)

    def all(self) -> list[Replica]:
        """The hosted replicas, in the order they were added."""
        return list(self._replicas.values())

    def __len__(self) -> int:
        return len(self._replicas)

    def report(self, me: str) -> list[obrpc_pb2.ReplicaInfo]:
        """``ReplicaInfo`` of every hosted replica, sorted by ``(tenant_id, ls_id)``, as the
        agent ``me`` (``ip:port``) reports them. Memory only."""
        return [self._replicas[k].info(me) for k in sorted(self._replicas)]

    def lock(self) -> asyncio.Lock:
        """The lock held while replicas are added, dropped or have their meta rewritten."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def forget_lock(self) -> None:
        """Drop the lock: a later start may run on another event loop, and asyncio
        primitives bind to one."""
        self._lock = None
