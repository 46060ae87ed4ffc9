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

from obcommon.clock import Clock
from obcommon.errors import ObError
from rootservice.config import (
    PARAMETERS,
    SIZE,
    RsSettings,
    parameter_range,
    parse_parameter,
    validate_parameter,
)
from rootservice.db import event_repo, param_repo
from rootservice.db.event_repo import Event
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term

log = logging.getLogger(__name__)

#: Where a parameter's value came from, as SHOW PARAMETERS prints it.
SOURCE_DEFAULT = "default"
SOURCE_FLAG = "command line"
SOURCE_TABLE = "__all_sys_parameter"


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
    ) -> None:
        """Every parameter starts from its default or its flag."""
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
        self.listener.parameters_changed(set(PARAMETERS))

    def set(self, items: Iterable[tuple[str, str | int | float]]) -> None:
        """ALTER SYSTEM SET: validate every ``(name, value)`` item (ranges and invariants,
        all together), write them and one ``set_parameter`` event each in one transaction,
        then apply them live. Raises OB_ERR_SYS_CONFIG_UNKNOWN, OB_INVALID_ARGUMENT,
        OB_RS_NOT_MASTER, OB_ERR_SYS; nothing changes on error."""
        trial = RsSettings.model_validate(self.settings.model_dump())
        values: dict[str, int | str] = {}
        for name, raw in items:
            if isinstance(raw, float):
                p = PARAMETERS.get(name.lower())
                raise ObError(
                    "OB_INVALID_ARGUMENT",
                    f"{name} = {raw}",
                    detail="write a size such as '64M'"
                    if p is not None and p.kind == SIZE
                    else "write a duration such as '10s'",
                )
            v = validate_parameter(trial, name, raw)
            trial = RsSettings.model_validate(trial.model_dump() | {name.lower(): v})
            values[name.lower()] = v
        now = self.clock.now_us()
        with self.store.txn() as conn:
            for name, v in values.items():
                p = PARAMETERS[name]
                param_repo.set_param(conn, name, p.format(v), now, p.info)
            event_repo.insert_events(
                conn,
                [
                    Event(now, "root_service", "set_parameter", ((n, PARAMETERS[n].format(v)),))
                    for n, v in values.items()
                ],
                self.store.rs_addr,
            )
        self._assign(trial)
        for name in values:
            self.sources[name] = SOURCE_TABLE
        self.listener.parameters_changed(set(values))

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
