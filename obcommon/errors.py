"""Domain errors with their OceanBase codes, and the one place that translates them.

Every refusal in the product is an :class:`ObError` carrying the OceanBase error code, name,
SQLSTATE and message of ``ob_errno.def`` (docs/design/index.md#error-codes). The servicers never build
error text themselves: :meth:`ObError.to_sql_text` gives the MySQL-style line that ``obadmin``
prints, :meth:`ObError.grpc_code` the gRPC status for unary calls, and
:func:`error_to_proto` / :func:`error_from_proto` carry an error inside a response message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc


@dataclass(frozen=True)
class ErrorDef:
    """One row of docs/design/index.md#error-codes: ``code`` is negative, as in ``ob_errno.def``; MySQL's
    own errors (``ER_*``: 1045, 1227, 1064...) too, and are printed with MySQL's positive
    number."""

    name: str
    code: int
    sqlstate: str
    template: str
    grpc_code: grpc.StatusCode
    #: ``M1`` of ``ob_errno.def``: the MySQL error number OceanBase puts in the MySQL error
    #: packet (``ER_NO_SUCH_TABLE`` 1146 for OB_TABLE_NOT_EXIST); None: the code itself.
    mysql_errno: int | None = None
    #: ``M3`` of ``ob_errno.def``: the message OceanBase sends when the code is returned
    #: without ``LOG_USER_ERROR`` (``ObError(name)`` with no arguments); None: the template.
    plain: str | None = None


_FP = grpc.StatusCode.FAILED_PRECONDITION

ERRORS: dict[str, ErrorDef] = {
    e.name: e
    for e in [
        ErrorDef(
            "OB_INVALID_ARGUMENT",
            -4002,
            "HY000",
            "Incorrect arguments to %s",
            grpc.StatusCode.INVALID_ARGUMENT,
            mysql_errno=1210,  # ER_WRONG_ARGUMENTS
        ),
        ErrorDef("OB_INIT_TWICE", -4005, "HY000", "The object is initialized twice", _FP),
        ErrorDef(
            "OB_NOT_SUPPORTED",
            -4007,
            "0A000",
            "%s not supported",
            grpc.StatusCode.UNIMPLEMENTED,
            mysql_errno=1235,  # ER_NOT_SUPPORTED_YET
        ),
        ErrorDef("OB_TIMEOUT", -4012, "HY000", "Timeout", grpc.StatusCode.DEADLINE_EXCEEDED),
        ErrorDef(
            "OB_ENTRY_EXIST",
            -4017,
            "HY000",
            "%s",
            grpc.StatusCode.ALREADY_EXISTS,
            plain="Entry already exist",
        ),
        ErrorDef(
            "OB_ENTRY_NOT_EXIST",
            -4018,
            "HY000",
            "%s",
            grpc.StatusCode.NOT_FOUND,
            plain="Entry not exist",
        ),
        ErrorDef(
            "OB_NOT_MASTER",
            -4038,
            "HY000",
            "The observer or zone is not the master",
            grpc.StatusCode.UNAVAILABLE,
        ),
        ErrorDef("OB_CANCELED", -4072, "HY000", "Operation canceled", grpc.StatusCode.CANCELLED),
        # Manual unit migration and resizing (ob_errno.def; ObUnitManager::admin_migrate_unit
        # and alter_unit_config name the zone, the server and the resource short).
        ErrorDef(
            "OB_MACHINE_RESOURCE_NOT_ENOUGH",
            -4624,
            "HY000",
            "zone '%s' server '%s' %s resource is not enough to hold a new unit",
            _FP,
            plain="machine resource is not enough to hold a new unit",
        ),
        ErrorDef("OB_SERVER_MIGRATE_IN_DENIED", -4551, "HY000", "server migrate in denied", _FP),
        ErrorDef(
            "OB_STATE_NOT_MATCH",
            -4109,
            "HY000",
            "Server state or role not the same as expected",
            _FP,
        ),
        # A peer of a release outside the version skew rule (obcommon/releases.py); OceanBase
        # answers a lease of another lease version with it (src/observer/ob_heartbeat.cpp).
        ErrorDef("OB_VERSION_NOT_MATCH", -4143, "HY000", "Version not match", _FP),
        ErrorDef(
            "OB_OP_NOT_ALLOW",
            -4179,
            "HY000",
            "%s not allowed",
            _FP,
            plain="Operation not allowed now",
        ),
        # A full data disk (ob_errno.def; OceanBase returns it when a migration cannot
        # fit: "failed to check_is_disk_full, cannot migrate in"). Not a disk error.
        ErrorDef(
            "OB_SERVER_OUTOF_DISK_SPACE",
            -4184,
            "53100",
            "Server out of disk space",
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ),
        ErrorDef(
            "OB_LEADER_NOT_EXIST",
            -4209,
            "HY000",
            "partition has not leader",
            grpc.StatusCode.UNAVAILABLE,
        ),
        ErrorDef(
            "OB_ZONE_INFO_NOT_EXIST",
            -4530,
            "HY000",
            "Zone info '%s' not exist",
            grpc.StatusCode.NOT_FOUND,
        ),
        ErrorDef(
            "OB_WAIT_ALL_RS_ONLINE_TIMEOUT",
            -4622,
            "HY000",
            "wait all rs online timeout",
            grpc.StatusCode.DEADLINE_EXCEEDED,
        ),
        ErrorDef(
            "OB_SERVER_ALREADY_DELETED", -4628, "HY000", "server has already been deleted", _FP
        ),
        ErrorDef("OB_SERVER_NOT_DELETING", -4629, "HY000", "server is not in deleting status", _FP),
        ErrorDef(
            "OB_SERVER_NOT_IN_WHITE_LIST",
            -4630,
            "HY000",
            "server not in server white list",
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        ErrorDef("OB_SERVER_ZONE_NOT_MATCH", -4631, "HY000", "server zone not match", _FP),
        ErrorDef("OB_OVER_ZONE_NUM_LIMIT", -4632, "HY000", "zone num has reach max zone num", _FP),
        ErrorDef("OB_ZONE_STATUS_NOT_MATCH", -4633, "HY000", "zone status not match", _FP),
        ErrorDef(
            "OB_RS_NOT_MASTER",
            -4638,
            "HY000",
            "The RootServer is not the master",
            grpc.StatusCode.UNAVAILABLE,
        ),
        ErrorDef(
            "OB_PARTITION_ZONE_DUPLICATED",
            -4640,
            "HY000",
            "The chosen partition servers belong to same zone.",
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        ErrorDef("OB_ZONE_NOT_ACTIVE", -4655, "HY000", "zone not active", _FP),
        ErrorDef(
            "OB_STOP_SERVER_IN_MULTIPLE_ZONES",
            -4660,
            "HY000",
            "%s",
            _FP,
            plain="Can not stop server in multiple zones",
        ),
        ErrorDef("OB_SERVER_NOT_ALIVE", -4663, "HY000", "server is not alive", _FP),
        ErrorDef(
            "OB_ERR_ZONE_NOT_EMPTY",
            -4668,
            "HY000",
            "The zone is not empty and can not be deleted. You should delete the servers of the"
            " zone. There are %s servers alive and %s not alive.",
            _FP,
            plain="zone not empty",
        ),
        ErrorDef(
            "OB_ZONE_RESOURCE_NOT_ENOUGH",
            -4733,
            "HY000",
            "zone '%s' resource not enough to hold %s unit",
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ),
        ErrorDef(
            "OB_ZONE_SERVER_NOT_ENOUGH",
            -4734,
            "HY000",
            "zone '%s' server not enough to hold %s new unit",
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ),
        ErrorDef("OB_DELETE_SERVER_NOT_ALLOWED", -4745, "HY000", "%s", _FP),
        ErrorDef(
            "OB_SERVER_CONNECTION_ERROR",
            -4784,
            "HY000",
            "Server '%s' connection error",
            grpc.StatusCode.UNAVAILABLE,
        ),
        # Tenants, resource pools and unit configs, as in OceanBase's ob_errno.
        ErrorDef(
            "OB_RESOURCE_POOL_ALREADY_GRANTED",
            -4626,
            "HY000",
            "resource pool '%s' has already been granted to a tenant",
            _FP,
        ),
        ErrorDef(
            "OB_RESOURCE_UNIT_IS_REFERENCED",
            -4634,
            "HY000",
            "resource unit '%s' is referenced by some resource pool",
            _FP,
        ),
        ErrorDef(
            "OB_PRIMARY_ZONE_NOT_IN_ZONE_LIST",
            -4643,
            "HY000",
            "primary zone '%s' not in zone list %s",
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        ErrorDef(
            "OB_EMPTY_RESOURCE_POOL_LIST",
            -4647,
            "HY000",
            "resource pool list is empty",
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        ErrorDef(
            "OB_RESOURCE_UNIT_NOT_EXIST",
            -4648,
            "HY000",
            "resource unit '%s' not exist",
            grpc.StatusCode.NOT_FOUND,
        ),
        ErrorDef(
            "OB_RESOURCE_UNIT_EXIST",
            -4649,
            "HY000",
            "resource unit '%s' already exists",
            grpc.StatusCode.ALREADY_EXISTS,
        ),
        ErrorDef(
            "OB_RESOURCE_POOL_NOT_EXIST",
            -4650,
            "HY000",
            "resource pool '%s' not exist",
            grpc.StatusCode.NOT_FOUND,
        ),
        ErrorDef(
            "OB_RESOURCE_POOL_EXIST",
            -4651,
            "HY000",
            "resource pool '%s' exists",
            grpc.StatusCode.ALREADY_EXISTS,
        ),
        ErrorDef(
            "OB_WAIT_LEADER_SWITCH_TIMEOUT",
            -4652,
            "HY000",
            "wait leader switch timeout",
            grpc.StatusCode.DEADLINE_EXCEEDED,
        ),
        ErrorDef(
            "OB_INVALID_RESOURCE_UNIT",
            -4659,
            "HY000",
            "invalid resource unit, %s's min value is %s",
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        ErrorDef(
            "OB_TENANT_EXIST",
            -5156,
            "HY000",
            "tenant '%s' already exist",
            grpc.StatusCode.ALREADY_EXISTS,
        ),
        ErrorDef(
            "OB_TENANT_NOT_EXIST",
            -5157,
            "HY000",
            "Unknown tenant '%s'",
            grpc.StatusCode.NOT_FOUND,
        ),
        # Not an OceanBase code: the MySQL parser error, kept here so SQL errors have one shape.
        ErrorDef(
            "ER_PARSE_ERROR",
            -1064,
            "42000",
            "You have an error in your SQL syntax; %s",
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        # A statement shape or function the read-only SELECT refuses:
        # MySQL's "This version of MySQL doesn't yet support '%s'".
        ErrorDef(
            "ER_NOT_SUPPORTED_YET",
            -1235,
            "42000",
            "This version of OceanBase doesn't yet support '%s'",
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        ErrorDef(
            "ER_BAD_DB_ERROR", -1049, "42000", "Unknown database '%s'", grpc.StatusCode.NOT_FOUND
        ),
        ErrorDef(
            "ER_EMPTY_QUERY", -1065, "42000", "Query was empty", grpc.StatusCode.INVALID_ARGUMENT
        ),
        ErrorDef(
            "ER_NET_PACKET_TOO_LARGE",
            -1153,
            "08S01",
            "Got a packet bigger than 'max_allowed_packet' bytes",
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        # Users and privileges: MySQL's own errors, negative like every code of
        # this table (``to_sql_text`` prints the absolute value, as for ER_PARSE_ERROR).
        ErrorDef(
            "ER_ACCESS_DENIED_ERROR",
            -1045,
            "28000",
            "Access denied for user '%s'@'%s' (using password: %s)",
            grpc.StatusCode.UNAUTHENTICATED,
        ),
        ErrorDef(
            "ER_NONEXISTING_GRANT",
            -1141,
            "42000",
            "There is no such grant defined for user '%s' on host '%s'",
            grpc.StatusCode.NOT_FOUND,
        ),
        ErrorDef(
            "ER_SPECIFIC_ACCESS_DENIED_ERROR",
            -1227,
            "42000",
            "Access denied; you need (at least one of) the %s privilege(s) for this operation",
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        ErrorDef("ER_CANNOT_USER", -1396, "HY000", "Operation %s failed for %s", _FP),
        ErrorDef(
            "ER_CANT_CREATE_USER_WITH_GRANT",
            -1410,
            "42000",
            "You are not allowed to create a user with GRANT",
            grpc.StatusCode.NOT_FOUND,
        ),
        # Admission of admin statements: MySQL's errors for too many
        # connections in all and of one user; the RS counts statements admitted at once.
        ErrorDef(
            "ER_CON_COUNT_ERROR",
            -1040,
            "08004",
            "Too many connections",
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ),
        ErrorDef(
            "ER_TOO_MANY_USER_CONNECTIONS",
            -1203,
            "42000",
            "User %s already has more than 'max_user_connections' active connections",
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ),
        # The MySQL endpoint: MySQL's refusal of a plaintext connection when
        # TLS is required (require_secure_transport=ON); ER_BAD_DB_ERROR is above.
        ErrorDef(
            "ER_SECURE_TRANSPORT_REQUIRED",
            -3159,
            "HY000",
            "Connections using insecure transport are prohibited while "
            "--require_secure_transport=ON.",
            grpc.StatusCode.FAILED_PRECONDITION,
        ),
        # An unreachable or failing system-table database. OceanBase has no code for the RS's
        # own meta database; OB_ERR_SYS is its generic "system error".
        ErrorDef("OB_ERR_SYS", -4015, "HY000", "System error", grpc.StatusCode.UNAVAILABLE),
        ErrorDef(
            "OB_ERR_UNEXPECTED",
            -4016,
            "HY000",
            "%s",
            grpc.StatusCode.INTERNAL,
            plain="Internal error",
        ),
        ErrorDef(
            "OB_TABLE_NOT_EXIST",
            -5019,
            "42S02",
            "Table '%s' doesn't exist",
            grpc.StatusCode.NOT_FOUND,
            mysql_errno=1146,  # ER_NO_SUCH_TABLE
        ),
        ErrorDef(
            "OB_ERR_BAD_FIELD_ERROR",
            -5217,
            "42S22",
            "Unknown column '%s' in '%s'",
            grpc.StatusCode.INVALID_ARGUMENT,
            mysql_errno=1054,  # ER_BAD_FIELD_ERROR
        ),
        # ob_errno.def: "Invalid config", with the checker's reason when it gives one.
        ErrorDef(
            "OB_INVALID_CONFIG",
            -4147,
            "HY000",
            "%s",
            grpc.StatusCode.INVALID_ARGUMENT,
            plain="Invalid config",
        ),
        ErrorDef(
            "OB_ERR_SYS_CONFIG_UNKNOWN",
            -5099,
            "HY000",
            "System config unknown",
            grpc.StatusCode.NOT_FOUND,
        ),
    ]
}

_BY_CODE = {e.code: e for e in ERRORS.values()}


class ObError(Exception):
    """A refusal with an OceanBase error code.

    ``ObError("OB_ZONE_INFO_NOT_EXIST", "z9")`` fills the ``%s`` placeholders of the code's
    message template with ``args`` (no ``args`` and a ``plain`` message on the row: that
    message, as OceanBase answers without ``LOG_USER_ERROR``); ``detail`` is appended after a comma to say which object
    (e.g. the server) the error concerns. Raises ``KeyError`` for an unknown code name.
    """

    def __init__(self, name: str, *args: Any, detail: str = "") -> None:
        """Build the error for code ``name``; ``KeyError`` if it is not in :data:`ERRORS`."""
        self.definition = ERRORS[name]
        template = self.definition.template
        n = template.count("%s")
        fill = list(args)[:n] + [""] * max(0, n - len(args))
        if not args and n and self.definition.plain is not None:
            message = self.definition.plain
        else:
            message = template % tuple(fill) if n else template
        if detail:
            message = f"{message}, {detail}"
        self.message = message
        super().__init__(f"{name}: {message}")

    @property
    def name(self) -> str:
        """OceanBase code name, e.g. ``"OB_SERVER_NOT_IN_WHITE_LIST"``."""
        return self.definition.name

    @property
    def code(self) -> int:
        """Negative OceanBase code, e.g. -4630."""
        return self.definition.code

    @property
    def mysql_errno(self) -> int:
        """The error number of the MySQL error packet, as OceanBase encodes it
        (``ob_errno.def``: "mysql errno used in error packet encoding"): the row's MySQL
        mapping when it has one (``OB_TABLE_NOT_EXIST`` -> 1146), else the code made positive
        (``OB_TIMEOUT`` -> 4012, ``ER_ACCESS_DENIED_ERROR`` -> 1045)."""
        mapped = self.definition.mysql_errno
        return mapped if mapped is not None else abs(self.code)

    @property
    def sqlstate(self) -> str:
        """Five-character SQLSTATE, e.g. ``"HY000"``."""
        return self.definition.sqlstate

    def grpc_code(self) -> grpc.StatusCode:
        """The gRPC status a unary call aborts with (e.g. ``FAILED_PRECONDITION``)."""
        return self.definition.grpc_code

    def to_sql_text(self) -> str:
        """The line the MySQL client would print, e.g.
        ``ERROR 4630 (HY000): OB_SERVER_NOT_IN_WHITE_LIST: server not in server white list``.
        MySQL's own errors (1064) carry no OB name."""
        if self.name.startswith("ER_"):
            return f"ERROR {abs(self.code)} ({self.sqlstate}): {self.message}"
        return f"ERROR {abs(self.code)} ({self.sqlstate}): {self.name}: {self.message}"


def error_to_proto(err: ObError, msg: Any) -> None:
    """Fill an ``ObError`` protobuf message ``msg`` (fields code, name, sqlstate, message)."""
    msg.code = err.code
    msg.name = err.name
    msg.sqlstate = err.sqlstate
    msg.message = err.message


class RemoteObError(ObError):
    """An :class:`ObError` received over RPC; keeps the sender's message verbatim."""

    def __init__(self, code: int, name: str, sqlstate: str, message: str) -> None:
        """Rebuild from the wire fields; an unknown ``code``/``name`` pair gets an ad-hoc definition
        mapped to gRPC ``UNKNOWN`` instead of raising ``KeyError``."""
        Exception.__init__(self, f"{name}: {message}")
        definition = _BY_CODE.get(code)
        if definition is None or definition.name != name:
            definition = ErrorDef(name, code, sqlstate, "%s", grpc.StatusCode.UNKNOWN)
        self.definition = definition
        self.message = message


def error_from_proto(msg: Any) -> ObError | None:
    """The error carried by an ``ObError`` protobuf message, or None when ``code == 0``."""
    if not msg.code:
        return None
    return RemoteObError(msg.code, msg.name, msg.sqlstate, msg.message)
