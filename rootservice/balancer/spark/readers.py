"""The jobs' inputs: system tables read from the RS's database, plus the server statuses.

API:

- :class:`Inputs` - the Spark DataFrames the jobs take: ``servers`` (layout
  :data:`rootservice.balancer.spark.schema.SERVERS_SCHEMA`, normally the RS's in-memory whitelist),
  ``units``, ``pools``, ``unit_configs``, ``ls_status``, ``ls_meta``, ``tenants`` (the
  columns of :data:`rootservice.balancer.spark.schema.INPUT_LAYOUTS` of ``__all_unit``,
  ``__all_resource_pool``, ``__all_unit_config``, ``__all_ls_status``,
  ``__all_ls_meta_table``, ``__all_tenant``). :meth:`Inputs.persist` reads them once for
  several jobs.
- :func:`read_inputs` ``(spark, db_url, servers=...)`` - PostgreSQL through JDBC (the
  session needs the driver jar: ``SparkSessionManager(..., db_url=db_url)`` adds it), the
  large tables in one partition per core (at most :data:`JDBC_MAX_PARTITIONS`) split on a
  numeric key, :data:`JDBC_FETCH_SIZE` rows per round trip, only the ``columns`` asked for
  (:data:`PLAN_COLUMNS`: what the plans read) pushed into the query; SQLite through
  SQLAlchemy into pandas, then ``spark.createDataFrame`` over Arrow.
- :func:`inputs_from_pandas` - the same from :class:`rootservice.balancer.spark.schema.PandasInputs`
  (tests; an RS that holds the state in memory).
- :func:`read_pandas_inputs` - the tables as pandas frames without Spark (PostgreSQL by
  ``COPY (SELECT <columns>) TO STDOUT`` parsed by Arrow's CSV reader; SQLite through
  SQLAlchemy), for the pandas reference; the same ``columns`` pruning.
- :func:`servers_from_table` - a servers input derived from ``__all_server`` rows when the
  caller has no in-memory statuses: heartbeat status from ``last_offline_time`` as an RS
  loading the table does (docs/design/servers.md#the-three-statuses), capacities 0 (so the unit plan places nothing).

The tables are read separately, not as one snapshot: a plan is advice that the RS checks
again when it applies it in its own fenced transaction (docs/design/ha.md#fenced-writes).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import pandas as pd
import sqlalchemy as sa

from rootservice.balancer.spark import schema as S
from rootservice.balancer.spark.schema import PandasInputs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

JDBC_MAX_PARTITIONS = 8
"""JDBC reads of the large tables run in one partition per core of the session
(``defaultParallelism``: 2 for ``local[2]``, where 2 beat 1) up to this many: each partition
is one PostgreSQL backend scanning the whole table for its ``mod(key, n) = i`` share."""
JDBC_FETCH_SIZE = 20_000
"""Rows per round trip of a JDBC read. Spark's PostgreSQL dialect turns autocommit off when
a fetch size is set, which is what makes the driver use a cursor at all (without it
pgjdbc buffers the whole result in the JVM); 5k and 20k measured alike at 1M replicas,
100k used more CPU (a larger heap per batch)."""
# Tables worth splitting, and the numeric key each is split on (mod(key, n) = i).
JDBC_PARTITION_KEYS = {"ls_meta": "ls_id", "ls_status": "ls_id", "units": "unit_id"}
DEFAULT_PERMANENT_OFFLINE_TIME_US = 3_600_000_000
DEFAULT_LEASE_TIME_US = 10_000_000

PLAN_COLUMNS: dict[str, tuple[str, ...]] = {
    "units": (
        "unit_id",
        "resource_pool_id",
        "zone",
        "svr_ip",
        "svr_port",
        "migrate_from_svr_ip",
        "migrate_from_svr_port",
    ),
    "pools": ("resource_pool_id", "unit_config_id", "tenant_id"),
    "unit_configs": ("unit_config_id", "max_cpu", "min_cpu", "memory_size", "log_disk_size"),
    "ls_status": ("tenant_id", "ls_id"),
    "ls_meta": (
        "tenant_id",
        "ls_id",
        "svr_ip",
        "svr_port",
        "role",
        "replica_type",
        "replica_status",
        "unit_id",
    ),
    "tenants": (),
}
"""The columns of each table input that the three plans (unit, replica, lost replicas - on
Spark, in pandas and in SQL) read: what the RS and the benchmark pass as ``columns`` to
:func:`read_inputs` / :func:`read_pandas_inputs` so that neither reads what no plan uses
(``ls_meta.zone``, ``ls_status.status`` / ``unit_group_id``, ``units.unit_group_id`` /
``status``, no column of ``__all_tenant``). A plan that starts reading another column must
add it here; ``tests/unit/rootservice/balancer/test_spark_jobs.py`` reads with and without
it and compares the plans."""


@dataclass
class Inputs:
    """The jobs' input DataFrames (layouts in :data:`rootservice.balancer.spark.schema.INPUT_LAYOUTS`)."""

    servers: DataFrame
    units: DataFrame
    pools: DataFrame
    unit_configs: DataFrame
    ls_status: DataFrame
    ls_meta: DataFrame
    tenants: DataFrame

    def frames(self) -> dict[str, DataFrame]:
        """Input name -> DataFrame."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def persist(self, *, eager: bool = True) -> Inputs:
        """Cache every input so that several jobs (or a job scanning an input twice, like
        the replica plan) share one read of the database. Returns ``self``.

        ``eager`` reads every input now (one ``count`` each; the benchmark times the read
        apart from the plans). ``eager=False`` only marks them: the first job that uses an
        input reads and caches it, and an input no job touches is never read - the RS's unit
        plan needs units, pools and unit configs, not the replicas of ``ls_meta``."""
        for df in self.frames().values():
            df.persist()
        if eager:
            for df in self.frames().values():
                df.count()
        return self

    def unpersist(self) -> None:
        """Drop the cached data of :meth:`persist`."""
        for df in self.frames().values():
            df.unpersist()


# --- from pandas ----------------------------------------------------------------------------


def spark_frame(spark: SparkSession, pdf: pd.DataFrame, layout: S.Layout) -> DataFrame:
    """``pdf`` coerced to ``layout`` (:func:`rootservice.balancer.spark.schema.conform_pandas`) as a
    Spark DataFrame, converted through Arrow. Raises ``KeyError`` for a missing column."""
    return spark.createDataFrame(S.conform_pandas(pdf, layout), schema=S.spark_schema(layout))


def servers_frame(spark: SparkSession, servers: pd.DataFrame | DataFrame) -> DataFrame:
    """The servers input from a pandas frame or a Spark DataFrame with (at least) the
    columns of :data:`rootservice.balancer.spark.schema.SERVERS_SCHEMA`."""
    if isinstance(servers, pd.DataFrame):
        return spark_frame(spark, servers, S.SERVERS_SCHEMA)
    return _cast(servers, S.SERVERS_SCHEMA)


def inputs_from_pandas(spark: SparkSession, p: PandasInputs) -> Inputs:
    """:class:`Inputs` made of the pandas frames of ``p`` (each coerced to its layout)."""
    kw: dict[str, Any] = {
        name: spark_frame(spark, getattr(p, name), layout)
        for name, layout in S.INPUT_LAYOUTS.items()
    }
    return Inputs(**kw)


# --- from the database ----------------------------------------------------------------------


def read_inputs(
    spark: SparkSession,
    db_url: str,
    *,
    servers: pd.DataFrame | DataFrame | None = None,
    now_us: int | None = None,
    permanent_offline_time_us: int = DEFAULT_PERMANENT_OFFLINE_TIME_US,
    lease_time_us: int = DEFAULT_LEASE_TIME_US,
    partitions: int | None = None,
    columns: Mapping[str, Sequence[str]] | None = None,
) -> Inputs:
    """The inputs read from the database at ``db_url`` (an SQLAlchemy URL, like the RS's
    ``--db``). Lazy for PostgreSQL: the JDBC reads run when a job runs (or on
    :meth:`Inputs.persist`).

    ``servers`` is the RS's in-memory server statuses (pandas or Spark,
    :data:`rootservice.balancer.spark.schema.SERVERS_SCHEMA`); without it they are derived from
    ``__all_server`` by :func:`servers_from_table` with ``now_us`` and the two durations.
    ``columns`` (table input -> column names, e.g. :data:`PLAN_COLUMNS`) reads only those
    columns of each table input named in it (the others of its layout are ``''`` / ``0``;
    an input given no column is not read at all); the default reads every column.
    ``partitions`` is the JDBC partition count (default: the session's
    ``defaultParallelism``, at most :data:`JDBC_MAX_PARTITIONS`).

    Raises ``ValueError`` for a database that is neither PostgreSQL nor SQLite; database
    errors surface as SQLAlchemy or Spark (``Py4JJavaError``) errors.
    """
    backend = sa.make_url(db_url).get_backend_name()
    if backend not in ("postgresql", "sqlite"):
        raise ValueError(f"unsupported database {backend!r}: PostgreSQL or SQLite")
    if servers is None:
        servers = servers_from_table(
            _read_all_server(db_url),
            now_us=now_us,
            permanent_offline_time_us=permanent_offline_time_us,
            lease_time_us=lease_time_us,
        )
    frames: dict[str, Any] = {"servers": servers_frame(spark, servers)}
    cols = _read_columns(columns)
    if backend == "postgresql":
        url, props = jdbc_url(db_url)
        if partitions is None:
            partitions = max(1, min(spark.sparkContext.defaultParallelism, JDBC_MAX_PARTITIONS))
        for name in S.INPUT_TABLES:
            frames[name] = _read_jdbc(spark, url, props, name, cols[name], partitions)
    else:
        pdfs = _read_sqlalchemy(db_url, cols)
        for name in S.INPUT_TABLES:
            frames[name] = spark_frame(spark, pdfs[name], S.INPUT_LAYOUTS[name])
    return Inputs(**frames)


def read_pandas_inputs(
    db_url: str,
    *,
    servers: pd.DataFrame | None = None,
    now_us: int | None = None,
    permanent_offline_time_us: int = DEFAULT_PERMANENT_OFFLINE_TIME_US,
    lease_time_us: int = DEFAULT_LEASE_TIME_US,
    columns: Mapping[str, Sequence[str]] | None = None,
) -> PandasInputs:
    """The inputs as pandas frames (no Spark): PostgreSQL tables by ``COPY (SELECT ...) TO
    STDOUT`` parsed by Arrow, SQLite tables through SQLAlchemy; ``servers`` and ``columns``
    as in :func:`read_inputs`."""
    backend = sa.make_url(db_url).get_backend_name()
    if servers is None:
        servers = servers_from_table(
            _read_all_server(db_url),
            now_us=now_us,
            permanent_offline_time_us=permanent_offline_time_us,
            lease_time_us=lease_time_us,
        )
    cols = _read_columns(columns)
    if backend == "postgresql":
        pdfs = _read_copy(db_url, cols)
    elif backend == "sqlite":
        pdfs = _read_sqlalchemy(db_url, cols)
    else:
        raise ValueError(f"unsupported database {backend!r}: PostgreSQL or SQLite")
    return PandasInputs(servers=S.conform_pandas(servers, S.SERVERS_SCHEMA), **pdfs)


def servers_from_table(
    all_server: pd.DataFrame,
    *,
    now_us: int | None = None,
    permanent_offline_time_us: int = DEFAULT_PERMANENT_OFFLINE_TIME_US,
    lease_time_us: int = DEFAULT_LEASE_TIME_US,
) -> pd.DataFrame:
    """A servers input (:data:`rootservice.balancer.spark.schema.SERVERS_SCHEMA`) from ``__all_server``
    rows (columns svr_ip, svr_port, zone, status, stop_time, last_offline_time and, when
    present, suspect_end_time).

    Heartbeat status as docs/design/servers.md#the-three-statuses loads it: ``last_offline_time == 0`` -> ``alive``;
    otherwise ``permanent_offline`` once ``now_us - last_offline_time >=
    permanent_offline_time_us - lease_time_us`` (never when ``now_us`` is None), else
    ``lease_expired``. Capacities are unknown: 0.
    """
    df = all_server
    offline = df["last_offline_time"].astype("int64")
    hb = pd.Series(S.HB_LEASE_EXPIRED, index=df.index, dtype=object)
    hb[offline == 0] = S.HB_ALIVE
    if now_us is not None:
        gone = (offline != 0) & (now_us - offline >= permanent_offline_time_us - lease_time_us)
        hb[gone] = S.HB_PERMANENT_OFFLINE
    out = pd.DataFrame(
        {
            "svr_ip": df["svr_ip"],
            "svr_port": df["svr_port"],
            "zone": df["zone"],
            "status": df["status"].astype(str).str.upper(),
            "hb_status": hb,
            "stop_time": df["stop_time"],
            "cpu_total": 0.0,
            "mem_total": 0,
            "log_disk_total": 0,
            "suspect": (hb == S.HB_ALIVE) & _suspect(df, now_us),
        }
    )
    return S.conform_pandas(out, S.SERVERS_SCHEMA)


def _suspect(all_server: pd.DataFrame, now_us: int | None) -> pd.Series:
    """SUSPECT as ``__all_server.suspect_end_time`` shows it: set and not
    past ``now_us`` (any set one when ``now_us`` is None); False for a table without it."""
    if "suspect_end_time" not in all_server.columns:
        return pd.Series(False, index=all_server.index)
    end = all_server["suspect_end_time"].fillna(0).astype("int64")
    suspect = (end != 0) if now_us is None else (end > now_us)
    if "lagging_time" in all_server.columns:
        # LAGGING is SUSPECT for placement
        suspect = suspect | (all_server["lagging_time"].fillna(0).astype("int64") != 0)
    return suspect


def jdbc_url(db_url: str) -> tuple[str, dict[str, str]]:
    """``postgresql+psycopg://user:pw@host:port/db?k=v`` -> (``jdbc:postgresql://host:port/db``,
    connection properties: user, password, the query parameters, the driver class)."""
    u = sa.make_url(db_url)
    if u.get_backend_name() != "postgresql":
        raise ValueError(f"not a PostgreSQL URL: {u.render_as_string(hide_password=True)}")
    props: dict[str, str] = {"driver": "org.postgresql.Driver"}
    if u.username:
        props["user"] = u.username
    if u.password:
        props["password"] = str(u.password)
    for k, v in u.query.items():
        props[k] = v if isinstance(v, str) else v[-1]
    return f"jdbc:postgresql://{u.host or 'localhost'}:{u.port or 5432}/{u.database or ''}", props


# --- internals ------------------------------------------------------------------------------


def _cast(df: DataFrame, layout: S.Layout) -> DataFrame:
    from pyspark.sql import functions as F

    return df.select(*[F.col(c).cast(S.spark_type(k)).alias(c) for c, k in layout])


def _read_columns(columns: Mapping[str, Sequence[str]] | None) -> dict[str, tuple[str, ...]]:
    """Table input -> the columns to read, in layout order (all of them by default)."""
    out: dict[str, tuple[str, ...]] = {}
    for name in S.INPUT_TABLES:
        every = S.columns(S.INPUT_LAYOUTS[name])
        if columns is None or name not in columns:
            out[name] = tuple(every)
            continue
        unknown = set(columns[name]) - set(every)
        if unknown:
            raise ValueError(f"{name} has no columns {sorted(unknown)}")
        out[name] = tuple(c for c in every if c in columns[name])
    return out


def _filler(kind: str) -> Any:
    """The value of a column that is not read: '' for strings, 0 for numbers."""
    return "" if kind == "string" else 0


def _select_sql(name: str, cols: Sequence[str] | None = None) -> str:
    """``SELECT <cols> FROM <table>`` (every column of the input's layout by default)."""
    cols = S.columns(S.INPUT_LAYOUTS[name]) if cols is None else cols
    return f"SELECT {', '.join(cols)} FROM {S.INPUT_TABLES[name]}"


def _filled(pdf: pd.DataFrame, name: str) -> pd.DataFrame:
    """``pdf`` with the layout's columns that were not read added ('' / 0), conformed."""
    layout = S.INPUT_LAYOUTS[name]
    for c, k in layout:
        if c not in pdf.columns:
            pdf[c] = _filler(k)
    return S.conform_pandas(pdf, layout)


def _read_jdbc(
    spark: SparkSession,
    url: str,
    props: dict[str, str],
    name: str,
    cols: tuple[str, ...],
    partitions: int,
) -> DataFrame:
    """One table input read over JDBC: only ``cols`` travel (the rest of the layout is added
    as literals on Spark's side), split on the input's numeric key into ``partitions``.
    An input with no column to read is an empty frame of its layout (no query at all)."""
    from pyspark.sql import functions as F

    layout = S.INPUT_LAYOUTS[name]
    if not cols:
        return spark.createDataFrame([], schema=S.spark_schema(layout))
    sub = f"({_select_sql(name, cols)}) AS src"
    props = {**props, "fetchsize": str(JDBC_FETCH_SIZE)}
    key = JDBC_PARTITION_KEYS.get(name)
    if key is not None and key in cols and partitions > 1:
        preds = [f"mod({key}, {partitions}) = {i}" for i in range(partitions)]
        df = spark.read.jdbc(url, sub, predicates=preds, properties=props)
    else:
        df = spark.read.jdbc(url, sub, properties=props)
    return df.select(
        *[
            (F.col(c) if c in cols else F.lit(_filler(k))).cast(S.spark_type(k)).alias(c)
            for c, k in layout
        ]
    )


def _read_all_server(db_url: str) -> pd.DataFrame:
    from rootservice.db.engine import make_engine

    engine = make_engine(db_url)
    try:
        with engine.connect().execution_options(read_only=True) as conn:
            return pd.read_sql_query(
                sa.text(
                    "SELECT svr_ip, svr_port, zone, status, stop_time, last_offline_time, "
                    "suspect_end_time, lagging_time FROM __all_server"
                ),
                conn,
            )
    finally:
        engine.dispose()


def _read_sqlalchemy(db_url: str, cols: dict[str, tuple[str, ...]]) -> dict[str, pd.DataFrame]:
    from rootservice.db.engine import make_engine

    engine = make_engine(db_url)
    try:
        with engine.connect().execution_options(read_only=True) as conn, conn.begin():
            return {name: _read_sql_or_empty(conn, name, cols[name]) for name in S.INPUT_TABLES}
    finally:
        engine.dispose()


def _read_sql_or_empty(conn: sa.Connection, name: str, cols: tuple[str, ...]) -> pd.DataFrame:
    if not cols:
        return _empty_frame(name)
    return _filled(pd.read_sql_query(sa.text(_select_sql(name, cols)), conn), name)


def _empty_frame(name: str) -> pd.DataFrame:
    layout = S.INPUT_LAYOUTS[name]
    return S.conform_pandas(pd.DataFrame({c: [] for c in S.columns(layout)}), layout)


def _read_copy(db_url: str, cols: dict[str, tuple[str, ...]]) -> dict[str, pd.DataFrame]:
    import psycopg
    import pyarrow as pa
    from pyarrow import csv

    u = sa.make_url(db_url)
    arrow_types = {"string": pa.string(), "int": pa.int32(), "long": pa.int64()}
    arrow_types["double"] = pa.float64()
    out: dict[str, pd.DataFrame] = {}
    conninfo = u.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        for name in S.INPUT_TABLES:
            kinds = dict(S.INPUT_LAYOUTS[name])
            read = cols[name]
            if not read:
                out[name] = _empty_frame(name)
                continue
            buf = io.BytesIO()
            with conn.cursor().copy(
                f"COPY ({_select_sql(name, read)}) TO STDOUT WITH (FORMAT csv, HEADER false)"
            ) as copy:
                for chunk in copy:
                    buf.write(chunk)
            if buf.tell() == 0:
                out[name] = _empty_frame(name)
                continue
            buf.seek(0)
            table = csv.read_csv(
                buf,
                read_options=csv.ReadOptions(column_names=list(read)),
                convert_options=csv.ConvertOptions(
                    column_types={c: arrow_types[kinds[c]] for c in read},
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
            out[name] = _filled(table.to_pandas(), name)
    return out
