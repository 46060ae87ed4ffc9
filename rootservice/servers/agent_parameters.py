"""The agents' parameters by zone and server: which value is in effect on each server, and
what its agent is sent in every lease answer.

An agent parameter (:data:`rootservice.config.AGENT_PARAMETERS`) has a cluster-wide value (the
RS's settings: default, ``__all_sys_parameter`` or a flag) and may have one per zone and one
per server (``__all_sys_parameter_override``). On a server the value in effect is its own, else
its zone's, else the cluster-wide one: the order in which OceanBase's ``ObSystemConfig::find``
(src/share/config/ob_system_config.cpp) looks for a server's row of ``__all_sys_parameter``
(ip and port matched, then the zone, then the cluster's). OceanBase 4.x reads with
``find_newest`` instead (the most recently written matching row wins); here a narrower scope
always wins, so a later cluster-wide SET does not undo a zone's or a server's value.

An agent is sent only what was set somewhere (cluster-wide by ALTER SYSTEM SET or a flag, or
for its zone or itself), so an agent started with its own ``--log-level`` keeps it until an
operator sets ``syslog_level``; ``migration_max_bytes_per_second`` has its own field and is
always sent, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from rootservice.config import AGENT_PARAMETERS, PARAMETERS, RsSettings
from rootservice.db.param_repo import ANY_SERVER, OverrideKey
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager

#: The agent parameter that travels in ``LeaseResponse.migration_max_bytes_per_second``.
COPY_RATE = "migration_max_bytes_per_second"


class ParameterPlaces(Protocol):
    """Where a ZONE or SERVER clause may point: the zones and servers of the cluster."""

    def server_zone(self, server: str, /) -> str | None:
        """The zone of the server ``'ip:port'`` (normalised), None when it is no server."""
        ...

    def zone_exists(self, zone: str, /) -> bool:
        """True when ``zone`` is a zone of ``__all_zone``."""
        ...

    def servers(self) -> list[tuple[str, int, str]]:
        """Every server as ``(ip, port, zone)``, sorted."""
        ...


class AgentParameterValues:
    """The overrides in memory (replaced whole, never changed in place, so the heartbeat
    threads read them without a lock) and the cluster-wide values of ``settings``.
    ``cluster_set`` names the agent parameters whose cluster-wide value was set (not the
    default)."""

    def __init__(self, settings: RsSettings) -> None:
        """No override; nothing set cluster-wide."""
        self.settings = settings
        self._overrides: Mapping[OverrideKey, str] = {}
        self._cluster_set: frozenset[str] = frozenset()
        self._sent: dict[tuple[str, int, str], tuple[int, dict[str, str]]] = {}
        # What every server of a zone without an override of its own is sent, by zone: the
        # heartbeat path looks it up by the zone's name alone (no key tuple to build and hash).
        self._sent_zone: dict[str, tuple[int, dict[str, str]]] = {}
        # The servers with an override of their own: every other server of a zone is sent
        # the same, computed once per zone (a reconnect storm of 5,000 agents computed it
        # 5,000 times, 1.6 % of the RS's samples).
        self._own: frozenset[tuple[str, int]] = frozenset()

    @property
    def overrides(self) -> Mapping[OverrideKey, str]:
        """(zone, svr_ip, svr_port, name) -> value text of every override."""
        return self._overrides

    def replace(self, overrides: Mapping[OverrideKey, str], cluster_set: Iterable[str]) -> None:
        """Take new overrides and the names set cluster-wide; forgets what was computed."""
        self._overrides = dict(overrides)
        self._cluster_set = frozenset(cluster_set) & AGENT_PARAMETERS
        self._own = frozenset((ip, port) for zone, ip, port, _ in self._overrides if not zone)
        self._sent = {}
        self._sent_zone = {}

    def value_in_effect(self, ip: str, port: int, zone: str, name: str) -> str:
        """The value text of parameter ``name`` on server ``ip:port`` of ``zone``: its own
        override, else its zone's, else the cluster-wide value (any parameter; only agent
        parameters have overrides)."""
        o = self._overrides
        v = o.get(("", ip, port, name))
        if v is None:
            v = o.get((zone, *ANY_SERVER, name))
        if v is not None:
            return v
        return PARAMETERS[name].format(getattr(self.settings, name))

    def for_server(self, ip: str, port: int, zone: str) -> tuple[int, dict[str, str]]:
        """What the lease answer to ``ip:port`` of ``zone`` carries: the copy bandwidth limit
        in bytes per second (0 = unlimited) and name -> value text of the other agent
        parameters set for it somewhere. Computed once per server until the next change."""
        # The caches as they are now: replace() (another thread) swaps in empty ones after
        # the new overrides, so a value computed from the old ones lands in a dropped cache.
        own, by_zone, by_key = self._own, self._sent_zone, self._sent
        if not (own and (ip, port) in own):
            sent = by_zone.get(zone)
            if sent is not None:
                return sent
        key = (ip, port, zone) if (ip, port) in own else ("", 0, zone)
        sent = by_key.get(key)
        if sent is not None:
            return sent
        o = self._overrides
        params = {
            name: self.value_in_effect(ip, port, zone, name)
            for name in sorted(AGENT_PARAMETERS - {COPY_RATE})
            if name in self._cluster_set
            or ("", ip, port, name) in o
            or (zone, *ANY_SERVER, name) in o
        }
        rate = int(PARAMETERS[COPY_RATE].parse(self.value_in_effect(ip, port, zone, COPY_RATE)))
        sent = (rate, params)
        by_key[key] = sent
        if not key[0]:
            by_zone[zone] = sent
        return sent


def override_key(name: str, server: tuple[str, int] | None, zone: str | None) -> OverrideKey:
    """The ``__all_sys_parameter_override`` key of ``name`` for ``server`` (ip, port) or else
    ``zone``."""
    if server is not None:
        return ("", server[0], server[1], name)
    assert zone is not None
    return (zone, *ANY_SERVER, name)


class ClusterPlaces:
    """:class:`ParameterPlaces` of the RS's memory: the whitelist's servers and the zone
    manager's zones."""

    def __init__(self, whitelist: Whitelist, zones: ZoneManager) -> None:
        """Read ``whitelist`` and ``zones`` at each call."""
        self.whitelist = whitelist
        self.zones = zones

    def server_zone(self, server: str, /) -> str | None:
        """The zone of the whitelist's ``server``, None when it has none."""
        s = self.whitelist.get(server)
        return s.zone if s is not None else None

    def zone_exists(self, zone: str, /) -> bool:
        """Whether ``zone`` is a zone of ``__all_zone``."""
        return self.zones.exists(zone)

    def servers(self) -> list[tuple[str, int, str]]:
        """Every server of the whitelist as ``(ip, port, zone)``, sorted."""
        return sorted((s.ip, s.port, s.zone) for s in self.whitelist.snapshot())
