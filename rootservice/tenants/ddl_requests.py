"""The DDL statements of the tenant layer as plain values (docs/design/statements.md).

:mod:`rootservice.api.statements` turns the parsed statements (``sql.ast``) into these, so the
tenant layer does not depend on the admin language. Values are as written by the operator;
:class:`rootservice.tenants.ddl.TenantManager` validates them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NewUnitConfig:
    """CREATE RESOURCE UNIT: ``options`` are (lower-cased option name, value as written:
    a number or a size string such as ``'4G'``), in statement order (duplicates kept, so
    that the DDL can refuse them)."""

    name: str
    options: tuple[tuple[str, str | int | float], ...]
    if_not_exists: bool = False


@dataclass(frozen=True)
class NewPool:
    """CREATE RESOURCE POOL: ``unit`` / ``unit_num`` None when not given; ``zone_list`` as
    written (None: every zone)."""

    name: str
    unit: str | None
    unit_num: int | None
    zone_list: tuple[str, ...] | None
    if_not_exists: bool = False


@dataclass(frozen=True)
class NewTenant:
    """CREATE TENANT: pool names; ``primary_zone`` as written (``RANDOM`` allowed, None when
    not given); ``ls_count`` None for one LS per unit group."""

    name: str
    pools: tuple[str, ...]
    primary_zone: str | None = None
    ls_count: int | None = None
    if_not_exists: bool = False
