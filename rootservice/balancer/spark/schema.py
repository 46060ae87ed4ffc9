"""Column layouts of the jobs' inputs and plans, the status words they test, and the reasons
they write (shared by the Spark jobs and by :mod:`rootservice.balancer.spark.reference`).

Every layout is a tuple of ``(column, kind)`` with ``kind`` one of ``string``, ``int``
(32-bit), ``long`` (64-bit), ``double`` and ``boolean``; :func:`spark_schema` and :func:`conform_pandas`
turn one into a Spark ``StructType`` or coerce a pandas frame to it. The input layouts are
the columns of the system tables (docs/design/servers.md#the-tables) the jobs need, plus :data:`SERVERS_SCHEMA`,
which the caller supplies because capacity and heartbeat status live only in the RS's memory.

Sizes are bytes, CPU is cores, times microseconds since the epoch (``0`` = not set).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

Layout = tuple[tuple[str, str], ...]

SERVERS_SCHEMA: Layout = (
    ("svr_ip", "string"),
    ("svr_port", "int"),
    ("zone", "string"),
    # display status: ACTIVE / INACTIVE / DELETING (docs/design/servers.md#the-three-statuses)
    ("status", "string"),
    # alive / lease_expired / permanent_offline (docs/design/servers.md#the-three-statuses)
    ("hb_status", "string"),
    ("stop_time", "long"),
    ("cpu_total", "double"),
    ("mem_total", "long"),
    ("log_disk_total", "long"),
    # SUSPECT: alive, but no new unit (no copy) goes to it
    ("suspect", "boolean"),
)
"""The servers input: one row per whitelisted server, from the RS's memory (``__all_server``
has ``status`` and ``stop_time`` but neither the heartbeat status nor the capacity). A
server missing from it is, for the jobs, not in ``__all_server``."""

UNITS_SCHEMA: Layout = (
    ("unit_id", "long"),
    ("resource_pool_id", "long"),
    ("unit_group_id", "long"),
    ("zone", "string"),
    ("svr_ip", "string"),
    ("svr_port", "int"),
    ("migrate_from_svr_ip", "string"),  # '' when the unit is not migrating
    ("migrate_from_svr_port", "int"),
    ("status", "string"),
)
"""``__all_unit``."""

POOLS_SCHEMA: Layout = (
    ("resource_pool_id", "long"),
    ("unit_config_id", "long"),
    ("tenant_id", "long"),  # -1 until the pool is granted
)
"""``__all_resource_pool``."""

UNIT_CONFIGS_SCHEMA: Layout = (
    ("unit_config_id", "long"),
    ("max_cpu", "double"),
    ("min_cpu", "double"),
    ("memory_size", "long"),
    ("log_disk_size", "long"),
)
"""``__all_unit_config``."""

LS_STATUS_SCHEMA: Layout = (
    ("tenant_id", "long"),
    ("ls_id", "long"),
    ("status", "string"),
    ("unit_group_id", "long"),
)
"""``__all_ls_status``."""

LS_META_SCHEMA: Layout = (
    ("tenant_id", "long"),
    ("ls_id", "long"),
    ("svr_ip", "string"),
    ("svr_port", "int"),
    ("role", "int"),  # 1 leader, 2 follower
    ("replica_type", "long"),  # 0 FULL (a Paxos member)
    ("replica_status", "string"),  # NORMAL = in service
    ("unit_id", "long"),
    ("zone", "string"),
)
"""``__all_ls_meta_table``."""

TENANTS_SCHEMA: Layout = (
    ("tenant_id", "long"),
    ("tenant_name", "string"),
    ("status", "string"),
)
"""``__all_tenant``."""

INPUT_LAYOUTS: dict[str, Layout] = {
    "servers": SERVERS_SCHEMA,
    "units": UNITS_SCHEMA,
    "pools": POOLS_SCHEMA,
    "unit_configs": UNIT_CONFIGS_SCHEMA,
    "ls_status": LS_STATUS_SCHEMA,
    "ls_meta": LS_META_SCHEMA,
    "tenants": TENANTS_SCHEMA,
}
"""Input name -> layout, in the order of the :class:`Inputs` fields."""

INPUT_TABLES: dict[str, str] = {
    "units": "__all_unit",
    "pools": "__all_resource_pool",
    "unit_configs": "__all_unit_config",
    "ls_status": "__all_ls_status",
    "ls_meta": "__all_ls_meta_table",
    "tenants": "__all_tenant",
}
"""Input name -> the system table it is read from (``servers`` comes from the caller)."""

UNIT_PLAN_SCHEMA: Layout = (
    ("unit_id", "long"),
    ("tenant_id", "long"),  # the pool's tenant, -1 for an ungranted pool
    ("zone", "string"),
    ("from_svr_ip", "string"),
    ("from_svr_port", "int"),
    ("to_svr_ip", "string"),  # null when the unit cannot be placed
    ("to_svr_port", "int"),
    ("reason", "string"),
)
"""Output of the unit migration plan."""

REPLICA_PLAN_SCHEMA: Layout = (
    ("tenant_id", "long"),
    ("ls_id", "long"),
    ("src_svr_ip", "string"),  # the member to copy from; null when there is none
    ("src_svr_port", "int"),
    ("dest_svr_ip", "string"),  # the unit's server; null while the unit has not moved
    ("dest_svr_port", "int"),
    ("old_svr_ip", "string"),  # the replica to replace (removed once the new one is a member)
    ("old_svr_port", "int"),
    ("reason", "string"),
)
"""Output of the replica migration plan."""

LOST_REPLICAS_SCHEMA: Layout = (
    ("tenant_id", "long"),
    ("ls_id", "long"),
    ("svr_ip", "string"),
    ("svr_port", "int"),
    ("reason", "string"),
)
"""Output of the lost-replica detection."""

# --- words ---------------------------------------------------------------------------------

STATUS_ACTIVE = "ACTIVE"
STATUS_INACTIVE = "INACTIVE"
STATUS_DELETING = "DELETING"
HB_ALIVE = "alive"
HB_LEASE_EXPIRED = "lease_expired"
HB_PERMANENT_OFFLINE = "permanent_offline"
REPLICA_STATUS_NORMAL = "NORMAL"
REPLICA_TYPE_FULL = 0
ROLE_LEADER = 1
UNGRANTED_TENANT = -1

# --- reasons -------------------------------------------------------------------------------

UNIT_REASON_DELETING = "server DELETING"
"""Unit plan, placed unit: its server is DELETING (also when it is permanent_offline too)."""
UNIT_REASON_OFFLINE = "server permanent_offline"
"""Unit plan, placed unit: its server is permanent_offline."""
# Units that cannot be placed carry rootservice.tenants.placement's PlacementFailure.reason.

REPLICA_REASON_UNIT_MOVED = "migrate replica due to unit not match"
"""Replica plan: the replica's unit is on another server (ObDRWorker's wording)."""
REPLICA_REASON_OFFLINE = "rebuild replica of permanent_offline server on its unit's server"
"""Replica plan: the replica's server is permanent_offline and its unit has moved."""
REPLICA_REASON_WAIT_UNIT = "unit still on the permanent_offline server: waiting for unit migration"
"""Replica plan (no destination): the unit has not left the permanent_offline server yet."""
REPLICA_REASON_NO_SOURCE = "no healthy member to copy from"
"""Replica plan (no source): no member of the LS is alive, in service and FULL."""

LOST_SERVER_NOT_IN_TABLE = "server not in __all_server"
LOST_SERVER_OFFLINE = "server permanent_offline"
LOST_NOT_IN_SERVICE = "replica not in service"
LOST_NOT_PAXOS = "not a paxos member"
LOST_LS_GONE = "log stream not in __all_ls_status"
# A lost replica's reason is "<server part>: <replica part>", e.g.
# "server permanent_offline: replica not in service".


# --- conversions ---------------------------------------------------------------------------

_PANDAS_DTYPES = {
    "string": object,
    "int": "int32",
    "long": "int64",
    "double": "float64",
    "boolean": "bool",
}
# Columns that may be null in a plan: nullable pandas integer dtype for them.
_NULLABLE_DTYPES = {**_PANDAS_DTYPES, "int": "Int32", "long": "Int64"}
_DDL_TYPES = {"string": "string", "int": "int", "long": "bigint", "double": "double"}
_DDL_TYPES["boolean"] = "boolean"


def columns(layout: Layout) -> list[str]:
    """The column names of ``layout``, in order."""
    return [name for name, _ in layout]


def spark_type(kind: str) -> str:
    """The Spark SQL type name of a layout ``kind`` (for ``cast``)."""
    return _DDL_TYPES[kind]


def spark_schema(layout: Layout) -> StructType:
    """``layout`` as a Spark ``StructType`` (every field nullable)."""
    from pyspark.sql.types import (
        BooleanType,
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    types = {
        "string": StringType,
        "int": IntegerType,
        "long": LongType,
        "double": DoubleType,
        "boolean": BooleanType,
    }
    return StructType([StructField(name, types[kind](), True) for name, kind in layout])


def ddl(layout: Layout) -> str:
    """``layout`` as a Spark DDL string, e.g. ``"svr_ip string, svr_port int"``."""
    return ", ".join(f"{name} {_DDL_TYPES[kind]}" for name, kind in layout)


def conform_pandas(df: pd.DataFrame, layout: Layout, *, nullable: bool = False) -> pd.DataFrame:
    """A copy of ``df`` with exactly the columns of ``layout``, in order, of its dtypes.

    ``nullable`` uses pandas' nullable integers (for plans, whose ip/port may be null).
    Raises ``KeyError`` naming a missing column; ``ValueError`` / ``TypeError`` for a value
    that does not convert (e.g. a null in a non-nullable integer column).
    """
    missing = [c for c in columns(layout) if c not in df.columns]
    if missing:
        raise KeyError(f"missing columns {missing}; expected {columns(layout)}")
    dtypes = _NULLABLE_DTYPES if nullable else _PANDAS_DTYPES
    out = pd.DataFrame(index=range(len(df)))
    for name, kind in layout:
        col = df[name].reset_index(drop=True)
        if kind == "string":
            out[name] = col.astype(object).where(col.notna(), None)
        else:
            out[name] = col.astype(dtypes[kind])  # type: ignore[call-overload]
    return out


@dataclass
class PandasInputs:
    """The jobs' inputs as pandas frames, one per :data:`INPUT_LAYOUTS` entry.

    What tests and the RS build in memory, what :func:`rootservice.balancer.spark.readers.read_pandas_inputs`
    returns, and what the pandas reference (:mod:`rootservice.balancer.spark.reference`) computes on.
    """

    servers: pd.DataFrame
    units: pd.DataFrame
    pools: pd.DataFrame
    unit_configs: pd.DataFrame
    ls_status: pd.DataFrame
    ls_meta: pd.DataFrame
    tenants: pd.DataFrame

    def conformed(self) -> PandasInputs:
        """A copy with every frame coerced to its layout (:func:`conform_pandas`)."""
        kw: dict[str, Any] = {
            f.name: conform_pandas(getattr(self, f.name), INPUT_LAYOUTS[f.name])
            for f in fields(self)
        }
        return PandasInputs(**kw)

    @staticmethod
    def empty() -> PandasInputs:
        """Inputs with no rows (tests fill in what they need)."""
        kw: dict[str, Any] = {
            name: conform_pandas(pd.DataFrame({c: [] for c in columns(layout)}), layout)
            for name, layout in INPUT_LAYOUTS.items()
        }
        return PandasInputs(**kw)
