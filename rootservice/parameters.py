"""Run-time parameters: where each value comes from, ALTER SYSTEM SET and SHOW PARAMETERS
(docs/design/index.md#configuration).

Precedence, lowest first: the defaults of :class:`rootservice.config.RsSettings`, the
``__all_sys_parameter`` table (what ALTER SYSTEM SET wrote), environment variables
``OB_RS_*`` and command-line flags. The one settings object is shared by every component and
updated in place, so a change applies at once; the components that cache something derived
from it (timers, the lease checker's deadlines, the agent client's timeout) hear about it
through :class:`ParameterListener`. Durations are integer microseconds, sizes (such as
``migration_max_bytes_per_second``) integer bytes.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable
from typing import Protocol

from obcommon.addresses import parse_server
from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.config import (
    AGENT_PARAMETERS,
    CHOICE,
    DURATION,
    INT,
    PARAMETERS,
    SIZE,
    RsSettings,
    parameter_range,
    parse_parameter,
    validate_parameter,
)
from rootservice.db import event_repo, param_repo
from rootservice.db.event_repo import Event
from rootservice.db.param_repo import OverrideKey
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.servers.agent_parameters import (
    AgentParameterValues,
    ParameterPlaces,
    override_key,
)
from sql.ast import ParameterScope

log = logging.getLogger(__name__)

#: Where a parameter's value came from, as SHOW PARAMETERS prints it.
SOURCE_DEFAULT = "default"
SOURCE_FLAG = "command line"
SOURCE_TABLE = "__all_sys_parameter"

#: GV$OB_PARAMETERS.DATA_TYPE of each kind of parameter, as OceanBase names its types.
DATA_TYPES = {DURATION: "TIME", SIZE: "CAPACITY", CHOICE: "STRING", INT: "INT"}

#: The columns of SHOW PARAMETERS: OceanBase's (src/sql/resolver/cmd/ob_show_resolver.cpp,
#: the columns of __all_virtual_tenant_parameter_stat it selects), then this project's range.
SHOW_COLUMNS = [
    "zone",
    "svr_type",
    "svr_ip",
    "svr_port",
    "name",
    "data_type",
    "value",
    "info",
    "section",
    "scope",
    "source",
    "edit_level",
    "default_value",
    "isdefault",
    "range",
]
SHOW_TYPES = ["VARCHAR"] * 3 + ["BIGINT"] + ["VARCHAR"] * 11

#: What one item of ALTER SYSTEM SET is once checked: the override key (None: cluster-wide),
#: the name, the value in the parameter's unit and the comment.
_Checked = tuple[OverrideKey | None, str, "int | str", str]


class ParameterListener(Protocol):
    """Told after parameters changed, with their lower-case names."""

    def parameters_changed(self, names: set[str], /) -> None:
        """Re-derive whatever was computed from these parameters (e.g. reschedule timers)."""
        ...


class Parameters:
    """The run-time parameters of one RS.

    ``settings`` is the shared object (updated in place); ``flags_set`` names the settings
    given on the command line or in the environment, which win over the table. ``listener``
    hears about every change. :attr:`sources` maps each parameter to where its value came
    from.
    """

    def __init__(
        self,
        settings: RsSettings,
        flags_set: Iterable[str],
        term: Term,
        store: MetaStore,
        clock: Clock,
        listener: ParameterListener,
        places: ParameterPlaces | None = None,
        agent_values: AgentParameterValues | None = None,
    ) -> None:
        """Every parameter starts from its default or its flag. ``places`` knows the zones
        and servers a ZONE or SERVER clause may name (None: those clauses are refused);
        ``agent_values`` is where the agents' values by zone and server are kept for the
        lease answers (default: one of its own)."""
        self.places = places
        self.agent_values = agent_values or AgentParameterValues(settings)
        self.settings = settings
        self.flags_set = set(flags_set)
        self.term = term
        self.store = store
        self.clock = clock
        self.listener = listener
        self.sources: dict[str, str] = {
            n: (SOURCE_FLAG if n in self.flags_set else SOURCE_DEFAULT) for n in PARAMETERS
        }

    def apply_table(self, params: dict[str, str]) -> None:
        """Take the ``__all_sys_parameter`` values (name -> text) of the parameters no flag
        set, at start and on taking office (a former leader may have changed them). A value
        that does not parse is logged and ignored. Raises ``ValueError`` when the table's
        values together with the flags break an invariant (nothing is changed then)."""
        trial = self.settings.model_dump()
        taken = []
        for name in PARAMETERS:
            if name in params and name not in self.flags_set:
                try:
                    trial[name] = parse_parameter(PARAMETERS[name], params[name])
                    taken.append(name)
                except ValueError as e:
                    log.error("ignoring __all_sys_parameter %s = %r: %s", name, params[name], e)
        try:
            merged = RsSettings.model_validate(trial)
        except ValueError as e:
            raise ValueError(
                f"__all_sys_parameter with the command-line flags is invalid: {e}"
            ) from e
        self._assign(merged)
        for name in taken:
            self.sources[name] = SOURCE_TABLE
        with self.store.read() as conn:
            overrides = param_repo.load_overrides(conn)
        self._refresh_agent_values(overrides)
        self.listener.parameters_changed(set(PARAMETERS))

    def _refresh_agent_values(self, overrides: dict[OverrideKey, str]) -> None:
        self.agent_values.replace(
            overrides, {n for n in AGENT_PARAMETERS if self.sources.get(n) != SOURCE_DEFAULT}
        )

    def publish(self) -> None:
        """Write ``__all_sys_parameter_info`` (what GV$OB_PARAMETERS shows of every
        parameter) from this RS's parameters; the leader does it on taking office."""
        with self.store.txn() as conn:
            param_repo.replace_param_info(conn, self.info_rows(), self.clock.now_us())

    def info_rows(
        self, settings: RsSettings | None = None, sources: dict[str, str] | None = None
    ) -> list[dict[str, str]]:
        """One ``__all_sys_parameter_info`` row per parameter, from ``settings`` and
        ``sources`` (default: this RS's)."""
        settings = settings or self.settings
        sources = sources if sources is not None else self.sources
        defaults = RsSettings.model_fields
        return [
            {
                "name": name,
                "data_type": DATA_TYPES[p.kind],
                "value": p.format(getattr(settings, name)),
                "default_value": p.format(defaults[name].default),
                "info": p.info,
                "section": "OBSERVER" if name in AGENT_PARAMETERS else "ROOT_SERVICE",
                "scope": "CLUSTER",
                "source": sources.get(name, SOURCE_DEFAULT),
                "edit_level": "DYNAMIC_EFFECTIVE",
                "value_range": parameter_range(p, settings.allow_short_timings),
            }
            for name, p in PARAMETERS.items()
        ]

    def set(self, items: Iterable[tuple[str, str | int | float]]) -> None:
        """ALTER SYSTEM SET of cluster-wide ``(name, value)`` items: :meth:`set_scoped`
        without clauses."""
        self.set_scoped([(n, v, ParameterScope()) for n, v in items])

    def set_scoped(self, items: list[tuple[str, str | int | float, ParameterScope]]) -> None:
        """ALTER SYSTEM SET: check every ``(name, value, clauses)`` item (name, value, range,
        invariants and scope, all together, as OceanBase's ``ObAdminSetConfig::verify_config``
        does before it writes anything: src/rootserver/ob_system_admin_util.cpp), write them
        and one ``set_parameter`` event each in one transaction, then apply them live. A
        cluster-wide item goes to ``__all_sys_parameter``, a ZONE or SERVER one (agent
        parameters only) to ``__all_sys_parameter_override``. SCOPE (MEMORY, SPFILE, BOTH)
        is accepted and changes nothing: every value is both applied and kept.

        Raises OB_ERR_SYS_CONFIG_UNKNOWN (unknown name; any TENANT clause, as no parameter
        here is a tenant parameter), OB_INVALID_CONFIG (bad value, or a ZONE / SERVER clause
        on a root service parameter), OB_INVALID_ARGUMENT (no such zone or server),
        OB_RS_NOT_MASTER, OB_ERR_SYS; nothing changes on error."""
        trial = RsSettings.model_validate(self.settings.model_dump())
        checked: list[_Checked] = []
        for name, raw, clauses in items:
            key = self._check_scope(name, clauses)
            if isinstance(raw, float):
                p = PARAMETERS[name.lower()]
                raise ObError(
                    "OB_INVALID_CONFIG",
                    f"{name} = {raw}: write a size such as '64M'"
                    if p.kind == SIZE
                    else f"{name} = {raw}: write a duration such as '10s'",
                )
            v = validate_parameter(trial, name, raw)
            if key is None:
                trial = RsSettings.model_validate(trial.model_dump() | {name.lower(): v})
            checked.append((key, name.lower(), v, clauses.comment or ""))
        now = self.clock.now_us()
        overrides = dict(self.agent_values.overrides)
        cluster = {name: v for key, name, v, _ in checked if key is None}
        with self.store.txn() as conn:
            for key, name, v, comment in checked:
                p = PARAMETERS[name]
                if key is None:
                    param_repo.set_param(conn, name, p.format(v), now, comment or p.info)
                else:
                    param_repo.set_override(conn, key, p.format(v), comment, now)
                    overrides[key] = p.format(v)
            event_repo.insert_events(
                conn,
                [
                    Event(now, "root_service", "set_parameter", _event_values(key, n, v))
                    for key, n, v, _ in checked
                ],
                self.store.rs_addr,
            )
            sources = self.sources | {name: SOURCE_TABLE for name in cluster}
            param_repo.replace_param_info(conn, self.info_rows(trial, sources), now)
        self._assign(trial)
        self.sources = sources
        self._refresh_agent_values(overrides)
        self.listener.parameters_changed({name for _, name, _, _ in checked})

    def _check_scope(self, name: str, clauses: ParameterScope) -> OverrideKey | None:
        """The override key a ZONE or SERVER clause makes of ``name`` (None: cluster-wide);
        raises as :meth:`set_scoped` says."""
        lower = name.lower()
        if clauses.tenant is not None or lower not in PARAMETERS:
            # Only the sys tenant's cluster parameters exist here: OceanBase looks a name
            # given with TENANT up among the tenant parameters and answers this when absent.
            detail = f"parameter '{name}'"
            if clauses.tenant is not None:
                detail += f" is no tenant parameter (TENANT = {clauses.tenant})"
            raise ObError("OB_ERR_SYS_CONFIG_UNKNOWN", detail=detail)
        if clauses.server is None and clauses.zone is None:
            return None
        if lower not in AGENT_PARAMETERS:
            raise ObError(
                "OB_INVALID_CONFIG",
                f"{lower} is a parameter of the root service: it has no ZONE or SERVER scope "
                f"(the agents' parameters are {', '.join(sorted(AGENT_PARAMETERS))})",
            )
        if self.places is None:
            raise ObError("OB_NOT_SUPPORTED", "ZONE or SERVER scope")
        if clauses.server is not None:
            try:
                ip, port = parse_server(clauses.server)
            except ObError:
                raise ObError("OB_INVALID_ARGUMENT", "server", detail=clauses.server) from None
            if self.places.server_zone(f"{ip}:{port}") is None:
                raise ObError(
                    "OB_INVALID_ARGUMENT", "server", detail=f"no server {ip}:{port}"
                ) from None
            return override_key(lower, (ip, port), None)
        assert clauses.zone is not None
        if not self.places.zone_exists(clauses.zone):
            raise ObError("OB_INVALID_ARGUMENT", "zone", detail=f"no zone {clauses.zone}")
        return override_key(lower, None, clauses.zone)

    def show(self, like: str | None = None) -> list[tuple[str, str, str, str, str, str]]:
        """SHOW PARAMETERS [LIKE pattern]: ``(name, value, default_value, range, source,
        info)`` per parameter whose name matches ``like`` (SQL LIKE, case-insensitive)."""
        defaults = RsSettings.model_fields
        rows = []
        for name, p in PARAMETERS.items():
            if like is not None and not sql_like(name, like):
                continue
            rows.append(
                (
                    name,
                    p.format(getattr(self.settings, name)),
                    p.format(defaults[name].default),
                    parameter_range(p, self.settings.allow_short_timings),
                    self.sources.get(name, SOURCE_DEFAULT),
                    p.info,
                )
            )
        return rows

    def show_rows(self, like: str | None = None) -> list[tuple[object, ...]]:
        """SHOW PARAMETERS [LIKE pattern]: :data:`SHOW_COLUMNS` per server and parameter
        whose name matches ``like``, the value in effect on that server (every server has
        every parameter: they are all cluster parameters). Before any server exists, one
        row per parameter with empty server columns."""
        places = self.places.servers() if self.places is not None else []
        defaults = RsSettings.model_fields
        rows: list[tuple[object, ...]] = []
        for ip, port, zone in places or [("", 0, "")]:
            for name, p in PARAMETERS.items():
                if like is not None and not sql_like(name, like):
                    continue
                value = self.agent_values.value_in_effect(ip, port, zone, name)
                default = p.format(defaults[name].default)
                rows.append(
                    (
                        zone,
                        "observer",
                        ip,
                        port,
                        name,
                        DATA_TYPES[p.kind],
                        value,
                        p.info,
                        "OBSERVER" if name in AGENT_PARAMETERS else "ROOT_SERVICE",
                        "CLUSTER",
                        self.sources.get(name, SOURCE_DEFAULT),
                        "DYNAMIC_EFFECTIVE",
                        default,
                        "YES" if value == default else "NO",
                        parameter_range(p, self.settings.allow_short_timings),
                    )
                )
        return rows

    def _assign(self, new: RsSettings) -> None:
        # The object is shared by every component, so it is updated in place; ``new`` was
        # validated as a whole, so per-field re-validation (which would see half-updated
        # invariants) is bypassed.
        for name in RsSettings.model_fields:
            self.settings.__dict__[name] = getattr(new, name)


def sql_like(text: str, pattern: str) -> bool:
    """SQL LIKE (case-insensitive, ``%`` and ``_``) via fnmatch, with fnmatch's own specials
    escaped."""
    translated = "".join(
        "*" if c == "%" else "?" if c == "_" else f"[{c}]" if c in "*?[]" else c for c in pattern
    )
    return fnmatch.fnmatchcase(text.lower(), translated.lower())


def _event_values(
    key: OverrideKey | None, name: str, value: int | str
) -> tuple[tuple[str, str], ...]:
    """The ``set_parameter`` event's name/value pairs, with the zone or server when scoped."""
    pairs: tuple[tuple[str, str], ...] = ((name, PARAMETERS[name].format(value)),)
    if key is None:
        return pairs
    zone, ip, port, _ = key
    return pairs + ((("server", f"{ip}:{port}"),) if not zone else (("zone", zone),))
