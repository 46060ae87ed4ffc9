"""The agent parameters the RS sends in every accepted lease answer
(``LeaseResponse.parameters``), applied while the agent runs: no restart.

``syslog_level`` takes OceanBase's words (src/share/parameter/ob_parameter_seed.ipp: DEBUG,
TRACE, WDIAG, EDIAG, INFO, WARN, ERROR) onto Python's levels for the ``observer_agent``
logger; ``disk_probe_interval`` (a duration such as ``5s``) is the period of the disk probe and
of the replica files check from their next round on. A parameter the RS does not send keeps
the agent's own start-up value (its flag or default). A value the agent cannot take is logged
and ignored; the RS checked it already, so that means two versions disagree.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from obcommon.durations import format_duration, parse_duration
from observer_agent.settings import DURATION_BOUNDS, AgentSettings

#: OceanBase's syslog_level words -> Python's level names.
SYSLOG_LEVELS = {
    "DEBUG": "DEBUG",
    "TRACE": "DEBUG",
    "INFO": "INFO",
    "WDIAG": "WARNING",
    "WARN": "WARNING",
    "EDIAG": "ERROR",
    "ERROR": "ERROR",
}


class RuntimeParameters:
    """Applies the parameters of each accepted answer to ``settings`` (updated in place:
    the periodic jobs read ``disk_probe_interval`` at each round) and to ``logger``'s level;
    ``log`` tells what changed. :attr:`applied` is name -> the value text last applied."""

    def __init__(
        self,
        settings: AgentSettings,
        log: logging.Logger | logging.LoggerAdapter,  # type: ignore[type-arg]
        logger: logging.Logger | None = None,
    ) -> None:
        """Nothing applied yet; ``logger`` defaults to the ``observer_agent`` logger."""
        self.settings = settings
        self.log = log
        self.logger = logger or logging.getLogger("observer_agent")
        self.applied: dict[str, str] = {}

    def apply(self, values: Mapping[str, str]) -> None:
        """Take ``values`` (name -> value text) of one accepted answer; unchanged values
        cost a dictionary look-up. Never raises."""
        for name, text in values.items():
            if self.applied.get(name) == text:
                continue
            try:
                self._apply_one(name, text)
            except ValueError as e:
                self.log.warning("parameter %s = %r from the RS not applied: %s", name, text, e)
            self.applied[name] = text

    def _apply_one(self, name: str, text: str) -> None:
        if name == "syslog_level":
            level = SYSLOG_LEVELS.get(text.strip().upper())
            if level is None:
                raise ValueError(f"not one of {', '.join(SYSLOG_LEVELS)}")
            self.logger.setLevel(level)
            self.settings.log_level = level
        elif name == "disk_probe_interval":
            us = parse_duration(text)
            lo, hi = DURATION_BOUNDS[name]
            if not lo <= us <= hi:
                raise ValueError(f"out of range [{format_duration(lo)}, {format_duration(hi)}]")
            self.settings.disk_probe_interval = us
        else:
            raise ValueError("this agent has no such parameter")
        # WARNING: the line must be seen whatever level the agent now logs at.
        self.log.warning("parameter %s = %s from the RS applied", name, text)
