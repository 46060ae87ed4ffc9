"""Lost-replica detection (docs/design/migration.md; OceanBase's ``ObLostReplicaChecker``).

A server is *lost* when it is not in ``__all_server`` (here: not in the servers input) or
is ``permanent_offline``. A replica (row of ``__all_ls_meta_table``) on a lost server is
*lost* when it is not in service (``replica_status != 'NORMAL'``), or not a Paxos member
(``replica_type != 0``, i.e. not FULL), or its LS is no longer in ``__all_ls_status``. The RS
deletes lost rows in batches; a FULL, in-service replica of a living LS on a lost server is
left to disaster recovery's member removal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rootservice.balancer.spark import schema as S

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from rootservice.balancer.spark.readers import Inputs


def lost_replicas(inputs: Inputs) -> DataFrame:
    """The lost replicas (see the module docstring).

    Output (:data:`rootservice.balancer.spark.schema.LOST_REPLICAS_SCHEMA`): ``tenant_id``, ``ls_id``,
    ``svr_ip``, ``svr_port`` - the primary key of the row to delete - and ``reason``,
    ``"<server>: <replica>"`` with server ``"server not in __all_server"`` or ``"server
    permanent_offline"`` and replica the first of ``"replica not in service"``, ``"not a
    paxos member"``, ``"log stream not in __all_ls_status"`` that applies.
    """
    from pyspark.sql import functions as F

    servers = F.broadcast(
        inputs.servers.select("svr_ip", "svr_port", "hb_status", F.lit(True).alias("known"))
    )
    on_lost = (
        inputs.ls_meta.join(servers, ["svr_ip", "svr_port"], "left")
        .where(F.col("known").isNull() | (F.col("hb_status") == S.HB_PERMANENT_OFFLINE))
        .select(
            "tenant_id", "ls_id", "svr_ip", "svr_port", "replica_status", "replica_type", "known"
        )
    )
    ls_keys = ["tenant_id", "ls_id"]
    # The rows on lost servers are few: only their log streams are looked up in ls_status.
    living = (
        inputs.ls_status.select(*ls_keys)
        .join(F.broadcast(on_lost.select(*ls_keys).distinct()), ls_keys)
        .withColumn("ls_exists", F.lit(True))
    )
    replica_part = (
        F.when(F.col("replica_status") != S.REPLICA_STATUS_NORMAL, F.lit(S.LOST_NOT_IN_SERVICE))
        .when(F.col("replica_type") != S.REPLICA_TYPE_FULL, F.lit(S.LOST_NOT_PAXOS))
        .when(F.col("ls_exists").isNull(), F.lit(S.LOST_LS_GONE))
    )
    server_part = F.when(F.col("known").isNull(), F.lit(S.LOST_SERVER_NOT_IN_TABLE)).otherwise(
        F.lit(S.LOST_SERVER_OFFLINE)
    )
    return (
        on_lost.join(living, ls_keys, "left")
        .where(replica_part.isNotNull())
        .select(
            "tenant_id",
            "ls_id",
            "svr_ip",
            "svr_port",
            F.concat(server_part, F.lit(": "), replica_part).alias("reason"),
        )
    )
