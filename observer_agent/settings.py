"""Typed settings of one observer agent (docs/design/leases.md and docs/design/index.md).

One :class:`AgentSettings` object is built at start-up from, in increasing precedence: the
defaults below, environment variables ``OB_AGENT_*`` (e.g. ``OB_AGENT_ZONE=z1``,
``OB_AGENT_RS_LIST=10.0.0.1:2882,10.0.0.2:2882``) and the command-line flags of
``observer-agent``. Durations are written like OceanBase's (``2s``, ``100ms``) and held as
integer microseconds; sizes are bytes, written as integers or OceanBase size words (``512K``,
``4M``, ``1.5G``, ``2GB``; binary multiples, the grammar of :mod:`obcommon.sizes` that resource
units use too). Validation happens once, at start-up, so a bad flag stops the process
before it ever talks to an RS.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from obcommon import releases
from obcommon.addresses import parse_host_port
from obcommon.backoff import DEFAULT_BASE_US, DEFAULT_CAP_US
from obcommon.durations import Duration, format_duration
from obcommon.logs import check_log_format
from obcommon.sizes import GIB, KIB, MIB, format_size, parse_size

US_PER_S = 1_000_000

#: What the agent reports as ``build_version`` unless told otherwise: its release first
#: (``"0.2.0_ob-rootservice-py"``), which the RS's version skew rule reads.
DEFAULT_BUILD_VERSION = releases.default_build_version()

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Bounds in microseconds. The lower bounds are short on purpose: tests and demos run agents
# with 50 ms heartbeats; the RS enforces its own, stricter, heartbeat_interval range.
DURATION_BOUNDS: dict[str, tuple[int, int]] = {
    "heartbeat_interval": (10_000, 60 * US_PER_S),
    "rpc_timeout": (10_000, 600 * US_PER_S),
    "disk_probe_interval": (10_000, 3600 * US_PER_S),
    "resource_refresh_interval": (10_000, 3600 * US_PER_S),
    "log_interval": (10_000, 60 * US_PER_S),
    "reconnect_backoff_base": (1_000, 60 * US_PER_S),
    "reconnect_backoff_cap": (1_000, 600 * US_PER_S),
}

#: Bounds of ``replica_size`` in bytes: tests use 64K, a drill a few GiB at most.
REPLICA_SIZE_BOUNDS = (4 * KIB, 64 * GIB)


#: Bytes, from an int or a size word (see :func:`parse_size`).
Size = Annotated[int, BeforeValidator(parse_size)]


def _split_rs_list(value: Any) -> Any:
    # The flag and the environment variable are comma-separated; Python callers may pass a list.
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


RsList = Annotated[list[str], NoDecode, BeforeValidator(_split_rs_list)]


class AgentSettings(BaseSettings):
    """Settings of one ``observer-agent`` process.

    - ``rs_list``: RS RPC addresses ``host:port`` to register with, tried round robin.
    - ``rpc_addr``: the agent's own RPC address ``ip:port``; it is also the server's identity
      (``svr_ip:svr_port`` in ``__all_server``), so the host must be a literal IPv4 address
      other than 0.0.0.0. Port 0 is refused except in settings built by :meth:`in_process`.
    - ``sql_port``: reported as ``inner_port``, 1..65535.
    - ``zone``: non-empty; ``data_dir``: where ``identity.json`` and the disk probe live.
    - durations (microseconds): ``heartbeat_interval`` (2 s), ``rpc_timeout`` (2 s),
      ``disk_probe_interval`` (5 s), ``resource_refresh_interval`` (10 s),
      ``reconnect_backoff_base`` (100 ms) and ``reconnect_backoff_cap`` (2 s, >= the base):
      the jittered backoff between attempts to reach an RS that does not answer
      (:mod:`obcommon.backoff`; raise the cap when very many agents share
      one RS, so their reconnects spread over more time than its TLS handshakes take).
    - ``log_disk_size``: bytes of log disk to report; None means 30 % of the data disk.
    - ``replica_size``: bytes of each LS replica's data file (4 MiB; 4K .. 64G).
    - ``log_interval`` (microseconds, 500 ms; 10 ms .. 60 s): a leader replica appends one
      log entry this often.
    - ``max_concurrent_copies`` (2; 1 .. 64): replicas built by copy (replica migration)
      streaming their data at the same time; more wait their turn.
    - ``log_level`` (INFO) and ``log_format`` (``text`` or ``json``, :mod:`obcommon.logs`).
    - ``cpu_count`` (cores, > 0) / ``memory_limit`` (bytes, > 0): reported as ``cpu_total`` /
      ``mem_total`` instead of what psutil sees; None = what psutil sees.

    Sizes accept integers (bytes) and size words (``4M``).

    Raises pydantic's ``ValidationError`` on any violation.
    """

    model_config = SettingsConfigDict(env_prefix="OB_AGENT_", extra="forbid")

    # Only _InProcessAgentSettings turns this on; it is no field, so no flag or env sets it.
    _allow_port_zero: ClassVar[bool] = False

    rs_list: RsList
    rpc_addr: str
    sql_port: int = Field(ge=1, le=65535)
    zone: str
    data_dir: Path
    heartbeat_interval: Duration = 2 * US_PER_S
    rpc_timeout: Duration = 2 * US_PER_S
    build_version: str = Field(default_factory=releases.default_build_version)
    log_disk_size: Size | None = Field(default=None, gt=0)
    replica_size: Size = 4 * MIB
    log_interval: Duration = 500_000
    max_concurrent_copies: int = Field(default=2, ge=1, le=64)
    cpu_count: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    memory_limit: Size | None = Field(default=None, gt=0)
    disk_probe_interval: Duration = 5 * US_PER_S
    resource_refresh_interval: Duration = 10 * US_PER_S
    reconnect_backoff_base: Duration = DEFAULT_BASE_US
    reconnect_backoff_cap: Duration = DEFAULT_CAP_US
    log_level: str = "INFO"
    # The log lines' format (obcommon/logs.py): "text" or "json".
    log_format: str = "text"
    # Trust boundary: ca.crt and node.crt / node.key, or plaintext with
    # ``insecure``; the command line insists on exactly one.
    certs_dir: Path | None = None
    insecure: bool = False
    # The HTTP(S) endpoint (/metrics, /healthz, /readyz), "host:port"; 8088 as
    # OceanBase obagent's monitor port, loopback by default.
    http_addr: str = "127.0.0.1:8088"

    @field_validator("rs_list")
    @classmethod
    def _check_rs_list(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one RS address host:port is required")
        out: list[str] = []
        for addr in value:
            host, port = parse_host_port(addr)
            norm = f"{host}:{port}"
            if norm not in out:
                out.append(norm)
        return out

    @field_validator("rpc_addr")
    @classmethod
    def _strip_rpc_addr(cls, value: str) -> str:
        return value.strip()

    @field_validator("zone")
    @classmethod
    def _check_zone(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("zone must not be empty")
        if len(value) > 128:
            raise ValueError("zone is longer than 128 characters")
        return value

    @field_validator("build_version")
    @classmethod
    def _check_build_version(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("build_version must not be empty")
        # The RS reads the agent's release from here (its version skew rule): a build
        # version without one would be taken for the oldest release's.
        if releases.parse(value) is None:
            raise ValueError(
                f"build_version {value.strip()!r} must start with the release major.minor.patch "
                f"(e.g. {releases.default_build_version()!r})"
            )
        return value.strip()

    @field_validator("log_level")
    @classmethod
    def _check_log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}")
        return level

    @field_validator("log_format")
    @classmethod
    def _check_log_format(cls, value: str) -> str:
        return check_log_format(value)

    @model_validator(mode="after")
    def _check(self) -> AgentSettings:
        host, _ = parse_host_port(self.rpc_addr, allow_port_zero=self._allow_port_zero)
        try:
            ip = ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(
                f"rpc_addr {self.rpc_addr!r}: the host must be an IPv4 address "
                "(it is the server's identity ip:port)"
            ) from None
        if ip.is_unspecified:
            raise ValueError(f"rpc_addr {self.rpc_addr!r}: 0.0.0.0 cannot identify a server")
        for name, (lo, hi) in DURATION_BOUNDS.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ValueError(
                    f"{name} = {format_duration(value)} is out of range "
                    f"[{format_duration(lo)}, {format_duration(hi)}]"
                )
        if self.reconnect_backoff_cap < self.reconnect_backoff_base:
            raise ValueError(
                f"reconnect_backoff_cap = {format_duration(self.reconnect_backoff_cap)} is "
                f"below reconnect_backoff_base = {format_duration(self.reconnect_backoff_base)}"
            )
        lo, hi = REPLICA_SIZE_BOUNDS
        if not lo <= self.replica_size <= hi:
            raise ValueError(
                f"replica_size = {format_size(self.replica_size)} is out of range "
                f"[{format_size(lo)}, {format_size(hi)}]"
            )
        return self

    @classmethod
    def in_process(cls, **values: Any) -> AgentSettings:
        """Settings for an agent embedded in a test process.

        Same validation as the constructor, except that the environment is ignored and
        ``rpc_addr`` may use port 0 (the real port is learnt when the gRPC server binds, see
        :func:`observer_agent.service.create_server`). Raises ``ValidationError``.
        """
        return _InProcessAgentSettings(**values)

    @property
    def rpc_host(self) -> str:
        """The host part of ``rpc_addr``."""
        return self.rpc_addr.rpartition(":")[0]

    @property
    def rpc_port(self) -> int:
        """The port part of ``rpc_addr`` (0 only for :meth:`in_process` settings)."""
        return int(self.rpc_addr.rpartition(":")[2])


class _InProcessAgentSettings(AgentSettings):
    """:meth:`AgentSettings.in_process`: init values only, port 0 allowed."""

    _allow_port_zero: ClassVar[bool] = True

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)
