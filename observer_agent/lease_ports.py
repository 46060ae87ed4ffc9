"""What the agent's lease decisions (:class:`observer_agent.lease.LeaseDecisions`) are given at
construction, as typed protocols: the data disk's status, the sampled resources, the hosted
replicas a request reports, the RS to try next, and where the copy bandwidth limit of an
accepted answer goes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from obcommon.proto import obrpc_pb2


class ServerStatus(Protocol):
    """The ``server_status`` bits a lease request reports (the data disk's health)."""

    @property
    def server_status(self) -> int:
        """``DATA_DISK_ERROR`` (0x1) while the data disk fails its probe, else 0."""
        ...

    @property
    def probe_latency_us(self) -> int:
        """The disk probe's latency, microseconds."""


class ResourceSource(Protocol):
    """The node's last sampled resources."""

    @property
    def info(self) -> obrpc_pb2.ResourceInfo:
        """The last ``ResourceInfo`` (empty before the first sample)."""
        ...


class ReplicaReport(Protocol):
    """The LS replicas the node hosts."""

    def report_into(self, msg: obrpc_pb2.LeaseRequest | obrpc_pb2.ApplyReplicasResponse) -> None:
        """Put ``ReplicaInfo`` of every hosted replica in ``msg.replicas`` and the report's
        number (one above the last one's) in ``msg.replicas_version``; from memory (no I/O)."""
        ...


class RsChoice(Protocol):
    """Which RS to try next (implemented by :class:`observer_agent.rs_list.RsAddresses`)."""

    def next_address(self) -> str:
        """The RS (``ip:port``) to try next."""
        ...

    def prefer(self, addr: str) -> None:
        """Try ``addr`` next (a leader hint, or the RS of a lost stream)."""
        ...

    def adopt(self, rs_list: Iterable[str]) -> None:
        """Adopt the RS list of an accepted response."""
        ...


class CopyRateLimit(Protocol):
    """Where the RS's ``migration_max_bytes_per_second`` goes (implemented by
    :class:`observer_agent.replicas.bandwidth.CopyBandwidth`)."""

    def set_rate(self, bytes_per_s: int) -> bool:
        """Take the limit (bytes per second, 0 = unlimited); True when it changed."""
        ...


class AgentParameters(Protocol):
    """Where the agent parameters of an accepted answer go (implemented by
    :class:`observer_agent.runtime_parameters.RuntimeParameters`)."""

    def apply(self, values: Mapping[str, str], /) -> None:
        """Take name -> value text of the parameters set for this server; never raises."""
        ...
