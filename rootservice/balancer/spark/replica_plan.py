"""Replica migration plan: disaster recovery's job (docs/design/migration.md; OceanBase's ``ObDRWorker``:
"migrate replica due to unit not match" and the rebuild of replicas of permanently offline
servers).

:func:`replica_migration_plan` lists, for log streams that still exist in
``__all_ls_status``:

1. every replica (row of ``__all_ls_meta_table``) whose server differs from its unit's
   server (joined on ``unit_id``): build a new replica on the unit's server, then remove
   the old one - unless the unit's server already has a healthy replica of the LS (then
   there is nothing to build and the row is skipped; a replica there that is still building
   or whose copy failed keeps the row, so the balancer can retry a failed copy);
2. every replica on a ``permanent_offline`` server whose LS is alive (a leader, role 1, on
   an alive server): rebuilt on the unit's server once the unit has moved (then it is a
   case of rule 1); while the unit is still on the dead server the row is listed with no
   destination, so that the wait is visible.

The member to copy from is a *healthy* replica of the LS - on an alive server, in service
(``replica_status`` NORMAL) and a Paxos member (FULL): the replica being moved itself when it
is healthy, else the leader when healthy, else the healthy member with the lowest address;
none -> no source. Servers missing from the servers input count as not alive; among several
leader rows on alive servers the lowest address wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rootservice.balancer.spark import schema as S

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from rootservice.balancer.spark.readers import Inputs


def replica_migration_plan(inputs: Inputs) -> DataFrame:
    """The replica migration plan (see the module docstring).

    Output, one row per replica to replace (:data:`rootservice.balancer.spark.schema.REPLICA_PLAN_SCHEMA`):
    ``tenant_id``, ``ls_id``; ``src_svr_ip`` / ``src_svr_port``, the member to copy from
    (null: none is healthy); ``dest_svr_ip`` / ``dest_svr_port``, the unit's server where
    the new replica is built (null: the unit is still on the permanent_offline server);
    ``old_svr_ip`` / ``old_svr_port``, the replica to remove once the new one is a member;
    ``reason``: :data:`rootservice.balancer.spark.schema.REPLICA_REASON_WAIT_UNIT` (no destination),
    ``REPLICA_REASON_NO_SOURCE`` (no source), ``REPLICA_REASON_OFFLINE`` (the old server is
    permanent_offline) or ``REPLICA_REASON_UNIT_MOVED``. A task is ready to run when both
    src and dest are set.

    The large input, ``ls_meta``, meets the others only through broadcasts (servers, units,
    the candidates' log streams) and is never shuffled; it is scanned more than once, so
    persist the inputs (:meth:`rootservice.balancer.spark.readers.Inputs.persist`) rather than
    reading it through JDBC each time.
    """
    from pyspark.sql import functions as F

    servers = F.broadcast(inputs.servers.select("svr_ip", "svr_port", "hb_status"))
    alive = F.coalesce(F.col("hb_status") == S.HB_ALIVE, F.lit(False))
    meta = inputs.ls_meta.join(servers, ["svr_ip", "svr_port"], "left").select(
        "tenant_id",
        "ls_id",
        "svr_ip",
        "svr_port",
        "role",
        "unit_id",
        alive.alias("alive"),
        F.coalesce(F.col("hb_status") == S.HB_PERMANENT_OFFLINE, F.lit(False)).alias("offline"),
        (
            alive
            & (F.col("replica_status") == S.REPLICA_STATUS_NORMAL)
            & (F.col("replica_type") == S.REPLICA_TYPE_FULL)
        ).alias("healthy"),
    )
    units = F.broadcast(
        inputs.units.select(
            "unit_id", F.col("svr_ip").alias("u_ip"), F.col("svr_port").alias("u_port")
        )
    )
    moved = (F.col("svr_ip") != F.col("u_ip")) | (F.col("svr_port") != F.col("u_port"))
    cand = (
        meta.join(units, "unit_id")
        .where(moved | F.col("offline"))
        .select(
            "tenant_id",
            "ls_id",
            "svr_ip",
            "svr_port",
            "u_ip",
            "u_port",
            moved.alias("moved"),
            "offline",
            "healthy",
        )
    )
    ls_keys = ["tenant_id", "ls_id"]
    # The candidates' log streams that still exist: ls_status streamed past the few keys.
    keys = inputs.ls_status.select(*ls_keys).join(
        F.broadcast(cand.select(*ls_keys).distinct()), ls_keys
    )
    members = meta.join(F.broadcast(keys), ls_keys, "left_semi")
    is_leader = (F.col("role") == S.ROLE_LEADER) & F.col("alive")
    # min over structs: the lowest address wins.
    ls_info = members.groupBy(*ls_keys).agg(
        F.min(F.when(is_leader, F.struct("svr_ip", "svr_port", "healthy"))).alias("leader"),
        F.min(F.when(F.col("healthy"), F.struct("svr_ip", "svr_port"))).alias("member"),
    )
    existing = members.where(F.col("healthy")).select(
        *ls_keys,
        F.col("svr_ip").alias("u_ip"),
        F.col("svr_port").alias("u_port"),
        F.lit(True).alias("dest_has"),
    )
    t = (
        cand.join(ls_info, ls_keys)
        .where(F.col("moved") | (F.col("offline") & F.col("leader").isNotNull()))
        .join(existing, [*ls_keys, "u_ip", "u_port"], "left")
        .where(~(F.col("moved") & F.coalesce(F.col("dest_has"), F.lit(False))))
    )
    leader_ok = F.coalesce(F.col("leader.healthy"), F.lit(False))
    src_ip = (
        F.when(F.col("healthy"), F.col("svr_ip"))
        .when(leader_ok, F.col("leader.svr_ip"))
        .otherwise(F.col("member.svr_ip"))
    )
    src_port = (
        F.when(F.col("healthy"), F.col("svr_port"))
        .when(leader_ok, F.col("leader.svr_port"))
        .otherwise(F.col("member.svr_port"))
    )
    reason = (
        F.when(~F.col("moved"), F.lit(S.REPLICA_REASON_WAIT_UNIT))
        .when(src_ip.isNull(), F.lit(S.REPLICA_REASON_NO_SOURCE))
        .when(F.col("offline"), F.lit(S.REPLICA_REASON_OFFLINE))
        .otherwise(F.lit(S.REPLICA_REASON_UNIT_MOVED))
    )
    return t.select(
        "tenant_id",
        "ls_id",
        src_ip.alias("src_svr_ip"),
        src_port.alias("src_svr_port"),
        F.when(F.col("moved"), F.col("u_ip")).alias("dest_svr_ip"),
        F.when(F.col("moved"), F.col("u_port")).alias("dest_svr_port"),
        F.col("svr_ip").alias("old_svr_ip"),
        F.col("svr_port").alias("old_svr_port"),
        reason.alias("reason"),
    )
