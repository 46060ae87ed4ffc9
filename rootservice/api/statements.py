"""One executor per statement of the admin language (docs/design/statements.md), and
:data:`EXECUTORS`, the table :func:`rootservice.api.dispatch.execute` runs them from.

Executors validate, then call the RS; they never touch tables themselves except the reads
(SELECT, SHOW TABLES, DESC), which read through :mod:`rootservice.db.query_repo`
and the catalog. What they return is a :class:`Result`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from obcommon.addresses import format_server, parse_server
from obcommon.durations import format_duration
from obcommon.errors import ObError
from rootservice.app import RootService
from rootservice.balancer.dry_run import COLUMNS as DRY_RUN_COLUMNS
from rootservice.balancer.dry_run import TYPES as DRY_RUN_TYPES
from rootservice.bootstrap import BootstrapItem
from rootservice.db import query_repo
from rootservice.parameters import SHOW_COLUMNS, SHOW_TYPES, sql_like
from rootservice.servers.maintenance_window import maintenance_duration
from rootservice.tenants.ddl_requests import NewPool, NewTenant, NewUnitConfig
from rootservice.tenants.layout_diff import reload_layout
from rootservice.tenants.recovery_plan import COLUMNS as RECOVER_COLUMNS
from rootservice.tenants.recovery_plan import TYPES as RECOVER_TYPES
from rootservice.tenants.recovery_plan import plan_rows
from rootservice.upgrade import finalize, mode
from sql import ast
from sql.reads import SCHEMA


@dataclass
class Result:
    """What a statement returns: a result set (``columns`` + ``rows``) or an OK packet
    (``affected_rows`` and ``info``).

    ``types`` is None or one MySQL column type name per column (``BIGINT``, ``DOUBLE``,
    ``DECIMAL``, ``VARCHAR``, ``DATETIME``, ...) for front ends that declare types (the MySQL
    endpoint); None lets a front end infer them from the values."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    affected_rows: int = 0
    info: str = ""
    is_result_set: bool = False
    types: list[str] | None = None


def _bootstrap(rs: RootService, st: ast.Bootstrap) -> Result:
    rs.bootstrap.run([BootstrapItem(e.region, e.zone, e.server) for e in st.entries])
    return Result(info=f"bootstrapped with {len(st.entries)} server(s)")


def _server_op(rs: RootService, st: ast.ServerOp) -> Result:
    m = rs.server_admin
    servers = list(st.servers)
    if st.op == "ADD":
        ids = m.add_servers(servers, st.zone)
        return Result(affected_rows=len(ids), info="server id(s) " + ", ".join(map(str, ids)))
    if st.op == "DELETE":
        jobs = m.delete_servers(servers, st.zone)
        return Result(
            affected_rows=len(jobs), info="DELETE_SERVER job(s) " + ", ".join(map(str, jobs))
        )
    if st.op == "FORCE_DELETE":
        return _force_delete(rs, st)
    if st.maintenance is not None and st.op != "STOP":
        raise ObError("OB_NOT_SUPPORTED", f"{st.op} SERVER ... FOR MAINTENANCE (only STOP)")
    if st.op == "CANCEL_DELETE":
        m.cancel_delete_servers(servers, st.zone)
    elif st.op == "STOP" and st.maintenance is not None:
        us = maintenance_duration(st.maintenance, short=rs.settings.allow_short_timings)
        m.stop_servers(servers, st.zone, "STOP", maintenance_us=us)
        return Result(
            affected_rows=len(servers),
            info=f"leaders moved off; maintenance window of {format_duration(us)} "
            "(DBA_OB_SERVERS.MAINTENANCE_END_TIME)",
        )
    elif st.op in ("STOP", "FORCE_STOP", "ISOLATE"):
        m.stop_servers(servers, st.zone, st.op)
        return Result(
            affected_rows=len(servers),
            info="leaders moved off: leader_cnt is 0 on the stopped server(s)",
        )
    elif st.op == "START":
        m.start_servers(servers, st.zone)
    else:  # pragma: no cover - the parser produces only the kinds above
        raise ObError("OB_NOT_SUPPORTED", f"{st.op} SERVER")
    return Result(affected_rows=len(servers))


def _drain_server(rs: RootService, st: ast.DrainServer) -> Result:
    # Waits for the drain (bounded by its TIMEOUT); progress is in DBA_OB_SERVER_DRAINS
    # for other sessions and for obadmin, which polls it while it waits.
    row = rs.drains.drain(st.server, st.timeout)
    return Result(
        affected_rows=1,
        info=f"drained {format_server(row.ip, row.port)}: no leader and no copy left; "
        "it stays isolated until START SERVER",
    )


def _force_delete(rs: RootService, st: ast.ServerOp) -> Result:
    # FORCE DELETE SERVER: the ZONE clause is checked as DELETE's is.
    if st.zone is not None:
        rs.server_admin.check_zone_of(list(st.servers), st.zone)
    out = rs.lost_servers.force_delete(list(st.servers))
    removed = [s for s in out.plan.steps if s.key not in out.failures]
    info = (
        f"buried {', '.join(out.plan.removed)}; DELETE_SERVER job(s) "
        f"{', '.join(map(str, out.jobs)) or 'none'}; removed from {len(removed)} log stream(s)"
    )
    if out.failures:
        info += "; still a member of " + ", ".join(
            f"LS {k[1]} of tenant {k[0]} ({e.name})" for k, e in sorted(out.failures.items())
        )
    return Result(affected_rows=len(out.plan.removed), info=info)


def _recover_ls(rs: RootService, st: ast.RecoverLs) -> Result:
    tenant_id = None
    if st.tenant is not None:
        topo = rs.tenant_layer.layout.topology(force=True)
        tenant = next((t for t in topo.tenants.values() if t.tenant_name == st.tenant), None)
        if tenant is None:
            raise ObError("OB_TENANT_NOT_EXIST", st.tenant)
        tenant_id = tenant.tenant_id
    out = rs.lost_servers.recover(list(st.servers), tenant_id, st.ls_id, dry_run=st.dry_run)
    plan = out.plan
    if st.dry_run:
        info = f"DRY RUN of plan {plan.plan_id}: nothing changed"
    else:
        info = f"plan {plan.plan_id} applied: RECOVER_LS job {out.jobs[0]}"
        if out.failures:
            info += "; FAILED for " + ", ".join(
                f"LS {k[1]} of tenant {k[0]}" for k in sorted(out.failures)
            )
    return Result(
        columns=list(RECOVER_COLUMNS),
        rows=plan_rows(plan),
        types=list(RECOVER_TYPES),
        is_result_set=True,
        info=info,
    )


def _explain_delete(rs: RootService, st: ast.ExplainDeleteServer) -> Result:
    # DELETE SERVER's own validation first, so a refusal is the very error DELETE SERVER
    # would give; then the plan, with nothing written.
    keys = rs.server_admin.check_delete_servers(list(st.servers), st.zone)
    rows = rs.delete_dry_run.explain(keys)
    return Result(
        columns=list(DRY_RUN_COLUMNS),
        rows=[r.as_tuple() for r in rows],
        types=list(DRY_RUN_TYPES),
        is_result_set=True,
    )


def _reload(rs: RootService, st: ast.ReloadServer) -> Result:
    # load_server_manager without a take-office grace (docs/design/servers.md#memory-and-the-table).
    rs.server_loader.load(take_office=False)
    return Result()


def _reload_zone(rs: RootService, st: ast.ReloadZone) -> Result:
    # ObRootService::admin_reload_zone: the zone manager re-read from __all_zone.
    changes = rs.zones.reload()
    return Result(info=f"{len(changes)} zone change(s)" + "".join(f"; {c}" for c in changes))


def _reload_unit(rs: RootService, st: ast.ReloadUnit) -> Result:
    # ObRootService::admin_reload_unit: the units and log-stream layout re-read from the tables.
    changes = reload_layout(rs.tenant_layer.layout)
    return Result(info=f"{len(changes)} unit change(s)" + "".join(f"; {c}" for c in changes))


def _run_job(rs: RootService, st: ast.RunJob) -> Result:
    if st.job.upper() != "ROOT_INSPECTION":
        raise ObError(
            "OB_NOT_SUPPORTED", f"RUN JOB '{st.job}'", detail="the only job is ROOT_INSPECTION"
        )
    out = rs.root_inspection.run()
    return Result(
        columns=["NAME", "INFO"],
        rows=list(out.rows),
        types=["VARCHAR", "VARCHAR"],
        is_result_set=True,
        info=f"ROOT_INSPECTION job {out.job_id}: {len(out.findings)} difference(s)",
    )


def _end_rolling_upgrade(rs: RootService, st: ast.EndRollingUpgrade) -> Result:
    before, after = rs.upgrade.end_rolling_upgrade(st.user)
    if before == after:
        return Result(info=f"the cluster version is {after} already")
    return Result(affected_rows=1, info=f"cluster version raised from {before} to {after}")


def _begin_upgrade(rs: RootService, st: ast.BeginUpgrade) -> Result:
    if not rs.upgrade.begin_upgrade(st.user):
        return Result(info="the cluster is in upgrade mode already")
    return Result(
        affected_rows=1,
        info="upgrade mode: tenant DDL, permanent offline and re-replication are held until "
        "ALTER SYSTEM END UPGRADE",
    )


def _begin_rolling_upgrade(rs: RootService, st: ast.BeginRollingUpgrade) -> Result:
    if not rs.upgrade.begin_rolling_upgrade(st.user):
        return Result(info="the rolling upgrade has begun already")
    return Result(
        affected_rows=1, info="rolling upgrade: stop, upgrade and start one zone at a time"
    )


def _end_upgrade(rs: RootService, st: ast.EndUpgrade) -> Result:
    if not rs.upgrade.end_upgrade(st.user):
        return Result(info="the cluster is not in upgrade mode")
    return Result(affected_rows=1, info="upgrade mode ended")


def _zone_op(rs: RootService, st: ast.ZoneOp) -> Result:
    # The rules of each statement are OceanBase's (docs/ZONES.md); STOP ZONE goes through the
    # server statements, which check the zone's servers as STOP SERVER does.
    zones = rs.zones
    if st.repeated is not None:
        # ObAdminZoneResolver's refusal of an option given twice.
        raise ObError("OB_NOT_SUPPORTED", f"multiple {st.repeated} option")
    if st.maintenance is not None and st.op != "STOP" and st.op != "FORCE_STOP":
        raise ObError("OB_NOT_SUPPORTED", f"{st.op} ZONE ... FOR MAINTENANCE (only STOP)")
    if st.op not in ("ADD", "ALTER") and (
        st.idc is not None or st.region is not None or st.zone_type is not None
    ):
        raise ObError(
            "OB_INVALID_ARGUMENT",
            "IDC / REGION / ZONE_TYPE",
            detail="they are only accepted by ADD and ALTER ZONE",
        )
    if st.op == "ADD":
        zones.add_zone(st.zone, st.region, st.idc, st.zone_type)
    elif st.op == "ALTER":
        zones.alter_zone(st.zone, st.region, st.idc, st.zone_type)
    elif st.op == "ISOLATE":
        servers = rs.zone_isolation.isolate_zone(st.zone)
        return Result(
            affected_rows=1,
            info=f"leaders moved off {len(servers)} server(s); they keep their replicas as "
            "followers until START ZONE",
        )
    elif st.op == "START":
        zones.start_zone(st.zone)
    elif st.op in ("STOP", "FORCE_STOP"):
        us = 0
        if st.maintenance is not None:
            if st.op != "STOP":
                raise ObError("OB_NOT_SUPPORTED", "FORCE STOP ZONE ... FOR MAINTENANCE")
            us = maintenance_duration(st.maintenance, short=rs.settings.allow_short_timings)
        if st.op == "STOP":
            # Upgrade mode's zone order (FORCE STOP overrides it, as it overrides the checks).
            rs.upgrade.check_stop_zone(st.zone)
        rs.server_admin.stop_zone(st.zone, force=st.op == "FORCE_STOP", maintenance_us=us)
    elif st.op == "DELETE":
        zones.delete_zone(st.zone)
    return Result(affected_rows=1)


def _set(rs: RootService, st: ast.SetParameters) -> Result:
    if any(name == finalize.PARAMETER for name, _ in st.items):
        raise ObError(
            "OB_OP_NOT_ALLOW",
            f"ALTER SYSTEM SET {finalize.PARAMETER}",
            detail="the cluster version rises only by ALTER SYSTEM END ROLLING UPGRADE",
        )
    for name, _ in st.items:
        if name in (mode.MODE_PARAMETER, mode.STAGE_PARAMETER):
            raise ObError(
                "OB_OP_NOT_ALLOW",
                f"ALTER SYSTEM SET {name}",
                detail="upgrade mode changes only by ALTER SYSTEM BEGIN / END [ROLLING] UPGRADE",
            )
    rs.parameters.set_scoped(st.scoped())
    return Result()


def _cluster_row(row: tuple[str, str, str, str, str, str]) -> tuple[object, ...]:
    # SHOW PARAMETERS' row of a cluster-wide state (the cluster version, the upgrade mode) in
    # SHOW_COLUMNS' order: the cluster's, so no server columns; read from its table, never
    # set by ALTER SYSTEM SET.
    name, value, default, rng, source, info = row
    return (
        "", "observer", "", 0, name, "STRING", value, info, "ROOT_SERVICE", "CLUSTER",
        source, "READONLY", default, "YES" if value == default else "NO", rng,
    )  # fmt: skip


def _cluster_rows(rs: RootService, like: str | None) -> list[tuple[object, ...]]:
    names = (finalize.PARAMETER, mode.MODE_PARAMETER, mode.STAGE_PARAMETER)
    if like is not None and not any(sql_like(n, like) for n in names):
        return []
    rows = [rs.finalize.parameter_row(), *rs.upgrade.parameter_rows()]
    return [_cluster_row(r) for r in rows if like is None or sql_like(r[0], like)]


def _show_parameters(rs: RootService, st: ast.ShowParameters) -> Result:
    return Result(
        columns=list(SHOW_COLUMNS),
        rows=[*rs.parameters.show_rows(st.like), *_cluster_rows(rs, st.like)],
        types=list(SHOW_TYPES),
        is_result_set=True,
    )


def _create_unit(rs: RootService, st: ast.CreateResourceUnit) -> Result:
    created = rs.tenant_layer.ddl.create_unit_config(
        NewUnitConfig(st.name, st.options, st.if_not_exists)
    )
    return Result(affected_rows=int(created), info="" if created else "resource unit exists")


def _drop_unit(rs: RootService, st: ast.DropResourceUnit) -> Result:
    dropped = rs.tenant_layer.ddl.drop_unit_config(st.name, if_exists=st.if_exists)
    return Result(affected_rows=int(dropped), info="" if dropped else "resource unit not exist")


def _create_pool(rs: RootService, st: ast.CreateResourcePool) -> Result:
    rs.upgrade.refuse_tenant_ddl("CREATE RESOURCE POOL")
    units = rs.tenant_layer.ddl.create_pool(
        NewPool(st.name, st.unit, st.unit_num, st.zone_list, st.if_not_exists)
    )
    info = f"unit(s) {', '.join(map(str, units))}" if units else "resource pool exists"
    return Result(affected_rows=len(units), info=info)


def _drop_pool(rs: RootService, st: ast.DropResourcePool) -> Result:
    rs.upgrade.refuse_tenant_ddl("DROP RESOURCE POOL")
    dropped = rs.tenant_layer.ddl.drop_pool(st.name, if_exists=st.if_exists)
    return Result(affected_rows=int(dropped), info="" if dropped else "resource pool not exist")


def _create_tenant(rs: RootService, st: ast.CreateTenant) -> Result:
    rs.upgrade.refuse_tenant_ddl("CREATE TENANT")
    tenant_id, ls_count = rs.tenant_layer.ddl.create_tenant(
        NewTenant(st.name, st.pools, st.primary_zone, st.ls_count, st.if_not_exists)
    )
    if not tenant_id:
        return Result(info="tenant exists")
    return Result(affected_rows=1, info=f"tenant {tenant_id} with {ls_count} log stream(s)")


def _drop_tenant(rs: RootService, st: ast.DropTenant) -> Result:
    rs.upgrade.refuse_tenant_ddl("DROP TENANT")
    tenant_id = rs.tenant_layer.ddl.drop_tenant(st.name, force=st.force, if_exists=st.if_exists)
    return Result(
        affected_rows=int(bool(tenant_id)),
        info=f"tenant {tenant_id} dropped" if tenant_id else "tenant not exist",
    )


def _alter_unit(rs: RootService, st: ast.AlterResourceUnit) -> Result:
    changed = rs.tenant_layer.alter.alter_unit_config(st.name, st.options)
    return Result(affected_rows=int(changed))


def _alter_pool(rs: RootService, st: ast.AlterResourcePool) -> Result:
    rs.upgrade.refuse_tenant_ddl("ALTER RESOURCE POOL")
    changed = rs.tenant_layer.pools.alter_pool(st.name, st.changes)
    return Result(affected_rows=int(changed))


def _alter_tenant(rs: RootService, st: ast.AlterTenant) -> Result:
    rs.upgrade.refuse_tenant_ddl("ALTER TENANT")
    job_id = rs.tenant_layer.alter.alter_primary_zone(
        st.name, st.primary_zone, f"ALTER TENANT {st.name} PRIMARY_ZONE = '{st.primary_zone}'"
    )
    if not job_id:
        return Result(info="primary zone unchanged")
    rs.timers.wake("ls_reconciler")
    return Result(affected_rows=1, info=f"job {job_id}")


def _migrate_unit(rs: RootService, st: ast.MigrateUnit) -> Result:
    job_id = rs.manual_moves.migrate(
        st.unit_id,
        st.destination,
        f"ALTER SYSTEM MIGRATE UNIT {st.unit_id} DESTINATION '{st.destination}'",
    )
    return Result(affected_rows=int(bool(job_id)), info=f"job {job_id}" if job_id else "")


def _cancel_migrate_unit(rs: RootService, st: ast.CancelMigrateUnit) -> Result:
    job_id = rs.manual_moves.cancel(st.unit_id)
    return Result(affected_rows=1, info=f"job {job_id} canceled" if job_id else "")


def _switch_leader(rs: RootService, st: ast.SwitchLeader) -> Result:
    topo = rs.tenant_layer.layout.topology(force=True)
    if st.tenant is not None:
        tenant = next(
            (t for t in topo.tenants.values() if t.tenant_name == st.tenant.lower()), None
        )
        if tenant is None:
            raise ObError("OB_TENANT_NOT_EXIST", st.tenant.lower())
        tenant_id = tenant.tenant_id
    else:
        # OceanBase takes the session's tenant; the RS's sessions serve every tenant, so
        # the one tenant with that log stream.
        having = sorted(t for t, ls in topo.plans if ls == st.ls_id)
        if len(having) != 1:
            raise ObError(
                "OB_INVALID_ARGUMENT",
                f"SWITCH REPLICA without TENANT ({len(having)} tenants have log stream "
                f"{st.ls_id}: name one)",
            )
        tenant_id = having[0]
    ip, port = parse_server(st.server)
    info = rs.tenant_layer.preferences.switch_replica(
        (tenant_id, st.ls_id), format_server(ip, port), st.role
    )
    return Result(affected_rows=1, info=info)


def _switch_rootservice(rs: RootService, st: ast.SwitchRootService) -> Result:
    ip, port = parse_server(st.server)
    return Result(info=rs.hand_over(format_server(ip, port)))


def _revoke_certificate(rs: RootService, st: ast.RevokeCertificate) -> Result:
    serial, added = rs.revocations.revoke(
        st.serial, subject=st.subject, reason=st.reason, revoked_by=st.revoked_by
    )
    info = f"certificate {serial} revoked" if added else f"certificate {serial} already revoked"
    return Result(affected_rows=int(added), info=info)


def _query(rs: RootService, st: ast.Query) -> Result:
    with rs.store.read() as conn:
        r = query_repo.run_query(
            conn,
            rs.catalog,
            st,
            timeout_us=rs.settings.select_timeout,
            max_rows=rs.settings.select_max_rows,
        )
    return Result(
        columns=r.columns,
        rows=r.rows,
        types=r.types,
        is_result_set=True,
        info="result truncated" if r.truncated else "",
    )


def _show_tables(rs: RootService, st: ast.ShowTables) -> Result:
    with rs.store.read() as conn:
        tables = rs.catalog.tables(conn)
    rows = [
        (t.name, t.kind) if st.full else (t.name,)
        for t in tables
        if st.like is None or sql_like(t.name, st.like)
    ]
    header = f"Tables_in_{SCHEMA}" + (f" ({st.like})" if st.like is not None else "")
    return Result(
        columns=[header, "Table_type"] if st.full else [header],
        rows=rows,
        types=["VARCHAR", "VARCHAR"] if st.full else ["VARCHAR"],
        is_result_set=True,
    )


def _show_databases(rs: RootService, st: ast.ShowDatabases) -> Result:
    names = [n for n in ("information_schema", SCHEMA) if st.like is None or sql_like(n, st.like)]
    header = "Database" + (f" ({st.like})" if st.like is not None else "")
    return Result(
        columns=[header], rows=[(n,) for n in names], types=["VARCHAR"], is_result_set=True
    )


def _describe(rs: RootService, st: ast.Describe) -> Result:
    with rs.store.read() as conn:
        info = rs.catalog.get(conn, st.table)
    rows = [
        (c.name, c.mysql_type, "YES" if c.nullable else "NO", c.key, c.default, "")
        for c in info.columns
        if st.like is None or sql_like(c.name, st.like)
    ]
    return Result(
        columns=["Field", "Type", "Null", "Key", "Default", "Extra"],
        rows=rows,
        types=["VARCHAR"] * 6,
        is_result_set=True,
    )


def _create_user(rs: RootService, st: ast.CreateUser) -> Result:
    created = rs.users.create_user(st.user, st.password, if_not_exists=st.if_not_exists)
    return Result(affected_rows=int(created), info="" if created else "user exists")


def _drop_user(rs: RootService, st: ast.DropUser) -> Result:
    dropped = rs.users.drop_user(st.user, if_exists=st.if_exists)
    return Result(affected_rows=int(dropped), info="" if dropped else "user not exist")


def _alter_user(rs: RootService, st: ast.AlterUser) -> Result:
    rs.users.alter_password(st.user, st.password)
    return Result()


def _grant(rs: RootService, st: ast.Grant) -> Result:
    rs.users.grant(st.user, st.privileges)
    return Result()


def _revoke(rs: RootService, st: ast.Revoke) -> Result:
    rs.users.revoke(st.user, st.privileges)
    return Result()


def _show_grants(rs: RootService, st: ast.ShowGrants) -> Result:
    # execute() has put the caller's name in a SHOW GRANTS without FOR.
    user = st.user or ""
    return Result(
        columns=[f"Grants for {user}@%"],
        rows=[(line,) for line in rs.users.show_grants(user)],
        is_result_set=True,
    )


EXECUTORS: dict[type, Callable[[RootService, Any], Result]] = {
    ast.Bootstrap: _bootstrap,
    ast.ServerOp: _server_op,
    ast.DrainServer: _drain_server,
    ast.ExplainDeleteServer: _explain_delete,
    ast.ReloadServer: _reload,
    ast.ReloadZone: _reload_zone,
    ast.ReloadUnit: _reload_unit,
    ast.RunJob: _run_job,
    ast.EndRollingUpgrade: _end_rolling_upgrade,
    ast.BeginUpgrade: _begin_upgrade,
    ast.BeginRollingUpgrade: _begin_rolling_upgrade,
    ast.EndUpgrade: _end_upgrade,
    ast.ZoneOp: _zone_op,
    ast.SetParameters: _set,
    ast.ShowParameters: _show_parameters,
    ast.Query: _query,
    ast.ShowTables: _show_tables,
    ast.ShowDatabases: _show_databases,
    ast.Describe: _describe,
    ast.CreateResourceUnit: _create_unit,
    ast.DropResourceUnit: _drop_unit,
    ast.CreateResourcePool: _create_pool,
    ast.DropResourcePool: _drop_pool,
    ast.CreateTenant: _create_tenant,
    ast.DropTenant: _drop_tenant,
    ast.SwitchLeader: _switch_leader,
    ast.AlterResourceUnit: _alter_unit,
    ast.AlterTenant: _alter_tenant,
    ast.AlterResourcePool: _alter_pool,
    ast.MigrateUnit: _migrate_unit,
    ast.CancelMigrateUnit: _cancel_migrate_unit,
    ast.SwitchRootService: _switch_rootservice,
    ast.RecoverLs: _recover_ls,
    ast.RevokeCertificate: _revoke_certificate,
    ast.CreateUser: _create_user,
    ast.DropUser: _drop_user,
    ast.AlterUser: _alter_user,
    ast.Grant: _grant,
    ast.Revoke: _revoke,
    ast.ShowGrants: _show_grants,
}
