"""The agent's logger: every record carries the agent's ``ip:port``."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from observer_agent.address import LocalServer

_logger = logging.getLogger("observer_agent")


class AgentLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Adds ``ob_server`` (the agent's ``ip:port``, read from ``address`` at each record) to
    every record of the ``observer_agent`` logger, so the lines of several agents in one
    test process can be told apart; ``observer-agent`` prints it."""

    def __init__(self, address: LocalServer) -> None:
        """A logger adapter for the agent at ``address``."""
        super().__init__(_logger, {})
        self._address = address

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        """Add ``extra["ob_server"]`` unless the caller gave one."""
        extra = dict(kwargs.get("extra") or {})
        extra.setdefault("ob_server", self._address.server)
        kwargs["extra"] = extra
        return msg, kwargs
