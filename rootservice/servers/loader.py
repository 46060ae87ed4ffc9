"""load_server_manager (docs/design/servers.md#memory-and-the-table): read ``__all_server`` and ``__all_zone`` into
memory when taking office and on RELOAD SERVER, and the take-office grace that follows.

Only a heartbeat makes a server alive: a loaded server is never alive unless it already was in
memory. After taking office no lease expires for one ``lease_time`` and servers the table shows
alive (the take-office candidates) keep their rows until then, so a new leader never flashes a
living server INACTIVE.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from obcommon.addresses import format_server
from obcommon.clock import Clock
from rootservice.config import RsSettings
from rootservice.db import server_repo, tombstone_repo, zone_repo
from rootservice.ha.store import MetaStore
from rootservice.servers.identity import ClusterIdentity
from rootservice.servers.maintenance_window import floor_mono
from rootservice.servers.persist_queue import PersistQueue
from rootservice.servers.status import (
    CHECKED_COLUMNS,
    HeartbeatStatus,
    ServerStatus,
    admin_from_display,
)
from rootservice.servers.suspect_policy import restored
from rootservice.servers.whitelist import Whitelist
from rootservice.servers.zones import ZoneManager

log = logging.getLogger(__name__)


def table_value(row: dict[str, Any], col: str) -> Any:
    """Column ``col`` of an ``__all_server`` row as :meth:`ServerStatus.to_row` would write it
    (``status`` compared case-insensitively)."""
    v = row[col]
    return v.upper() if col == "status" and isinstance(v, str) else v


#: While candidates keep coming back, their grace lasts up to this many ``lease_time`` after
#: the take office (10,000 agents reconnecting over TLS to a restarted RS on
#: one Python core took 90 s; with a grace of one lease every one of them was shown INACTIVE).
MAX_GRACE_LEASES = 10


class TakeOfficeGrace:
    """The take-office grace (docs/design/servers.md#memory-and-the-table), per server.

    ``candidates``: servers the table shows alive that a take-office load could not prove alive
    yet; their rows stay as they are while the grace holds them. ``no_expire_until_mono``: end
    of the first ``lease_time`` after the take office on the monotonic clock (what the lease
    checker compares, so a wall-clock step neither ends nor stretches it; 0 before any take
    office): until then no lease expires at all. ``no_expire_until``: the same instant in wall
    time, for display only (``take_office_grace_until_us``). ``candidates`` is guarded by the
    whitelist lock.

    A server's grace ends as soon as its agent is back: from its first heartbeat it is alive
    and its lease is judged as any other (after the first ``lease_time``). The candidates still
    away are held past ``no_expire_until_mono`` while one came back within the last half
    ``lease_time`` (the RS is still re-admitting its servers), at most until
    :data:`MAX_GRACE_LEASES` leases after the take office (:meth:`holds`); then they are shown
    INACTIVE. So a server that died during a reconnect storm is expired within ``lease_time``
    of its last heartbeat if it came back first, and within half a ``lease_time`` of the
    storm's last return if it never did (before, every server waited for the whole storm).
    Kubernetes' node lifecycle controller likewise gives nodes a grace from its own start
    (``nodeStartupGracePeriod``) rather than judging them by heartbeats it could not have
    received.
    """

    def __init__(self) -> None:
        """No grace: nothing taken office yet."""
        self.candidates: set[str] = set()
        self.no_expire_until_mono = 0
        self.no_expire_until = 0
        self.last_return_mono = 0

    def begin(self, until_mono: int, candidates: set[str], until_wall: int = 0) -> None:
        """A take-office load: no lease expires before monotonic ``until_mono`` (wall
        ``until_wall``, shown only); ``candidates`` wait for it."""
        self.no_expire_until_mono = until_mono
        self.no_expire_until = until_wall
        self.last_return_mono = 0
        self.candidates.clear()
        self.candidates |= candidates

    def hold_until(self, until_mono: int) -> None:
        """No lease expires before monotonic ``until_mono`` (at least): the metadata server
        changed (a PostgreSQL failover), and agents that could not reach
        this RS while it failed over get one lease to come back, as after a take office."""
        self.no_expire_until_mono = max(self.no_expire_until_mono, until_mono)

    def returned(self, mono: int) -> None:
        """A candidate heartbeated at monotonic ``mono`` (microseconds); the heartbeat path
        calls it under the whitelist lock."""
        self.last_return_mono = mono

    def first_lease(self, mono: int) -> bool:
        """True before ``no_expire_until_mono``: one ``lease_time`` after the take office no
        lease may expire at monotonic ``mono`` (docs/design/servers.md#memory-and-the-table: the agents need the chance
        to find the new RS)."""
        return mono < self.no_expire_until_mono

    def holds(self, mono: int, lease: int) -> bool:
        """True while the candidates not back yet keep their rows at monotonic ``mono``
        (microseconds): before ``no_expire_until_mono``, then while candidates still wait and
        one came back within ``lease / 2`` microseconds, but never past
        ``no_expire_until_mono + (MAX_GRACE_LEASES - 1) * lease``. Servers that came back are
        not held (their grace ended with their first heartbeat)."""
        if mono < self.no_expire_until_mono:
            return True
        if not self.candidates:
            return False
        cap = self.no_expire_until_mono + (MAX_GRACE_LEASES - 1) * lease
        return mono - self.last_return_mono < lease // 2 and mono < cap

    def keep_only(self, keys: Iterable[str]) -> None:
        """A reload: candidates that left the whitelist are forgotten."""
        self.candidates &= set(keys)

    def clear(self) -> None:
        """Forget the candidates (a step-down or a failed bootstrap)."""
        self.candidates.clear()


class ServerLoader:
    """``load(take_office=...)``: load_server_manager on the given whitelist, zone cache and
    grace. Pending queued changes of ``persist`` are flushed first."""

    def __init__(
        self,
        whitelist: Whitelist,
        zones: ZoneManager,
        persist: PersistQueue,
        grace: TakeOfficeGrace,
        identity: ClusterIdentity,
        store: MetaStore,
        clock: Clock,
        settings: RsSettings,
    ) -> None:
        """Load into ``whitelist`` / ``zones`` from ``store``; ``identity.self_server`` marks
        the co-located server ``with_rootserver``."""
        self.whitelist = whitelist
        self.zones = zones
        self.persist = persist
        self.grace = grace
        self.identity = identity
        self.store = store
        self.clock = clock
        self.settings = settings

    def load(self, *, take_office: bool) -> None:
        """Read ``__all_server`` and ``__all_zone`` into memory.

        Servers absent from the table leave memory; new ones come in ``lease_expired`` (or
        ``permanent_offline`` when ``now - last_offline_time >= server_permanent_offline_time
        - lease_time``): never alive, only a heartbeat proves life. Existing ones take the
        table's values but keep ``last_hb_time``, ``hb_status`` and ``resource_info``. With
        ``take_office``, no lease expires for one ``lease_time`` after the load. Pending
        queued changes are flushed first so the table is as fresh as possible. Raises
        ``ObError(OB_ERR_SYS)`` when the database cannot be read (memory unchanged).
        """
        lease = self.settings.lease_time
        offline = self.settings.server_permanent_offline_time
        with self.store.write_lock:
            self.persist.run_once()
            with self.store.read() as conn:
                rows = server_repo.load_servers(conn)
                zones = zone_repo.load_zones(conn)
                stones = tombstone_repo.load_tombstones(conn)
            now = self.clock.now_us()
            mono = self.clock.monotonic_us()
            self_server = self.identity.self_server
            with self.whitelist.lock:
                self.zones.replace_all(zones)
                self.whitelist.tombstones.replace_all(stones)
                fresh: dict[str, ServerStatus] = {}
                candidates: set[str] = set()
                for r in rows:
                    key = format_server(r["svr_ip"], r["svr_port"])
                    old = self.whitelist.records.get(key)
                    s = ServerStatus(
                        id=r["id"],
                        zone=r["zone"],
                        ip=r["svr_ip"],
                        port=r["svr_port"],
                        sql_port=r["inner_port"],
                        build_version=r["build_version"],
                        stop_time=r["stop_time"],
                        start_service_time=r["start_service_time"],
                        block_migrate_in_time=r["block_migrate_in_time"],
                        last_offline_time=r["last_offline_time"],
                        admin_status=admin_from_display(r["status"]),
                        with_rootserver=bool(r["with_rootserver"]),
                        with_partition=r["with_partition"],
                        first_sessid=r["first_sessid"],
                        maintenance_end_time=r["maintenance_end_time"],
                    )
                    s.maintenance_floor_mono = floor_mono(s.maintenance_end_time, now, mono)
                    if old is not None:
                        s.last_hb_time = old.last_hb_time
                        s.last_hb_mono_us = old.last_hb_mono_us
                        s.register_time = old.register_time
                        s.hb_status = old.hb_status
                        s.resource_info = old.resource_info
                        s.force_stop_hb = old.force_stop_hb
                        s.leader_cnt = old.leader_cnt
                        s.server_report_status = old.server_report_status
                        s.suspect = old.suspect
                        s.suspect_end_time = old.suspect_end_time
                        s.offline_spans = old.offline_spans
                        s.offline_declared = old.offline_declared
                        s.draining = old.draining
                        s.maintenance_floor_mono = max(
                            s.maintenance_floor_mono, old.maintenance_floor_mono
                        )
                        s.lag, s.lagging_time = old.lag, old.lagging_time
                        s.disk_probe_latency_us = old.disk_probe_latency_us
                        if s.is_alive():
                            s.last_offline_time = 0
                    else:
                        if s.last_offline_time == 0:
                            # It was alive when the table was last written: we do not know
                            # when it died, so count its offline time from now.
                            s.last_offline_time = now
                            s.last_hb_time = now
                        else:
                            s.last_hb_time = s.last_offline_time - lease
                        # The table only has wall times: the age they show is the best
                        # guess of the monotonic one (never negative after a backward step).
                        s.last_hb_mono_us = mono - max(0, now - s.last_hb_time)
                        s.hb_status = HeartbeatStatus.LEASE_EXPIRED
                        if now - s.last_offline_time >= offline - lease and not s.in_maintenance(
                            now
                        ):
                            s.hb_status = HeartbeatStatus.PERMANENT_OFFLINE
                        elif take_office and r["last_offline_time"] == 0:
                            candidates.add(key)
                        if r["suspect_end_time"] > now:
                            # The old leader's SUSPECT period goes on.
                            s.suspect_end_time = r["suspect_end_time"]
                            s.suspect = restored(
                                s.suspect_end_time - now, mono, self.settings.server_suspect_time
                            )
                    s.with_rootserver = bool(self_server) and key == self_server
                    fresh[key] = s
                self.whitelist.replace_all(fresh)
                self.whitelist.rebuild_offline_heap(offline, mono)
                self.whitelist.suspect_heap.clear()
                for s in fresh.values():
                    if s.suspect_end_time:
                        self.whitelist.push_suspect(s)
                if take_office:
                    self.grace.begin(mono + lease, candidates, now + lease)
                else:
                    self.grace.keep_only(fresh.keys())
                by_key = {format_server(r["svr_ip"], r["svr_port"]): r for r in rows}
                for k, s in fresh.items():
                    if k in self.grace.candidates:
                        continue
                    mine = s.to_row()
                    if any(mine[c] != table_value(by_key[k], c) for c in CHECKED_COLUMNS):
                        self.persist.mark(k)
        log.info("loaded %d servers and %d zones from the system tables", len(rows), len(zones))
