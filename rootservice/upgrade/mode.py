"""Upgrade mode: ALTER SYSTEM BEGIN UPGRADE, BEGIN ROLLING UPGRADE, END ROLLING UPGRADE and END
UPGRADE, and what upgrade mode refuses.

Follows OceanBase's ``ObAdminUpgradeCmd`` and ``ObAdminRollingUpgradeCmd``
(src/rootserver/ob_system_admin_util.cpp): the cluster's upgrade state is two parameters,
``enable_upgrade_mode`` and ``_upgrade_stage`` (``NONE`` -> BEGIN UPGRADE -> ``PREUPGRADE`` ->
BEGIN ROLLING UPGRADE -> ``DBUPGRADE`` -> END ROLLING UPGRADE -> ``POSTUPGRADE`` -> END UPGRADE
-> ``NONE``), kept in ``__all_sys_parameter`` (so a new leader reads them on taking office),
shown by SHOW PARAMETERS, each change an ``upgrade`` event with who ran it.

Before entering upgrade mode the pre-checks of OceanBase's upgrade_checker.py run
(:mod:`rootservice.upgrade.checks`); a refusal names every blocker and changes nothing. In
upgrade mode (:meth:`rootservice.upgrade.versions.Versions.in_upgrade_mode`): tenant and
resource pool DDL is refused (OceanBase's ``in upgrade mode, CREATE TENANT is not allowed``),
no server is declared permanently offline and nothing is re-replicated (OceanBase's checker
raises ``server_permanent_offline_time`` to 72h for the upgrade, so that processes restarted
one by one are not rebuilt elsewhere), and STOP ZONE keeps the zone order.

END ROLLING UPGRADE keeps its own rules (:mod:`rootservice.upgrade.finalize`) and does not
require BEGIN ROLLING UPGRADE: OceanBase's ``ObAdminRollingUpgradeCmd`` checks no stage, and
its upgrade_post.py runs it whether or not BEGIN UPGRADE ever ran ("maybe in
upgrade_post_check stage or never run begin upgrade"). In upgrade mode it moves the stage to
``POSTUPGRADE``. END UPGRADE is refused while the stage is ``DBUPGRADE``: a rolling upgrade
begun and not ended would leave the cluster version below the processes' release.
"""

from __future__ import annotations

import logging
import threading

from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.releases import Release
from rootservice.db import cluster_version_repo, event_repo, param_repo
from rootservice.db.event_repo import Event
from rootservice.ha.store import MetaStore
from rootservice.upgrade.checks import UpgradeChecks, named, release_of
from rootservice.upgrade.finalize import Finalize
from rootservice.upgrade.versions import Versions

log = logging.getLogger(__name__)

#: OceanBase's parameter names of the upgrade state (rows of ``__all_sys_parameter``).
MODE_PARAMETER = "enable_upgrade_mode"
STAGE_PARAMETER = "_upgrade_stage"
#: OceanBase's ``obrpc::ObUpgradeStage`` names.
NONE, PREUPGRADE, DBUPGRADE, POSTUPGRADE = "NONE", "PREUPGRADE", "DBUPGRADE", "POSTUPGRADE"
STAGES = (NONE, PREUPGRADE, DBUPGRADE, POSTUPGRADE)

MODE_INFO = (
    "the cluster is in upgrade mode: set by ALTER SYSTEM BEGIN UPGRADE, cleared by END "
    "UPGRADE; tenant DDL, permanent offline and re-replication are held meanwhile"
)
STAGE_INFO = (
    "the stage of the upgrade: NONE, PREUPGRADE (BEGIN UPGRADE), DBUPGRADE (BEGIN ROLLING "
    "UPGRADE), POSTUPGRADE (END ROLLING UPGRADE)"
)

#: The tenant DDL upgrade mode refuses (statement names as the refusal spells them).
TENANT_DDL = (
    "CREATE TENANT",
    "DROP TENANT",
    "ALTER TENANT",
    "CREATE RESOURCE POOL",
    "DROP RESOURCE POOL",
    "ALTER RESOURCE POOL",
)


def stage_of(params: dict[str, str]) -> str:
    """The upgrade stage the ``__all_sys_parameter`` rows ``params`` record (``NONE`` without
    them, or when ``enable_upgrade_mode`` is not True)."""
    if params.get(MODE_PARAMETER, "False") != "True":
        return NONE
    stage = params.get(STAGE_PARAMETER, PREUPGRADE)
    return stage if stage in STAGES and stage != NONE else PREUPGRADE


class UpgradeMode:
    """The four upgrade statements, the tenant-DDL refusal and STOP ZONE's order check. The
    state in memory is ``versions.upgrade_stage`` (loaded on taking office by the office);
    every statement re-reads the table first."""

    def __init__(
        self,
        versions: Versions,
        finalize: Finalize,
        checks: UpgradeChecks,
        store: MetaStore,
        clock: Clock,
    ) -> None:
        """Nothing is read until a statement runs."""
        self.versions = versions
        self.finalize = finalize
        self.checks = checks
        self.store = store
        self.clock = clock
        # One upgrade statement at a time: each reads the stage, then writes the next.
        self._lock = threading.Lock()

    def stage(self) -> str:
        """The stage as stored (also refreshes the memory). Raises ``ObError(OB_ERR_SYS)``
        when the database fails."""
        with self.store.read() as conn:
            stage = stage_of(param_repo.load_params(conn))
        self.versions.set_upgrade_stage(stage)
        return stage

    def begin_upgrade(self, user: str) -> bool:
        """Enter upgrade mode (stage ``PREUPGRADE``) once :meth:`UpgradeChecks.begin_blockers`
        finds nothing; False when it was in upgrade mode already (nothing written, no check).
        Raises ``ObError(OB_OP_NOT_ALLOW)`` naming the blockers (nothing changes)."""
        with self._lock:
            if self.stage() != NONE:
                return False
            blockers = self.checks.begin_blockers()
            if blockers:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    "BEGIN UPGRADE",
                    detail=f"the upgrade pre-checks failed: {named(blockers)}",
                )
            self._write(PREUPGRADE, "begin_upgrade", user)
            return True

    def begin_rolling_upgrade(self, user: str) -> bool:
        """Stage ``DBUPGRADE`` (from ``PREUPGRADE``); False when there already. Raises
        ``ObError(OB_OP_NOT_ALLOW)`` outside upgrade mode or after END ROLLING UPGRADE."""
        with self._lock:
            stage = self.stage()
            if stage == DBUPGRADE:
                return False
            if stage == NONE:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    "BEGIN ROLLING UPGRADE",
                    detail="the cluster is not in upgrade mode: run ALTER SYSTEM BEGIN UPGRADE "
                    "first",
                )
            if stage == POSTUPGRADE:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    "BEGIN ROLLING UPGRADE",
                    detail="the rolling upgrade has ended (stage POSTUPGRADE): run ALTER SYSTEM "
                    "END UPGRADE",
                )
            self._write(DBUPGRADE, "begin_rolling_upgrade", user)
            return True

    def end_rolling_upgrade(self, user: str) -> tuple[Release, Release]:
        """:meth:`Finalize.end_rolling_upgrade` (its rules and refusals unchanged), then, in
        upgrade mode, stage ``POSTUPGRADE``. Returns the cluster version before and after."""
        with self._lock:
            before, after = self.finalize.end_rolling_upgrade(user)
            if self.stage() in (PREUPGRADE, DBUPGRADE):
                # The raise wrote its event; a stage change without one writes its own.
                self._write(POSTUPGRADE, None if after != before else "end_rolling_upgrade", user)
            return before, after

    def end_upgrade(self, user: str) -> bool:
        """Leave upgrade mode (stage ``NONE``); False when not in it. Raises
        ``ObError(OB_OP_NOT_ALLOW)`` while a rolling upgrade has begun and not ended."""
        with self._lock:
            stage = self.stage()
            if stage == NONE:
                return False
            if stage == DBUPGRADE:
                raise ObError(
                    "OB_OP_NOT_ALLOW",
                    "END UPGRADE",
                    detail="a rolling upgrade has begun and not ended (stage DBUPGRADE): run "
                    "ALTER SYSTEM END ROLLING UPGRADE first",
                )
            self._write(NONE, "end_upgrade", user)
            return True

    def refuse_tenant_ddl(self, statement: str) -> None:
        """Raise ``ObError(OB_OP_NOT_ALLOW)`` ("in upgrade mode, CREATE TENANT is not allowed")
        when the cluster is in upgrade mode; ``statement`` is one of :data:`TENANT_DDL`."""
        if self.versions.in_upgrade_mode():
            raise ObError(
                "OB_OP_NOT_ALLOW",
                f"in upgrade mode, {statement} is",
                detail="run it after ALTER SYSTEM END UPGRADE",
            )

    def check_stop_zone(self, zone: str) -> None:
        """In upgrade mode, raise ``ObError(OB_OP_NOT_ALLOW)`` naming what blocks
        (:meth:`UpgradeChecks.zone_blockers`, the newest release being the highest of this
        RS's and the servers'); nothing outside it."""
        if not self.versions.in_upgrade_mode():
            return
        found = [r for s in self.checks.servers.snapshot() if (r := release_of(s)) is not None]
        newest = max([self.versions.release, *found])
        blockers = self.checks.zone_blockers(zone, newest)
        if blockers:
            raise ObError(
                "OB_OP_NOT_ALLOW",
                f"stop zone '{zone}' during an upgrade",
                detail=f"upgrade one zone at a time: {named(blockers)}",
            )

    def parameter_rows(self) -> list[tuple[str, str, str, str, str, str]]:
        """SHOW PARAMETERS' rows of ``enable_upgrade_mode`` and ``_upgrade_stage``, read from
        the database: ``(name, value, default_value, range, source, info)``."""
        stage = self.stage()
        return [
            (
                MODE_PARAMETER,
                str(stage != NONE),
                "False",
                "",
                "__all_sys_parameter",
                MODE_INFO,
            ),
            (
                STAGE_PARAMETER,
                stage,
                NONE,
                "[" + ", ".join(STAGES) + "]",
                "__all_sys_parameter",
                STAGE_INFO,
            ),
        ]

    def _write(self, stage: str, event: str | None, user: str) -> None:
        """Store ``stage`` (and the mode it implies) in one fenced transaction with the
        ``upgrade`` event ``event`` (none when None: END ROLLING UPGRADE writes its own)."""
        now = self.clock.now_us()
        with self.store.txn() as conn:
            cluster = cluster_version_repo.get(conn)
            param_repo.set_param(conn, MODE_PARAMETER, str(stage != NONE), now, MODE_INFO)
            param_repo.set_param(conn, STAGE_PARAMETER, stage, now, STAGE_INFO)
            if event is not None:
                event_repo.insert_events(
                    conn,
                    [
                        Event(
                            now,
                            "upgrade",
                            event,
                            (
                                ("cluster_version", str(cluster)),
                                ("build_version", str(self.versions.release)),
                                ("stage", stage),
                                ("user", user),
                            ),
                        )
                    ],
                    self.store.rs_addr,
                )
        self.versions.set_upgrade_stage(stage)
        log.info("upgrade stage is now %s (%s by %r)", stage, event or "end_rolling_upgrade", user)
