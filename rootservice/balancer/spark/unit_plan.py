"""Unit migration plan: the root balancer's job (docs/design/migration.md; OceanBase's ``ObRootBalancer``
driving ``ObUnitManager``'s unit migration).

:func:`unit_migration_plan` finds a new server for every unit of a server that is DELETING
or ``permanent_offline``: an active server (display status ACTIVE, alive, ``stop_time ==
0``) of the unit's zone with room for it after every move planned before it, never hosting
two units of one tenant (of one pool while the pool is not granted), least loaded after
placement first, ties by address - :func:`rootservice.tenants.placement.place_units`, called per
zone by :func:`rootservice.balancer.spark.placer.place_zone` inside ``applyInPandas``, so zones are
planned in parallel. What the servers' units take (the joins of ``__all_unit`` with pools
and unit configs and the sums per server, counting a migrating unit on both its servers as
OceanBase does) is computed by Spark.

Units already migrating (``migrate_from_svr_ip != ''``) are left alone; units whose pool or
unit config is missing are skipped. The RS records each placed move in ``__all_unit``
(``svr_*`` = target, ``migrate_from_svr_*`` = source) and reports the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rootservice.balancer.spark import schema as S
from rootservice.balancer.spark.placer import place_zone, ship_by_value

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from rootservice.balancer.spark.readers import Inputs

_DEMANDS = """
SELECT /*+ BROADCAST(p), BROADCAST(c) */
       u.unit_id, u.resource_pool_id, p.tenant_id, u.zone, u.svr_ip, u.svr_port,
       u.migrate_from_svr_ip, u.migrate_from_svr_port,
       c.min_cpu, c.max_cpu, c.memory_size, c.log_disk_size,
       IF(p.tenant_id <> :ungranted, concat('tenant:', CAST(p.tenant_id AS STRING)),
          concat('pool:', CAST(u.resource_pool_id AS STRING))) AS affinity
FROM {units} u
JOIN {pools} p ON p.resource_pool_id = u.resource_pool_id
JOIN {unit_configs} c ON c.unit_config_id = p.unit_config_id
"""

_ROOMS = """
WITH holders AS (
    SELECT svr_ip, svr_port, min_cpu, memory_size, log_disk_size, affinity FROM {demands}
    UNION ALL
    SELECT migrate_from_svr_ip, migrate_from_svr_port, min_cpu, memory_size, log_disk_size,
           affinity
    FROM {demands}
    WHERE migrate_from_svr_ip <> ''
      AND NOT (migrate_from_svr_ip = svr_ip AND migrate_from_svr_port = svr_port)
), loads AS (
    SELECT svr_ip, svr_port, sum(min_cpu) AS cpu_used, sum(memory_size) AS mem_used,
           sum(log_disk_size) AS log_disk_used, collect_set(affinity) AS affinity
    FROM holders GROUP BY svr_ip, svr_port
)
SELECT s.zone, s.svr_ip, s.svr_port, s.cpu_total, s.mem_total, s.log_disk_total,
       CAST(coalesce(l.cpu_used, 0) AS double) AS cpu_used,
       CAST(coalesce(l.mem_used, 0) AS bigint) AS mem_used,
       CAST(coalesce(l.log_disk_used, 0) AS bigint) AS log_disk_used,
       (s.status = :active AND s.hb_status = :alive AND s.stop_time = 0 AND NOT s.suspect)
           AS usable,
       l.affinity
FROM {servers} s
LEFT JOIN loads l ON l.svr_ip = s.svr_ip AND l.svr_port = s.svr_port
"""

_REQUESTS = """
SELECT /*+ BROADCAST(s) */
       d.unit_id, d.tenant_id, d.zone, d.svr_ip AS from_svr_ip, d.svr_port AS from_svr_port,
       d.min_cpu, d.max_cpu, d.memory_size, d.log_disk_size, d.affinity,
       IF(s.status = :deleting, :r_deleting, :r_offline) AS trigger
FROM {demands} d
JOIN {servers} s ON s.svr_ip = d.svr_ip AND s.svr_port = d.svr_port
WHERE d.migrate_from_svr_ip = '' AND (s.status = :deleting OR s.hb_status = :offline)
"""


def unit_demands(inputs: Inputs) -> DataFrame:
    """Every unit with its tenant, demand and anti-affinity key: columns unit_id,
    resource_pool_id, tenant_id, zone, svr_ip, svr_port, migrate_from_svr_ip,
    migrate_from_svr_port, min_cpu, max_cpu (cores), memory_size, log_disk_size (bytes),
    affinity (``tenant:<id>`` or ``pool:<id>``). Inner joins: a unit without pool or config
    is dropped."""
    return inputs.units.sparkSession.sql(
        _DEMANDS,
        {"ungranted": S.UNGRANTED_TENANT},
        units=inputs.units,
        pools=inputs.pools,
        unit_configs=inputs.unit_configs,
    )


def server_rooms(inputs: Inputs, demands: DataFrame) -> DataFrame:
    """Every server of the servers input as a placement candidate
    (:data:`rootservice.balancer.spark.placer.ROOMS_LAYOUT` plus ``affinity``, an array of the keys it
    hosts): its units' demands summed, a unit migrating away counted on both its servers;
    ``usable`` = ACTIVE, alive, not stopped and not SUSPECT."""
    return demands.sparkSession.sql(
        _ROOMS,
        {"active": S.STATUS_ACTIVE, "alive": S.HB_ALIVE},
        demands=demands,
        servers=inputs.servers,
    )


def units_to_move(inputs: Inputs, demands: DataFrame) -> DataFrame:
    """Units (not already migrating) of DELETING or ``permanent_offline`` servers, as
    :data:`rootservice.balancer.spark.placer.REQUESTS_LAYOUT` rows."""
    return demands.sparkSession.sql(
        _REQUESTS,
        {
            "deleting": S.STATUS_DELETING,
            "offline": S.HB_PERMANENT_OFFLINE,
            "r_deleting": S.UNIT_REASON_DELETING,
            "r_offline": S.UNIT_REASON_OFFLINE,
        },
        demands=demands,
        servers=inputs.servers,
    )


def unit_migration_plan(inputs: Inputs) -> DataFrame:
    """The unit migration plan (see the module docstring).

    Output, one row per unit to move (:data:`rootservice.balancer.spark.schema.UNIT_PLAN_SCHEMA`):
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
