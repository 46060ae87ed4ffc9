"""Unit migration plan: the root balancer's job (SPEC.md §9; OceanBase's ``ObRootBalancer``
driving ``ObUnitManager``'s unit migration).

:func:`unit_migration_plan` finds a new server for every unit of a server that is DELETING
or ``permanent_offline``: an active server (display status ACTIVE, alive, ``stop_time ==
0``) of the unit's zone with room for it after every move planned before it, never hosting
two units of one tenant (of one pool while the pool is not granted), least loaded after
placement first, ties by address - :func:`rootservice.placement.place_units`, called per
zone by :func:`rootservice.jobs.placer.place_zone` inside ``applyInPandas``, so zones are
planned in parallel. What the servers' units take (the joins of ``__all_unit`` with pools
and unit configs and the sums per server, counting a migrating unit on both its servers as
OceanBase does) is computed by Spark.

Units already migrating (``migrate_from_svr_ip != ''``) are left alone; units whose pool or
unit config is missing are skipped. The RS records each placed move in ``__all_unit``
(``svr_*`` = target, ``migrate_from_svr_*`` = source) and reports the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rootservice.jobs import schema as S
from rootservice.jobs.placer import ROOMS_LAYOUT, place_zone, ship_by_value

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from rootservice.jobs.readers import Inputs


def unit_demands(inputs: Inputs) -> DataFrame:
    """Every unit with its tenant, demand and anti-affinity key: columns unit_id,
    resource_pool_id, tenant_id, zone, svr_ip, svr_port, migrate_from_svr_ip,
    migrate_from_svr_port, min_cpu, max_cpu (cores), memory_size, log_disk_size (bytes),
    affinity (``tenant:<id>`` or ``pool:<id>``). Inner joins: a unit without pool or config
    is dropped."""
    from pyspark.sql import functions as F

    return (
        inputs.units.join(inputs.pools, "resource_pool_id")
        .join(inputs.unit_configs, "unit_config_id")
        .select(
            "unit_id",
            "resource_pool_id",
            "tenant_id",
            "zone",
            "svr_ip",
            "svr_port",
            "migrate_from_svr_ip",
            "migrate_from_svr_port",
            "min_cpu",
            "max_cpu",
            "memory_size",
            "log_disk_size",
            F.when(
                F.col("tenant_id") != S.UNGRANTED_TENANT,
                F.concat(F.lit("tenant:"), F.col("tenant_id").cast("string")),
            )
            .otherwise(F.concat(F.lit("pool:"), F.col("resource_pool_id").cast("string")))
            .alias("affinity"),
        )
    )


def usable_server() -> Column:
    """Spark condition: the server may receive units (ACTIVE, alive, not stopped)."""
    from pyspark.sql import functions as F

    return (
        (F.col("status") == S.STATUS_ACTIVE)
        & (F.col("hb_status") == S.HB_ALIVE)
        & (F.col("stop_time") == 0)
    )


def server_rooms(inputs: Inputs, demands: DataFrame) -> DataFrame:
    """Every server of the servers input as a placement candidate
    (:data:`rootservice.jobs.placer.ROOMS_LAYOUT` plus ``affinity``, an array of keys):
    its units' demands summed, a unit migrating away counted on both its servers."""
    from pyspark.sql import functions as F

    demand_cols = ["min_cpu", "memory_size", "log_disk_size", "affinity"]
    hosted = demands.select("svr_ip", "svr_port", *demand_cols)
    leaving = demands.where(
        (F.col("migrate_from_svr_ip") != "")
        & ~(
            (F.col("migrate_from_svr_ip") == F.col("svr_ip"))
            & (F.col("migrate_from_svr_port") == F.col("svr_port"))
        )
    ).select(
        F.col("migrate_from_svr_ip").alias("svr_ip"),
        F.col("migrate_from_svr_port").alias("svr_port"),
        *demand_cols,
    )
    loads = (
        hosted.unionByName(leaving)
        .groupBy("svr_ip", "svr_port")
        .agg(
            F.sum("min_cpu").alias("cpu_used"),
            F.sum("memory_size").alias("mem_used"),
            F.sum("log_disk_size").alias("log_disk_used"),
            F.collect_set("affinity").alias("affinity"),
        )
    )
    cols: list[Column | str] = []
    for c, k in ROOMS_LAYOUT:
        if c in ("cpu_used", "mem_used", "log_disk_used"):
            cols.append(F.coalesce(F.col(c), F.lit(0)).cast(S.spark_type(k)).alias(c))
        elif c == "usable":
            cols.append(usable_server().alias(c))
        else:
            cols.append(c)
    return inputs.servers.join(loads, ["svr_ip", "svr_port"], "left").select(*cols, "affinity")


def units_to_move(inputs: Inputs, demands: DataFrame) -> DataFrame:
    """Units (not already migrating) of DELETING or ``permanent_offline`` servers, as
    :data:`rootservice.jobs.placer.REQUESTS_LAYOUT` rows."""
    from pyspark.sql import functions as F

    sources = inputs.servers.where(
        (F.col("status") == S.STATUS_DELETING) | (F.col("hb_status") == S.HB_PERMANENT_OFFLINE)
    ).select(
        "svr_ip",
        "svr_port",
        F.when(F.col("status") == S.STATUS_DELETING, F.lit(S.UNIT_REASON_DELETING))
        .otherwise(F.lit(S.UNIT_REASON_OFFLINE))
        .alias("trigger"),
    )
    return (
        demands.where(F.col("migrate_from_svr_ip") == "")
        .join(F.broadcast(sources), ["svr_ip", "svr_port"])
        .select(
            "unit_id",
            "tenant_id",
            "zone",
            F.col("svr_ip").alias("from_svr_ip"),
            F.col("svr_port").alias("from_svr_port"),
            "min_cpu",
            "max_cpu",
            "memory_size",
            "log_disk_size",
            "affinity",
            "trigger",
        )
    )


def unit_migration_plan(inputs: Inputs) -> DataFrame:
    """The unit migration plan (see the module docstring).

    Output, one row per unit to move (:data:`rootservice.jobs.schema.UNIT_PLAN_SCHEMA`):
    ``unit_id`` bigint, ``tenant_id`` bigint (-1 for an ungranted pool), ``zone``,
    ``from_svr_ip`` / ``from_svr_port`` (the server it leaves), ``to_svr_ip`` /
    ``to_svr_port`` (the target; null when it cannot be placed) and ``reason``: for a placed
    unit why it moves (``"server DELETING"`` / ``"server permanent_offline"``), else what is
    short, e.g. ``"memory: needs 4G, free 2G on 10.0.0.7:2882, the roomiest server of zone
    'z1'"`` or ``"zone 'z1' has no other active server without a unit of the same tenant"``.
    Lazy, like every DataFrame: nothing runs before an action (``toPandas``...).
    """
    ship_by_value()
    demands = unit_demands(inputs)
    requests = units_to_move(inputs, demands)
    rooms = server_rooms(inputs, demands)
    return (
        rooms.groupBy("zone")
        .cogroup(requests.groupBy("zone"))
        .applyInPandas(place_zone, S.ddl(S.UNIT_PLAN_SCHEMA))
    )
