"""The one table of which privilege each statement needs (docs/admin-language.md,
"Users and privileges"), after MySQL's: reading needs SELECT, changing the cluster ALTER SYSTEM, managing
users CREATE USER; a user may always see its own grants and change its own password.
"""

from __future__ import annotations

from sql import ast

SELECT = "SELECT"
ALTER_SYSTEM = "ALTER SYSTEM"
CREATE_USER = "CREATE USER"

ALL_PRIVILEGES: tuple[str, ...] = ast.PRIVILEGES
"""Every privilege, in SHOW GRANTS order (``ALL PRIVILEGES``)."""

REQUIRED: dict[type, str] = {
    # Reading the system tables and the parameters.
    ast.Query: SELECT,
    ast.ShowTables: SELECT,
    ast.ShowDatabases: SELECT,
    ast.Describe: SELECT,
    ast.ShowParameters: SELECT,
    # Everything that changes the cluster.
    ast.Bootstrap: ALTER_SYSTEM,
    ast.ServerOp: ALTER_SYSTEM,
    # The dry run of DELETE SERVER changes nothing, but what it tells is
    # for whoever may delete: an operator who may run DELETE SERVER may ask what it would do.
    ast.ExplainDeleteServer: ALTER_SYSTEM,
    ast.ReloadServer: ALTER_SYSTEM,
    ast.ReloadZone: ALTER_SYSTEM,
    ast.ReloadUnit: ALTER_SYSTEM,
    ast.RunJob: ALTER_SYSTEM,
    ast.EndRollingUpgrade: ALTER_SYSTEM,
    ast.BeginUpgrade: ALTER_SYSTEM,
    ast.BeginRollingUpgrade: ALTER_SYSTEM,
    ast.EndUpgrade: ALTER_SYSTEM,
    ast.ZoneOp: ALTER_SYSTEM,
    ast.SetParameters: ALTER_SYSTEM,
    ast.SwitchLeader: ALTER_SYSTEM,
    ast.SwitchRootService: ALTER_SYSTEM,
    ast.RecoverLs: ALTER_SYSTEM,
    ast.DrainServer: ALTER_SYSTEM,
    # Revoking a certificate refuses a node, an RS or a user: a change of the cluster.
    ast.RevokeCertificate: ALTER_SYSTEM,
    ast.CreateResourceUnit: ALTER_SYSTEM,
    ast.DropResourceUnit: ALTER_SYSTEM,
    ast.CreateResourcePool: ALTER_SYSTEM,
    ast.DropResourcePool: ALTER_SYSTEM,
    ast.CreateTenant: ALTER_SYSTEM,
    ast.DropTenant: ALTER_SYSTEM,
    ast.AlterResourceUnit: ALTER_SYSTEM,
    ast.AlterResourcePool: ALTER_SYSTEM,
    ast.AlterTenant: ALTER_SYSTEM,
    ast.MigrateUnit: ALTER_SYSTEM,
    ast.CancelMigrateUnit: ALTER_SYSTEM,
    # Users: MySQL's CREATE USER privilege covers CREATE / DROP / ALTER USER; GRANT and
    # REVOKE of the global privileges need it too here (MySQL asks GRANT OPTION plus the
    # privileges granted; with three global privileges one privilege is simpler).
    ast.CreateUser: CREATE_USER,
    ast.DropUser: CREATE_USER,
    ast.AlterUser: CREATE_USER,
    ast.Grant: CREATE_USER,
    ast.Revoke: CREATE_USER,
    ast.ShowGrants: CREATE_USER,
}
"""Statement class -> the privilege it needs (see :func:`required_privilege` for the two
statements a user may run on itself without it)."""


def required_privilege(statement: ast.Statement, user: str) -> str | None:
    """The privilege ``user`` needs to run ``statement``, or None when it needs none: SHOW
    GRANTS of oneself (or without FOR) and ALTER USER of oneself (changing one's own
    password), as in MySQL. Raises ``KeyError`` for a statement class missing from
    :data:`REQUIRED` (a test keeps the table complete)."""
    if isinstance(statement, ast.ShowGrants) and statement.user in (None, user):
        return None
    if isinstance(statement, ast.AlterUser) and statement.user == user:
        return None
    return REQUIRED[type(statement)]
