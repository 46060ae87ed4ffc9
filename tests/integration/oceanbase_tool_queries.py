"""The SQL that OceanBase's own tools send about servers, zones, units, resource pools,
tenants, parameters, jobs and log streams, copied verbatim from their public source, with
what the answer must satisfy against the cluster's state.

Sources (repository, file, the commit read):

- ``oceanbase/ob-operator`` ``pkg/oceanbase-sdk/const/sql/{server,zone,parameter,system,
  tenant,cluster}.go`` at 9f1ab81d62fd06e947ef867cfe7af503c010beeb; its connector
  (``pkg/oceanbase-sdk/connector/datasource.go``) opens go-sql-driver/mysql with
  ``interpolateParams=true``, so each ``?`` reaches the server as a literal, quoted and
  backslash-escaped for a string, in decimal for a number (:func:`go_interpolate`);
  ``%s`` is filled by ``fmt.Sprintf`` first. The test values follow ob-operator's own test
  (``pkg/oceanbase-sdk/test/tenant_test.go``: ``unit_test`` with 2 CPUs and 2,048,000,000
  bytes, ``utf8mb4``, ``ob_tcp_invited_nodes='%'``).
- ``oceanbase/obagent`` ``monitor/plugins/common/observer_meta.go`` and
  ``etc/module_config/monitor_ob.yaml`` (the OceanBase 4.x forms) at
  a8c8fdf98ba34f16062db1d072d3288e49477f93; also ``interpolateParams=true``.
- ``oceanbase/oceanbase`` ``tools/upgrade/upgrade_checker.py`` and
  ``tools/upgrade/upgrade_health_checker.py`` at 003dc1e43839d604c608c40d9cbee9e064fee7f8:
  mysql.connector, text built with ``str.format``.

Each :class:`ToolQuery` is one of:

- a read whose ``check`` gets the answer (column labels and rows, every value as text or
  None, as the ``mariadb`` CLI shows it) and the :class:`State` (the cluster's facts, read
  through obadmin's gRPC path from the project's own tables) and raises AssertionError;
- a statement (``kind="statement"``) run once per client in :data:`STATEMENTS`' order, whose
  ``check`` verifies the effect afterwards;
- ``refused="reason"``: a feature this project does not have; the answer must be an error
  with a MySQL error number and a message, the session usable afterwards, and nothing
  changed.

``needs`` names the branch that builds what the query reads (``params``, ``units``,
``switch``, ``zones``, ``obviews``); until it is merged the query is an expected failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from obcommon.durations import format_duration, parse_duration

OB_OPERATOR = "oceanbase/ob-operator@9f1ab81d:pkg/oceanbase-sdk/const/sql/"
OBAGENT_META = "oceanbase/obagent@a8c8fdf9:monitor/plugins/common/observer_meta.go"
OBAGENT_YAML = "oceanbase/obagent@a8c8fdf9:etc/module_config/monitor_ob.yaml"
UPGRADE_CHECKER = "oceanbase/oceanbase@003dc1e4:tools/upgrade/upgrade_checker.py"
HEALTH_CHECKER = "oceanbase/oceanbase@003dc1e4:tools/upgrade/upgrade_health_checker.py"


@dataclass
class Answer:
    """A result set as a client saw it: column labels and rows of text (None for NULL);
    ``types`` is PyMySQL's Python type of each value (empty for the CLI)."""

    columns: list[str]
    rows: list[list[str | None]]
    types: list[list[type]] = field(default_factory=list)


@dataclass
class State:
    """The cluster the queries run against, as the test knows it.

    ``truth(sql)`` runs ``sql`` through obadmin's gRPC path (the project's own reading of
    its tables, not the MySQL endpoint under test) and returns rows of text. ``vars`` fills
    the placeholders of the queries (``server_ip``, ``server_port``, ``zone``, ``tenant``,
    ``tenant_id``, ``c`` the client's suffix, ``spare`` a running agent not yet added)."""

    truth: Callable[[str], list[list[str | None]]]
    vars: dict[str, Any]

    def servers(self) -> dict[tuple[str, str], str]:
        """(ip, port) -> zone of every server of the whitelist."""
        return {
            (ip or "", port or ""): zone or ""
            for ip, port, zone in self.truth("SELECT svr_ip, svr_port, zone FROM __all_server")
        }


Check = Callable[[Answer, State], None]


@dataclass
class ToolQuery:
    """One query of one tool. ``sql`` is the constant as its source spells it; ``sprintf``
    fills its ``%s`` / ``%d`` (Go's fmt.Sprintf) and ``args`` its ``?`` (Go) or ``{0}``
    (Python's str.format, ``style="format"``); a ``str`` in either is first formatted with
    :attr:`State.vars`."""

    name: str
    source: str
    sql: str
    args: Sequence[Any] = ()
    sprintf: Sequence[Any] = ()
    style: str = "go"
    kind: str = "read"
    check: Check | None = None
    refused: str = ""
    needs: str = ""
    # Columns the tool reads as integers: PyMySQL must get a number for them.
    int_columns: Sequence[str] = ()
    # A project query whose answer the refusal must leave unchanged.
    unchanged: str = ""

    def text(self, vars: dict[str, Any]) -> str:
        """The statement exactly as the tool puts it on the wire."""

        def fill(v: Any) -> Any:
            if not isinstance(v, str):
                return v
            # A lone placeholder keeps the value's type (Go passes an int64 id unquoted).
            whole = re.fullmatch(r"\{(\w+)\}", v)
            return vars[whole[1]] if whole else v.format(**vars)

        sql = self.sql
        if self.sprintf:
            parts = iter([fill(v) for v in self.sprintf])
            sql = re.sub(r"%[sd]", lambda _m: str(next(parts)), sql)
        args = [fill(v) for v in self.args]
        if self.style == "format":
            return sql.format(*args)
        return go_interpolate(sql, args)


def go_interpolate(sql: str, args: Sequence[Any]) -> str:
    """go-sql-driver/mysql's ``interpolateParams``: every ``?`` in order becomes the next
    argument (a string quoted with backslash escapes, an int in decimal, a float in Go's
    shortest 'g' form, None as NULL)."""
    if sql.count("?") != len(args):
        raise ValueError(f"{len(args)} arguments for {sql.count('?')} placeholders: {sql}")
    it = iter(args)

    def lit(_m: re.Match[str]) -> str:
        v = next(it)
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "1" if v else "0"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return repr(int(v)) if v.is_integer() else repr(v)
        s = str(v)
        for a, b in (("\\", "\\\\"), ("'", "\\'"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r")):
            s = s.replace(a, b)
        return "'" + s.replace("\x00", "\\0").replace("\x1a", "\\Z") + "'"

    return re.sub(r"\?", lit, sql)


# --------------------------------------------------------------------------- checks


def col(a: Answer, name: str) -> list[str | None]:
    """The values of column ``name`` (case-insensitive)."""
    lower = [c.lower() for c in a.columns]
    assert name.lower() in lower, f"no column {name} in {a.columns}"
    i = lower.index(name.lower())
    return [r[i] for r in a.rows]


def records(a: Answer) -> list[dict[str, str | None]]:
    return [dict(zip([c.lower() for c in a.columns], r, strict=True)) for r in a.rows]


def one_value(a: Answer) -> str | None:
    assert len(a.rows) == 1 and len(a.rows[0]) == 1, f"not one value: {a.rows}"
    return a.rows[0][0]


def count_is(expected: int | Callable[[State], int]) -> Check:
    def check(a: Answer, st: State) -> None:
        want = expected(st) if callable(expected) else expected
        assert one_value(a) == str(want), f"count {a.rows}, expected {want}"

    return check


def truth_count(sql: str) -> Callable[[State], int]:
    return lambda st: int(st.truth(sql)[0][0] or 0)


def servers_are(a: Answer, st: State) -> None:
    """One row per server of the whitelist, with its zone."""
    got = {(r["svr_ip"], r["svr_port"]): r["zone"] for r in records(a)}
    assert got == st.servers(), f"{got} != {st.servers()}"


def _server_rows(a: Answer, st: State) -> None:
    servers_are(a, st)
    truth = {
        (ip, port): (i, sst)
        for ip, port, i, sst in st.truth(
            "SELECT svr_ip, svr_port, id, start_service_time FROM __all_server"
        )
    }
    for r in records(a):
        i, sst = truth[(r["svr_ip"], r["svr_port"])]
        assert r["id"] == i and r["start_service_time"] == sst, (r, i, sst)
        assert r["status"] == "active", r
        assert int(r["start_service_time"] or 0) > 0, r
        assert r["with_rootserver"] in ("0", "1"), r


def _one_server(a: Answer, st: State) -> None:
    ip, port = st.vars["server_ip"], str(st.vars["server_port"])
    rows = records(a)
    assert len(rows) == 1, rows
    assert (rows[0]["svr_ip"], rows[0]["svr_port"]) == (ip, port), rows
    assert rows[0]["zone"] == st.servers()[(ip, port)], rows


def _server_id(a: Answer, st: State) -> None:
    (want,) = st.truth(
        f"SELECT id FROM __all_server WHERE svr_ip = '{st.vars['server_ip']}' "
        f"AND svr_port = {st.vars['server_port']}"
    )[0]
    assert one_value(a) == want, (a.rows, want)


def _start_service_time_usec(a: Answer, st: State) -> None:
    (want,) = st.truth(
        "SELECT start_service_time FROM __all_server WHERE "
        f"svr_ip = '{st.vars['server_ip']}' AND svr_port = {st.vars['server_port']}"
    )[0]
    got = one_value(a)
    # SQLite computes UNIX_TIMESTAMP(DATETIME(6)) in a double: the last microsecond may round.
    assert got is not None and abs(int(float(got)) - int(want or 0)) <= 1, (got, want)


def _zones(a: Answer, st: State) -> None:
    truth = {
        z: (s, region) for z, s, region in st.truth("SELECT zone, status, region FROM DBA_OB_ZONES")
    }
    got = {r["name"]: (r["status"], r["region"]) for r in records(a)}
    assert set(got) == set(truth), (got, truth)
    for z, (status, region) in got.items():
        assert status == (truth[z][0] or "").lower() and region == truth[z][1], (z, got, truth)
    assert all(r["type"] == "ReadWrite" for r in records(a)), a.rows


def _zone_z1(a: Answer, st: State) -> None:
    rows = records(a)
    assert [r["name"] for r in rows] == [st.vars["zone"]], rows
    assert rows[0]["status"] == "active", rows


def _tenant_row(a: Answer, st: State) -> None:
    rows = records(a)
    assert len(rows) == 1, rows
    r = rows[0]
    assert r["tenant_name"] == st.vars["tenant"] and r["tenant_id"] == str(st.vars["tenant_id"])
    assert r["primary_zone"] == st.vars["primary_zone"] and r["status"] == "NORMAL", r
    assert r["previous_locality"] == "", r


def _units_of_tenant(a: Answer, st: State) -> None:
    truth = st.truth(
        "SELECT unit_id, zone, svr_ip, svr_port FROM DBA_OB_UNITS "
        f"WHERE tenant_id = {st.vars['tenant_id']}"
    )
    got = [[r["unit_id"], r["zone"], r["svr_ip"], r["svr_port"]] for r in records(a)]
    assert sorted(got, key=str) == sorted(truth, key=str), (got, truth)
    for r in records(a):
        assert r["tenant_id"] == str(st.vars["tenant_id"]) and r["status"] == "ACTIVE", r
        assert float(r["max_cpu"] or 0) == 1.0 and r["memory_size"] == str(2 << 30), r


def _all_units(a: Answer, st: State) -> None:
    truth = st.truth("SELECT unit_id, resource_pool_id, zone, svr_ip, svr_port FROM DBA_OB_UNITS")
    cols = ["unit_id", "resource_pool_id", "zone", "svr_ip", "svr_port"]
    got = [[r[c] for c in cols] for r in records(a)]
    assert sorted(got, key=str) == sorted(truth, key=str), (got, truth)
    for r in records(a):
        assert r["migrate_from_svr_ip"] is None and r["migrate_from_svr_port"] is None, r


def _units_on_ip(a: Answer, st: State) -> None:
    truth = st.truth(f"SELECT unit_id FROM DBA_OB_UNITS WHERE svr_ip = '{st.vars['server_ip']}'")
    assert sorted(col(a, "unit_id"), key=str) == sorted((t[0] for t in truth), key=str)


def _pool_p1(a: Answer, st: State) -> None:
    rows = records(a)
    assert len(rows) == 1, rows
    r = rows[0]
    assert r["name"] == st.vars["pool"] and r["tenant_id"] == str(st.vars["tenant_id"]), r
    assert r["unit_count"] == "1" and r["zone_list"] == "z1;z2;z3", r


def _pools(a: Answer, st: State) -> None:
    truth = {n for (n,) in st.truth("SELECT name FROM __all_resource_pool")}
    assert set(col(a, "name")) == truth, (a.rows, truth)


def _unit_config_u1(a: Answer, st: State) -> None:
    rows = records(a)
    assert len(rows) == 1, rows
    r = rows[0]
    assert float(r["max_cpu"] or 0) == 1.0 and r["memory_size"] == str(2 << 30), r
    assert r["log_disk_size"] == str(4 << 30), r


def _unit_configs(a: Answer, st: State) -> None:
    truth = {n for (n,) in st.truth("SELECT name FROM __all_unit_config")}
    assert set(col(a, "name")) == truth, (a.rows, truth)


def _tenant_names(a: Answer, st: State) -> None:
    truth = {n for (n,) in st.truth("SELECT tenant_name FROM __all_tenant")}
    names = set(col(a, "tenant_name"))
    assert truth <= names, (names, truth)


def _tenant_primary_zones(a: Answer, st: State) -> None:
    got = {r["tenant_name"]: r["primary_zone"] for r in records(a)}
    assert got.get(st.vars["tenant"]) == st.vars["primary_zone"], got


def _tenant_ids_desc(a: Answer, st: State) -> None:
    ids = [int(v or 0) for v in col(a, "tenant_id")]
    assert ids == sorted(ids, reverse=True) and st.vars["tenant_id"] in ids, ids


def _servers_by_status(a: Answer, st: State) -> None:
    truth: dict[str, set[str]] = {}
    for ip, status in st.truth("SELECT svr_ip, status FROM DBA_OB_SERVERS"):
        truth.setdefault(status or "", set()).add(ip or "")
    rows = records(a)
    assert {r["status"] for r in rows} == set(truth), (rows, truth)
    n = len(st.servers())
    assert sum(int(r["cnt"] or 0) for r in rows) == n, rows
    for r in rows:
        assert set((r["servers"] or "").split(",")) == truth[r["status"] or ""], (r, truth)


def _with_rootserver(a: Answer, st: State) -> None:
    (want,) = st.truth(
        "SELECT with_rootserver FROM __all_server WHERE "
        f"svr_ip = '{st.vars['server_ip']}' AND svr_port = {st.vars['server_port']}"
    )[0]
    assert one_value(a) == want, (a.rows, want)


def _pool_unit_config_join(a: Answer, st: State) -> None:
    rows = records(a)
    truth = st.truth(f"SELECT unit_id FROM DBA_OB_UNITS WHERE svr_ip = '{st.vars['server_ip']}'")
    assert len(rows) == len(truth) and rows, (rows, truth)
    for r in rows:
        assert r["tenant_id"] == str(st.vars["tenant_id"]) and r["name"] == "u1", r
        assert float(r["max_cpu"] or 0) == 1.0 and r["max_memory"] == str(2 << 30), r


def _version_comment(a: Answer, st: State) -> None:
    rows = records(a)
    assert len(rows) == 1, rows
    # obagent's ParseVersionComment takes the second word and compares it with 4.0.0.0.
    words = (rows[0]["value"] or "").split(" ")
    assert len(words) > 1 and re.fullmatch(r"\d+(\.\d+){3}", words[1]), rows
    assert int(words[1].split(".")[0]) >= 4, rows


def _distinct_build_version(a: Answer, st: State) -> None:
    truth = {
        (bv or "").split("_")[0] for (bv,) in st.truth("SELECT build_version FROM __all_server")
    }
    assert {r[0] for r in a.rows} == truth and len(a.rows) == 1, (a.rows, truth)


def _parameters_of(name: str) -> Check:
    def check(a: Answer, st: State) -> None:
        rows = records(a)
        servers = st.servers()
        assert {(r["svr_ip"], r["svr_port"]) for r in rows} == set(servers), rows
        for r in rows:
            assert r["name"] == name and r["zone"] == servers[(r["svr_ip"], r["svr_port"])], r
            assert r["value"] and r["edit_level"] and r["scope"] == "CLUSTER", r
            assert r["tenant_id"] == "0", r

    return check


def _parameter_on_server(a: Answer, st: State) -> None:
    rows = records(a)
    assert [(r["svr_ip"], r["svr_port"]) for r in rows] == [
        (st.vars["server_ip"], str(st.vars["server_port"]))
    ], rows


def _parameters_listed(a: Answer, st: State) -> None:
    rows = records(a)
    assert rows, "no parameter"
    for r in rows:
        assert r["name"] and r["data_type"] and r["edit_level"] and r["scope"], r
    servers = {(r["svr_ip"], r["svr_port"]) for r in rows}
    assert servers == set(st.servers()), servers


def _parameters_by_name(a: Answer, st: State) -> None:
    names = col(a, "name")
    assert names and len(names) == len(set(names)), names


def _tenant_parameters(a: Answer, st: State) -> None:
    for r in records(a):
        assert r["scope"] == "TENANT", r


def _compatible(a: Answer, st: State) -> None:
    ids = {r["tenant_id"] for r in records(a)}
    assert str(st.vars["tenant_id"]) in ids, a.rows
    assert all(re.fullmatch(r"\d+(\.\d+){3}", r["value"] or "") for r in records(a)), a.rows


def _one_version(a: Answer, st: State) -> None:
    # get_version() of the upgrade scripts needs four dotted numbers, and one value.
    assert re.fullmatch(r"\d+(\.\d+){3}", one_value(a) or ""), a.rows


def _gv_servers(a: Answer, st: State) -> None:
    servers_are(a, st)
    for r in records(a):
        for c in ("cpu_capacity", "mem_capacity", "data_disk_capacity", "log_disk_capacity"):
            assert float(r[c] or 0) > 0, (c, r)
        assert float(r["cpu_assigned"] or 0) >= 1.0 and int(r["mem_assigned"] or 0) >= 2 << 30, r
        assert r["data_disk_health_status"] == "NORMAL", r


def _resource_total(a: Answer, st: State) -> None:
    assert len(a.rows) == len(st.servers()), a.rows
    for r in records(a):
        assert float(r["cpu_capacity"] or 0) > 0 and int(r["mem_capacity"] or 0) > 0, r


def _server_stat(a: Answer, st: State) -> None:
    rows = records(a)
    assert len(rows) == 1, rows
    r = rows[0]
    assert float(r["cpu_total"] or 0) > 0 and float(r["cpu_assigned"] or 0) >= 1.0, r
    assert 0 < float(r["mem_assigned_percent"] or 0) <= 1, r


def _tenant_server_stat(a: Answer, st: State) -> None:
    rows = records(a)
    assert [r["tenant_id"] for r in rows] == [str(st.vars["tenant_id"])], rows
    assert rows[0]["tenant_name"] == st.vars["tenant"], rows


def _disk_free(a: Answer, st: State) -> None:
    rows = records(a)
    assert len(rows) == 1, rows
    assert 0 < int(rows[0]["free_size"] or 0) <= int(rows[0]["total_size"] or 0), rows


def _tenants_on_server(a: Answer, st: State) -> None:
    assert col(a, "tenant_id") == ["1", str(st.vars["tenant_id"])], a.rows


def _tenant_named(a: Answer, st: State) -> None:
    # A primary tenant: OceanBase's neutral values in the standby columns.
    [r] = records(a)
    assert r["tenant_name"] == st.vars["tenant"] and r["tenant_role"] == "PRIMARY", r
    assert r["switchover_status"] == "NORMAL" and r["log_mode"] == "NOARCHIVELOG", r


def _user_tenants(a: Answer, st: State) -> None:
    truth = {n for (n,) in st.truth("SELECT tenant_name FROM __all_tenant WHERE tenant_id > 1")}
    assert {r["tenant_name"] for r in records(a)} == truth, (a.rows, truth)


def _log_stats(a: Answer, st: State) -> None:
    truth = {
        ls
        for (ls,) in st.truth(
            f"SELECT ls_id FROM __all_ls_status WHERE tenant_id = {st.vars['tenant_id']}"
        )
    }
    assert sorted(col(a, "ls_id"), key=str) == sorted(truth, key=str), (a.rows, truth)
    assert all(int(v or -1) >= 0 for v in col(a, "begin_lsn")), a.rows


def _no_rows_or_count_zero(a: Answer, st: State) -> None:
    assert a.rows == [] or one_value(a) == "0", a.rows


def _rs_job_none(a: Answer, st: State) -> None:
    assert a.rows == [], a.rows


# --------------------------------------------------------------------------- reads

_TENANT_FIELDS = (
    "tenant_id, tenant_name, tenant_type, create_time, modify_time, primary_zone, locality, "
    "compatibility_mode, status, in_recyclebin, locked, tenant_role, sync_scn, replayable_scn, "
    "readable_scn, recovery_until_scn, log_mode, arbitration_service_status, switchover_status, "
    "switchover_epoch"
)
_UNIT_FIELDS = (
    "unit_id, tenant_id, status, resource_pool_id, unit_group_id, create_time, modify_time, "
    "zone, svr_ip, svr_port, unit_config_id, max_cpu, min_cpu, memory_size, log_disk_size, "
    "max_iops, min_iops, iops_weight"
)
_NO_STORAGE = "there is no storage engine here: no {what}"
_NOT_OBSERVER = "the RS is not an observer: {what}"

READS: list[ToolQuery] = [
    # ---- ob-operator: servers
    ToolQuery(
        "obop_list_server",
        OB_OPERATOR + "server.go ListServer",
        "select id, zone, svr_ip, svr_port, inner_port, with_rootserver, with_partition, lower(status) as status, start_service_time, build_version from __all_server",
        check=_server_rows,
        int_columns=("id", "svr_port", "inner_port", "with_rootserver", "start_service_time"),
    ),
    ToolQuery(
        "obop_get_server",
        OB_OPERATOR + "server.go GetServer",
        "select id, zone, svr_ip, svr_port, inner_port, with_rootserver, with_partition, lower(status) as status, start_service_time, build_version from __all_server where svr_ip = ? and svr_port = ?",
        args=("{server_ip}", "{server_port_int}"),
        check=_one_server,
        int_columns=("id", "svr_port"),
    ),
    ToolQuery(
        "obop_list_gv_servers",
        OB_OPERATOR + "server.go ListGVServers",
        "select svr_ip, svr_port, zone, sql_port, cpu_capacity, cpu_capacity_max, cpu_assigned, cpu_assigned_max, mem_capacity, mem_assigned, memory_limit, log_disk_capacity, log_disk_assigned, data_disk_capacity, data_disk_allocated, data_disk_in_use, data_disk_health_status from oceanbase.GV$OB_SERVERS",
        check=_gv_servers,
        int_columns=("svr_port", "mem_capacity", "data_disk_capacity"),
    ),
    # ---- ob-operator: zones
    ToolQuery(
        "obop_list_zones",
        OB_OPERATOR + "zone.go ListZones",
        "select zone as name, lower(status) as status, idc, region, type from DBA_OB_ZONES",
        check=_zones,
    ),
    ToolQuery(
        "obop_get_zone",
        OB_OPERATOR + "zone.go GetZone",
        "select zone as name, lower(status) as status, idc, region, type from DBA_OB_ZONES where zone = ?",
        args=("{zone}",),
        check=_zone_z1,
    ),
    # ---- ob-operator: parameters
    ToolQuery(
        "obop_query_parameter",
        OB_OPERATOR + "parameter.go QueryParameter",
        "select zone, svr_ip, svr_port, name, value, scope, edit_level, coalesce(tenant_id, 0) as tenant_id from gv$ob_parameters where name = ?",
        args=("server_permanent_offline_time",),
        check=_parameters_of("server_permanent_offline_time"),
        int_columns=("svr_port", "tenant_id"),
    ),
    ToolQuery(
        "obop_query_parameter_with_scope",
        OB_OPERATOR + "parameter.go QueryParameterWithScope",
        "select zone, svr_ip, svr_port, name, value, scope, edit_level, coalesce(tenant_id, 0) as tenant_id from gv$ob_parameters where name = ? and %s = ?",
        sprintf=("svr_ip",),
        args=("syslog_level", "{server_ip}"),
        check=_parameters_of("syslog_level"),
    ),
    ToolQuery(
        "obop_list_parameters_with_tenant_id",
        OB_OPERATOR + "parameter.go ListParametersWithTenantID",
        "select name, value, IFNULL(data_type, 'unknown') as data_type, info, section, edit_level, scope from GV$OB_PARAMETERS where tenant_id = ?",
        args=("{tenant_id}",),
        check=_tenant_parameters,
    ),
    ToolQuery(
        "obop_select_compatible_of_tenants",
        OB_OPERATOR + "parameter.go SelectCompatibleOfTenants",
        "select name, value, tenant_id from GV$OB_PARAMETERS where name = 'compatible'",
        check=_compatible,
    ),
    ToolQuery(
        "obop_list_parameters_group_by_name",
        OB_OPERATOR + "parameter.go ListParametersGroupByName",
        "select name, value, IFNULL(data_type, 'unknown') as data_type, info, section, edit_level, scope, svr_ip, zone, svr_port, IFNULL(tenant_id, 0) as tenant_id from GV$OB_PARAMETERS group by name",
        check=_parameters_by_name,
    ),
    ToolQuery(
        "obop_list_all_parameters",
        OB_OPERATOR + "parameter.go ListAllParameters",
        "select name, value, IFNULL(data_type, 'unknown') as data_type, info, section, edit_level, scope, svr_ip, zone, svr_port, IFNULL(tenant_id, 0) as tenant_id from GV$OB_PARAMETERS",
        check=_parameters_listed,
    ),
    # ---- ob-operator: tenants, pools, units (system.go, tenant.go)
    ToolQuery(
        "obop_query_tenant_with_name",
        OB_OPERATOR + "system.go QueryTenantWithName",
        "SELECT "
        + _TENANT_FIELDS
        + " FROM DBA_OB_TENANTS where tenant_name = ? and tenant_type = 'USER'",
        args=("{tenant}",),
        check=_tenant_named,
    ),
    ToolQuery(
        "obop_select_sys_tenant",
        OB_OPERATOR + "system.go SelectSysTenant",
        "SELECT " + _TENANT_FIELDS + " FROM DBA_OB_TENANTS where tenant_type = 'USER'",
        check=_user_tenants,
    ),
    ToolQuery(
        "obop_query_units_with_tenant_id",
        OB_OPERATOR + "system.go QueryUnitsWithTenantId",
        "SELECT " + _UNIT_FIELDS + " FROM DBA_OB_UNITS where tenant_id = ?",
        args=("{tenant_id}",),
        check=_units_of_tenant,
        int_columns=("unit_id", "tenant_id", "svr_port", "memory_size"),
    ),
    ToolQuery(
        "obop_list_units_with_server_ip",
        OB_OPERATOR + "system.go ListUnitsWithServerIP",
        "SELECT " + _UNIT_FIELDS + " FROM DBA_OB_UNITS where svr_ip = ?",
        args=("{server_ip}",),
        check=_units_on_ip,
    ),
    ToolQuery(
        "obop_get_tenant_by_name",
        OB_OPERATOR + "tenant.go GetTenantByName",
        "SELECT tenant_id, tenant_name, primary_zone, locality, COALESCE(previous_locality, '') as previous_locality, status FROM oceanbase.DBA_OB_TENANTS WHERE tenant_name = ?;",
        args=("{tenant}",),
        check=_tenant_row,
        int_columns=("tenant_id",),
    ),
    ToolQuery(
        "obop_get_pool_by_name",
        OB_OPERATOR + "tenant.go GetPoolByName",
        "SELECT resource_pool_id, name, unit_count, unit_config_id, zone_list, tenant_id FROM oceanbase.DBA_OB_RESOURCE_POOLS WHERE name = ?;",
        args=("{pool}",),
        check=_pool_p1,
        int_columns=("resource_pool_id", "unit_count", "unit_config_id", "tenant_id"),
    ),
    ToolQuery(
        "obop_get_unit_config_v4_by_name",
        OB_OPERATOR + "tenant.go GetUnitConfigV4ByName",
        "SELECT max_cpu, min_cpu, memory_size, log_disk_size, max_iops, min_iops, iops_weight FROM oceanbase.DBA_OB_UNIT_CONFIGS WHERE name = ?;",
        args=("{unit}",),
        check=_unit_config_u1,
        int_columns=("memory_size", "log_disk_size", "max_iops", "min_iops", "iops_weight"),
    ),
    ToolQuery(
        "obop_get_pool_list",
        OB_OPERATOR + "tenant.go GetPoolList",
        "SELECT resource_pool_id, name, unit_count, unit_config_id, zone_list, tenant_id FROM oceanbase.DBA_OB_RESOURCE_POOLS;",
        check=_pools,
    ),
    ToolQuery(
        "obop_get_unit_list",
        OB_OPERATOR + "tenant.go GetUnitList",
        "SELECT unit_id, resource_pool_id, zone, svr_ip, svr_port, migrate_from_svr_ip, migrate_from_svr_port, status FROM oceanbase.DBA_OB_UNITS;",
        check=_all_units,
        int_columns=("unit_id", "resource_pool_id", "svr_port"),
    ),
    ToolQuery(
        "obop_get_unit_config_v4_list",
        OB_OPERATOR + "tenant.go GetUnitConfigV4List",
        "SELECT unit_config_id, name, max_cpu, min_cpu, memory_size, max_iops, min_iops, log_disk_size, iops_weight FROM oceanbase.DBA_OB_UNIT_CONFIGS;",
        check=_unit_configs,
    ),
    ToolQuery(
        "obop_get_tenant_count_by_name",
        OB_OPERATOR + "tenant.go GetTenantCountByName",
        "SELECT count(*) FROM oceanbase.DBA_OB_TENANTS WHERE tenant_name = ?;",
        args=("{tenant}",),
        check=count_is(1),
        int_columns=("count(*)",),
    ),
    ToolQuery(
        "obop_get_pool_count_by_name",
        OB_OPERATOR + "tenant.go GetPoolCountByName",
        "SELECT count(*) FROM oceanbase.DBA_OB_RESOURCE_POOLS WHERE name = ?;",
        args=("no_such_pool",),
        check=count_is(0),
        int_columns=("count(*)",),
    ),
    ToolQuery(
        "obop_get_unit_config_v4_count_by_name",
        OB_OPERATOR + "tenant.go GetUnitConfigV4CountByName",
        "SELECT count(*) FROM oceanbase.DBA_OB_UNIT_CONFIGS WHERE name = ?;",
        args=("{unit}",),
        check=count_is(1),
        int_columns=("count(*)",),
    ),
    ToolQuery(
        "obop_get_rs_job_count",
        OB_OPERATOR + "tenant.go GetRsJobCount",
        "select count(*) from DBA_OB_TENANT_JOBS where tenant_id=? and job_status ='INPROGRESS' and job_type='ALTER_TENANT_LOCALITY'",
        args=("{tenant_id}",),
        check=count_is(0),
        int_columns=("count(*)",),
    ),
    ToolQuery(
        "obop_get_rs_job",
        OB_OPERATOR + "tenant.go GetRsJob",
        "select job_id, job_type, job_status, tenant_id from DBA_OB_TENANT_JOBS where tenant_name=? and job_status ='INPROGRESS' and job_type='ALTER_TENANT_LOCALITY'",
        args=("{tenant}",),
        check=_rs_job_none,
    ),
    ToolQuery(
        "obop_get_resource_total",
        OB_OPERATOR + "tenant.go GetResourceTotal",
        "SELECT cpu_capacity, mem_capacity, data_disk_capacity FROM oceanbase.GV$OB_SERVERS;",
        check=_resource_total,
    ),
    ToolQuery(
        "obop_get_charset",
        OB_OPERATOR + "tenant.go GetCharset",
        "SELECT CHARSET('oceanbase') as charset;",
        refused="CHARSET(): the RS stores no user data, so no character set to report",
    ),
    ToolQuery(
        "obop_get_ob_version",
        OB_OPERATOR + "tenant.go GetObVersion",
        "SELECT ob_version() as version;",
        refused="ob_version(): the RS is not an observer and has no OceanBase build version",
    ),
    ToolQuery(
        "obop_query_ls_deletion",
        OB_OPERATOR + "tenant.go QueryLSDeletion",
        "(SELECT ls_id FROM oceanbase.CDB_OB_LS_HISTORY WHERE TENANT_ID = ?) EXCEPT (SELECT ls_id FROM oceanbase.CDB_OB_LS WHERE TENANT_ID = ?);",
        args=("{tenant_id}", "{tenant_id}"),
        refused="no CDB_OB_LS_HISTORY: a log stream here lives as long as its tenant",
    ),
    ToolQuery(
        "obop_query_log_stats",
        OB_OPERATOR + "tenant.go QueryLogStats",
        "SELECT ls_id, begin_lsn FROM oceanbase.GV$OB_LOG_STAT WHERE TENANT_ID = ? AND ROLE = 'LEADER';",
        args=("{tenant_id}",),
        check=_log_stats,
    ),
    # ---- obagent: observer_meta.go
    ToolQuery(
        "obagent_show_ob_version",
        OBAGENT_META + " showObVersion",
        "show variables like 'version_comment'",
        check=_version_comment,
    ),
    ToolQuery(
        "obagent_select_host_ip",
        OBAGENT_META + " selectHostIp",
        "select host_ip()",
        refused=_NOT_OBSERVER.format(what="host_ip() names the observer a session is on"),
    ),
    ToolQuery(
        "obagent_select_rpc_port",
        OBAGENT_META + " selectRpcPort",
        "select rpc_port()",
        refused=_NOT_OBSERVER.format(what="rpc_port() names the observer a session is on"),
    ),
    ToolQuery(
        "obagent_select_observer_id",
        OBAGENT_META + " selectObserverId",
        "select id from __all_server where svr_ip = ? and svr_port = ?",
        args=("{server_ip}", "{server_port_int}"),
        check=_server_id,
        int_columns=("id",),
    ),
    ToolQuery(
        "obagent_select_observer_start_time",
        OBAGENT_META + " selectObserverStartTime",
        "select start_service_time from __all_server where svr_ip = ? and svr_port = ?",
        args=("{server_ip}", "{server_port_int}"),
        check=_start_service_time_usec,
        int_columns=("start_service_time",),
    ),
    ToolQuery(
        "obagent_select_observer_id_v4",
        OBAGENT_META + " selectObserverIdForObVersion4",
        "select id from DBA_OB_SERVERS where svr_ip = ? and svr_port = ?",
        args=("{server_ip}", "{server_port_int}"),
        check=_server_id,
        int_columns=("id",),
    ),
    ToolQuery(
        "obagent_select_observer_start_time_v4",
        OBAGENT_META + " selectObserverStartTimeForObVersion4",
        "select floor(unix_timestamp(start_service_time) *1000000) as start_service_time from DBA_OB_SERVERS where svr_ip = ? and svr_port = ?",
        args=("{server_ip}", "{server_port_int}"),
        check=_start_service_time_usec,
    ),
    ToolQuery(
        "obagent_select_all_tenants_v4",
        OBAGENT_META + " selectAllTenantsForObVersion4",
        "select tenant_id from GV$OB_UNITS where (svr_ip = ? and svr_port = ?) union select 1 order by tenant_id",
        args=("{server_ip}", "{server_port_int}"),
        check=_tenants_on_server,
    ),
    # ---- obagent: monitor_ob.yaml (OceanBase 4.x collectors)
    ToolQuery(
        "obagent_with_rootserver",
        OBAGENT_YAML + " ob_role",
        "select (case when with_rootserver='YES' then 1 else 0 end) as with_rootserver from DBA_OB_SERVERS where svr_ip = ? and svr_port = ?",
        args=("{server_ip}", "{server_port_int}"),
        check=_with_rootserver,
        int_columns=("with_rootserver",),
    ),
    ToolQuery(
        "obagent_servers_by_status",
        OBAGENT_YAML + " ob_server_num",
        "select /* MONITOR_AGENT */ group_concat(svr_ip SEPARATOR ',') as servers, status, count(1) as cnt from DBA_OB_SERVERS group by status",
        check=_servers_by_status,
        int_columns=("cnt",),
    ),
    ToolQuery(
        "obagent_server_resource",
        OBAGENT_YAML + " ob_server_resource",
        "select /* MONITOR_AGENT */ cpu_capacity_max as cpu_total,cpu_assigned_max as cpu_assigned,mem_capacity as mem_total,mem_assigned as mem_assigned,data_disk_capacity as disk_total, (cpu_assigned_max / cpu_capacity_max) as cpu_assigned_percent, (mem_assigned / mem_capacity) as mem_assigned_percent from GV$OB_SERVERS where svr_ip = ? and svr_port = ?",
        args=("{server_ip}", "{server_port_int}"),
        check=_server_stat,
    ),
    ToolQuery(
        "obagent_tenant_server_resource",
        OBAGENT_YAML + " ob_tenant_resource",
        "select /* MONITOR_AGENT */ t4.tenant_id, t4.tenant_name, cpu_capacity as cpu_total,cpu_assigned,mem_capacity as mem_total,mem_assigned as mem_assigned from GV$OB_SERVERS t1 JOIN (SELECT t2.tenant_id, t3.tenant_name, t2.svr_ip, t2.svr_port FROM gv$ob_units t2 left join DBA_OB_TENANTS t3 on t2.tenant_id=t3.tenant_id WHERE T3.tenant_type<>'META') t4 ON t1.svr_ip=t4.svr_ip AND t1.svr_port=t4.svr_port WHERE t1.svr_ip = ? AND t1.svr_port = ?",
        args=("{server_ip}", "{server_port_int}"),
        check=_tenant_server_stat,
    ),
    ToolQuery(
        "obagent_disk_free",
        OBAGENT_YAML + " ob_disk",
        "select /* MONITOR_AGENT */ data_disk_capacity as total_size, (data_disk_capacity - data_disk_in_use) as free_size from GV$OB_SERVERS where svr_ip = ? and svr_port = ?",
        args=("{server_ip}", "{server_port_int}"),
        check=_disk_free,
    ),
    ToolQuery(
        "obagent_unit_configs_on_server",
        OBAGENT_YAML + " ob_unit",
        "select /* MONITOR_AGENT */ DBA_OB_RESOURCE_POOLS.tenant_id, DBA_OB_UNIT_CONFIGS.name, DBA_OB_UNIT_CONFIGS.max_cpu, DBA_OB_UNIT_CONFIGS.min_cpu, DBA_OB_UNIT_CONFIGS.memory_size as max_memory, DBA_OB_UNIT_CONFIGS.max_iops, DBA_OB_UNIT_CONFIGS.min_iops from DBA_OB_RESOURCE_POOLS, DBA_OB_UNIT_CONFIGS, DBA_OB_UNITS  where DBA_OB_RESOURCE_POOLS.unit_config_id = DBA_OB_UNIT_CONFIGS.unit_config_id and DBA_OB_UNITS.resource_pool_id = DBA_OB_RESOURCE_POOLS.resource_pool_id and DBA_OB_UNITS.svr_ip = ?",
        args=("{server_ip}",),
        check=_pool_unit_config_join,
        int_columns=("tenant_id", "max_memory"),
    ),
    ToolQuery(
        "obagent_tenants",
        OBAGENT_YAML + " ob_tenant (querySql)",
        "SELECT tenant_id ob_tenant_id, tenant_name FROM DBA_OB_TENANTS WHERE tenant_type<>'META'",
        check=_tenant_names,
        int_columns=("ob_tenant_id",),
    ),
    ToolQuery(
        "obagent_processlist",
        OBAGENT_YAML + " ob_active_session_num",
        "select /* MONITOR_AGENT */ case when cnt is null then 0 else cnt end as cnt, tenant_name, tenant_id from (select DBA_OB_TENANTS.tenant_name, DBA_OB_TENANTS.tenant_id, cnt from DBA_OB_TENANTS left join (select count(`state`='ACTIVE' OR NULL) as cnt, tenant as tenant_name from GV$OB_PROCESSLIST where svr_ip = ? and svr_port = ? group by tenant) t1 on DBA_OB_TENANTS.tenant_name = t1.tenant_name where DBA_OB_TENANTS.tenant_type<>'META') t2",
        args=("{server_ip}", "{server_port_int}"),
        refused="no GV$OB_PROCESSLIST: the observers run no SQL sessions here",
    ),
    ToolQuery(
        "obagent_unit_count",
        OBAGENT_YAML + " ob_unit_num",
        "select /* MONITOR_AGENT */ count(*) as cnt from V$OB_UNITS",
        refused=_NOT_OBSERVER.format(
            what="V$OB_UNITS lists the units of the observer a session is on"
        ),
    ),
    # ---- OceanBase tools/upgrade: upgrade_checker.py
    ToolQuery(
        "upgrade_min_observer_version",
        UPGRADE_CHECKER + " check_observer_version",
        """select distinct value from GV$OB_PARAMETERS  where name='min_observer_version'""",
        check=_one_version,
    ),
    ToolQuery(
        "upgrade_compatible",
        UPGRADE_CHECKER + " check_data_version",
        """select distinct value from oceanbase.__all_virtual_tenant_parameter_info where name='compatible'""",
        refused="no __all_virtual_* tables: the RS has no per-observer virtual tables",
    ),
    ToolQuery(
        "upgrade_tenant_count",
        UPGRADE_CHECKER + " check_data_version",
        "select count(*) from oceanbase.__all_tenant",
        check=count_is(truth_count("SELECT count(*) FROM __all_tenant")),
        int_columns=("count(*)",),
    ),
    ToolQuery(
        "upgrade_unsync_replicas",
        UPGRADE_CHECKER + " check_paxos_replica",
        """select count(1) as unsync_cnt from GV$OB_LOG_STAT where in_sync = 'NO'""",
        check=count_is(0),
        int_columns=("unsync_cnt",),
    ),
    ToolQuery(
        "upgrade_locality_jobs",
        UPGRADE_CHECKER + " check_rebalance_task",
        """select count(1) as cnt from DBA_OB_TENANT_JOBS where job_status='INPROGRESS' and result_code is null""",
        check=count_is(0),
        int_columns=("cnt",),
    ),
    ToolQuery(
        "upgrade_rebalance_tasks",
        UPGRADE_CHECKER + " check_rebalance_task",
        """select count(1) as rebalance_task_cnt from CDB_OB_LS_REPLICA_TASKS""",
        check=count_is(0),
        int_columns=("rebalance_task_cnt",),
    ),
    ToolQuery(
        "upgrade_major_compaction",
        UPGRADE_CHECKER + " check_cluster_status",
        """select count(1) from CDB_OB_MAJOR_COMPACTION where (GLOBAL_BROADCAST_SCN > LAST_SCN or STATUS != 'IDLE')""",
        refused=_NO_STORAGE.format(what="major compaction (CDB_OB_MAJOR_COMPACTION)"),
    ),
    ToolQuery(
        "upgrade_abnormal_tenants",
        UPGRADE_CHECKER + " check_tenant_status",
        """select count(*) as count from DBA_OB_TENANTS where status != 'NORMAL'""",
        check=count_is(0),
        int_columns=("count",),
    ),
    ToolQuery(
        "upgrade_tenant_info",
        UPGRADE_CHECKER + " check_tenant_status",
        """select count(*) as count from oceanbase.__all_virtual_tenant_info where tenant_role != 'PRIMARY' and tenant_role != 'STANDBY'""",
        refused="no __all_virtual_tenant_info: there are no standby tenants here",
    ),
    ToolQuery(
        "upgrade_locked_tenants",
        UPGRADE_CHECKER + " check_tenant_status",
        """select count(*) from DBA_OB_TENANTS where LOCKED = 'YES'""",
        check=count_is(0),
        int_columns=("count(*)",),
    ),
    ToolQuery(
        "upgrade_restore_jobs",
        UPGRADE_CHECKER + " check_restore_job_exist",
        """select count(1) from CDB_OB_RESTORE_PROGRESS""",
        refused=_NO_STORAGE.format(what="backup or restore (CDB_OB_RESTORE_PROGRESS)"),
    ),
    ToolQuery(
        "upgrade_tenant_primary_zones",
        UPGRADE_CHECKER + " check_tenant_primary_zone",
        """select tenant_name,primary_zone from DBA_OB_TENANTS where  tenant_id != 1""",
        check=_tenant_primary_zones,
    ),
    ToolQuery(
        "upgrade_ddl_tasks",
        UPGRADE_CHECKER + " check_ddl_task_execute",
        """select count(1) from __all_virtual_ddl_task_status""",
        refused=_NO_STORAGE.format(what="DDL (__all_virtual_ddl_task_status)"),
    ),
    ToolQuery(
        "upgrade_backup_jobs",
        UPGRADE_CHECKER + " check_backup_job_exist",
        """select count(1) from CDB_OB_BACKUP_JOBS""",
        refused=_NO_STORAGE.format(what="backup (CDB_OB_BACKUP_JOBS)"),
    ),
    ToolQuery(
        "upgrade_server_version",
        UPGRADE_CHECKER + " check_server_version",
        """select distinct(substring_index(build_version, '_', 1)) from __all_server""",
        check=_distinct_build_version,
    ),
    ToolQuery(
        "upgrade_observer_status",
        UPGRADE_CHECKER + " check_observer_status",
        """select count(*) from oceanbase.__all_server where (start_service_time <= 0 or status != "active")""",
        check=count_is(0),
        int_columns=("count(*)",),
    ),
    ToolQuery(
        "upgrade_schema_status",
        UPGRADE_CHECKER + " check_schema_status",
        """select if (a.cnt = b.cnt, 1, 0) as passed from (select count(*) as cnt from oceanbase.__all_virtual_server_schema_info where refreshed_schema_version > 1 and refreshed_schema_version % 8 = 0) as a join (select count(*) as cnt from oceanbase.__all_server join oceanbase.__all_tenant) as b""",
        refused="no schemas here (__all_virtual_server_schema_info): the RS keeps no tables",
    ),
    ToolQuery(
        "upgrade_tenant_names",
        UPGRADE_CHECKER + " check_not_supported_tenant_name",
        """select tenant_name from oceanbase.DBA_OB_TENANTS""",
        check=_tenant_names,
    ),
    ToolQuery(
        "upgrade_tableapi_compress",
        UPGRADE_CHECKER + " check_table_api_transport_compress_func",
        """select count(1) as cnt from GV$OB_PARAMETERS where (name like "tableapi_transport_compress_func" and value like "zlib%");""",
        check=count_is(0),
        int_columns=("cnt",),
    ),
    # ---- OceanBase tools/upgrade: upgrade_health_checker.py
    ToolQuery(
        "health_zone_valid",
        HEALTH_CHECKER + " check_zone_valid",
        """select count(*) from oceanbase.DBA_OB_ZONES where zone = '{0}'""",
        args=("{zone}",),
        style="format",
        check=count_is(1),
        int_columns=("count(*)",),
    ),
    ToolQuery(
        "health_tenant_ids",
        HEALTH_CHECKER + " fetch_tenant_ids",
        """select distinct tenant_id from oceanbase.__all_tenant order by tenant_id desc""",
        style="format",
        check=_tenant_ids_desc,
        int_columns=("tenant_id",),
    ),
    ToolQuery(
        "health_server_version_in_zone",
        HEALTH_CHECKER + " check_server_version_by_zone",
        """select distinct(substring_index(build_version, '_', 1)) from oceanbase.__all_server where zone = '{0}'""",
        args=("{zone}",),
        style="format",
        check=_distinct_build_version,
    ),
    ToolQuery(
        "health_unsync_replicas",
        HEALTH_CHECKER + " check_paxos_replica",
        """select count(*) from oceanbase.GV$OB_LOG_STAT where in_sync = 'NO'""",
        check=count_is(0),
        int_columns=("count(*)",),
    ),
    ToolQuery(
        "health_observer_status",
        HEALTH_CHECKER + " check_observer_status",
        """select count(*) from oceanbase.__all_server where (start_service_time <= 0 or status='inactive')"""
        """ and zone = '{0}'""",
        args=("{zone}",),
        style="format",
        check=count_is(0),
        int_columns=("count(*)",),
    ),
]


# --------------------------------------------------------------------------- statements


def _server_added(a: Answer, st: State) -> None:
    ip, port = st.vars["spare"].rsplit(":", 1)
    assert (ip, port) in st.servers(), st.servers()


def _server_deleting_or_gone(a: Answer, st: State) -> None:
    ip, port = st.vars["spare"].rsplit(":", 1)
    rows = st.truth(f"SELECT status FROM __all_server WHERE svr_ip = '{ip}' AND svr_port = {port}")
    assert rows == [] or rows[0][0] == "DELETING", rows


def _zone_status(status: str | None) -> Check:
    def check(a: Answer, st: State) -> None:
        rows = st.truth(f"SELECT status FROM DBA_OB_ZONES WHERE zone = 'zone_{st.vars['c']}'")
        want = [] if status is None else [[status]]
        assert rows == want, rows

    return check


def _unit_created(a: Answer, st: State) -> None:
    rows = st.truth(
        "SELECT max_cpu, min_cpu, memory_size, log_disk_size, max_iops, min_iops "
        f"FROM DBA_OB_UNIT_CONFIGS WHERE name = 'unit_test_{st.vars['c']}'"
    )
    assert len(rows) == 1, rows
    max_cpu, min_cpu, mem, log_disk, max_iops, min_iops = rows[0]
    assert float(max_cpu or 0) == 1 and float(min_cpu or 0) == 1, rows
    assert (mem, log_disk, max_iops, min_iops) == (str(2 << 30), str(2 << 30), "1024", "1024")


def _unit_resized(a: Answer, st: State) -> None:
    rows = st.truth(
        f"SELECT max_cpu, memory_size FROM DBA_OB_UNIT_CONFIGS WHERE name = 'unit_test_{st.vars['c']}'"
    )
    assert len(rows) == 1 and float(rows[0][0] or 0) == 1 and rows[0][1] == str(3 << 30), rows


def _pool_created(zones: str) -> Check:
    def check(a: Answer, st: State) -> None:
        rows = st.truth(
            "SELECT unit_count, zone_list FROM DBA_OB_RESOURCE_POOLS "
            f"WHERE name = 'pool_test_{st.vars['c']}'"
        )
        assert rows == [["1", zones]], rows

    return check


def _gone(table: str, column: str, value: str) -> Check:
    def check(a: Answer, st: State) -> None:
        v = value.format(**st.vars)
        assert st.truth(f"SELECT count(*) FROM {table} WHERE {column} = '{v}'") == [["0"]]

    return check


def _parameter_is(name: str, value: str) -> Check:
    """SHOW PARAMETERS shows ``value`` for ``name`` (a duration in its largest exact unit,
    as the project prints it: 7200s is 2h)."""
    shown = format_duration(parse_duration(value)) if re.fullmatch(r"\d+[smhd]", value) else value

    def check(a: Answer, st: State) -> None:
        rows = st.truth(f"SHOW PARAMETERS LIKE '{name}'")
        assert rows and all(shown in [str(v) for v in r] for r in rows), rows

    return check


def _tenant_primary_zone(zone: str) -> Check:
    def check(a: Answer, st: State) -> None:
        rows = st.truth(
            f"SELECT primary_zone FROM DBA_OB_TENANTS WHERE tenant_name = '{st.vars['tenant']}'"
        )
        assert rows == [[zone]], rows

    return check


_TENANTS = (
    "SELECT tenant_id, tenant_name, primary_zone, status FROM __all_tenant ORDER BY tenant_id"
)
_POOLS = "SELECT name, unit_count, zone_list, tenant_id FROM __all_resource_pool ORDER BY name"

#: Run in this order by one client, then by the other, on objects named for the client
#: (``{c}``), each undoing what an earlier one did so that the cluster ends as it began (one
#: client's zone is deleted before the other's is stopped: OceanBase stops one zone at a time).
STATEMENTS: list[ToolQuery] = [
    ToolQuery(
        "obop_add_server",
        OB_OPERATOR + "server.go AddServer",
        "alter system add server ?",
        args=("{spare}",),
        kind="statement",
        check=_server_added,
    ),
    ToolQuery(
        "obop_delete_server",
        OB_OPERATOR + "server.go DeleteServer",
        "alter system delete server ?",
        args=("{spare}",),
        kind="statement",
        check=_server_deleting_or_gone,
    ),
    ToolQuery(
        "obop_add_zone",
        OB_OPERATOR + "zone.go AddZone",
        "alter system add zone ?",
        args=("zone_{c}",),
        kind="statement",
        check=_zone_status("INACTIVE"),
    ),
    ToolQuery(
        "obop_start_zone",
        OB_OPERATOR + "zone.go StartZone",
        "alter system start zone ?",
        args=("zone_{c}",),
        kind="statement",
        check=_zone_status("ACTIVE"),
    ),
    ToolQuery(
        "obop_stop_zone",
        OB_OPERATOR + "zone.go StopZone",
        "alter system stop zone ?",
        args=("zone_{c}",),
        kind="statement",
        check=_zone_status("INACTIVE"),
    ),
    ToolQuery(
        "obop_delete_zone",
        OB_OPERATOR + "zone.go DeleteZone",
        "alter system delete zone ?",
        args=("zone_{c}",),
        kind="statement",
        check=_zone_status(None),
    ),
    ToolQuery(
        "obop_add_unit_config_v4",
        OB_OPERATOR + "tenant.go AddUnitConfigV4 (preparedSQLForAddUnitConfigV4)",
        "CREATE RESOURCE UNIT IF NOT EXISTS %s max_cpu ?, memory_size ? %s;",
        sprintf=("unit_test_{c}", ", min_cpu ?, log_disk_size ?, max_iops ?, min_iops ?"),
        # ob-operator's own test has 2 CPUs and 2,048,000,000 bytes; OceanBase refuses a log
        # disk under 2 GiB (and so does this project), and the test agents have 2 CPUs.
        args=(1.0, 2 << 30, 1.0, 2 << 30, 1024, 1024),
        kind="statement",
        check=_unit_created,
    ),
    ToolQuery(
        "obop_set_unit_config_v4",
        OB_OPERATOR + "tenant.go SetUnitConfigV4 (preparedSQLForSetUnitConfigV4)",
        "ALTER RESOURCE UNIT %s %s;",
        sprintf=("unit_test_{c}", "max_cpu=?,memory_size=?"),
        args=(1.0, 3 << 30),
        kind="statement",
        check=_unit_resized,
    ),
    ToolQuery(
        "obop_add_pool",
        OB_OPERATOR + "tenant.go AddPool (preparedSQLForAddPool)",
        "CREATE RESOURCE POOL IF NOT EXISTS %s UNIT=?, UNIT_NUM=?, ZONE_LIST=(?);",
        sprintf=("pool_test_{c}",),
        args=("unit_test_{c}", 1, "z1"),
        kind="statement",
        check=_pool_created("z1"),
    ),
    ToolQuery(
        "obop_set_pool_zone_list",
        OB_OPERATOR + "tenant.go SetPool (prepareSQLForAlterPool)",
        "ALTER RESOURCE POOL %s %s",
        sprintf=("pool_test_{c}", "zone_list = ('z1', 'z2')"),
        kind="statement",
        check=_pool_created("z1;z2"),
    ),
    ToolQuery(
        "obop_add_tenant",
        OB_OPERATOR + "tenant.go AddTenant (preparedSQLForAddTenant)",
        "CREATE TENANT IF NOT EXISTS %s CHARSET=?, PRIMARY_ZONE=?, RESOURCE_POOL_LIST=(%s) %s %s;",
        sprintf=("tenant_{c}", "?", "", "SET VARIABLES ob_tcp_invited_nodes='%'"),
        args=("utf8mb4", "z1", "pool_test_{c}"),
        kind="statement",
        refused=(
            "CHARSET and SET VARIABLES: a tenant here has no character set and no system "
            "variables (it holds no user data)"
        ),
        unchanged=_TENANTS,
    ),
    ToolQuery(
        "obop_set_tenant_unit_num",
        OB_OPERATOR + "tenant.go SetTenantUnitNum",
        "ALTER RESOURCE TENANT %s UNIT_NUM = ?;",
        sprintf=("{tenant}",),
        args=(1,),
        kind="statement",
        refused="ALTER RESOURCE TENANT: change UNIT_NUM on the pool (ALTER RESOURCE POOL)",
        unchanged=_POOLS,
    ),
    ToolQuery(
        "obop_set_tenant_variable",
        OB_OPERATOR + "tenant.go SetTenantVariable",
        "ALTER TENANT %s VARIABLES %s;",
        sprintf=("{tenant}", "ob_tcp_invited_nodes='%'"),
        kind="statement",
        refused="tenant system variables: a tenant here runs no SQL sessions",
        unchanged=_TENANTS,
    ),
    ToolQuery(
        "obop_set_tenant_primary_zone",
        OB_OPERATOR + "tenant.go SetTenant (preparedSQLForSetTenant)",
        "ALTER TENANT %s %s;",
        sprintf=("{tenant}", "PRIMARY_ZONE=?"),
        args=("z2",),
        kind="statement",
        check=_tenant_primary_zone("z2"),
    ),
    ToolQuery(
        "obop_set_tenant_primary_zone_back",
        OB_OPERATOR + "tenant.go SetTenant (preparedSQLForSetTenant)",
        "ALTER TENANT %s %s;",
        sprintf=("{tenant}", "PRIMARY_ZONE=?"),
        args=("{primary_zone}",),
        kind="statement",
        check=_tenant_primary_zone("z1"),
    ),
    ToolQuery(
        "obop_set_tenant_name",
        OB_OPERATOR + "tenant.go SetTenantName",
        "ALTER TENANT %s RENAME GLOBAL_NAME TO ?",
        sprintf=("{tenant}",),
        args=("t_renamed",),
        kind="statement",
        refused="RENAME GLOBAL_NAME: tenants here are not renamed",
        unchanged=_TENANTS,
    ),
    ToolQuery(
        "obop_delete_pool",
        OB_OPERATOR + "tenant.go DeletePool",
        "DROP RESOURCE POOL %s;",
        sprintf=("pool_test_{c}",),
        kind="statement",
        check=_gone("__all_resource_pool", "name", "pool_test_{c}"),
    ),
    ToolQuery(
        "obop_delete_unit_config",
        OB_OPERATOR + "tenant.go DeleteUnitConfig",
        "DROP RESOURCE UNIT %s;",
        sprintf=("unit_test_{c}",),
        kind="statement",
        check=_gone("__all_unit_config", "name", "unit_test_{c}"),
    ),
    ToolQuery(
        "obop_set_parameter",
        OB_OPERATOR + "parameter.go SetParameter",
        "alter system set %s = ?",
        sprintf=("server_permanent_offline_time",),
        args=("7200s",),
        kind="statement",
        check=_parameter_is("server_permanent_offline_time", "7200s"),
    ),
    ToolQuery(
        "upgrade_set_parameter",
        UPGRADE_CHECKER + " modify_server_permanent_offline_time (set_parameter)",
        """alter system set {0} = '{1}'""",
        args=("server_permanent_offline_time", "72h"),
        style="format",
        kind="statement",
        check=_parameter_is("server_permanent_offline_time", "72h"),
    ),
    ToolQuery(
        "obop_set_parameter_with_scope",
        OB_OPERATOR + "parameter.go SetParameterWithScope",
        "alter system set %s = ? %s = ?",
        sprintf=("syslog_level", "server"),
        args=("INFO", "{server}"),
        kind="statement",
        check=_parameter_is("syslog_level", "INFO"),
    ),
    ToolQuery(
        "obop_create_standby_tenant",
        OB_OPERATOR + "tenant.go CreateEmptyStandbyTenant",
        "CREATE STANDBY TENANT IF NOT EXISTS %s LOG_RESTORE_SOURCE=?, PRIMARY_ZONE=?, LOCALITY=?, RESOURCE_POOL_LIST=(%s);",
        sprintf=("standby_{c}", "?"),
        args=("SERVICE=127.0.0.1:2881 USER=rep@t1 PASSWORD=x", "z1", "FULL{{1}}@z1", "{pool}"),
        kind="statement",
        refused="standby tenants: there is no log restore or switchover here",
        unchanged=_TENANTS,
    ),
    ToolQuery(
        "obop_switch_tenant_role",
        OB_OPERATOR + "tenant.go SwitchTenantRole",
        "ALTER SYSTEM SWITCHOVER TO %s TENANT = %s",
        sprintf=("PRIMARY", "{tenant}"),
        kind="statement",
        refused="switchover: there are no standby tenants here",
        unchanged=_TENANTS,
    ),
    ToolQuery(
        "obop_upgrade_tenant",
        OB_OPERATOR + "tenant.go UpgradeTenantWithName",
        'ALTER SYSTEM RUN UPGRADE JOB "UPGRADE_ALL" TENANT = %s',
        sprintf=("{tenant}",),
        kind="statement",
        refused="upgrade jobs: a tenant here has no data version to upgrade",
        unchanged=_TENANTS,
    ),
]

ALL: list[ToolQuery] = READS + STATEMENTS

#: The accepted answers of a refusal: MySQL's numbers for a syntax error (1064), a feature
#: that is not supported (1235), a missing table (1146), column (1054) or function (1305),
#: and OceanBase's own codes the endpoint passes through (4007 not supported, 5019, 5217).
REFUSAL_CODES = frozenset({1064, 1235, 1146, 1054, 1305, 4007, 5019, 5217})
