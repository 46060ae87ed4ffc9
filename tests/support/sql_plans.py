"""The three balancer plans as SQL inside PostgreSQL, a reference for the Spark jobs: the
benchmark (``make bench-spark``) and the test that checks that the engines agree compare them
with :mod:`rootservice.balancer.spark` and :mod:`rootservice.balancer.spark.reference`.

SQL (a psycopg 3 connection to the RS's PostgreSQL database in, pandas frame out):
:func:`sql_unit_migration_plan`, :func:`sql_replica_migration_plan`,
:func:`sql_lost_replicas`. The servers input, which lives in the RS's memory, is read from a
table with the columns of :data:`rootservice.balancer.spark.schema.SERVERS_SCHEMA`
(:func:`load_servers_table` creates one with ``COPY``). The replica and lost-replica plans
are single queries. The unit plan's joins and sums are SQL too, but a greedy placement
(each unit sees the moves decided before it) is sequential by nature: it runs as a PL/pgSQL
loop over temporary tables, with the capacity test, the least-loaded order and the reason
texts of :mod:`rootservice.tenants.placement` (``format_bytes`` and Python's ``{:g}`` re-done in
PL/pgSQL, equal for the values the RS sees: whole bytes, cores in multiples of 1/2^k).

:func:`plan_digest` gives a plan's row count and a hash of its sorted rows, to compare plans
from different engines. Test and benchmark code: the RS never runs SQL outside
``rootservice/db/``.
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

import pandas as pd

from rootservice.balancer.spark import schema as S


def _empty(layout: S.Layout) -> pd.DataFrame:
    return S.conform_pandas(pd.DataFrame({c: [] for c in S.columns(layout)}), layout, nullable=True)


# --- SQL in PostgreSQL ----------------------------------------------------------------------

DEFAULT_SERVERS_TABLE = "ob_job_servers"


def load_servers_table(
    conn: Any, servers: pd.DataFrame, table: str = DEFAULT_SERVERS_TABLE
) -> None:
    """(Re)create ``table`` in the database of the psycopg connection ``conn`` with the
    columns of :data:`rootservice.balancer.spark.schema.SERVERS_SCHEMA` and load ``servers`` into it
    by ``COPY``. The caller commits (or uses an autocommit connection)."""
    from psycopg import sql

    pg = {
        "string": "text",
        "int": "integer",
        "long": "bigint",
        "double": "double precision",
        "boolean": "boolean",
    }
    cols = sql.SQL(", ").join(
        sql.SQL("{} {} NOT NULL").format(sql.Identifier(c), sql.SQL(pg[k]))
        for c, k in S.SERVERS_SCHEMA
    )
    ident = sql.Identifier(table)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
    conn.execute(
        sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY (svr_ip, svr_port))").format(ident, cols)
    )
    df = S.conform_pandas(servers, S.SERVERS_SCHEMA)
    buf = io.StringIO()
    df.to_csv(buf, index=False, header=False)
    with conn.cursor().copy(sql.SQL("COPY {} FROM STDIN WITH (FORMAT csv)").format(ident)) as copy:
        copy.write(buf.getvalue())
    conn.execute(sql.SQL("ANALYZE {}").format(ident))


def _fetch(conn: Any, query: Any, params: dict[str, Any] | None, layout: S.Layout) -> pd.DataFrame:
    cur = conn.execute(query, params)
    rows = cur.fetchall()
    df = pd.DataFrame(rows, columns=S.columns(layout)) if rows else _empty(layout)
    return S.conform_pandas(df, layout, nullable=True)


_REASONS = {
    "wait": S.REPLICA_REASON_WAIT_UNIT,
    "nosrc": S.REPLICA_REASON_NO_SOURCE,
    "off": S.REPLICA_REASON_OFFLINE,
    "moved": S.REPLICA_REASON_UNIT_MOVED,
    "alive": S.HB_ALIVE,
    "offline": S.HB_PERMANENT_OFFLINE,
    "normal": S.REPLICA_STATUS_NORMAL,
    "full": S.REPLICA_TYPE_FULL,
    "leader": S.ROLE_LEADER,
    "srv_gone": S.LOST_SERVER_NOT_IN_TABLE,
    "srv_off": S.LOST_SERVER_OFFLINE,
    "not_in_service": S.LOST_NOT_IN_SERVICE,
    "not_paxos": S.LOST_NOT_PAXOS,
    "ls_gone": S.LOST_LS_GONE,
}

_REPLICA_SQL = """
WITH m AS NOT MATERIALIZED (
    SELECT m.tenant_id, m.ls_id, m.svr_ip, m.svr_port, m.role, m.unit_id,
           COALESCE(s.hb_status = %(alive)s, false) AS alive,
           COALESCE(s.hb_status = %(offline)s, false) AS offline,
           COALESCE(s.hb_status = %(alive)s, false) AND m.replica_status = %(normal)s
               AND m.replica_type = %(full)s AS healthy
    FROM __all_ls_meta_table m
    LEFT JOIN {servers} s ON s.svr_ip = m.svr_ip AND s.svr_port = m.svr_port
), cand AS (
    SELECT m.*, u.svr_ip AS u_ip, u.svr_port AS u_port,
           (m.svr_ip <> u.svr_ip OR m.svr_port <> u.svr_port) AS moved
    FROM m JOIN __all_unit u ON u.unit_id = m.unit_id
    WHERE m.svr_ip <> u.svr_ip OR m.svr_port <> u.svr_port OR m.offline
), keys AS (
    SELECT DISTINCT c.tenant_id, c.ls_id
    FROM cand c JOIN __all_ls_status l ON l.tenant_id = c.tenant_id AND l.ls_id = c.ls_id
), members AS MATERIALIZED (
    SELECT m.* FROM m JOIN keys k ON k.tenant_id = m.tenant_id AND k.ls_id = m.ls_id
), leader AS (
    SELECT DISTINCT ON (tenant_id, ls_id) tenant_id, ls_id,
           svr_ip AS l_ip, svr_port AS l_port, healthy AS l_healthy
    FROM members WHERE role = %(leader)s AND alive
    ORDER BY tenant_id, ls_id, svr_ip COLLATE "C", svr_port
), member AS (
    SELECT DISTINCT ON (tenant_id, ls_id) tenant_id, ls_id, svr_ip AS h_ip, svr_port AS h_port
    FROM members WHERE healthy
    ORDER BY tenant_id, ls_id, svr_ip COLLATE "C", svr_port
), t AS (
    SELECT c.*, ld.l_ip, ld.l_port, COALESCE(ld.l_healthy, false) AS l_ok, mb.h_ip, mb.h_port
    FROM cand c
    JOIN keys k ON k.tenant_id = c.tenant_id AND k.ls_id = c.ls_id
    LEFT JOIN leader ld ON ld.tenant_id = c.tenant_id AND ld.ls_id = c.ls_id
    LEFT JOIN member mb ON mb.tenant_id = c.tenant_id AND mb.ls_id = c.ls_id
    WHERE (c.moved OR (c.offline AND ld.l_ip IS NOT NULL))
      AND NOT (c.moved AND EXISTS (
          SELECT 1 FROM members e
          WHERE e.tenant_id = c.tenant_id AND e.ls_id = c.ls_id
            AND e.svr_ip = c.u_ip AND e.svr_port = c.u_port AND e.healthy))
), p AS (
    SELECT tenant_id, ls_id,
           CASE WHEN healthy THEN svr_ip WHEN l_ok THEN l_ip ELSE h_ip END AS src_svr_ip,
           CASE WHEN healthy THEN svr_port WHEN l_ok THEN l_port ELSE h_port END AS src_svr_port,
           CASE WHEN moved THEN u_ip END AS dest_svr_ip,
           CASE WHEN moved THEN u_port END AS dest_svr_port,
           svr_ip AS old_svr_ip, svr_port AS old_svr_port, moved, offline
    FROM t
)
SELECT tenant_id, ls_id, src_svr_ip, src_svr_port, dest_svr_ip, dest_svr_port,
       old_svr_ip, old_svr_port,
       CASE WHEN NOT moved THEN %(wait)s
            WHEN src_svr_ip IS NULL THEN %(nosrc)s
            WHEN offline THEN %(off)s
            ELSE %(moved)s END AS reason
FROM p
"""

_LOST_SQL = """
WITH on_lost AS (
    SELECT m.tenant_id, m.ls_id, m.svr_ip, m.svr_port, m.replica_status, m.replica_type,
           s.svr_ip IS NOT NULL AS known
    FROM __all_ls_meta_table m
    LEFT JOIN {servers} s ON s.svr_ip = m.svr_ip AND s.svr_port = m.svr_port
    WHERE s.svr_ip IS NULL OR s.hb_status = %(offline)s
), r AS (
    SELECT o.*,
           CASE WHEN o.replica_status <> %(normal)s THEN %(not_in_service)s
                WHEN o.replica_type <> %(full)s THEN %(not_paxos)s
                WHEN NOT EXISTS (SELECT 1 FROM __all_ls_status l
                                 WHERE l.tenant_id = o.tenant_id AND l.ls_id = o.ls_id)
                    THEN %(ls_gone)s
           END AS replica_part
    FROM on_lost o
)
SELECT tenant_id, ls_id, svr_ip, svr_port,
       CASE WHEN known THEN %(srv_off)s ELSE %(srv_gone)s END || ': ' || replica_part AS reason
FROM r WHERE replica_part IS NOT NULL
"""


def _servers_ident(table: str) -> Any:
    from psycopg import sql

    return sql.Identifier(table)


def sql_replica_migration_plan(
    conn: Any, servers_table: str = DEFAULT_SERVERS_TABLE
) -> pd.DataFrame:
    """The replica migration plan as one SQL query on the psycopg connection ``conn``
    (layout :data:`rootservice.balancer.spark.schema.REPLICA_PLAN_SCHEMA`)."""
    from psycopg import sql

    q = sql.SQL(_REPLICA_SQL).format(servers=_servers_ident(servers_table))
    return _fetch(conn, q, _REASONS, S.REPLICA_PLAN_SCHEMA)


def sql_lost_replicas(conn: Any, servers_table: str = DEFAULT_SERVERS_TABLE) -> pd.DataFrame:
    """The lost replicas as one SQL query on the psycopg connection ``conn`` (layout
    :data:`rootservice.balancer.spark.schema.LOST_REPLICAS_SCHEMA`)."""
    from psycopg import sql

    q = sql.SQL(_LOST_SQL).format(servers=_servers_ident(servers_table))
    return _fetch(conn, q, _REASONS, S.LOST_REPLICAS_SCHEMA)


# The unit plan: set-based preparation, then PL/pgSQL for the greedy loop. Temporary
# objects live in pg_temp and are dropped at the end.
_UNIT_FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION pg_temp.ob_fmt_bytes(n double precision) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE u text; sz double precision; v double precision; t double precision;
BEGIN
    -- rootservice.tenants.placement.format_bytes
    IF abs(n) >= 1099511627776 THEN u := 'T'; sz := 1099511627776;
    ELSIF abs(n) >= 1073741824 THEN u := 'G'; sz := 1073741824;
    ELSIF abs(n) >= 1048576 THEN u := 'M'; sz := 1048576;
    ELSIF abs(n) >= 1024 THEN u := 'K'; sz := 1024;
    ELSE RETURN trunc(n)::bigint::text;
    END IF;
    v := n / sz;
    IF v = trunc(v) THEN RETURN trunc(v)::bigint::text || u; END IF;
    t := v * 20;
    IF t = trunc(t) AND mod(trunc(t)::bigint, 2) <> 0 THEN
        -- an exact tie x.x5: Python rounds half to even
        RETURN round((round(v * 10) / 10)::numeric, 1)::text || u;
    END IF;
    RETURN round(v::numeric, 1)::text || u;
END $$;

CREATE OR REPLACE FUNCTION pg_temp.ob_fmt_g(x double precision) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE r text;
BEGIN
    -- Python's format(x, 'g') for 1e-4 <= |x| < 1e6 (6 significant digits)
    IF x = 0 THEN RETURN '0'; END IF;
    r := round(x::numeric, greatest(0, 5 - floor(log(abs(x)))::int))::text;
    IF position('.' IN r) > 0 THEN
        r := rtrim(rtrim(r, '0'), '.');
    END IF;
    RETURN r;
END $$;

CREATE OR REPLACE FUNCTION pg_temp.ob_load(
    cpu_used double precision, mem_used bigint, log_used bigint,
    cpu_total double precision, mem_total bigint, log_total bigint,
    min_cpu double precision, memory bigint, log_disk bigint) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
    -- ServerRoom.load_after
    SELECT greatest(
        CASE WHEN cpu_total <> 0 THEN (cpu_used + min_cpu) / cpu_total ELSE 1.0 END,
        CASE WHEN mem_total <> 0
             THEN (mem_used + memory)::double precision / mem_total::double precision
             ELSE 1.0 END,
        CASE WHEN log_total <> 0
             THEN (log_used + log_disk)::double precision / log_total::double precision
             ELSE 1.0 END)
$$;

CREATE OR REPLACE FUNCTION pg_temp.ob_shortfall(
    cpu_used double precision, mem_used bigint, log_used bigint,
    cpu_total double precision, mem_total bigint, log_total bigint,
    min_cpu double precision, max_cpu double precision, memory bigint, log_disk bigint)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE free_cpu double precision;
BEGIN
    -- ServerRoom.shortfall
    IF max_cpu > cpu_total + 1e-9 THEN
        RETURN 'CPU: max_cpu ' || pg_temp.ob_fmt_g(max_cpu) || ' exceeds the server''s '
            || pg_temp.ob_fmt_g(cpu_total) || ' cores';
    END IF;
    free_cpu := cpu_total - cpu_used;
    IF min_cpu > free_cpu + 1e-9 THEN
        RETURN 'CPU: needs ' || pg_temp.ob_fmt_g(min_cpu) || ' cores, free '
            || pg_temp.ob_fmt_g(greatest(free_cpu, 0)) ;
    END IF;
    IF memory > mem_total - mem_used THEN
        RETURN 'memory: needs ' || pg_temp.ob_fmt_bytes(memory) || ', free '
            || pg_temp.ob_fmt_bytes(greatest(mem_total - mem_used, 0));
    END IF;
    IF log_disk > log_total - log_used THEN
        RETURN 'log disk: needs ' || pg_temp.ob_fmt_bytes(log_disk) || ', free '
            || pg_temp.ob_fmt_bytes(greatest(log_total - log_used, 0));
    END IF;
    RETURN NULL;
END $$;
"""

_UNIT_PREPARE = """
DROP TABLE IF EXISTS pg_temp.ob_demand, pg_temp.ob_holders, pg_temp.ob_rooms,
    pg_temp.ob_room_aff, pg_temp.ob_requests, pg_temp.ob_unit_plan;
CREATE TEMP TABLE ob_demand AS
    SELECT u.unit_id, u.resource_pool_id, p.tenant_id, u.zone, u.svr_ip, u.svr_port,
           u.migrate_from_svr_ip, u.migrate_from_svr_port,
           c.min_cpu, c.max_cpu, c.memory_size, c.log_disk_size,
           CASE WHEN p.tenant_id <> -1 THEN 'tenant:' || p.tenant_id
                ELSE 'pool:' || u.resource_pool_id END AS aff
    FROM __all_unit u
    JOIN __all_resource_pool p ON p.resource_pool_id = u.resource_pool_id
    JOIN __all_unit_config c ON c.unit_config_id = p.unit_config_id;
CREATE TEMP TABLE ob_holders AS
    SELECT svr_ip, svr_port, min_cpu, memory_size, log_disk_size, aff FROM ob_demand
    UNION ALL
    SELECT migrate_from_svr_ip, migrate_from_svr_port, min_cpu, memory_size, log_disk_size, aff
    FROM ob_demand
    WHERE migrate_from_svr_ip <> ''
      AND NOT (migrate_from_svr_ip = svr_ip AND migrate_from_svr_port = svr_port);
CREATE TEMP TABLE ob_requests AS
    SELECT d.unit_id, d.tenant_id, d.zone, d.svr_ip AS from_ip, d.svr_port AS from_port,
           d.svr_ip || ':' || d.svr_port AS from_key,
           d.min_cpu, d.max_cpu, d.memory_size, d.log_disk_size, d.aff,
           CASE WHEN s.status = {deleting} THEN {r_deleting} ELSE {r_offline} END AS trigger
    FROM ob_demand d
    JOIN {servers} s ON s.svr_ip = d.svr_ip AND s.svr_port = d.svr_port
    WHERE d.migrate_from_svr_ip = ''
      AND (s.status = {deleting} OR s.hb_status = {offline});
CREATE TEMP TABLE ob_rooms AS
    SELECT s.svr_ip || ':' || s.svr_port AS key, s.svr_ip, s.svr_port, s.zone,
           s.cpu_total, s.mem_total, s.log_disk_total,
           COALESCE(h.cpu_used, 0)::double precision AS cpu_used,
           COALESCE(h.mem_used, 0)::bigint AS mem_used,
           COALESCE(h.log_used, 0)::bigint AS log_used,
           (s.status = {active} AND s.hb_status = {alive} AND s.stop_time = 0
            AND NOT s.suspect) AS usable
    FROM {servers} s
    LEFT JOIN (SELECT svr_ip, svr_port, sum(min_cpu) AS cpu_used,
                      sum(memory_size) AS mem_used, sum(log_disk_size) AS log_used
               FROM ob_holders GROUP BY svr_ip, svr_port) h
        ON h.svr_ip = s.svr_ip AND h.svr_port = s.svr_port
    WHERE s.zone IN (SELECT zone FROM ob_requests);
CREATE UNIQUE INDEX ON ob_rooms (key);
CREATE INDEX ON ob_rooms (zone);
CREATE TEMP TABLE ob_room_aff AS
    SELECT DISTINCT h.svr_ip || ':' || h.svr_port AS key, h.aff
    FROM ob_holders h JOIN ob_rooms r ON r.svr_ip = h.svr_ip AND r.svr_port = h.svr_port;
CREATE UNIQUE INDEX ON ob_room_aff (key, aff);
ANALYZE ob_rooms;
ANALYZE ob_room_aff;
CREATE TEMP TABLE ob_unit_plan (
    unit_id bigint, tenant_id bigint, zone text, from_svr_ip text, from_svr_port integer,
    to_svr_ip text, to_svr_port integer, reason text);
"""

_UNIT_PLACE = r"""
DO $$
DECLARE q record; b record; why text;
BEGIN
    -- rootservice.tenants.placement.place_units, one request at a time in unit_id order
    FOR q IN SELECT * FROM ob_requests ORDER BY unit_id LOOP
        SELECT r.* INTO b FROM ob_rooms r
        WHERE r.zone = q.zone AND r.usable AND r.key <> q.from_key
          AND NOT EXISTS (SELECT 1 FROM ob_room_aff a WHERE a.key = r.key AND a.aff = q.aff)
          AND pg_temp.ob_shortfall(r.cpu_used, r.mem_used, r.log_used, r.cpu_total,
                                   r.mem_total, r.log_disk_total, q.min_cpu, q.max_cpu,
                                   q.memory_size, q.log_disk_size) IS NULL
        ORDER BY pg_temp.ob_load(r.cpu_used, r.mem_used, r.log_used, r.cpu_total, r.mem_total,
                                 r.log_disk_total, q.min_cpu, q.memory_size, q.log_disk_size),
                 r.key COLLATE "C"
        LIMIT 1;
        IF FOUND THEN
            UPDATE ob_rooms SET cpu_used = cpu_used + q.min_cpu,
                                mem_used = mem_used + q.memory_size,
                                log_used = log_used + q.log_disk_size
            WHERE key = b.key;
            INSERT INTO ob_room_aff VALUES (b.key, q.aff) ON CONFLICT DO NOTHING;
            INSERT INTO ob_unit_plan VALUES (q.unit_id, q.tenant_id, q.zone, q.from_ip,
                                             q.from_port, b.svr_ip, b.svr_port, q.trigger);
            CONTINUE;
        END IF;
        SELECT r.* INTO b FROM ob_rooms r
        WHERE r.zone = q.zone AND r.usable AND r.key <> q.from_key
          AND NOT EXISTS (SELECT 1 FROM ob_room_aff a WHERE a.key = r.key AND a.aff = q.aff)
        ORDER BY pg_temp.ob_load(r.cpu_used, r.mem_used, r.log_used, r.cpu_total, r.mem_total,
                                 r.log_disk_total, q.min_cpu, q.memory_size, q.log_disk_size),
                 r.key COLLATE "C" DESC
        LIMIT 1;
        IF NOT FOUND THEN
            why := 'zone ''' || q.zone || ''' has no other active server without a unit of '
                || 'the same tenant';
        ELSE
            why := pg_temp.ob_shortfall(b.cpu_used, b.mem_used, b.log_used, b.cpu_total,
                                        b.mem_total, b.log_disk_total, q.min_cpu, q.max_cpu,
                                        q.memory_size, q.log_disk_size)
                || ' on ' || b.key || ', the roomiest server of zone ''' || q.zone || '''';
        END IF;
        INSERT INTO ob_unit_plan VALUES (q.unit_id, q.tenant_id, q.zone, q.from_ip, q.from_port,
                                         NULL, NULL, why);
    END LOOP;
END $$;
"""

_UNIT_CLEANUP = """
DROP TABLE IF EXISTS pg_temp.ob_demand, pg_temp.ob_holders, pg_temp.ob_rooms,
    pg_temp.ob_room_aff, pg_temp.ob_requests, pg_temp.ob_unit_plan;
"""


def sql_unit_migration_plan(conn: Any, servers_table: str = DEFAULT_SERVERS_TABLE) -> pd.DataFrame:
    """The unit migration plan inside PostgreSQL on the psycopg connection ``conn``: SQL for
    the joins and sums, a PL/pgSQL loop for the greedy placement (layout
    :data:`rootservice.balancer.spark.schema.UNIT_PLAN_SCHEMA`). Runs in one transaction (a savepoint
    when ``conn`` is in one already); its temporary tables are dropped before it returns."""
    from psycopg import sql

    lit = sql.Literal
    prepare = sql.SQL(_UNIT_PREPARE).format(
        servers=_servers_ident(servers_table),
        deleting=lit(S.STATUS_DELETING),
        offline=lit(S.HB_PERMANENT_OFFLINE),
        active=lit(S.STATUS_ACTIVE),
        alive=lit(S.HB_ALIVE),
        r_deleting=lit(S.UNIT_REASON_DELETING),
        r_offline=lit(S.UNIT_REASON_OFFLINE),
    )
    with conn.transaction():
        conn.execute(_UNIT_FUNCTIONS)
        conn.execute(prepare)
        conn.execute(_UNIT_PLACE)
        out = _fetch(conn, "SELECT * FROM ob_unit_plan ORDER BY unit_id", None, S.UNIT_PLAN_SCHEMA)
        conn.execute(_UNIT_CLEANUP)
    return out


# --- comparing plans ------------------------------------------------------------------------


def plan_digest(df: pd.DataFrame, layout: S.Layout) -> tuple[int, str]:
    """(row count, sha256 of the rows sorted) of a plan with columns ``layout``; nulls and
    dtypes are normalised so that plans from Spark, pandas and SQL compare equal."""
    cols = S.columns(layout)
    norm = S.conform_pandas(df, layout, nullable=True).astype(object)
    norm = norm.where(norm.notna(), None)
    rows = sorted(
        tuple("" if v is None else str(v) for v in r) for r in norm[cols].itertuples(index=False)
    )
    h = hashlib.sha256()
    for r in rows:
        h.update("\x1f".join(r).encode())
        h.update(b"\x1e")
    return len(rows), h.hexdigest()
