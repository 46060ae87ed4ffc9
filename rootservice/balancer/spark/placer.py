"""The greedy unit placer of one zone, on pandas frames (used by the Spark job inside
``applyInPandas`` and by the pandas reference).

:func:`place_zone` turns the zone's candidate servers and the units that must leave their
server into unit-plan rows by calling :func:`rootservice.tenants.placement.place_units`, so the
balancer decides exactly as the DELETE SERVER pre-check and CREATE RESOURCE POOL do
(OceanBase's ``ObUnitManager::choose_server_for_unit``: capacity, anti-affinity, least load
after placement, ties by address). Units are placed in ``unit_id`` order, the order in which
the DELETE pre-check (``ServerPreChecks.check_delete``) tried them, so a delete that the pre-check
allowed finds the same room here.

This module imports only pandas and :mod:`rootservice.tenants.placement`; both are shipped to Spark
executors by value (see :func:`ship_by_value`), so the job also runs on a cluster whose
executors do not have this project installed.
"""

from __future__ import annotations

import pandas as pd

from rootservice.balancer.spark.schema import (
    UNGRANTED_TENANT,
    UNIT_PLAN_SCHEMA,
    Layout,
    columns,
    conform_pandas,
)
from rootservice.tenants.placement import Demand, ServerRoom, UnitRequest, place_units

# Names are imported (not modules) so that cloudpickle can ship the functions by value.

ROOMS_LAYOUT: Layout = (
    ("zone", "string"),
    ("svr_ip", "string"),
    ("svr_port", "int"),
    ("cpu_total", "double"),
    ("mem_total", "long"),
    ("log_disk_total", "long"),
    ("cpu_used", "double"),
    ("mem_used", "long"),
    ("log_disk_used", "long"),
    ("usable", "boolean"),
)
"""Candidate servers: capacity, what their units (hosted or migrating away) take, and
``usable`` (ACTIVE, alive, not stopped); plus ``affinity``, an array of the anti-affinity
keys they host (:func:`affinity_key`)."""

REQUESTS_LAYOUT: Layout = (
    ("unit_id", "long"),
    ("tenant_id", "long"),
    ("zone", "string"),
    ("from_svr_ip", "string"),
    ("from_svr_port", "int"),
    ("min_cpu", "double"),
    ("max_cpu", "double"),
    ("memory_size", "long"),
    ("log_disk_size", "long"),
    ("affinity", "string"),
    ("trigger", "string"),
)
"""Units to move: demand, anti-affinity key, and the reason they move (``trigger``, one of
:data:`rootservice.balancer.spark.schema.UNIT_REASON_DELETING` / ``UNIT_REASON_OFFLINE``)."""


def affinity_key(tenant_id: int, resource_pool_id: int) -> str:
    """Anti-affinity key of a unit: ``tenant:<id>`` once its pool is granted, else
    ``pool:<id>`` (as :func:`rootservice.tenants.vocabulary.affinity_of`)."""
    if tenant_id != UNGRANTED_TENANT:
        return f"tenant:{tenant_id}"
    return f"pool:{resource_pool_id}"


def _key(ip: str, port: int) -> str:
    return f"{ip}:{int(port)}"


def place_zone(rooms: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """Place one zone's ``requests`` (:data:`REQUESTS_LAYOUT`) on its ``rooms``
    (:data:`ROOMS_LAYOUT` plus ``affinity``). Returns unit-plan rows
    (:data:`rootservice.balancer.spark.schema.UNIT_PLAN_SCHEMA`, nullable ``to_svr_*``): the target
    server and ``trigger`` as reason, or null target and the placement failure's reason
    (e.g. ``"memory: needs 4G, free 2G on 10.0.0.7:2882, the roomiest server of zone 'z1'"``
    or ``"zone 'z1' has no other active server without a unit of the same tenant"``).

    ``rooms`` is not modified. Either frame may be empty (no rows out without requests).
    """
    if requests.empty:
        return conform_pandas(
            pd.DataFrame({c: [] for c in columns(UNIT_PLAN_SCHEMA)}),
            UNIT_PLAN_SCHEMA,
            nullable=True,
        )
    servers: list[ServerRoom] = []
    address: dict[str, tuple[str, int]] = {}
    for r in rooms.itertuples(index=False):
        key = _key(r.svr_ip, r.svr_port)
        address[key] = (r.svr_ip, int(r.svr_port))
        aff = r.affinity
        servers.append(
            ServerRoom(
                key=key,
                zone=r.zone,
                cpu_total=float(r.cpu_total),
                mem_total=int(r.mem_total),
                log_disk_total=int(r.log_disk_total),
                cpu_used=float(r.cpu_used),
                mem_used=int(r.mem_used),
                log_disk_used=int(r.log_disk_used),
                affinity=set() if aff is None or isinstance(aff, float) else {str(a) for a in aff},
                usable=bool(r.usable),
            )
        )
    reqs = requests.sort_values("unit_id", kind="stable")
    units: list[UnitRequest] = []
    for q in reqs.itertuples(index=False):
        units.append(
            UnitRequest(
                ref=int(q.unit_id),
                zone=q.zone,
                demand=Demand(
                    float(q.min_cpu), float(q.max_cpu), int(q.memory_size), int(q.log_disk_size)
                ),
                affinity=q.affinity,
                exclude=frozenset({_key(q.from_svr_ip, q.from_svr_port)}),
            )
        )
    result = place_units(units, servers)
    failed = {f.request.ref: f.reason for f in result.failures}
    rows = []
    for q in reqs.itertuples(index=False):
        uid = int(q.unit_id)
        chosen = result.chosen.get(uid)
        to_ip, to_port = address[chosen] if chosen is not None else (None, None)
        rows.append(
            {
                "unit_id": uid,
                "tenant_id": int(q.tenant_id),
                "zone": q.zone,
                "from_svr_ip": q.from_svr_ip,
                "from_svr_port": int(q.from_svr_port),
                "to_svr_ip": to_ip,
                "to_svr_port": to_port,
                "reason": q.trigger if chosen is not None else failed[uid],
            }
        )
    return conform_pandas(pd.DataFrame(rows), UNIT_PLAN_SCHEMA, nullable=True)


def ship_by_value() -> None:
    """Have PySpark's cloudpickle send this module and :mod:`rootservice.tenants.placement` by value
    with the UDF, so executors need only pandas and pyarrow. Idempotent."""
    import sys

    from pyspark import cloudpickle

    from rootservice.balancer.spark import schema
    from rootservice.tenants import placement

    for mod in (placement, schema, sys.modules[__name__]):
        cloudpickle.register_pickle_by_value(mod)
