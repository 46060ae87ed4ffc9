"""Typed settings of the RootService: defaults, ranges and invariants (docs/design/index.md#configuration).

One :class:`RsSettings` object is built at start-up from, in increasing precedence: the
defaults below, the ``__all_sys_parameter`` table, environment variables ``OB_RS_*`` and
command-line flags. Durations are written like OceanBase's (``10s``, ``1h``, ``100ms``) and
held as integer microseconds. :data:`PARAMETERS` lists the ones ``ALTER SYSTEM SET`` may
change at run time and ``SHOW PARAMETERS`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from obcommon.durations import Duration, format_duration, parse_duration
from obcommon.errors import ObError
from obcommon.logs import check_log_format
from obcommon.sizes import format_size, parse_size

#: ``ParamDef.kind`` of a duration (held in microseconds, written ``10s``) and of a size
#: (held in bytes, written ``64M``).
DURATION = "duration"
SIZE = "size"
#: ``ParamDef.kind`` of a parameter that is one of a few words (``ParamDef.choices``).
CHOICE = "choice"
#: ``ParamDef.kind`` of a plain integer (a count or a percentage), written ``50``.
INT = "int"


@dataclass(frozen=True)
class ParamDef:
    """A run-time parameter: its settings field, bounds and meaning. The bounds are in the
    unit of ``kind``: microseconds for a :data:`DURATION`, bytes for a :data:`SIZE`."""

    name: str
    min_us: int
    max_us: int | None
    info: str
    short_min_us: int  # lower bound when allow_short_timings (tests, demos)
    kind: str = DURATION
    # A parameter whose value is one of these words (lower case) rather than a duration or
    # a size; the bounds are unused then (balancer_planner).
    choices: tuple[str, ...] = ()

    def parse(self, raw: str | int) -> int:
        """``raw`` as written in ALTER SYSTEM SET or ``__all_sys_parameter``, in the unit of
        :attr:`kind`. Raises ``ValueError``."""
        if self.kind == INT:
            try:
                return int(str(raw).strip())
            except ValueError:
                raise ValueError(f"{raw!r} is not an integer") from None
        return parse_size(raw) if self.kind == SIZE else parse_duration(raw)

    def format(self, value: int | str) -> str:
        """``value`` as SHOW PARAMETERS prints it and ``__all_sys_parameter`` keeps it (a
        choice parameter's word as it is)."""
        if isinstance(value, str):
            return value
        if self.kind == INT:
            return str(value)
        return format_size(value) if self.kind == SIZE else format_duration(value)


S = 1_000_000
DAY = 86_400 * S
GIB = 1 << 30
PARAMETERS: dict[str, ParamDef] = {
    p.name: p
    for p in [
        ParamDef(
            "lease_time", 1 * S, 300 * S, "how long a heartbeat keeps a server alive", 100_000
        ),
        ParamDef(
            "server_permanent_offline_time",
            20 * S,
            None,
            "after this long without a heartbeat a server is permanently offline",
            1 * S,
        ),
        # Rootservice/servers/suspect_policy.py: a server whose lease
        # expired and came back gets no new leaders and no copies for this long of gap-free
        # heartbeats, doubled by each repeat up to 5 min. CockroachDB's
        # server.time_after_store_suspect is 30s.
        ParamDef(
            "server_suspect_time",
            4 * S,
            300 * S,
            "a server back after its lease expired is SUSPECT (no new leaders, no copies) for "
            "this long, doubled by each repeat up to 5m",
            100_000,
        ),
        # Rootservice/servers/lag_policy.py: a server with an RS command
        # unapplied this long is LAGGING; copies and followers get twice as long. Elasticsearch's
        # cluster.follower_lag.timeout is 90s.
        ParamDef(
            "agent_lag_timeout",
            5 * S,
            600 * S,
            "an agent with an RS command unapplied this long is LAGGING (no new leaders or copies, "
            "leaders moved off); a copy without progress or a trailing follower after twice it",
            500_000,
        ),
        ParamDef(
            "heartbeat_interval", 100_000, 60 * S, "how often agents renew their lease", 10_000
        ),
        ParamDef(
            "heartbeat_check_interval", 10_000, 10 * S, "period of the lease-expiry checker", 1_000
        ),
        ParamDef("server_check_interval", 1 * S, 3600 * S, "period of CheckAllServerTask", 100_000),
        ParamDef(
            "empty_server_check_interval",
            1 * S,
            3600 * S,
            "period of the empty-server checker",
            100_000,
        ),
        ParamDef(
            "migration_disable_time",
            1 * S,
            None,
            "how long migration into a failed server is blocked",
            1 * S,
        ),
        ParamDef("rpc_timeout", 100_000, 600 * S, "timeout of RS -> agent RPCs", 10_000),
        ParamDef(
            "ls_check_interval",
            100_000,
            600 * S,
            "period of the log-stream reconciler and of the __all_ls_meta_table sync",
            10_000,
        ),
        ParamDef(
            "ls_log_sync_threshold",
            100_000,
            600 * S,
            "a member whose log is this far behind its leader's is not in sync (STOP SERVER)",
            1_000,
        ),
        ParamDef(
            "stop_server_check_timeout",
            1 * S,
            3600 * S,
            "how long STOP SERVER retries its majority / log-in-sync checks",
            10_000,
        ),
        ParamDef(
            "leader_switch_timeout",
            1 * S,
            3600 * S,
            "how long STOP / ISOLATE SERVER wait for the servers' leader_cnt to reach 0",
            10_000,
        ),
        ParamDef(
            "migration_stall_time",
            1 * S,
            None,
            "a DELETE SERVER migration that moves nothing for this long is reported stalled",
            10_000,
        ),
        ParamDef(
            "balancer_interval",
            100_000,
            3600 * S,
            "period of the root balancer (it also runs when woken)",
            10_000,
        ),
        ParamDef(
            "lost_replica_check_interval",
            1 * S,
            3600 * S,
            "period of the lost-replica checker (it also runs when woken)",
            10_000,
        ),
        ParamDef(
            "select_timeout",
            100_000,
            3600 * S,
            "statement timeout of a read-only SELECT",
            1_000,
        ),
        # OceanBase's ob_event_history_recycle_interval: 7d, range [1d, 180d]
        # (src/share/parameter/ob_parameter_seed.ipp); its operators delete rows with
        # gmt_create < now - interval, 1,024 at a time.
        ParamDef(
            "event_history_retention",
            1 * DAY,
            180 * DAY,
            "__all_rootservice_event_history rows older than this are deleted",
            1 * S,
        ),
        # OceanBase never deletes __all_rootservice_job rows; here an ended job is kept 30
        # days, long enough for a monthly review of DELETE SERVER runs, and never less than
        # a day; INPROGRESS jobs are kept however old.
        ParamDef(
            "job_history_retention",
            1 * DAY,
            None,
            "ended __all_rootservice_job rows older than this are deleted",
            1 * S,
        ),
        # Beside migration_concurrency_per_server. OceanBase's own limit
        # is sys_bkgd_net_percentage ("the net percentage of sys background net", [0, 100],
        # one ObInOutBandwidthThrottle per observer shared by migration, rebuild and backup,
        # src/share/parameter/ob_parameter_seed.ipp); a percentage needs the NIC speed, so
        # this is a byte rate written as OceanBase's bandwidth capacities are, with the range
        # of standby_fetch_log_bandwidth_limit ("the max bandwidth in bytes per second",
        # "0MB", "[0M,10000G]", same file); 0 = unlimited.
        ParamDef(
            "migration_max_bytes_per_second",
            0,
            10_000 * GIB,
            "bytes per second all replica copies to one destination server may receive "
            "together; 0 = unlimited",
            0,
            SIZE,
        ),
        ParamDef(
            "tenant_create_timeout",
            1 * S,
            3600 * S,
            "how long CREATE TENANT waits for every log stream to have a leader",
            10_000,
        ),
        # Which planner computes the balancer's and the lost-replica
        # checker's plans; 'local' runs the same plans in pandas, for clusters without a JVM.
        ParamDef(
            "balancer_planner",
            0,
            None,
            "planner of the balancer's plans: spark (a SparkSession) or local (pandas, no JVM)",
            0,
            CHOICE,
            choices=("spark", "local"),
        ),
        # Rootservice/servers/self_suspicion.py: an RS that sees more than
        # this percentage of the servers (and at least the count) lose their lease within one
        # lease_time suspects itself and holds permanent-offline declarations. Kubernetes'
        # --unhealthy-zone-threshold is 0.55 with more than 2 nodes not ready.
        ParamDef(
            "server_mass_expire_percentage",
            1,
            100,
            "percentage of the alive servers whose leases expiring within one lease_time "
            "make this RS suspect itself (holds permanent offline)",
            1,
            INT,
        ),
        # The agents' own parameters (:data:`AGENT_PARAMETERS`). syslog_level has
        # OceanBase's name and words (src/share/parameter/ob_parameter_seed.ipp: DEBUG, TRACE,
        # WDIAG, EDIAG, INFO, WARN, ERROR); the agent maps them on Python's levels.
        ParamDef(
            "syslog_level",
            0,
            None,
            "the agents' log level: DEBUG, TRACE, WDIAG, EDIAG, INFO, WARN or ERROR",
            0,
            CHOICE,
            choices=("DEBUG", "TRACE", "WDIAG", "EDIAG", "INFO", "WARN", "ERROR"),
        ),
        ParamDef(
            "disk_probe_interval",
            1 * S,
            3600 * S,
            "how often an agent probes its data disk (a 4 KiB write and fsync) and checks its "
            "replica files",
            10_000,
        ),
        ParamDef(
            "server_mass_expire_min_count",
            1,
            1_000_000,
            "fewest lease expiries within one lease_time that make this RS suspect itself",
            1,
            INT,
        ),
    ]
}


#: The parameters the agents apply (sent in every lease answer, with the value in effect
#: on that server): the only ones ALTER SYSTEM SET accepts with a ZONE or SERVER clause. The
#: others are the RS's own, cluster-wide.
AGENT_PARAMETERS = frozenset(
    {"syslog_level", "disk_probe_interval", "migration_max_bytes_per_second"}
)


class RsSettings(BaseSettings):
    """Settings of one RootService process.

    Durations are microseconds (``*_time`` and ``*_interval`` fields). ``db_url`` defaults to
    a SQLite file in ``data_dir``. Validation enforces docs/design/index.md#configuration ranges (relaxed
    when ``allow_short_timings``) and the invariants ``lease_time > heartbeat_interval`` and
    ``server_permanent_offline_time > lease_time``, and a cluster ``spark_master`` needs
    a database its executors can reach (:func:`check_spark_master_db`); violations raise
    pydantic's ``ValidationError`` at start-up.
    """

    model_config = SettingsConfigDict(env_prefix="OB_RS_", extra="forbid", validate_assignment=True)

    data_dir: Path = Path("rs_data")
    db_url: str = ""
    rpc_addr: str = "127.0.0.1:2882"
    # The MySQL-protocol endpoint (OceanBase's SQL port 2881), "host:port".
    mysql_addr: str = "127.0.0.1:2881"
    # The HTTP(S) endpoint (/metrics, /healthz, /readyz, the status API and the
    # dashboard), "host:port"; 8080 as CockroachDB's HTTP port, loopback by default.
    http_addr: str = "127.0.0.1:8080"
    lease_time: Duration = 10 * S
    server_permanent_offline_time: Duration = 3600 * S
    server_suspect_time: Duration = 30 * S
    agent_lag_timeout: Duration = 30 * S
    heartbeat_interval: Duration = 2 * S
    heartbeat_check_interval: Duration = 100_000
    server_check_interval: Duration = 30 * S
    empty_server_check_interval: Duration = 10 * S
    migration_disable_time: Duration = 3600 * S
    rpc_timeout: Duration = 2 * S
    ls_check_interval: Duration = 1 * S
    ls_log_sync_threshold: Duration = 3 * S
    stop_server_check_timeout: Duration = 30 * S
    leader_switch_timeout: Duration = 30 * S
    tenant_create_timeout: Duration = 30 * S
    # A read-only SELECT: its statement timeout, and the rows it returns at most
    # (more are cut, with info "result truncated").
    select_timeout: Duration = 10 * S
    select_max_rows: int = Field(default=100_000, ge=1, le=10_000_000)
    migration_stall_time: Duration = 60 * S
    # Retention of the history tables (rootservice/servers/history_pruner.py).
    event_history_retention: Duration = 7 * DAY
    job_history_retention: Duration = 30 * DAY
    balancer_interval: Duration = 10 * S
    lost_replica_check_interval: Duration = 10 * S
    # Replica copies handed out at once to one destination server (building, data or log).
    # Its agent moves the data of --max-concurrent-copies (2) of them at a time and starts a
    # queued one the moment one's data is in place: a limit above the agent's
    # keeps that queue filled, where one equal to it left the agent idle for a report, a
    # balancer round and an ApplyReplicas between two copies (1-2.7 s in make bench-empty).
    migration_concurrency_per_server: int = Field(default=4, ge=1, le=64)
    # Bytes per second all copies to one destination may receive together (0 = unlimited),
    # sent to the agents in every lease response.
    migration_max_bytes_per_second: Annotated[int, BeforeValidator(parse_size)] = 0
    # Spark master for the balancer's plans ("local[*]" runs inside the RS) and extra
    # Spark configuration "k=v" entries.
    spark_master: str = "local[*]"
    # Which planner computes the plans: "spark" or "local" (pandas).
    balancer_planner: str = "spark"
    spark_conf: list[str] = Field(default_factory=list)
    persist_interval: Duration = 100_000
    bootstrap_timeout: Duration = 60 * S
    bootstrap_in_service_timeout: Duration = 40 * S
    # How long a standby waits for the leader's answer to a statement it forwarded;
    # connecting to the leader is bounded by rpc_timeout.
    forward_timeout: Duration = 60 * S
    allow_short_timings: bool = False
    # 'ip:port' of the observer co-located with this RS (its with_rootserver is 1), or "".
    self_server: str = ""
    grpc_max_pending_requests: int = Field(default=50_000, ge=100)
    # Statements above this size are refused (MySQL's max_allowed_packet), in bytes.
    max_statement_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    # Admission of admin statements (rootservice/api/admission.py): their
    # own threads, the statements admitted at once (running or waiting) in all and per
    # user, and the tokens a statement may have before the parser sees it.
    admin_workers: int = Field(default=4, ge=1, le=64)
    admin_queue_limit: int = Field(default=64, ge=1, le=100_000)
    admin_per_user_limit: int = Field(default=4, ge=1, le=100_000)
    max_statement_tokens: int = Field(default=100_000, ge=100)
    # Trust boundary: the directory of ca.crt, rs.crt/rs.key (and client certs),
    # or ``insecure`` for plaintext with no authentication (everyone is root). The command
    # line refuses to start with neither.
    certs_dir: Path | None = None
    insecure: bool = False
    # The log lines' format (obcommon/logs.py): "text" or "json".
    log_format: str = "text"
    # Self-suspicion of the RS (rootservice/servers/self_suspicion.py).
    server_mass_expire_percentage: int = 50
    server_mass_expire_min_count: int = 3
    # The agents' parameters (AGENT_PARAMETERS), their cluster-wide values: sent to an agent
    # only once set (here, by a flag or the environment, or with ALTER SYSTEM SET).
    syslog_level: str = "INFO"
    disk_probe_interval: Duration = 5 * S

    @field_validator("log_format")
    @classmethod
    def _check_log_format(cls, value: str) -> str:
        return check_log_format(value)

    @field_validator("balancer_planner", "syslog_level")
    @classmethod
    def _check_choice(cls, value: str, info: Any) -> str:
        return check_choice(PARAMETERS[info.field_name], value, ValueError)

    @model_validator(mode="after")
    def _check(self) -> RsSettings:
        for name, p in PARAMETERS.items():
            if p.choices:
                continue
            check_parameter_range(p, getattr(self, name), self.allow_short_timings, ValueError)
        if self.lease_time <= self.heartbeat_interval:
            raise ValueError(
                f"lease_time ({format_duration(self.lease_time)}) must be greater than "
                f"heartbeat_interval ({format_duration(self.heartbeat_interval)})"
            )
        if self.server_permanent_offline_time <= self.lease_time:
            raise ValueError("server_permanent_offline_time must be greater than lease_time")
        for name in ("rpc_addr", "mysql_addr", "http_addr"):
            addr = getattr(self, name)
            host, _, port = addr.rpartition(":")
            if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
                raise ValueError(f"{name} must be host:port, got {addr!r}")
        check_spark_master_db(self.spark_master, self.effective_db_url())
        return self

    def effective_db_url(self) -> str:
        """``db_url``, or ``sqlite:///<data_dir>/rootservice.db`` when empty."""
        if self.db_url:
            return self.db_url
        return f"sqlite:///{(self.data_dir / 'rootservice.db').resolve()}"


def is_local_spark_master(master: str) -> bool:
    """True for Spark's in-process masters ``local``, ``local[N]``, ``local[*]``,
    ``local[N,F]`` (the plans' executors are threads of the RS)."""
    return master == "local" or master.startswith("local[")


def check_spark_master_db(master: str, db_url: str) -> None:
    """Refuse a cluster Spark master (``spark://``, ``yarn``, ``k8s://``...) over a SQLite
    database: the plans' executors run in other processes, possibly on other hosts, and read
    the system tables over JDBC (rootservice/balancer/spark/readers.py), which a SQLite file
    of the RS's data directory is not. Raises ``ValueError`` naming both
    ways out."""
    if is_local_spark_master(master) or not db_url.startswith("sqlite"):
        return
    raise ValueError(
        f"spark_master {master} runs the balancer's plans on a Spark cluster whose executors "
        f"read the system tables over JDBC, but the database is the SQLite file {db_url} that "
        "they cannot reach: use PostgreSQL (--db postgresql+psycopg://user:pw@host:port/db) "
        "or a local[...] Spark master"
    )


def check_choice(p: ParamDef, value: object, exc: Any) -> str:
    """``value`` as the word of ``p.choices`` it names (in any case; returned as
    ``p.choices`` spells it); raises ``exc(message)`` when it names none."""
    word = str(value).strip().lower()
    for choice in p.choices:
        if choice.lower() == word:
            return choice
    raise exc(f"{p.name} = {value!r} is not one of {', '.join(p.choices)}")


def parse_parameter(p: ParamDef, raw: str | int) -> int | str:
    """A parameter's value from its text (``__all_sys_parameter``, ALTER SYSTEM SET): in
    ``p``'s unit (:meth:`ParamDef.parse`), or for a choice parameter the lower-case word.
    Raises ``ValueError`` when it does not parse."""
    if p.choices:
        return check_choice(p, raw, ValueError)
    return p.parse(raw)


def parameter_range(p: ParamDef, short: bool) -> str:
    """The range column of SHOW PARAMETERS: ``[lo, hi]`` or ``{a, b}`` for a choice."""
    if p.choices:
        return "{" + ", ".join(p.choices) + "}"
    lo = p.short_min_us if short else p.min_us
    hi = p.format(p.max_us) if p.max_us else "+inf"
    return f"[{p.format(lo)}, {hi}]"


def check_parameter_range(p: ParamDef, value_us: int, short: bool, exc: Any) -> None:
    """Raise ``exc(message)`` when ``value_us`` (in ``p``'s unit) is outside ``p``'s range."""
    lo = p.short_min_us if short else p.min_us
    if value_us < lo or (p.max_us is not None and value_us > p.max_us):
        hi = p.format(p.max_us) if p.max_us is not None else "+inf"
        raise exc(f"{p.name} = {p.format(value_us)} is out of range [{p.format(lo)}, {hi}]")


def validate_parameter(settings: RsSettings, name: str, raw: str | int) -> int | str:
    """Check ``ALTER SYSTEM SET name = raw`` against ``settings`` without changing them.

    Returns the value in the parameter's unit (microseconds, or bytes for a size; a choice
    parameter's word as :data:`PARAMETERS` spells it). Raises
    ``ObError(OB_ERR_SYS_CONFIG_UNKNOWN)`` for an unknown name and
    ``ObError(OB_INVALID_CONFIG)`` for a malformed or out-of-range value or one that breaks
    an invariant, as OceanBase's ``ObAdminSetConfig::verify_config``
    (src/rootserver/ob_system_admin_util.cpp) answers a value its checker refuses.
    """
    p = PARAMETERS.get(name.lower())
    if p is None:
        raise ObError("OB_ERR_SYS_CONFIG_UNKNOWN", detail=f"parameter '{name}'")
    if p.choices:
        try:
            return check_choice(p, raw, ValueError)
        except ValueError as e:
            raise ObError("OB_INVALID_CONFIG", str(e)) from None
    try:
        value = p.parse(raw)
    except ValueError as e:
        raise ObError("OB_INVALID_CONFIG", f"{p.name}: {e}") from None

    def refuse(msg: str) -> ObError:
        return ObError("OB_INVALID_CONFIG", msg)

    check_parameter_range(p, value, settings.allow_short_timings, refuse)
    trial = settings.model_dump()
    trial[p.name] = value
    try:
        RsSettings.model_validate(trial)
    except ValidationError as e:
        msg = e.errors()[0]["msg"].removeprefix("Value error, ")
        raise ObError("OB_INVALID_CONFIG", f"{p.name} = {raw}: {msg}") from None
    return value
