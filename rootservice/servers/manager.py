"""The server layer as the tenant and balancer layers are still built with it (transitional).

``rootservice.tenants`` (``LsManager``, ``TenantManager``) and ``rootservice.balancer``
(``MigrationManager``) take one ``ServerManager`` and read the whitelist, the zone cache, the
persistence queue, the heartbeat requester and the shared services through it. The server
layer itself is split into :mod:`~rootservice.servers.whitelist`,
:mod:`~rootservice.servers.heartbeat`, :mod:`~rootservice.servers.lease_checker`,
:mod:`~rootservice.servers.admin` and the rest; this class only bundles what those layers
read, delegating every call, until they take their collaborators one by one. It holds no
state and carries no behaviour of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from obcommon.clock import Clock
from rootservice.config import RsSettings
from rootservice.ha.store import MetaStore
from rootservice.ha.term import Term
from rootservice.metrics import Metrics
from rootservice.servers.agent_client import AgentClient
from rootservice.servers.heartbeat_requester import HeartbeatRequester
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.ports import Wake
from rootservice.servers.status import ServerStatus, StopMode
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager

__all__ = ["ServerManager", "StopMode"]


class ServerManager:
    """What the tenant and balancer layers read of the server layer: the whitelist's read API
    (``get``, ``snapshot``, ``with_server``, ``has_servers_to_empty``), ``zones``,
    ``persist`` (their events), ``request_heartbeats``, ``wake``, ``sleep`` (seconds) and the
    shared ``store`` / ``term`` / ``clock`` / ``settings`` / ``agents`` / ``metrics``."""

    def __init__(
        self,
        whitelist: Whitelist,
        zones: ZoneManager,
        persist: PersistQueue,
        heartbeats: HeartbeatRequester,
        term: Term,
        store: MetaStore,
        clock: Clock,
        settings: RsSettings,
        agents: AgentClient,
        metrics: Metrics,
        wake: Wake,
        sleep: Callable[[float], None],
    ) -> None:
        """Bundle the given parts; nothing is copied."""
        self.whitelist = whitelist
        self.zones = zones
        self.persist = persist
        self.heartbeats = heartbeats
        self.term = term
        self.store = store
        self.clock = clock
        self.settings = settings
        self.agents = agents
        self.metrics = metrics
        self.wake = wake
        self.sleep = sleep

    def get(self, server: str) -> ServerStatus | None:
        """See :meth:`Whitelist.get`."""
        return self.whitelist.get(server)

    def snapshot(self) -> list[ServerStatus]:
        """See :meth:`Whitelist.snapshot`."""
        return self.whitelist.snapshot()

    def with_server(self, server: str, fn: Callable[[ServerStatus], None]) -> None:
        """See :meth:`Whitelist.with_server`."""
        self.whitelist.with_server(server, fn)

    def has_servers_to_empty(self) -> bool:
        """See :meth:`Whitelist.has_servers_to_empty`."""
        return self.whitelist.has_servers_to_empty()

    def request_heartbeats(self, servers: Iterable[str]) -> int:
        """See :meth:`HeartbeatRequester.request_heartbeats`."""
        return self.heartbeats.request_heartbeats(servers)
