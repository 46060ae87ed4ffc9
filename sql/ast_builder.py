"""From lark's parse tree to :mod:`sql.ast`: the transformer that builds one statement,
unescapes MySQL string literals and checks integer literals against int64
(docs/design/statements.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from lark import Token, Transformer, v_args

from obcommon.errors import ObError
from sql import ast

_INT64_MIN = -(2**63)


_INT64_MAX = 2**63 - 1


# MySQL string escapes (https://dev.mysql.com/doc/refman/8.0/en/string-literals.html).
# \% and \_ keep their backslash so that LIKE patterns can still tell them from wildcards;
# any other escaped character stands for itself.
_ESCAPES = {
    "0": "\x00",
    "b": "\b",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "Z": "\x1a",
    "%": "\\%",
    "_": "\\_",
}


_UNESCAPE = {
    "'": re.compile(r"\\([\s\S])|''"),
    '"': re.compile(r'\\([\s\S])|""'),
}


class BadToken(Exception):
    """A token that lexes and parses but cannot be a value (int64 overflow, infinite float,
    empty `` identifier); reported as a syntax error at that token."""

    def __init__(self, token: Token) -> None:
        super().__init__(str(token))
        self.token = token


@dataclass(frozen=True)
class _Attr:
    """A ``KEYWORD [=] value`` clause (ZONE, IDC, REGION) on its way to its statement."""

    key: str
    value: str


@dataclass(frozen=True)
class _Option:
    """A resource pool or tenant option on its way to its statement; ``keyword`` is the
    option's token, where a second occurrence of the option is reported."""

    keyword: Token
    value: Any


def _unescape_string(token: Token) -> str:
    quote, body = token[0], token[1:-1]

    def replace(m: re.Match[str]) -> str:
        escaped = m.group(1)
        if escaped is None:  # a doubled quote
            return quote
        return _ESCAPES.get(escaped, escaped)

    return _UNESCAPE[quote].sub(replace, body)


def _to_int64(token: Token, negative: bool = False) -> int:
    digits = token.lstrip("0")
    # Bound the length before int(): Python refuses to convert over 4300 digits.
    if len(digits) > 19:
        raise BadToken(token)
    value = -int(token) if negative else int(token)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise BadToken(token)
    return value


def _privileges(groups: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The privileges named (each group one privilege, or all for ALL), once each, in the
    order of :data:`sql.ast.PRIVILEGES`."""
    named = {p for group in groups for p in group}
    return tuple(p for p in ast.PRIVILEGES if p in named)


def _options(options: tuple[_Option, ...]) -> dict[str, Any]:
    """Pool or tenant options by lower-cased keyword; an option given twice is a syntax error
    at its second occurrence rather than silently one of the two values."""
    found: dict[str, Any] = {}
    for option in options:
        key = option.keyword.lower()
        if key in found:
            raise BadToken(option.keyword)
        found[key] = option.value
    return found


@v_args(inline=True)
class ToAst(Transformer[Token, Any]):
    """Callbacks named after the grammar's rules; run by the LALR parser at each reduction.
    Must stay stateless: one instance serves every parse, from any thread."""

    # --- statements -------------------------------------------------------------------

    def start(self, statement: ast.Statement) -> ast.Statement:
        return statement

    def bootstrap(self, *entries: ast.BootstrapEntry) -> ast.Bootstrap:
        return ast.Bootstrap(entries=tuple(entries))

    def bootstrap_entry(self, *children: Any) -> ast.BootstrapEntry:
        *region, zone, server = children
        return ast.BootstrapEntry(
            region=region[0].value if region else None, zone=zone, server=server
        )

    def server_op(self, op: ast.ServerOpKind, *rest: Any) -> ast.ServerOp:
        servers = tuple(r for r in rest if isinstance(r, str))
        attrs = {r.key: r.value for r in rest if isinstance(r, _Attr)}
        return ast.ServerOp(
            op=op, servers=servers, zone=attrs.get("zone"), maintenance=attrs.get("maintenance")
        )

    def maintenance(self, value: Token | str) -> _Attr:
        return _Attr("maintenance", str(value))

    def drain_server(self, server: str, timeout: str | None) -> ast.DrainServer:
        return ast.DrainServer(server=server, timeout=timeout)

    def drain_timeout(self, value: Token | str) -> str:
        return str(value)

    def explain_delete_server(self, *rest: Any) -> ast.ExplainDeleteServer:
        servers = tuple(r for r in rest if isinstance(r, str))
        zone = next((r.value for r in rest if isinstance(r, _Attr)), None)
        return ast.ExplainDeleteServer(servers=servers, zone=zone)

    def server_verb(self, *words: Token) -> str:
        return "_".join(w.upper() for w in words)

    zone_verb = server_verb

    def server_zone(self, zone: str) -> _Attr:
        return _Attr("zone", zone)

    def reload_server(self) -> ast.ReloadServer:
        return ast.ReloadServer()

    def reload_zone(self) -> ast.ReloadZone:
        return ast.ReloadZone()

    def reload_unit(self) -> ast.ReloadUnit:
        return ast.ReloadUnit()

    def run_job(self, name: str) -> ast.RunJob:
        return ast.RunJob(job=name)

    def end_rolling_upgrade(self) -> ast.EndRollingUpgrade:
        return ast.EndRollingUpgrade()

    def begin_upgrade(self) -> ast.BeginUpgrade:
        return ast.BeginUpgrade()

    def begin_rolling_upgrade(self) -> ast.BeginRollingUpgrade:
        return ast.BeginRollingUpgrade()

    def end_upgrade(self) -> ast.EndUpgrade:
        return ast.EndUpgrade()

    def zone_op(self, op: ast.ZoneOpKind, zone: str, *rest: Any) -> ast.ZoneOp:
        found: dict[str, str] = {}
        repeated: str | None = None
        for attrs in rest:
            for a in (attrs,) if isinstance(attrs, _Attr) else attrs:
                if a.key in found and repeated is None:
                    repeated = a.key
                found[a.key] = a.value
        return ast.ZoneOp(
            op=op,
            zone=zone,
            idc=found.get("idc"),
            region=found.get("region"),
            maintenance=found.get("maintenance"),
            zone_type=found.get("zone_type"),
            repeated=repeated,
        )

    def alter_zone(self, zone: str, attrs: Any) -> ast.ZoneOp:
        return self.zone_op("ALTER", zone, attrs)

    def zone_attrs(self, *attrs: _Attr) -> tuple[_Attr, ...]:
        return attrs

    def idc_attr(self, value: str) -> _Attr:
        return _Attr("idc", value)

    def region_attr(self, value: str) -> _Attr:
        return _Attr("region", value)

    def zone_type_attr(self, value: str) -> _Attr:
        return _Attr("zone_type", value)

    def set_parameters(
        self, *items: tuple[str, str | int | float, ast.ParameterScope]
    ) -> ast.SetParameters:
        scopes = tuple(sc for _, _, sc in items)
        return ast.SetParameters(
            items=tuple((n, v) for n, v, _ in items),
            scopes=scopes if any(sc != ast.ParameterScope() for sc in scopes) else (),
        )

    def set_item(
        self,
        name: str,
        value: str | int | float,
        comment: str | None,
        scope: str | None,
        place: _Attr | None,
        tenant: str | None,
    ) -> tuple[str, str | int | float, ast.ParameterScope]:
        where = {place.key: place.value} if place is not None else {}
        return (
            name.lower(),
            value,
            ast.ParameterScope(
                comment=comment,
                scope=scope,
                server=where.get("server"),
                zone=where.get("zone"),
                tenant=tenant,
            ),
        )

    def set_comment(self, comment: str) -> str:
        return comment

    def set_scope(self, word: str) -> str:
        return word

    def scope_word(self, token: Token) -> str:
        return token.upper()

    def set_server(self, server: str) -> _Attr:
        return _Attr("server", server)

    def set_zone(self, zone: str) -> _Attr:
        return _Attr("zone", zone)

    def set_tenant(self, tenant: str) -> str:
        return tenant

    def duration(self, token: Token) -> str:
        return str(token)

    def bare_word(self, token: Token) -> str:
        return str(token)

    def show_parameters(self, like: str | None = None) -> ast.ShowParameters:
        return ast.ShowParameters(like=like)

    def switch_leader(
        self, role: str, ls_id: Token, server: str, tenant: str | None
    ) -> ast.SwitchLeader:
        return ast.SwitchLeader(ls_id=_to_int64(ls_id), server=server, tenant=tenant, role=role)

    def switch_role(self, word: Token) -> str:
        return word.upper()

    def switch_tenant(self, name: str) -> str:
        return name

    def switch_rootservice(self, server: str) -> ast.SwitchRootService:
        return ast.SwitchRootService(server=server)

    def recover_ls(self, tenant: str | None, ls_id: int | None, *rest: Any) -> ast.RecoverLs:
        servers = tuple(r for r in rest if isinstance(r, str))
        return ast.RecoverLs(servers=servers, tenant=tenant, ls_id=ls_id, dry_run=rest[-1] is True)

    def recover_tenant(self, name: str) -> str:
        return name

    def recover_ls_id(self, ls_id: Token) -> int:
        return _to_int64(ls_id)

    def dry_run(self) -> bool:
        return True

    def revoke_certificate(
        self, serial: str, subject: str | None, reason: str | None
    ) -> ast.RevokeCertificate:
        return ast.RevokeCertificate(serial=serial, subject=subject or "", reason=reason or "")

    def cert_subject(self, value: str) -> str:
        return value

    cert_reason = cert_subject

    # --- resource units, resource pools, tenants ----------------------------------------

    def create_resource_unit(
        self, if_not_exists: bool | None, name: str, *options: tuple[str, str | int | float]
    ) -> ast.CreateResourceUnit:
        return ast.CreateResourceUnit(
            name=name.lower(), options=tuple(options), if_not_exists=bool(if_not_exists)
        )

    def alter_resource_unit(
        self, name: str, *options: tuple[str, str | int | float]
    ) -> ast.AlterResourceUnit:
        return ast.AlterResourceUnit(name=name.lower(), options=tuple(options))

    def alter_resource_pool(self, name: str, *options: _Option) -> ast.AlterResourcePool:
        changes = []
        for o in options:
            key = o.keyword.lower()
            value = o.value
            if key == "unit_num" and not isinstance(value, tuple):
                value = (value, ())
            changes.append((key, value))
        return ast.AlterResourcePool(name=name.lower(), changes=tuple(changes))

    def pool_unit_num_delete(self, keyword: Token, count: Token, *ids: Token) -> _Option:
        return _Option(keyword, (_to_int64(count), tuple(_to_int64(i) for i in ids)))

    def alter_tenant(self, name: str, keyword: Token, zone: str) -> ast.AlterTenant:
        return ast.AlterTenant(name=name.lower(), primary_zone=zone)

    def migrate_unit(self, unit_id: Token, destination: str) -> ast.MigrateUnit:
        return ast.MigrateUnit(unit_id=_to_int64(unit_id), destination=destination)

    def cancel_migrate_unit(self, unit_id: Token) -> ast.CancelMigrateUnit:
        return ast.CancelMigrateUnit(unit_id=_to_int64(unit_id))

    def drop_resource_unit(self, if_exists: bool | None, name: str) -> ast.DropResourceUnit:
        return ast.DropResourceUnit(name=name.lower(), if_exists=bool(if_exists))

    def unit_option(self, name: str, value: str | int | float) -> tuple[str, str | int | float]:
        return (name, value)

    def unit_option_name(self, token: Token) -> str:
        return token.lower()

    def size_word(self, token: Token) -> str:
        return str(token)

    def create_resource_pool(
        self, if_not_exists: bool | None, name: str, *options: _Option
    ) -> ast.CreateResourcePool:
        found = _options(options)
        return ast.CreateResourcePool(
            name=name.lower(),
            unit=found.get("unit"),
            unit_num=found.get("unit_num"),
            zone_list=found.get("zone_list"),
            if_not_exists=bool(if_not_exists),
        )

    def drop_resource_pool(self, if_exists: bool | None, name: str) -> ast.DropResourcePool:
        return ast.DropResourcePool(name=name.lower(), if_exists=bool(if_exists))

    def pool_unit(self, keyword: Token, unit: str) -> _Option:
        return _Option(keyword, unit)

    def pool_unit_num(self, keyword: Token, count: Token) -> _Option:
        return _Option(keyword, _to_int64(count))

    def pool_zone_list(self, keyword: Token, *zones: str) -> _Option:
        return _Option(keyword, tuple(zones))

    def create_tenant(
        self, if_not_exists: bool | None, name: str, *options: _Option
    ) -> ast.CreateTenant:
        found = _options(options)
        return ast.CreateTenant(
            name=name.lower(),
            pools=found.get("resource_pool_list", ()),
            primary_zone=found.get("primary_zone"),
            ls_count=found.get("ls_count"),
            if_not_exists=bool(if_not_exists),
        )

    def drop_tenant(self, if_exists: bool | None, name: str, force: bool | None) -> ast.DropTenant:
        return ast.DropTenant(name=name.lower(), force=bool(force), if_exists=bool(if_exists))

    def tenant_pools(self, keyword: Token, *pools: str) -> _Option:
        return _Option(keyword, tuple(pools))

    def tenant_primary_zone(self, keyword: Token, zone: str) -> _Option:
        return _Option(keyword, zone)

    def tenant_ls_count(self, keyword: Token, count: Token) -> _Option:
        return _Option(keyword, _to_int64(count))

    def if_not_exists(self) -> bool:
        return True

    if_exists = if_not_exists
    force = if_not_exists

    # --- users and privileges ---------------------------------------------------------

    def create_user(self, if_not_exists: bool | None, user: str, password: str) -> ast.CreateUser:
        return ast.CreateUser(user=user, password=password, if_not_exists=bool(if_not_exists))

    def drop_user(self, if_exists: bool | None, user: str) -> ast.DropUser:
        return ast.DropUser(user=user, if_exists=bool(if_exists))

    def alter_user(self, user: str, password: str) -> ast.AlterUser:
        return ast.AlterUser(user=user, password=password)

    def grant(self, *children: Any) -> ast.Grant:
        *privileges, user = children
        return ast.Grant(privileges=_privileges(privileges), user=user)

    def revoke(self, *children: Any) -> ast.Revoke:
        *privileges, user = children
        return ast.Revoke(privileges=_privileges(privileges), user=user)

    def show_grants(self, user: str | None = None) -> ast.ShowGrants:
        return ast.ShowGrants(user=user)

    def privilege(self, *words: Token) -> tuple[str, ...]:
        spelled = " ".join(w.upper() for w in words)
        if spelled in ("ALL", "ALL PRIVILEGES"):
            return ast.PRIVILEGES
        if spelled in ast.PRIVILEGES:
            return (spelled,)
        raise ObError(
            "OB_NOT_SUPPORTED",
            f"privilege '{spelled[:64]}'",
            detail="the privileges are SELECT, ALTER SYSTEM, CREATE USER and ALL [PRIVILEGES]",
        )

    def user(self, name: str, host: str | None = None) -> str:
        # The host of 'u'@'host' is ignored: a user is the same from every host.
        if not name:
            raise ObError("OB_INVALID_ARGUMENT", "user name", detail="it must not be empty")
        return name

    # --- literals and names -------------------------------------------------------------

    def number(self, *tokens: Token) -> int | float:
        negative = len(tokens) == 2
        token = tokens[-1]
        if token.type == "INT":
            return _to_int64(token, negative)
        value = float(token)
        if not math.isfinite(value):
            raise BadToken(token)
        return -value if negative else value

    def string(self, token: Token) -> str:
        return _unescape_string(token)

    def name(self, value: str) -> str:
        return value

    def object_name(self, value: str) -> str:
        return value.lower()

    def ident(self, token: Token) -> str:
        if token.type == "BACKQUOTED":
            if len(token) == 2:  # MySQL refuses the empty identifier ``
                raise BadToken(token)
            return token[1:-1].replace("``", "`")
        return str(token)
