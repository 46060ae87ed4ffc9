"""The server status records of the whitelist and the three statuses (docs/design/servers.md).

A :class:`ServerStatus` is the in-memory record of one server (OceanBase's
``share::ObServerStatus``). Admin status is set by operators, heartbeat status by heartbeats
and the checker, and the display status stored in ``__all_server.status`` is derived from
both. :func:`parse_server` validates the ``'ip:port'`` strings operators and agents send.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from obcommon import releases
from obcommon.addresses import format_server
from obcommon.errors import ObError
from rootservice.servers.lag_policy import LagState
from rootservice.servers.offline_window import Span
from rootservice.servers.suspect_policy import SuspectState

DATA_DISK_ERROR_BIT = 0x1
#: ``server_status`` bit of an agent's last lease request when it stops cleanly (since 0.2.0;
#: agents send it only once the cluster version allows, see ``obcommon.releases``).
STOPPING_BIT = releases.STOPPING_STATUS_BIT

MAX_ZONE_LENGTH = 128

StopMode = Literal["STOP", "FORCE_STOP", "ISOLATE"]
"""The statement that stops a server (docs/design/statements.md): STOP checks the majority and the log
sync of every LS with a member there, FORCE STOP only the majority, ISOLATE the tenants'
primary regions."""


class AdminStatus(StrEnum):
    """Set only by operators (docs/design/servers.md#the-three-statuses): NORMAL, or DELETING after DELETE SERVER."""

    NORMAL = "NORMAL"
    DELETING = "DELETING"


class HeartbeatStatus(StrEnum):
    """Set by heartbeats and the checker (docs/design/servers.md#the-three-statuses)."""

    ALIVE = "alive"
    LEASE_EXPIRED = "lease_expired"
    PERMANENT_OFFLINE = "permanent_offline"


class DisplayStatus(StrEnum):
    """What ``__all_server.status`` shows, derived by :func:`display_status`."""

    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"
    DELETING = "DELETING"


class ReportStatus(StrEnum):
    """``server_report_status``: what the agent last reported of its data disk."""

    NORMAL = "NORMAL"
    DATA_DISK_ERROR = "DATA_DISK_ERROR"


# The members the per-record loops test, again as module names. Reading one through its
# class costs about 0.1 us on Python 3.11 (EnumType defines __getattr__, which sends every
# class attribute read down the slow path), 15 times a module global; the rounds that visit
# every record of a 10,000-server whitelist read these instead.
HB_ALIVE = HeartbeatStatus.ALIVE
HB_PERMANENT_OFFLINE = HeartbeatStatus.PERMANENT_OFFLINE
ADMIN_NORMAL = AdminStatus.NORMAL
ADMIN_DELETING = AdminStatus.DELETING


def display_status(admin: AdminStatus, hb: HeartbeatStatus) -> DisplayStatus:
    """docs/design/servers.md#the-three-statuses: DELETING wins; otherwise ACTIVE iff alive."""
    if admin is AdminStatus.DELETING:
        return DisplayStatus.DELETING
    return DisplayStatus.ACTIVE if hb is HeartbeatStatus.ALIVE else DisplayStatus.INACTIVE


def admin_from_display(text: str) -> AdminStatus:
    """Case-insensitive inverse used when loading ``__all_server``: DELETING -> DELETING,
    anything else -> NORMAL."""
    return AdminStatus.DELETING if text.strip().upper() == "DELETING" else AdminStatus.NORMAL


def check_zone_name(zone: str) -> str:
    """A zone name is 1..128 printable characters without quotes; returns it stripped.
    Raises ``ObError(OB_INVALID_ARGUMENT)``."""
    z = zone.strip() if isinstance(zone, str) else ""
    if not z or len(z) > MAX_ZONE_LENGTH or not z.isprintable() or any(c in z for c in "'\"`"):
        shown = z if len(z) <= 64 else z[:61] + "..."
        raise ObError("OB_INVALID_ARGUMENT", f"zone '{shown}'")
    return z


@dataclass(slots=True)
class ResourceInfo:
    """``ObServerResourceInfo``: CPU in cores, everything else in bytes."""

    cpu_total: float = 0.0
    cpu_assigned: float = 0.0
    mem_total: int = 0
    mem_assigned: int = 0
    mem_in_use: int = 0
    log_disk_total: int = 0
    log_disk_assigned: int = 0
    log_disk_in_use: int = 0
    data_disk_total: int = 0
    data_disk_assigned: int = 0
    data_disk_in_use: int = 0

    @classmethod
    def from_proto(cls, msg: Any) -> ResourceInfo:
        """Copy the fields of an ``obrpc_pb2.ResourceInfo``."""
        return cls(**{f: getattr(msg, f) for f in cls.__slots__})  # type: ignore[attr-defined]

    def is_valid(self) -> bool:
        """No negative count or size."""
        return all(getattr(self, f) >= 0 for f in self.__slots__)  # type: ignore[attr-defined]


@dataclass(slots=True)
class ServerStatus:
    """One whitelist record (docs/design/servers.md#the-server-record). Times are microseconds since the epoch,
    0 meaning never / not set. ``key`` is the ``'ip:port'`` string.

    ``last_hb_mono_us`` is the same instant as ``last_hb_time`` on the RS's monotonic clock
    (:meth:`obcommon.clock.Clock.monotonic_us`), memory only: lease ages and the
    permanent-offline deadline are measured on it, so a step of the wall clock (NTP, an
    operator's ``date -s``) neither expires live servers nor keeps dead ones alive. ``last_hb_time`` stays wall time for the table, the events and the dashboards.

    SUSPECT (:mod:`rootservice.servers.suspect_policy`): ``suspect`` is the
    damping state (memory only; SUSPECT while ``suspect.is_suspect(mono)``, exact to the
    microsecond for placement) and ``suspect_end_time`` its wall-clock end as
    ``__all_server.suspect_end_time`` shows it (0: not SUSPECT; cleared by the lease checker's
    tick once the period is over). ``offline_spans`` are the closed outages of the sliding
    permanent-offline window (:mod:`rootservice.servers.offline_window`), memory only.

    Maintenance (:mod:`rootservice.servers.maintenance`):
    ``maintenance_end_time`` is the wall-clock end of a ``STOP ... FOR MAINTENANCE`` window
    (0: none), as ``__all_server`` shows it; ``maintenance_floor_mono`` the same instant on
    the monotonic clock (memory only, kept after the window ends): no offline time before it
    counts towards permanent offline (:meth:`offline_start`). ``draining``: a DRAIN SERVER
    is running on it (memory; ``__all_server_drain`` holds the drain itself).

    LAGGING (:mod:`rootservice.servers.lag_policy`): ``lag`` is the episode
    (memory only), ``lagging_time`` its wall-clock start as ``__all_server.lagging_time`` shows
    it (0: not LAGGING), ``disk_probe_latency_us`` the last reported disk-probe latency. A
    LAGGING server is SUSPECT for placement (:meth:`is_suspect`)."""

    id: int
    zone: str
    ip: str
    port: int
    sql_port: int
    build_version: str = ""
    register_time: int = 0
    last_hb_time: int = 0
    last_hb_mono_us: int = 0
    last_offline_time: int = 0
    stop_time: int = 0
    start_service_time: int = 0
    block_migrate_in_time: int = 0
    admin_status: AdminStatus = AdminStatus.NORMAL
    hb_status: HeartbeatStatus = HeartbeatStatus.LEASE_EXPIRED
    with_rootserver: bool = False
    force_stop_hb: bool = False
    resource_info: ResourceInfo = field(default_factory=ResourceInfo)
    leader_cnt: int = -1
    server_report_status: ReportStatus = ReportStatus.NORMAL
    with_partition: int = 0
    first_sessid: int = 0
    suspect_end_time: int = 0
    maintenance_end_time: int = 0
    maintenance_floor_mono: int = 0
    draining: bool = False
    suspect: SuspectState = SuspectState()
    offline_spans: tuple[Span, ...] = ()
    # Declared permanently offline in the current episode of being gone (memory only; one
    # event per episode, rootservice/servers/offline_window.py ``episode_over``).
    offline_declared: bool = False
    lagging_time: int = 0
    lag: LagState = LagState()
    disk_probe_latency_us: int = 0
    # The last accepted resource_info as serialized bytes (heartbeat fast path).
    resource_raw: bytes = b""
    #: The whitelist key, ``'ip:port'`` of ``ip`` and ``port`` (which never change: a record
    #: is replaced, not readdressed). Formatted once: the heartbeat path reads it several
    #: times per request.
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.key = format_server(self.ip, self.port)

    def is_alive(self) -> bool:
        """Heartbeat status is alive."""
        return self.hb_status is HB_ALIVE

    def is_active(self) -> bool:
        """alive and admin NORMAL."""
        return self.hb_status is HB_ALIVE and self.admin_status is ADMIN_NORMAL

    def is_suspect(self, mono: int) -> bool:
        """SUSPECT at monotonic ``mono``: alive and within its suspect period, or LAGGING
        (no new leaders, no copies)."""
        return (self.suspect.until_mono_us > mono or self.lag.lagging) and self.is_alive()

    def offline_start(self, since_mono: int) -> int:
        """Where an outage that began at monotonic ``since_mono`` starts counting towards
        permanent offline: not before the end of a maintenance window."""
        # 0 is "no window", not an instant: a monotonic reading may be below 0 after a load.
        floor = self.maintenance_floor_mono
        return max(since_mono, floor) if floor else since_mono

    def in_maintenance(self, now: int) -> bool:
        """Within a maintenance window at wall-clock ``now`` (``now < maintenance_end_time``)."""
        return now < self.maintenance_end_time

    def is_stopped(self) -> bool:
        """``stop_time != 0`` (stopped or isolated)."""
        return self.stop_time != 0

    def in_service(self) -> bool:
        """``start_service_time != 0``."""
        return self.start_service_time != 0

    def can_migrate_in(self) -> bool:
        """Active and ``block_migrate_in_time == 0``."""
        return self.is_active() and self.block_migrate_in_time == 0

    def display_status(self) -> DisplayStatus:
        """docs/design/servers.md#the-three-statuses, see :func:`display_status`."""
        return display_status(self.admin_status, self.hb_status)

    def to_row(self) -> dict[str, Any]:
        """The ``__all_server`` columns this record determines (no gmt_* columns)."""
        return {
            "svr_ip": self.ip,
            "svr_port": self.port,
            "id": self.id,
            "zone": self.zone,
            "inner_port": self.sql_port,
            "with_rootserver": 1 if self.with_rootserver else 0,
            "status": self.display_status().value,
            "block_migrate_in_time": self.block_migrate_in_time,
            "build_version": self.build_version,
            "stop_time": self.stop_time,
            "start_service_time": self.start_service_time,
            "first_sessid": self.first_sessid,
            "with_partition": self.with_partition,
            "last_offline_time": self.last_offline_time,
            "suspect_end_time": self.suspect_end_time,
            "maintenance_end_time": self.maintenance_end_time,
            "lagging_time": self.lagging_time,
        }

    def checked_values(self) -> tuple[Any, ...]:
        """The values of :data:`CHECKED_COLUMNS` in that order, as :meth:`to_row` writes
        them (what ``check_all_server`` compares with the table, without a dict per server)."""
        return (
            self.zone,
            self.sql_port,
            self.build_version,
            self.display_status().value,
            1 if self.with_rootserver else 0,
            self.block_migrate_in_time,
            self.stop_time,
            self.start_service_time,
            self.with_partition,
            self.last_offline_time,
            self.suspect_end_time,
            self.maintenance_end_time,
            self.lagging_time,
        )


# Columns CheckAllServerTask compares between memory and the table (docs/design/servers.md#memory-and-the-table).
CHECKED_COLUMNS = (
    "zone",
    "inner_port",
    "build_version",
    "status",
    "with_rootserver",
    "block_migrate_in_time",
    "stop_time",
    "start_service_time",
    "with_partition",
    "last_offline_time",
    "suspect_end_time",
    "maintenance_end_time",
    "lagging_time",
)
