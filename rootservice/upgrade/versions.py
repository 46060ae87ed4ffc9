"""This RS's release, the cluster version it last read, and the version skew rule applied to
the agents at lease time (:mod:`obcommon.releases` has the rule itself).

An agent outside the rule is refused with ``OB_VERSION_NOT_MATCH`` naming both releases and
the rule; the refusal changes nothing else (no whitelist record, no row). It is counted
(``lease_version_refused_total``; the lease servicer also counts it under its error name),
and the first refusal of each (server, build version) while the cluster version is unchanged
becomes one WARNING line and one ``version_refused`` event, so an agent retrying every
heartbeat fills neither the log nor the event history.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from obcommon import releases
from obcommon.errors import ObError
from obcommon.releases import Release
from rootservice.db.event_repo import Event
from rootservice.db.member_repo import Member
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)

#: Refusals remembered for the log / event once-only rule; past it the memory starts afresh
#: (a few more lines, never unbounded memory).
MAX_REMEMBERED = 4096


class Versions:
    """``release``: this RS's; ``cluster``: the cluster version as last loaded or raised
    (:meth:`set_cluster`; the oldest release until then). :meth:`agent_refusal` judges an
    agent's ``build_version`` on the heartbeat path: one dictionary look-up per request once
    a build version was seen. ``upgrade_stage`` is the cluster's upgrade stage as last
    loaded or changed (:meth:`set_upgrade_stage`; ``NONE`` until then) and
    :meth:`in_upgrade_mode` the one answer the gates of upgrade mode ask."""

    def __init__(self, release: Release, metrics: Metrics) -> None:
        """Start with the cluster version at the oldest release (the safest guess)."""
        self.release = release
        self.metrics = metrics
        self.cluster = releases.oldest()
        # OceanBase's _upgrade_stage: NONE outside upgrade mode (rootservice.upgrade.mode).
        self.upgrade_stage = "NONE"
        self._reasons: dict[str, str | None] = {}
        self._told: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def set_cluster(self, cluster: Release) -> None:
        """The cluster version is now ``cluster`` (read on taking office, raised by
        finalizing): every verdict is judged again."""
        with self._lock:
            self.cluster = cluster
            self._reasons = {}
            self._told = set()

    def set_upgrade_stage(self, stage: str) -> None:
        """The cluster's upgrade stage is now ``stage`` (read on taking office, changed by the
        upgrade statements): ``NONE`` is outside upgrade mode."""
        self.upgrade_stage = stage

    def in_upgrade_mode(self) -> bool:
        """Whether the cluster is in upgrade mode (ALTER SYSTEM BEGIN UPGRADE ran, END UPGRADE
        not yet): permanent offline, re-replication and tenant DDL are held then. One
        attribute read: the lease checker asks on every tick."""
        return self.upgrade_stage != "NONE"

    def gate_open(self, since: Release) -> bool:
        """Whether behaviour of release ``since`` may be started now
        (:func:`obcommon.releases.gate_open` on :attr:`cluster`)."""
        return releases.gate_open(self.cluster, since)

    def agent_refusal(
        self, server: str, zone: str, build_version: str, now_us: int
    ) -> tuple[ObError, Event | None] | None:
        """None when an agent reporting ``build_version`` may hold a lease from this RS as
        leader; else the ``OB_VERSION_NOT_MATCH`` to answer (counted) and, the first time for
        this server and build version, the ``version_refused`` event to queue (also logged);
        the event is None after that."""
        reasons = self._reasons
        if build_version in reasons:
            reason = reasons[build_version]
        else:
            agent = releases.of_build_version(build_version)
            reason = releases.agent_refusal(agent, self.release, self.cluster)
            if len(reasons) >= MAX_REMEMBERED:
                reasons.clear()
            reasons[build_version] = reason
        if reason is None:
            return None
        agent = releases.of_build_version(build_version)
        err = ObError(
            "OB_VERSION_NOT_MATCH",
            detail=(
                f"server '{server}' of release {agent} (build version '{build_version[:64]}') "
                f"refused by the RS leader of release {self.release} with cluster version "
                f"{self.cluster}: {reason}; the version skew rule: {releases.SKEW_RULE}"
            ),
        )
        self.metrics.inc("lease_version_refused_total")
        with self._lock:
            key = (server, build_version)
            first = key not in self._told
            if first:
                if len(self._told) >= MAX_REMEMBERED:
                    self._told.clear()
                self._told.add(key)
        if not first:
            return err, None
        log.warning("lease of %s refused: %s", server, err.message)
        return err, Event(
            now_us,
            "server",
            "version_refused",
            (
                ("server", server),
                ("zone", zone),
                ("release", str(agent)),
                ("rs_release", str(self.release)),
                ("cluster_version", str(self.cluster)),
            ),
            extra_info=err.message,
        )


def rs_skew_refusal(mine: Release, me: str, members: Iterable[Member]) -> str | None:
    """Why a root service of release ``mine`` at ``me`` may not start beside the root services
    ``members`` (the ones seen lately; a row without a build version is a 0.1.0 RS's), naming
    the first one outside the version skew rule; None when all are within it."""
    for m in members:
        if m.addr == me:
            continue
        other = releases.of_build_version(m.build_version or "")
        reason = releases.rs_refusal(mine, other)
        if reason is not None:
            return (
                f"this root service of release {mine} cannot run beside the root service at "
                f"{m.addr} of release {other}: {reason}; the version skew rule: "
                f"{releases.SKEW_RULE}"
            )
    return None
