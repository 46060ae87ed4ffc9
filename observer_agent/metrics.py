"""The agent's Prometheus collectors (issue 12), served at the agent's ``/metrics``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry


class AgentMetrics:
    """The collectors of one agent process, in their own ``registry`` (not the global one,
    so that tests running several agents in one process keep them apart)."""

    def __init__(self) -> None:
        """Start with an empty registry."""
        self.registry = CollectorRegistry()
