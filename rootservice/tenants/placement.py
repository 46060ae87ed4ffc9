"""Unit placement: which server of a zone hosts a unit (docs/design/statements.md and docs/design/migration.md).

One pure module used by CREATE RESOURCE POOL, by the DELETE SERVER pre-check ("can the other
servers of the zone hold this server's units?") and later by the root balancer. It follows
OceanBase's ``ObUnitManager`` / ``ObUnitPlacementStrategy``:

- a unit goes to a server of its zone that is active (alive, NORMAL, not stopped) and has
  room for it: the sum of ``min_cpu`` of the server's units stays within its CPU count and no
  unit's ``max_cpu`` exceeds it; memory and log disk are summed and must fit the reported
  ``mem_total`` / ``log_disk_total``;
- anti-affinity: two units of one tenant (or, before the pool is granted, of one pool) never
  share a server, which implies OceanBase's "never two units of one unit group on one server";
- among the servers with room, the least loaded after placement wins (the largest of its CPU,
  memory and log-disk utilisation), ties broken by address, so units spread over the zone.

Sizes are bytes, CPU is cores. Nothing here touches the database or the network.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

GIB = 1 << 30


def format_bytes(n: int | float) -> str:
    """``n`` bytes as OceanBase writes capacities: ``4G``, ``512M``, ``1.5G``, ``300``."""
    for unit, size in (("T", 1 << 40), ("G", GIB), ("M", 1 << 20), ("K", 1 << 10)):
        if abs(n) >= size:
            v = n / size
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{int(n)}"


@dataclass(frozen=True)
class Demand:
    """What one unit takes from its server: CPU cores and bytes of memory / log disk."""

    min_cpu: float
    max_cpu: float
    memory: int
    log_disk: int


@dataclass
class ServerRoom:
    """One candidate server: capacity as reported by its agent, what its units already take,
    and the anti-affinity keys (tenants / pools) it already hosts. ``usable`` is False for a
    server that may not receive units (not alive, DELETING, stopped)."""

    key: str
    zone: str
    cpu_total: float
    mem_total: int
    log_disk_total: int
    cpu_used: float = 0.0
    mem_used: int = 0
    log_disk_used: int = 0
    affinity: set[Hashable] = field(default_factory=set)
    usable: bool = True

    def shortfall(self, d: Demand) -> str | None:
        """None when ``d`` fits, else the first resource short, e.g.
        ``"memory: needs 4G, free 2G"``."""
        if d.max_cpu > self.cpu_total + 1e-9:
            return f"CPU: max_cpu {d.max_cpu:g} exceeds the server's {self.cpu_total:g} cores"
        free_cpu = self.cpu_total - self.cpu_used
        if d.min_cpu > free_cpu + 1e-9:
            return f"CPU: needs {d.min_cpu:g} cores, free {max(free_cpu, 0):g}"
        free_mem = self.mem_total - self.mem_used
        if d.memory > free_mem:
            return f"memory: needs {format_bytes(d.memory)}, free {format_bytes(max(free_mem, 0))}"
        free_log = self.log_disk_total - self.log_disk_used
        if d.log_disk > free_log:
            return (
                f"log disk: needs {format_bytes(d.log_disk)}, free {format_bytes(max(free_log, 0))}"
            )
        return None

    def short_resource(self, d: Demand) -> str | None:
        """None when ``d`` fits, else the first resource short under OceanBase's name for
        it (``ObUnitManager::alter_resource_err_to_str``): ``MAX_CPU`` (above the server's
        cores), ``MIN_CPU``, ``MEMORY_SIZE`` or ``LOG_DISK_SIZE`` (above what is free)."""
        if d.max_cpu > self.cpu_total + 1e-9:
            return "MAX_CPU"
        if d.min_cpu > self.cpu_total - self.cpu_used + 1e-9:
            return "MIN_CPU"
        if d.memory > self.mem_total - self.mem_used:
            return "MEMORY_SIZE"
        if d.log_disk > self.log_disk_total - self.log_disk_used:
            return "LOG_DISK_SIZE"
        return None

    def load_after(self, d: Demand) -> float:
        """The largest utilisation (0..1) of CPU, memory and log disk once ``d`` is added."""
        parts = [
            (self.cpu_used + d.min_cpu) / self.cpu_total if self.cpu_total else 1.0,
            (self.mem_used + d.memory) / self.mem_total if self.mem_total else 1.0,
            (self.log_disk_used + d.log_disk) / self.log_disk_total if self.log_disk_total else 1.0,
        ]
        return max(parts)

    def take(self, d: Demand, affinity: Hashable) -> None:
        """Account for a unit placed here."""
        self.cpu_used += d.min_cpu
        self.mem_used += d.memory
        self.log_disk_used += d.log_disk
        self.affinity.add(affinity)

    def release(self, d: Demand, affinity: Hashable) -> None:
        """Forget a unit that leaves this server (the DELETE pre-check moves units away)."""
        self.cpu_used -= d.min_cpu
        self.mem_used -= d.memory
        self.log_disk_used -= d.log_disk
        self.affinity.discard(affinity)


@dataclass(frozen=True)
class UnitRequest:
    """A unit to place: ``ref`` identifies it to the caller (a unit id, or ``(pool, zone, i)``
    for a new one), ``affinity`` is its tenant or pool, ``exclude`` servers it may not go to
    (the server it leaves)."""

    ref: Hashable
    zone: str
    demand: Demand
    affinity: Hashable
    exclude: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PlacementFailure:
    """A unit that found no server. ``kind`` ``"server"``: the zone has too few usable
    servers without a unit of the same tenant (OB_ZONE_SERVER_NOT_ENOUGH); ``"resource"``:
    there are such servers but none has room (OB_ZONE_RESOURCE_NOT_ENOUGH), ``reason`` naming
    what is short on the roomiest of them."""

    request: UnitRequest
    kind: Literal["server", "resource"]
    reason: str


@dataclass
class Placement:
    """Result of :func:`place_units`: ``chosen`` maps each placed ``ref`` to a server key."""

    chosen: dict[Hashable, str] = field(default_factory=dict)
    failures: list[PlacementFailure] = field(default_factory=list)


def place_units(requests: Sequence[UnitRequest], servers: Iterable[ServerRoom]) -> Placement:
    """Place ``requests`` in order on ``servers`` (which are updated in place with what
    they receive). Every request is tried; failures are collected, not raised.

    Source: OceanBase ``ObUnitManager::choose_server_for_unit`` (capacity, anti-affinity,
    least load after placement).
    """
    by_zone: dict[str, list[ServerRoom]] = {}
    for s in servers:
        by_zone.setdefault(s.zone, []).append(s)
    out = Placement()
    for req in requests:
        pool = [
            s
            for s in by_zone.get(req.zone, [])
            if s.usable and s.key not in req.exclude and req.affinity not in s.affinity
        ]
        if not pool:
            out.failures.append(
                PlacementFailure(
                    req,
                    "server",
                    f"zone '{req.zone}' has no other active server without a unit of the same "
                    "tenant",
                )
            )
            continue
        fitting = [s for s in pool if s.shortfall(req.demand) is None]
        if not fitting:
            roomiest = max(pool, key=lambda s: (-s.load_after(req.demand), s.key))
            out.failures.append(
                PlacementFailure(
                    req,
                    "resource",
                    f"{roomiest.shortfall(req.demand)} on {roomiest.key}, the roomiest server "
                    f"of zone '{req.zone}'",
                )
            )
            continue
        best = min(fitting, key=lambda s: (s.load_after(req.demand), s.key))
        best.take(req.demand, req.affinity)
        out.chosen[req.ref] = best.key
    return out
