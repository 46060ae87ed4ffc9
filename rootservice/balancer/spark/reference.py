"""The three plans computed without Spark, in plain single-process pandas: what the RS's
``PandasPlanner`` runs. Same inputs, same rules, same output layouts as the Spark jobs
(:mod:`rootservice.balancer.spark.unit_plan`, :mod:`rootservice.balancer.spark.replica_plan`,
:mod:`rootservice.balancer.spark.lost_replicas`, whose docstrings give the rules); used by the
benchmark (``make bench-spark``) and by the test that checks that the engines agree.

pandas (:class:`rootservice.balancer.spark.schema.PandasInputs` in, pandas frame out):
:func:`pandas_unit_migration_plan`, :func:`pandas_replica_migration_plan`,
:func:`pandas_lost_replicas`. The unit plan's greedy placer is the same
:func:`rootservice.balancer.spark.placer.place_zone`, called per zone.

The same plans as SQL inside PostgreSQL, for the benchmark and the agreement test, are in
``tests/support/sql_plans.py``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rootservice.balancer.spark import schema as S
from rootservice.balancer.spark.placer import REQUESTS_LAYOUT, ROOMS_LAYOUT, place_zone
from rootservice.balancer.spark.schema import PandasInputs

# --- pandas ---------------------------------------------------------------------------------


def _empty(layout: S.Layout) -> pd.DataFrame:
    return S.conform_pandas(pd.DataFrame({c: [] for c in S.columns(layout)}), layout, nullable=True)


def pandas_unit_demands(p: PandasInputs) -> pd.DataFrame:
    """Every unit with tenant, demand and anti-affinity key (as
    :func:`rootservice.balancer.spark.unit_plan.unit_demands`)."""
    d = p.units.merge(p.pools, on="resource_pool_id").merge(p.unit_configs, on="unit_config_id")
    d["affinity"] = np.where(
        d["tenant_id"] != S.UNGRANTED_TENANT,
        "tenant:" + d["tenant_id"].astype(str),
        "pool:" + d["resource_pool_id"].astype(str),
    )
    return d


def pandas_unit_migration_plan(p: PandasInputs) -> pd.DataFrame:
    """The unit migration plan in pandas (layout :data:`rootservice.balancer.spark.schema.UNIT_PLAN_SCHEMA`)."""
    d = pandas_unit_demands(p)
    s = p.servers
    src = s[(s["status"] == S.STATUS_DELETING) | (s["hb_status"] == S.HB_PERMANENT_OFFLINE)]
    src = src[["svr_ip", "svr_port", "status"]].copy()
    src["trigger"] = np.where(
        src["status"] == S.STATUS_DELETING, S.UNIT_REASON_DELETING, S.UNIT_REASON_OFFLINE
    )
    req = d[d["migrate_from_svr_ip"] == ""].merge(
        src[["svr_ip", "svr_port", "trigger"]], on=["svr_ip", "svr_port"]
    )
    if req.empty:
        return _empty(S.UNIT_PLAN_SCHEMA)
    req = req.rename(columns={"svr_ip": "from_svr_ip", "svr_port": "from_svr_port"})
    req = req[S.columns(REQUESTS_LAYOUT)]

    cols = ["min_cpu", "memory_size", "log_disk_size", "affinity"]
    hosted = d[["svr_ip", "svr_port", *cols]]
    mf = d[
        (d["migrate_from_svr_ip"] != "")
        & ~(
            (d["migrate_from_svr_ip"] == d["svr_ip"])
            & (d["migrate_from_svr_port"] == d["svr_port"])
        )
    ]
    leaving = mf[["migrate_from_svr_ip", "migrate_from_svr_port", *cols]].rename(
        columns={"migrate_from_svr_ip": "svr_ip", "migrate_from_svr_port": "svr_port"}
    )
    holders = pd.concat([hosted, leaving], ignore_index=True)
    loads = holders.groupby(["svr_ip", "svr_port"], as_index=False).agg(
        cpu_used=("min_cpu", "sum"),
        mem_used=("memory_size", "sum"),
        log_disk_used=("log_disk_size", "sum"),
        affinity=("affinity", lambda a: sorted(set(a))),
    )
    rooms = s.merge(loads, on=["svr_ip", "svr_port"], how="left")
    for c in ("cpu_used", "mem_used", "log_disk_used"):
        rooms[c] = rooms[c].fillna(0)
    rooms["usable"] = (
        (rooms["status"] == S.STATUS_ACTIVE)
        & (rooms["hb_status"] == S.HB_ALIVE)
        & (rooms["stop_time"] == 0)
        & ~rooms["suspect"]
    )
    rooms = rooms[[*S.columns(ROOMS_LAYOUT), "affinity"]]
    parts = [place_zone(rooms[rooms["zone"] == zone], group) for zone, group in req.groupby("zone")]
    return pd.concat(parts, ignore_index=True)


def _with_server_health(p: PandasInputs) -> pd.DataFrame:
    m = p.ls_meta.merge(
        p.servers[["svr_ip", "svr_port", "hb_status"]], on=["svr_ip", "svr_port"], how="left"
    )
    m["alive"] = m["hb_status"] == S.HB_ALIVE
    m["offline"] = m["hb_status"] == S.HB_PERMANENT_OFFLINE
    m["healthy"] = (
        m["alive"]
        & (m["replica_status"] == S.REPLICA_STATUS_NORMAL)
        & (m["replica_type"] == S.REPLICA_TYPE_FULL)
    )
    return m


def pandas_replica_migration_plan(p: PandasInputs) -> pd.DataFrame:
    """The replica migration plan in pandas (layout
    :data:`rootservice.balancer.spark.schema.REPLICA_PLAN_SCHEMA`)."""
    keys = ["tenant_id", "ls_id"]
    m = _with_server_health(p)
    units = p.units[["unit_id", "svr_ip", "svr_port"]].rename(
        columns={"svr_ip": "u_ip", "svr_port": "u_port"}
    )
    c = m.merge(units, on="unit_id")
    c["moved"] = (c["svr_ip"] != c["u_ip"]) | (c["svr_port"] != c["u_port"])
    c = c[c["moved"] | c["offline"]]
    c = c.merge(p.ls_status[keys], on=keys)
    if c.empty:
        return _empty(S.REPLICA_PLAN_SCHEMA)
    ls = c[keys].drop_duplicates()
    members = m.merge(ls, on=keys)
    members = members.sort_values(["svr_ip", "svr_port"], kind="stable")
    leaders = members[(members["role"] == S.ROLE_LEADER) & members["alive"]]
    leaders = leaders.drop_duplicates(keys)[[*keys, "svr_ip", "svr_port", "healthy"]].rename(
        columns={"svr_ip": "l_ip", "svr_port": "l_port", "healthy": "l_healthy"}
    )
    healthy = members[members["healthy"]].drop_duplicates(keys)[[*keys, "svr_ip", "svr_port"]]
    healthy = healthy.rename(columns={"svr_ip": "h_ip", "svr_port": "h_port"})
    t = c.merge(leaders, on=keys, how="left").merge(healthy, on=keys, how="left")
    t = t[t["moved"] | (t["offline"] & t["l_ip"].notna())]
    existing = members[members["healthy"]][[*keys, "svr_ip", "svr_port"]].rename(
        columns={"svr_ip": "u_ip", "svr_port": "u_port"}
    )
    existing["dest_has"] = True
    t = t.merge(existing, on=[*keys, "u_ip", "u_port"], how="left")
    t = t[~(t["moved"] & t["dest_has"].eq(True))]
    if t.empty:
        return _empty(S.REPLICA_PLAN_SCHEMA)
    leader_ok = t["l_healthy"].eq(True)
    own = t["healthy"].astype(bool)
    src_ip = np.where(own, t["svr_ip"], np.where(leader_ok, t["l_ip"], t["h_ip"]))
    src_port = np.where(own, t["svr_port"], np.where(leader_ok, t["l_port"], t["h_port"]))
    out = pd.DataFrame(
        {
            "tenant_id": t["tenant_id"].to_numpy(),
            "ls_id": t["ls_id"].to_numpy(),
            "src_svr_ip": src_ip,
            "src_svr_port": pd.array(src_port, dtype="Float64"),
            "dest_svr_ip": np.where(t["moved"], t["u_ip"], None),
            "dest_svr_port": pd.array(np.where(t["moved"], t["u_port"], np.nan), dtype="Float64"),
            "old_svr_ip": t["svr_ip"].to_numpy(),
            "old_svr_port": t["svr_port"].to_numpy(),
        }
    )
    out["src_svr_ip"] = out["src_svr_ip"].where(out["src_svr_ip"].notna(), None)
    moved = t["moved"].to_numpy()
    no_src = out["src_svr_ip"].isna().to_numpy()
    offline = t["offline"].to_numpy()
    out["reason"] = np.select(
        [~moved, no_src, offline],
        [S.REPLICA_REASON_WAIT_UNIT, S.REPLICA_REASON_NO_SOURCE, S.REPLICA_REASON_OFFLINE],
        S.REPLICA_REASON_UNIT_MOVED,
    )
    return S.conform_pandas(out, S.REPLICA_PLAN_SCHEMA, nullable=True)


def pandas_lost_replicas(p: PandasInputs) -> pd.DataFrame:
    """The lost replicas in pandas (layout :data:`rootservice.balancer.spark.schema.LOST_REPLICAS_SCHEMA`)."""
    keys = ["tenant_id", "ls_id"]
    servers = p.servers[["svr_ip", "svr_port", "hb_status"]].copy()
    servers["known"] = True
    m = p.ls_meta.merge(servers, on=["svr_ip", "svr_port"], how="left")
    m["known"] = m["known"].eq(True)
    m = m[~m["known"] | (m["hb_status"] == S.HB_PERMANENT_OFFLINE)]
    living = p.ls_status[keys].merge(m[keys].drop_duplicates(), on=keys)
    living["ls_exists"] = True
    m = m.merge(living, on=keys, how="left")
    not_in_service = (m["replica_status"] != S.REPLICA_STATUS_NORMAL).to_numpy()
    not_paxos = (m["replica_type"] != S.REPLICA_TYPE_FULL).to_numpy()
    gone = m["ls_exists"].isna().to_numpy()
    replica_part = np.select(
        [not_in_service, not_paxos, gone],
        [S.LOST_NOT_IN_SERVICE, S.LOST_NOT_PAXOS, S.LOST_LS_GONE],
        "",
    )
    server_part = np.where(m["known"], S.LOST_SERVER_OFFLINE, S.LOST_SERVER_NOT_IN_TABLE)
    m["reason"] = pd.Series(server_part, index=m.index) + ": " + replica_part
    m = m[replica_part != ""]
    return S.conform_pandas(m, S.LOST_REPLICAS_SCHEMA, nullable=True)
