"""Realistic cluster metadata for the Spark jobs (benchmark ``make bench-spark`` and tests).

:func:`generate` builds, deterministically from a seed, the rows an RS of an OceanBase-like
cluster would hold: 3 zones of servers (a few big ones per zone), tenants with one granted
resource pool each (1-4 units per zone, three unit sizes), two ungranted pools, and log
streams (one replica per zone on the unit of its unit group) - ``n_replicas`` rows of
``__all_ls_meta_table`` in all. On top of a healthy cluster it sets up what the jobs look
for, in proportions that scale with the size:

- DELETING servers (1% of zones z1 and z2, and a big server of z1 whose extra-large unit
  has nowhere to go: the "no room" case), ``permanent_offline`` servers whose units are still
  there (fresh) and whose units have already moved away (old: ``migrate_from`` set, replicas
  left behind), ``lease_expired`` and stopped servers;
- units migrating between healthy servers (0.5%), a quarter of them with the new replica
  already built;
- log streams whose leader sits on a dead server (election pending), replicas not in
  service, replicas left on servers that are gone from ``__all_server`` (FULL or READONLY,
  in service or not), and log streams dropped from ``__all_ls_status``.

:func:`load_postgres` copies a :class:`Cluster` into a migrated PostgreSQL database with
``COPY`` (and the servers input into a table for the SQL reference); :func:`load_sqlalchemy`
inserts a small one into any database through SQLAlchemy (SQLite in tests).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import sqlalchemy as sa
from pyarrow import csv

from rootservice.balancer.spark import schema as S
from rootservice.balancer.spark.schema import PandasInputs
from tests.support.sql_plans import load_servers_table

GIB = 1 << 30
ZONES = ("z1", "z2", "z3")
SVR_PORT = 2882
SQL_PORT = 2881
NOW_US = 1_800_000_000_000_000
HOUR_US = 3_600_000_000

NORMAL_CPU, NORMAL_MEM, NORMAL_LOG = 48.0, 256 * GIB, 768 * GIB
BIG_CPU, BIG_MEM, BIG_LOG = 64.0, 1024 * GIB, 3072 * GIB
BIG_PER_ZONE = 3
# (unit_config_id, name, max_cpu, min_cpu, memory, log disk)
CONFIGS = (
    (1, "unit_s", 2.0, 2.0, 8 * GIB, 24 * GIB),
    (2, "unit_m", 4.0, 2.0, 16 * GIB, 48 * GIB),
    (3, "unit_l", 8.0, 8.0, 32 * GIB, 96 * GIB),
    (4, "unit_xl", 48.0, 48.0, 600 * GIB, 1200 * GIB),
)
CONFIG_WEIGHTS = (0.3, 0.45, 0.25)  # s, m, l for ordinary tenants
UNIT_NUM_CHOICES = (1, 2, 3, 4)
UNIT_NUM_WEIGHTS = (0.35, 0.35, 0.15, 0.15)
UNITS_PER_SERVER = 8  # about 55% of a normal server's memory
READONLY = 5  # OceanBase's REPLICA_TYPE_READONLY


def default_servers(n_replicas: int) -> int:
    """300 servers at 100k replicas, 1,000 at 1M, 3,000 at 5M (30 at least), a multiple of 3."""
    n = n_replicas
    if n <= 100_000:
        k = max(30, 300 * n // 100_000)
    elif n <= 1_000_000:
        k = 300 + (n - 100_000) * 700 // 900_000
    else:
        k = min(3000, 1000 + (n - 1_000_000) * 2000 // 4_000_000)
    return max(30, k - k % 3)


@dataclass
class Cluster:
    """Generated rows: ``servers`` is the RS's in-memory statuses (SERVERS_SCHEMA); the other
    frames hold every NOT NULL column of their system table."""

    servers: pd.DataFrame
    all_server: pd.DataFrame
    unit_configs: pd.DataFrame
    pools: pd.DataFrame
    units: pd.DataFrame
    tenants: pd.DataFrame
    ls_status: pd.DataFrame
    ls_meta: pd.DataFrame

    def pandas_inputs(self) -> PandasInputs:
        """The jobs' inputs (only the columns the jobs read)."""
        return PandasInputs(
            servers=self.servers,
            units=self.units,
            pools=self.pools,
            unit_configs=self.unit_configs,
            ls_status=self.ls_status,
            ls_meta=self.ls_meta,
            tenants=self.tenants,
        ).conformed()

    def tables(self) -> dict[str, pd.DataFrame]:
        """System table name -> rows."""
        return {
            "__all_server": self.all_server,
            "__all_unit_config": self.unit_configs,
            "__all_resource_pool": self.pools,
            "__all_unit": self.units,
            "__all_tenant": self.tenants,
            "__all_ls_status": self.ls_status,
            "__all_ls_meta_table": self.ls_meta,
        }


def _pick(rng: np.random.Generator, pool: list[int], k: int) -> list[int]:
    k = min(k, len(pool))
    chosen = [int(x) for x in rng.choice(np.array(pool), size=k, replace=False)] if k else []
    for c in chosen:
        pool.remove(c)
    return chosen


def generate(n_replicas: int, n_servers: int | None = None, seed: int = 0) -> Cluster:
    """A cluster with about ``n_replicas`` rows of ``__all_ls_meta_table`` (see the module
    docstring). ``n_servers`` defaults to :func:`default_servers`; it must be >= 30."""
    rng = np.random.default_rng(seed)
    n_servers = n_servers or default_servers(n_replicas)
    if n_servers < 30:
        raise ValueError("n_servers must be >= 30")
    per_zone = n_servers // 3
    big = BIG_PER_ZONE if per_zone >= 30 else 0

    # --- servers ------------------------------------------------------------------------
    ips: list[str] = []
    zone_of: list[int] = []
    is_big: list[bool] = []
    for zi in range(3):
        for j in range(per_zone):
            ips.append(f"10.{zi + 1}.{j // 250}.{j % 250 + 1}")
            zone_of.append(zi)
            is_big.append(j < big)
    n = len(ips)
    role = ["healthy"] * n
    frac = {"deleting": 0.01, "fresh_offline": 0.003, "old_offline": 0.003}
    frac |= {"lease_expired": 0.003, "stopped": 0.003}
    for zi in range(3):
        pool = [i for i in range(n) if zone_of[i] == zi and not is_big[i]]
        for r, f in frac.items():
            if r == "deleting" and zi == 2:
                continue
            for i in _pick(rng, pool, max(1, round(f * per_zone))):
                role[i] = r
    big_deleting = -1
    if big:
        big_deleting = zone_of.index(0)  # the first big server of z1
        role[big_deleting] = "deleting"
    status = {
        "healthy": S.STATUS_ACTIVE,
        "stopped": S.STATUS_ACTIVE,
        "deleting": S.STATUS_DELETING,
        "fresh_offline": S.STATUS_INACTIVE,
        "old_offline": S.STATUS_INACTIVE,
        "lease_expired": S.STATUS_INACTIVE,
    }
    hb = {r: S.HB_ALIVE for r in status}
    hb |= {
        "fresh_offline": S.HB_PERMANENT_OFFLINE,
        "old_offline": S.HB_PERMANENT_OFFLINE,
        "lease_expired": S.HB_LEASE_EXPIRED,
    }
    offline_since = {"fresh_offline": 2 * HOUR_US, "old_offline": 5 * HOUR_US}
    offline_since["lease_expired"] = 60_000_000
    servers = pd.DataFrame(
        {
            "svr_ip": ips,
            "svr_port": SVR_PORT,
            "zone": [ZONES[z] for z in zone_of],
            "status": [status[r] for r in role],
            "hb_status": [hb[r] for r in role],
            "stop_time": [NOW_US - HOUR_US if r == "stopped" else 0 for r in role],
            "cpu_total": [BIG_CPU if b else NORMAL_CPU for b in is_big],
            "mem_total": [BIG_MEM if b else NORMAL_MEM for b in is_big],
            "log_disk_total": [BIG_LOG if b else NORMAL_LOG for b in is_big],
            "suspect": False,
        }
    )
    all_server = pd.DataFrame(
        {
            "svr_ip": ips,
            "svr_port": SVR_PORT,
            "id": np.arange(1, n + 1),
            "zone": servers["zone"],
            "inner_port": SQL_PORT,
            "status": servers["status"],
            "stop_time": servers["stop_time"],
            "last_offline_time": [
                NOW_US - offline_since[r] if r in offline_since else 0 for r in role
            ],
        }
    )
    alive = np.array([hb[r] == S.HB_ALIVE for r in role])
    usable = np.array([r in ("healthy",) for r in role])
    # Servers gone from __all_server that still have rows in __all_ls_meta_table.
    removed_ips = [[f"10.{zi + 1}.250.{k + 1}" for k in range(2)] for zi in range(3)]

    # --- tenants, pools, units ----------------------------------------------------------
    hosts = [
        [i for i in range(n) if zone_of[i] == zi and not is_big[i] and role[i] != "old_offline"]
        for zi in range(3)
    ]
    old_hosts = [
        [i for i in range(n) if zone_of[i] == zi and role[i] == "old_offline"] for zi in range(3)
    ]
    for zi in range(3):
        # old_offline servers hosted units before they died: interleave them with the others
        hosts[zi] = list(rng.permutation(hosts[zi] + old_hosts[zi]).astype(int))
    n_tenants = max(
        3,
        round(UNITS_PER_SERVER * len(hosts[0]) / float(np.dot(UNIT_NUM_CHOICES, UNIT_NUM_WEIGHTS))),
    )
    tenant_rows: list[dict[str, Any]] = []
    pool_rows: list[dict[str, Any]] = []
    unit_rows: list[dict[str, Any]] = []
    ug_rows: list[tuple[int, int, list[int]]] = []  # (tenant, unit_group_id, unit per zone)
    unit_server: dict[int, int] = {}  # unit_id -> server index (where its replicas are)
    unit_cfg: dict[int, int] = {}
    next_unit, next_ug = 1001, 1001
    cursor = [0, 0, 0]

    def add_pool(
        tenant_id: int, pool_id: int, config_id: int, unit_num: int, fixed: list[list[int]] | None
    ) -> None:
        nonlocal next_unit, next_ug
        pool_rows.append(
            {
                "resource_pool_id": pool_id,
                "name": f"pool_{pool_id}",
                "unit_count": unit_num,
                "unit_config_id": config_id,
                "zone_list": ";".join(ZONES),
                "tenant_id": tenant_id,
            }
        )
        ugs = list(range(next_ug, next_ug + unit_num))
        next_ug += unit_num
        per_group: list[list[int]] = [[] for _ in range(unit_num)]
        for zi in range(3):
            for k in range(unit_num):
                if fixed is not None:
                    srv = fixed[zi][k]
                else:
                    h = hosts[zi]
                    srv = h[(cursor[zi] + k) % len(h)]
                uid = next_unit
                next_unit += 1
                unit_rows.append(
                    {
                        "unit_id": uid,
                        "resource_pool_id": pool_id,
                        "unit_group_id": ugs[k],
                        "zone": ZONES[zi],
                        "svr_ip": ips[srv],
                        "svr_port": SVR_PORT,
                        "migrate_from_svr_ip": "",
                        "migrate_from_svr_port": 0,
                        "status": "ACTIVE",
                    }
                )
                unit_server[uid] = srv
                unit_cfg[uid] = config_id
                per_group[k].append(uid)
            if fixed is None:
                cursor[zi] += unit_num
        if tenant_id != S.UNGRANTED_TENANT:
            for k in range(unit_num):
                ug_rows.append((tenant_id, ugs[k], per_group[k]))

    def add_tenant(
        tenant_id: int, config_id: int, unit_num: int, fixed: list[list[int]] | None = None
    ) -> None:
        tenant_rows.append(
            {
                "tenant_id": tenant_id,
                "tenant_name": f"tenant_{tenant_id}",
                "zone_list": ";".join(ZONES),
                "status": "NORMAL",
            }
        )
        add_pool(tenant_id, tenant_id, config_id, unit_num, fixed)

    tid = 1002
    if big:
        bigs = [[i for i in range(n) if zone_of[i] == zi and is_big[i]] for zi in range(3)]
        add_tenant(tid, 4, 1, [[b[0]] for b in bigs])  # its z1 unit is on the DELETING big server
        add_tenant(tid + 2, 4, 2, [[b[1], b[2]] for b in bigs])  # fills the other two
        tid += 4
    units_per_tenant = rng.choice(UNIT_NUM_CHOICES, size=n_tenants, p=UNIT_NUM_WEIGHTS)
    configs = rng.choice([1, 2, 3], size=n_tenants, p=CONFIG_WEIGHTS)
    for k in range(n_tenants):
        add_tenant(tid, int(configs[k]), int(units_per_tenant[k]))
        tid += 2
    for pid in (1, 2):  # ungranted pools
        add_pool(S.UNGRANTED_TENANT, pid, 1, 1, None)

    units = pd.DataFrame(unit_rows)
    replica_server = units["unit_id"].map(unit_server).to_numpy()  # where the replicas are
    pool_tenant = {p["resource_pool_id"]: p["tenant_id"] for p in pool_rows}
    unit_tenant = units["resource_pool_id"].map(pool_tenant).to_numpy()

    # --- units in migration -------------------------------------------------------------
    tenant_servers: dict[tuple[int, int], set[int]] = {}
    for uid, srv, t in zip(units["unit_id"], replica_server, unit_tenant, strict=True):
        key = (int(t), zone_of[srv]) if t != S.UNGRANTED_TENANT else (-int(uid), zone_of[srv])
        tenant_servers.setdefault(key, set()).add(int(srv))
    usable_by_zone = [
        [i for i in range(n) if zone_of[i] == zi and usable[i] and not is_big[i]] for zi in range(3)
    ]
    cur_server = replica_server.copy()
    built: list[int] = []  # unit indexes whose new replica already exists
    for ui in range(len(units)):
        srv = int(replica_server[ui])
        move = role[srv] == "old_offline" or (
            role[srv] == "healthy" and not is_big[srv] and rng.random() < 0.005
        )
        if not move:
            continue
        zi = zone_of[srv]
        t = int(unit_tenant[ui])
        taken = tenant_servers.get((t, zi), set()) if t != S.UNGRANTED_TENANT else set()
        options = [s for s in usable_by_zone[zi] if s not in taken]
        if not options:
            continue
        dest = int(options[int(rng.integers(len(options)))])
        cur_server[ui] = dest
        if t != S.UNGRANTED_TENANT:
            tenant_servers.setdefault((t, zi), set()).add(dest)
        if role[srv] != "old_offline" and rng.random() < 0.25:
            built.append(ui)
    moving = cur_server != replica_server
    units["svr_ip"] = [ips[s] for s in cur_server]
    units.loc[moving, "migrate_from_svr_ip"] = [ips[s] for s in replica_server[moving]]
    units.loc[moving, "migrate_from_svr_port"] = SVR_PORT

    # --- log streams --------------------------------------------------------------------
    unit_index = {int(u): i for i, u in enumerate(units["unit_id"])}
    n_ug = len(ug_rows)
    n_ls = max(n_ug, n_replicas // 3)
    counts = np.full(n_ug, n_ls // n_ug)
    counts[: n_ls % n_ug] += 1
    ls_ug = np.repeat(np.arange(n_ug), counts)
    ug_tenant = np.array([g[0] for g in ug_rows])
    ug_id = np.array([g[1] for g in ug_rows])
    ug_units = np.array([[unit_index[u] for u in g[2]] for g in ug_rows])  # (n_ug, 3) unit idx
    ls_tenant = ug_tenant[ls_ug]
    rank = pd.Series(ls_tenant).groupby(ls_tenant).cumcount().to_numpy()
    ls_id = np.where(rank == 0, 1, 1000 + rank)
    ls_status = pd.DataFrame(
        {
            "tenant_id": ls_tenant,
            "ls_id": ls_id,
            "status": "NORMAL",
            "ls_group_id": ug_id[ls_ug],
            "unit_group_id": ug_id[ls_ug],
            "primary_zone": "",
        }
    )

    # --- replicas -----------------------------------------------------------------------
    rep_unit = ug_units[ls_ug]  # (n_ls, 3): unit index of each zone's replica
    rep_srv = replica_server[rep_unit]  # (n_ls, 3)
    rep_alive = alive[rep_srv]
    pref = ls_id % 3
    leader_zone = pref.copy()
    # The leader is on the preferred zone's replica, or on the next alive one - except for
    # 10% of the log streams whose preferred leader died: their election is still pending.
    pending = rng.random(n_ls) < 0.1
    for shift in (1, 2):
        z = (pref + shift) % 3
        cur_alive = rep_alive[np.arange(n_ls), leader_zone]
        take = ~cur_alive & ~pending & rep_alive[np.arange(n_ls), z]
        leader_zone = np.where(take, z, leader_zone)
    ip_arr = np.array(ips, dtype=object)
    keys = ip_arr[rep_srv] + f":{SVR_PORT}"
    member_list = keys[:, 0] + "," + keys[:, 1] + "," + keys[:, 2]
    frames = []
    for zi in range(3):
        is_leader = leader_zone == zi
        frames.append(
            pd.DataFrame(
                {
                    "tenant_id": ls_tenant,
                    "ls_id": ls_id,
                    "svr_ip": ip_arr[rep_srv[:, zi]],
                    "svr_port": SVR_PORT,
                    "sql_port": SQL_PORT,
                    "role": np.where(is_leader, S.ROLE_LEADER, 2),
                    "member_list": np.where(is_leader, member_list, ""),
                    "replica_type": S.REPLICA_TYPE_FULL,
                    "replica_status": S.REPLICA_STATUS_NORMAL,
                    "unit_id": units["unit_id"].to_numpy()[rep_unit[:, zi]],
                    "zone": ZONES[zi],
                    "paxos_replica_number": 3,
                }
            )
        )
    # New replicas already built on the destination of a migrating unit.
    if built:
        built_set = set(built)
        for zi in range(3):
            sel = np.isin(rep_unit[:, zi], list(built_set))
            if not sel.any():
                continue
            frames.append(
                pd.DataFrame(
                    {
                        "tenant_id": ls_tenant[sel],
                        "ls_id": ls_id[sel],
                        "svr_ip": ip_arr[cur_server[rep_unit[sel, zi]]],
                        "svr_port": SVR_PORT,
                        "sql_port": SQL_PORT,
                        "role": 2,
                        "member_list": "",
                        "replica_type": S.REPLICA_TYPE_FULL,
                        "replica_status": S.REPLICA_STATUS_NORMAL,
                        "unit_id": units["unit_id"].to_numpy()[rep_unit[sel, zi]],
                        "zone": ZONES[zi],
                        "paxos_replica_number": 3,
                    }
                )
            )
    # Leftovers on servers that left __all_server.
    n_left = max(6, n_ls // 2000)
    pick = rng.choice(n_ls, size=min(n_left, n_ls), replace=False)
    zsel = rng.integers(0, 3, size=len(pick))
    frames.append(
        pd.DataFrame(
            {
                "tenant_id": ls_tenant[pick],
                "ls_id": ls_id[pick],
                "svr_ip": [removed_ips[z][int(rng.integers(2))] for z in zsel],
                "svr_port": SVR_PORT,
                "sql_port": SQL_PORT,
                "role": 2,
                "member_list": "",
                "replica_type": rng.choice([S.REPLICA_TYPE_FULL, READONLY], size=len(pick)),
                "replica_status": rng.choice([S.REPLICA_STATUS_NORMAL, "OFFLINE"], size=len(pick)),
                "unit_id": units["unit_id"].to_numpy()[rep_unit[pick, zsel]],
                "zone": [ZONES[z] for z in zsel],
                "paxos_replica_number": 3,
            }
        )
    )
    meta = pd.concat(frames, ignore_index=True)
    meta = meta.drop_duplicates(["tenant_id", "ls_id", "svr_ip", "svr_port"], ignore_index=True)
    # Replicas not in service: 10% of those on fresh permanent_offline servers, 0.1% elsewhere.
    srv_role = dict(zip(ips, role, strict=True))
    on_fresh = meta["svr_ip"].map(lambda ip: srv_role.get(ip) == "fresh_offline").to_numpy()
    r = rng.random(len(meta))
    sick = (on_fresh & (r < 0.1)) | (
        ~on_fresh & (r < 0.001) & (meta["role"] != S.ROLE_LEADER).to_numpy()
    )
    meta.loc[sick, "replica_status"] = "OFFLINE"
    meta["data_size"] = rng.integers(GIB, 100 * GIB, size=len(meta))
    meta["required_size"] = meta["data_size"]
    # Log streams dropped from __all_ls_status (their rows linger), among them some with
    # leftovers on removed servers.
    n_drop = max(2, n_ls // 5000)
    drop = np.unique(
        np.concatenate([rng.choice(n_ls, size=n_drop, replace=False), pick[: max(1, n_drop // 2)]])
    )
    ls_status = ls_status.drop(index=drop).reset_index(drop=True)

    unit_configs = pd.DataFrame(
        [
            {
                "unit_config_id": c[0],
                "name": c[1],
                "max_cpu": c[2],
                "min_cpu": c[3],
                "memory_size": c[4],
                "log_disk_size": c[5],
                "max_iops": 10000,
                "min_iops": 10000,
                "iops_weight": 0,
            }
            for c in CONFIGS
        ]
    )
    return Cluster(
        servers=S.conform_pandas(servers, S.SERVERS_SCHEMA),
        all_server=all_server,
        unit_configs=unit_configs,
        pools=pd.DataFrame(pool_rows),
        units=units,
        tenants=pd.DataFrame(tenant_rows),
        ls_status=ls_status,
        ls_meta=meta,
    )


# --- loading ----------------------------------------------------------------------------------

COPY_CHUNK_ROWS = 500_000


def load_postgres(conn: Any, cluster: Cluster, servers_table: str = "ob_job_servers") -> None:
    """COPY every table of ``cluster`` into the (migrated, empty) database of the psycopg
    connection ``conn``, load the servers input into ``servers_table`` and ANALYZE."""
    from psycopg import sql

    for table, df in cluster.tables().items():
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in df.columns)
        stmt = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv, NULL '\\N')").format(
            sql.Identifier(table), cols
        )
        with conn.cursor().copy(stmt) as copy:
            for start in range(0, len(df), COPY_CHUNK_ROWS):
                part = pa.Table.from_pandas(
                    df.iloc[start : start + COPY_CHUNK_ROWS], preserve_index=False
                )
                buf = io.BytesIO()
                csv.write_csv(part, buf, csv.WriteOptions(include_header=False))
                copy.write(buf.getvalue())
    load_servers_table(conn, cluster.servers, servers_table)
    for table in cluster.tables():
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))


def load_sqlalchemy(engine: sa.Engine, cluster: Cluster) -> None:
    """Insert every table of a small ``cluster`` through SQLAlchemy (one transaction)."""
    with engine.begin() as conn:
        for table, df in cluster.tables().items():
            df.to_sql(table, conn, if_exists="append", index=False, chunksize=5000)
