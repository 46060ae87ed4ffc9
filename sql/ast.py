"""Statement AST produced by :func:`sql.parser.parse` and consumed by the RS executors.

Plain frozen dataclasses, no behaviour. String values are kept exactly as written between
the quotes (quotes removed, escapes resolved); validation of addresses, zones and values is
the executors' job so that a well-formed statement with a bad value gets the OceanBase error
(``OB_INVALID_ARGUMENT``...), not a syntax error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ServerOpKind = Literal[
    "ADD", "DELETE", "CANCEL_DELETE", "START", "STOP", "FORCE_STOP", "FORCE_DELETE", "ISOLATE"
]
ZoneOpKind = Literal["ADD", "START", "STOP", "FORCE_STOP", "DELETE", "ALTER", "ISOLATE"]


@dataclass(frozen=True)
class BootstrapEntry:
    """One ``[REGION [=] 'r'] ZONE [=] 'z' SERVER [=] 'ip:port'`` of BOOTSTRAP (docs/design/ha.md#taking-office).

    ``region`` is None when not written (the executor then uses the default region).
    """

    region: str | None
    zone: str
    server: str  # 'ip:port' as written


@dataclass(frozen=True)
class Bootstrap:
    """ALTER SYSTEM BOOTSTRAP [REGION [=] 'r'] ZONE [=] 'z' SERVER [=] 'ip:port' [, ...]"""

    entries: tuple[BootstrapEntry, ...]


@dataclass(frozen=True)
class ServerOp:
    """ALTER SYSTEM {ADD|DELETE|CANCEL DELETE|START|STOP|FORCE STOP|FORCE DELETE|ISOLATE}
    SERVER 'ip:port' [, 'ip:port' ...] [ZONE [=] 'z']

    FORCE DELETE buries servers that no longer heartbeat."""

    op: ServerOpKind
    servers: tuple[str, ...]
    zone: str | None
    #: ``FOR MAINTENANCE d`` as written, None without it.
    maintenance: str | None = None


@dataclass(frozen=True)
class DrainServer:
    """ALTER SYSTEM DRAIN SERVER 'ip:port' [TIMEOUT d]; ``timeout`` as
    written, None for the default."""

    server: str
    timeout: str | None = None


@dataclass(frozen=True)
class ExplainDeleteServer:
    """EXPLAIN ALTER SYSTEM DELETE SERVER 'ip:port' [, 'ip:port' ...] [ZONE [=] 'z']: what DELETE SERVER would move and what would block it, nothing changed."""

    servers: tuple[str, ...]
    zone: str | None


@dataclass(frozen=True)
class ReloadServer:
    """ALTER SYSTEM RELOAD SERVER"""


@dataclass(frozen=True)
class ReloadZone:
    """ALTER SYSTEM RELOAD ZONE"""


@dataclass(frozen=True)
class ReloadUnit:
    """ALTER SYSTEM RELOAD UNIT"""


@dataclass(frozen=True)
class RunJob:
    """ALTER SYSTEM RUN JOB 'name'; ``job`` as written."""

    job: str


@dataclass(frozen=True)
class EndRollingUpgrade:
    """ALTER SYSTEM END ROLLING UPGRADE: raise the cluster version to the leader's release once
    every server and root service reports it; ``user`` who ran it (filled by the dispatcher,
    for the event history)."""

    user: str = ""


@dataclass(frozen=True)
class BeginUpgrade:
    """ALTER SYSTEM BEGIN UPGRADE: enter upgrade mode once the pre-checks pass; ``user`` who
    ran it (filled by the dispatcher)."""

    user: str = ""


@dataclass(frozen=True)
class BeginRollingUpgrade:
    """ALTER SYSTEM BEGIN ROLLING UPGRADE: the rolling stage of upgrade mode; ``user`` who ran
    it (filled by the dispatcher)."""

    user: str = ""


@dataclass(frozen=True)
class EndUpgrade:
    """ALTER SYSTEM END UPGRADE: leave upgrade mode; ``user`` who ran it (filled by the
    dispatcher)."""

    user: str = ""


@dataclass(frozen=True)
class ZoneOp:
    """ALTER SYSTEM {ADD|START|STOP|FORCE STOP|DELETE|ISOLATE} ZONE 'z' [IDC [=] 'i']
    [,] [REGION [=] 'r'] [,] [ZONE_TYPE [=] 't'] (options in any order); ``op`` ALTER for
    ALTER SYSTEM {ALTER|CHANGE|MODIFY} ZONE 'z' [SET] IDC / REGION / ZONE_TYPE."""

    op: ZoneOpKind
    zone: str
    idc: str | None = None
    region: str | None = None
    #: ``FOR MAINTENANCE d`` as written, None without it.
    maintenance: str | None = None
    #: ``ZONE_TYPE`` as written, None without it.
    zone_type: str | None = None
    #: The first option given twice (``idc`` / ``region`` / ``zone_type``), None if none.
    repeated: str | None = None


@dataclass(frozen=True)
class ParameterScope:
    """The clauses after one ``name = value`` of ALTER SYSTEM SET: ``COMMENT 'c'``,
    ``SCOPE = MEMORY | SPFILE | BOTH`` (upper case; None when not written), ``SERVER [=]
    'ip:port'`` or ``ZONE [=] 'z'`` (as written), ``TENANT [=] t`` (lower-cased)."""

    comment: str | None = None
    scope: str | None = None
    server: str | None = None
    zone: str | None = None
    tenant: str | None = None


@dataclass(frozen=True)
class SetParameters:
    """ALTER SYSTEM [SET] name = value [COMMENT 'c'] [SCOPE = ...] [SERVER [=] 's' | ZONE
    [=] 'z'] [TENANT [=] t] [, ...]; values as written: a quoted string, a number, or a bare
    duration such as 10s (kept as the string '10s'). Names are lower-cased; any other bare
    word (``= true``) is kept as the string written. ``scopes`` holds one
    :class:`ParameterScope` per item, in the same order (empty when no item has a clause)."""

    items: tuple[tuple[str, str | int | float], ...]
    scopes: tuple[ParameterScope, ...] = ()

    def scoped(self) -> list[tuple[str, str | int | float, ParameterScope]]:
        """``(name, value, scope)`` per item, a bare item with an empty scope."""
        scopes = self.scopes or (ParameterScope(),) * len(self.items)
        return [(n, v, sc) for (n, v), sc in zip(self.items, scopes, strict=True)]


@dataclass(frozen=True)
class ShowParameters:
    """SHOW PARAMETERS [LIKE 'pattern']"""

    like: str | None = None


# --- tenants, resource pools, unit configs -------------------------------------


@dataclass(frozen=True)
class CreateResourceUnit:
    """CREATE RESOURCE UNIT [IF NOT EXISTS] name MAX_CPU [=] n [, MIN_CPU [=] n],
    MEMORY_SIZE [=] size [, LOG_DISK_SIZE [=] size] [, MAX_IOPS [=] n] [, MIN_IOPS [=] n]
    [, IOPS_WEIGHT [=] n]

    Options may come in any order, separated by commas. ``options`` maps the lower-cased
    option name to the value as written: a number (int or float), or a string (a quoted size
    such as ``'4G'`` or a bare size word such as ``4G``); sizes are converted by the
    executor (``obcommon.sizes.parse_size``). ``name`` is lower-cased (OceanBase object names
    are case-insensitive).
    """

    name: str
    options: tuple[tuple[str, str | int | float], ...]
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropResourceUnit:
    """DROP RESOURCE UNIT [IF EXISTS] name"""

    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class CreateResourcePool:
    """CREATE RESOURCE POOL [IF NOT EXISTS] name UNIT [=] 'unit', UNIT_NUM [=] n,
    ZONE_LIST [=] ('z1', 'z2', ...)

    Options in any order; ``unit`` is lower-cased; ``zone_list`` as written (None when not
    given: the executor then uses every zone).
    """

    name: str
    unit: str | None
    unit_num: int | None
    zone_list: tuple[str, ...] | None
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropResourcePool:
    """DROP RESOURCE POOL [IF EXISTS] name"""

    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class CreateTenant:
    """CREATE TENANT [IF NOT EXISTS] name RESOURCE_POOL_LIST [=] ('pool', ...)
    [, PRIMARY_ZONE [=] 'z1;z2,z3'] [, LS_COUNT [=] n]

    Options in any order; pool names lower-cased; ``primary_zone`` as written (``RANDOM``
    allowed), None when not given.
    """

    name: str
    pools: tuple[str, ...]
    primary_zone: str | None = None
    ls_count: int | None = None
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropTenant:
    """DROP TENANT [IF EXISTS] name [FORCE]"""

    name: str
    force: bool = False
    if_exists: bool = False


@dataclass(frozen=True)
class AlterResourceUnit:
    """ALTER RESOURCE UNIT name option [=] value [, ...] (the options of
    :class:`CreateResourceUnit`; those not given keep their value)."""

    name: str
    options: tuple[tuple[str, str | int | float], ...]


@dataclass(frozen=True)
class AlterResourcePool:
    """ALTER RESOURCE POOL name {UNIT_NUM [=] n [DELETE UNIT [=] (id, ...)] | UNIT [=] 'u' |
    ZONE_LIST [=] ('z', ...)} [, ...]

    ``changes`` keeps each option as written, in order: ``("unit_num", (n, (ids...)))``,
    ``("unit", name)`` (lower-cased) or ``("zone_list", (zones...))``. OceanBase reads a list
    and refuses more than one change: the executor does.
    """

    name: str
    changes: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class AlterTenant:
    """ALTER TENANT name [SET] PRIMARY_ZONE [=] 'z1;z2,z3' (``primary_zone`` as written,
    ``RANDOM`` allowed)."""

    name: str
    primary_zone: str


@dataclass(frozen=True)
class MigrateUnit:
    """ALTER SYSTEM MIGRATE UNIT [=] id DESTINATION [=] 'ip:port'"""

    unit_id: int
    destination: str


@dataclass(frozen=True)
class CancelMigrateUnit:
    """ALTER SYSTEM CANCEL MIGRATE UNIT id"""

    unit_id: int


@dataclass(frozen=True)
class SwitchLeader:
    """ALTER SYSTEM SWITCH REPLICA {LEADER | FOLLOWER | DEFAULT} LS [=] n SERVER [=]
    'ip:port' [TENANT [=] name]

    OceanBase 4.x's leader preferences of a log stream (``ALTER SYSTEM SWITCH REPLICA``):
    ``role`` LEADER makes the server the LS's manual leader, FOLLOWER keeps leaders off it,
    DEFAULT clears both. ``tenant`` None: not given.
    """

    ls_id: int
    server: str
    tenant: str | None
    role: str = "LEADER"


@dataclass(frozen=True)
class SwitchRootService:
    """ALTER SYSTEM SWITCH ROOTSERVICE LEADER SERVER [=] 'ip:port': hand the RS office over
    to the standby root service at ``server``."""

    server: str


@dataclass(frozen=True)
class RecoverLs:
    """ALTER SYSTEM RECOVER LS [TENANT [=] name] [LS [=] n] FROM LOST SERVERS 'ip:port'
    [, ...] [DRY RUN]: recover the log streams that lost their majority
    with the servers named; ``tenant`` / ``ls_id`` None select every one."""

    servers: tuple[str, ...]
    tenant: str | None = None
    ls_id: int | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class RevokeCertificate:
    """ALTER SYSTEM REVOKE CERTIFICATE SERIAL [=] 'hex' [SUBJECT [=] 'dn'] [REASON [=] 'text']

    Puts a certificate on the cluster's revocation list; ``serial`` as
    written (the executor normalises it), ``subject`` and ``reason`` "" when left out.
    """

    serial: str
    subject: str = ""
    reason: str = ""
    #: Who revokes: filled by the executor's caller from the principal, never parsed.
    revoked_by: str = ""


# --- reads (parsed and checked by sql.reads with sqlglot) ------------------


@dataclass(frozen=True)
class Query:
    """A checked read-only SELECT (also WITH, UNION, a parenthesised SELECT) in MySQL syntax.

    ``tree`` is the sqlglot expression (``sqlglot.exp.Query``) that :func:`sql.reads.parse_read`
    checked: only reads, only allowed functions, tables in no schema or ``oceanbase``. The
    executor copies it before changing it. Equality is on the tree's SQL text."""

    tree: Any = field(compare=False)
    text: str = ""

    def __post_init__(self) -> None:
        """Keep the canonical MySQL text for equality and logs."""
        if not self.text:
            # Imported here: obadmin loads sql.ast and never needs sqlglot.
            from sql.mysql_dialect import ObMySQL

            object.__setattr__(self, "text", self.tree.sql(ObMySQL))


@dataclass(frozen=True)
class ShowTables:
    """SHOW [FULL] TABLES [FROM oceanbase] [LIKE 'pattern']"""

    full: bool = False
    like: str | None = None


@dataclass(frozen=True)
class ShowDatabases:
    """SHOW {DATABASES | SCHEMAS} [LIKE 'pattern']"""

    like: str | None = None


@dataclass(frozen=True)
class Describe:
    """DESC | DESCRIBE t, SHOW [FULL] {COLUMNS | FIELDS} FROM t [FROM oceanbase] [LIKE 'p'];
    ``table`` as written (the executor resolves it case-insensitively)."""

    table: str
    full: bool = False
    like: str | None = None


# --- users and privileges -------------------------------------------------------

PRIVILEGES = ("SELECT", "ALTER SYSTEM", "CREATE USER")
"""The global privileges, in the order SHOW GRANTS lists them; ``ALL [PRIVILEGES]`` is all
of them."""


@dataclass(frozen=True)
class CreateUser:
    """CREATE USER [IF NOT EXISTS] 'u'[@'host'] IDENTIFIED BY 'pw' (the host is ignored)."""

    user: str
    password: str
    if_not_exists: bool = False

    def __repr__(self) -> str:
        # Never the password, even in a debug log.
        return f"CreateUser(user={self.user!r}, password='***', if_not_exists={self.if_not_exists})"


@dataclass(frozen=True)
class DropUser:
    """DROP USER [IF EXISTS] 'u'[@'host']"""

    user: str
    if_exists: bool = False


@dataclass(frozen=True)
class AlterUser:
    """ALTER USER 'u'[@'host'] IDENTIFIED BY 'pw'"""

    user: str
    password: str

    def __repr__(self) -> str:
        return f"AlterUser(user={self.user!r}, password='***')"


@dataclass(frozen=True)
class Grant:
    """GRANT priv [, priv ...] ON *.* TO 'u'[@'host']; ``privileges`` are names of
    :data:`PRIVILEGES` (``ALL`` expanded), without repeats, in that order."""

    privileges: tuple[str, ...]
    user: str


@dataclass(frozen=True)
class Revoke:
    """REVOKE priv [, priv ...] ON *.* FROM 'u'[@'host'] (``privileges`` as :class:`Grant`'s)."""

    privileges: tuple[str, ...]
    user: str


@dataclass(frozen=True)
class ShowGrants:
    """SHOW GRANTS [FOR 'u'[@'host']]; ``user`` None means the caller."""

    user: str | None = None


Statement = (
    Bootstrap
    | ServerOp
    | DrainServer
    | ExplainDeleteServer
    | ReloadServer
    | ReloadZone
    | ReloadUnit
    | RunJob
    | EndRollingUpgrade
    | BeginUpgrade
    | BeginRollingUpgrade
    | EndUpgrade
    | ZoneOp
    | SetParameters
    | ShowParameters
    | Query
    | ShowTables
    | ShowDatabases
    | Describe
    | CreateResourceUnit
    | DropResourceUnit
    | CreateResourcePool
    | DropResourcePool
    | CreateTenant
    | DropTenant
    | AlterResourceUnit
    | AlterResourcePool
    | AlterTenant
    | MigrateUnit
    | CancelMigrateUnit
    | SwitchLeader
    | SwitchRootService
    | RecoverLs
    | RevokeCertificate
    | CreateUser
    | DropUser
    | AlterUser
    | Grant
    | Revoke
    | ShowGrants
)
