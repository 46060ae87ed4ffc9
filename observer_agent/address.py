"""This agent's RPC address (``ip:port``): the ``server`` of every lease request
(docs/design/leases.md), the name members, leaders and copy sources use for it (section 9), and the tag
of its log lines. The port is only known once the gRPC server is bound when configured as 0.
"""

from __future__ import annotations

from typing import Protocol

from observer_agent.settings import AgentSettings


class LocalServer(Protocol):
    """This agent's address as its parts see it; known only once its gRPC server is bound."""

    @property
    def server(self) -> str:
        """This agent's ``ip:port``, as the RS, members, leaders and sources name it."""
        ...


class AgentAddress:
    """The ``ip:port`` of the agent configured by ``settings.rpc_addr`` (implements
    :class:`LocalServer`)."""

    def __init__(self, settings: AgentSettings) -> None:
        """The configured address; a configured port 0 stays 0 until :meth:`bind`."""
        self._host = settings.rpc_host
        self._configured_port = settings.rpc_port
        self._port = settings.rpc_port

    @property
    def server(self) -> str:
        """This server's ``ip:port`` (the RPC address; the bound port when configured as 0)."""
        return f"{self._host}:{self._port}"

    def bind(self, port: int) -> bool:
        """Record the port the gRPC server actually bound (adopted only when configured as
        0); False when a configured non-zero port differs from it (the caller warns)."""
        if self._configured_port == 0:
            self._port = port
            return True
        return port == self._configured_port
