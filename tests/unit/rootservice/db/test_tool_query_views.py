"""What migration 0020 adds to OceanBase's views for the queries OceanBase's tools send, read
through the SELECT engine of a whole RootService on SQLite and PostgreSQL: the tenant
parameter ``compatible`` and the cluster version ``min_observer_version`` in
``GV$OB_PARAMETERS`` (and the same data version in ``DBA_OB_TENANTS.COMPATIBLE``),
``DBA_OB_TENANT_JOBS.TENANT_NAME`` and ``GV$OB_LOG_STAT.BEGIN_LSN``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from obcommon.releases import Release
from rootservice.app import RootService
from rootservice.db import cluster_version_repo, job_repo
from sql.client import result_rows
from tests.support.tenants import (
    A,
    B,
    C,
    D,
    lease,
    make_tenant,
    make_tenant_rs,
    members_of,
    replica,
    sql,
)


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    """An RS with servers A, D (z1), B (z2), C (z3) heartbeating."""
    r = make_tenant_rs(db_url, tmp_path)
    yield r
    r.shutdown()


def select(rs: RootService, query: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in result_rows(sql(rs, query))]


def cluster_version(rs: RootService) -> str:
    with rs.store.read() as conn:
        return str(cluster_version_repo.get(conn))


def unit_servers(rs: RootService, tenant_id: int) -> set[str]:
    return {
        f"{ip}:{port}"
        for ip, port in select(
            rs, f"SELECT svr_ip, svr_port FROM GV$OB_UNITS WHERE tenant_id = {tenant_id}"
        )
    }


def test_compatible_is_a_tenant_parameter_on_the_servers_of_the_tenant(rs: RootService) -> None:
    query = "select name, value, tenant_id from GV$OB_PARAMETERS where name = 'compatible'"
    assert select(rs, query) == []  # no tenant: no tenant parameter
    tid = make_tenant(rs)
    version = cluster_version(rs) + ".0"
    rows = select(
        rs,
        "SELECT SVR_IP, SVR_PORT, SCOPE, TENANT_ID, VALUE, SECTION, DEFAULT_VALUE, ISDEFAULT "
        "FROM GV$OB_PARAMETERS WHERE NAME = 'compatible'",
    )
    # One unit in each of z1..z3: three of the four servers host the tenant.
    hosts = unit_servers(rs, tid)
    assert len(hosts) == 3 and {f"{r[0]}:{r[1]}" for r in rows} == hosts
    assert {r[2:] for r in rows} == {("TENANT", tid, version, "TENANT", version, "YES")}
    assert select(rs, query) == [("compatible", version, tid)] * 3
    assert select(rs, f"SELECT COMPATIBLE FROM DBA_OB_TENANTS WHERE TENANT_ID = {tid}") == [
        (version,)
    ]
    # Cluster parameters carry no tenant.
    assert select(
        rs, "SELECT DISTINCT SCOPE, TENANT_ID FROM GV$OB_PARAMETERS WHERE NAME = 'lease_time'"
    ) == [("CLUSTER", None)]
    # A data version set for the tenants wins, in both views.
    with rs.store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO __all_sys_parameter (name, value) VALUES ('compatible', '4.3.0.0')"
        )
    assert {r[1:] for r in select(rs, query)} == {("4.3.0.0", tid)}
    assert select(rs, f"SELECT COMPATIBLE FROM DBA_OB_TENANTS WHERE TENANT_ID = {tid}") == [
        ("4.3.0.0",)
    ]
    assert select(
        rs, "SELECT DISTINCT ISDEFAULT FROM GV$OB_PARAMETERS WHERE NAME = 'compatible'"
    ) == [("NO",)]


def test_min_observer_version_is_one_row_per_server_in_four_numbers(rs: RootService) -> None:
    query = "select distinct value from GV$OB_PARAMETERS  where name='min_observer_version'"
    before = cluster_version(rs)
    assert select(rs, query) == [(before + ".0",)]
    rows = select(
        rs,
        "SELECT SVR_IP, SVR_PORT, SCOPE, TENANT_ID, SECTION, EDIT_LEVEL FROM GV$OB_PARAMETERS "
        "WHERE NAME = 'min_observer_version'",
    )
    assert sorted(f"{r[0]}:{r[1]}" for r in rows) == [A, B, C, D]
    assert {r[2:] for r in rows} == {("CLUSTER", None, "ROOT_SERVICE", "READONLY")}
    # SHOW PARAMETERS WHERE reads the same rows; SHOW PARAMETERS LIKE the same value.
    shown = select(rs, "SHOW PARAMETERS WHERE name = 'min_observer_version'")
    assert sorted(f"{r[2]}:{r[3]}" for r in shown) == [A, B, C, D]
    assert {(r[6], r[10], r[14]) for r in shown} == {(before + ".0", "__all_cluster_version", "")}
    assert [r[6] for r in select(rs, "SHOW PARAMETERS LIKE 'min_observer%'")] == [before + ".0"]
    # It follows the cluster version when an upgrade is finalized.
    with rs.store.txn() as conn:
        assert cluster_version_repo.raise_to(conn, Release(0, 9, 3), rs.clock.now_us())
    assert select(rs, query) == [("0.9.3.0",)]


def test_tenant_jobs_name_their_tenant(rs: RootService) -> None:
    tid = make_tenant(rs)
    now, addr = rs.clock.now_us(), rs.store.rs_addr
    with rs.store.txn() as conn:
        job = job_repo.create_job(
            conn, "ALTER_TENANT_LOCALITY", "", 0, now, addr, "l", tenant_id=tid
        )
        gone = job_repo.create_job(
            conn, "ALTER_TENANT_PRIMARY_ZONE", "", 0, now, addr, "p", tenant_id=tid + 100
        )
    resp = sql(rs, "SELECT * FROM DBA_OB_TENANT_JOBS")
    assert list(resp.columns)[-5:] == [
        "SQL_TEXT", "EXTRA_INFO", "RS_SVR_IP", "RS_SVR_PORT", "TENANT_NAME",
    ]  # fmt: skip
    names = {r[0]: r[-1] for r in result_rows(resp)}
    assert names == {job: "t1", gone: None}  # a tenant dropped since: no name
    get_rs_job = (
        "select job_id, job_type, job_status, tenant_id from DBA_OB_TENANT_JOBS "
        "where tenant_name={} and job_status ='INPROGRESS' and job_type='ALTER_TENANT_LOCALITY'"
    )
    assert select(rs, get_rs_job.format("'t1'")) == [
        (job, "ALTER_TENANT_LOCALITY", "INPROGRESS", tid)
    ]
    assert select(rs, get_rs_job.format("'t2'")) == []


def test_begin_lsn_is_the_log_a_replica_no_longer_keeps(rs: RootService) -> None:
    tid = make_tenant(rs, ls_count=1)
    members = members_of(rs, tid, 1001)
    leader = next(m for m in members if m in (A, D))

    def report(base: dict[str, int], end: int = 100) -> int:
        for m in members:
            r = replica((tid, 1001), leader, members, me=m, end=end)
            r.log_base_index = base.get(m, 0)
            rs.heartbeats.receive_hb(lease(m, [r]))
        return rs.tenant_layer.meta_sync.sync_meta()

    report({leader: 40})
    query = (
        f"SELECT ls_id, begin_lsn FROM oceanbase.GV$OB_LOG_STAT WHERE TENANT_ID = {tid} "
        "AND ROLE = 'LEADER';"
    )
    assert select(rs, query) == [(1001, 40)]
    rows = {
        f"{r[0]}:{r[1]}": r[2:]
        for r in select(
            rs,
            "SELECT SVR_IP, SVR_PORT, BASE_LSN, BEGIN_LSN, END_LSN FROM GV$OB_LOG_STAT "
            f"WHERE TENANT_ID = {tid}",
        )
    }
    assert rows == {m: ((40, 40, None) if m == leader else (0, 0, None)) for m in members}
    # The log's end moving alone writes nothing; a compaction does.
    assert report({leader: 40}, end=150) == 0
    assert report({leader: 90}, end=150) == 1
    assert select(rs, query) == [(1001, 90)]
