"""ALTER SYSTEM END ROLLING UPGRADE: raise the cluster version to this RS's release, the
point of no return of a rolling upgrade; and the cluster version as SHOW PARAMETERS shows it
(``min_observer_version``).

Follows OceanBase's ``ObAdminRollingUpgradeCmd::execute`` (src/rootserver/
ob_system_admin_util.cpp): ending a rolling upgrade raises ``min_observer_version`` and
records an ``END_ROLLING_UPGRADE`` event with the cluster version before and after and the
build version. Before raising it, every whitelisted server and every root service seen within
the last lease must report this RS's release line (CockroachDB finalizes only when every node
runs the new binary); each refusal names what still blocks and changes nothing. The raise is
one fenced transaction that never lowers the row (:func:`cluster_version_repo.raise_to`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import sqlalchemy as sa

from obcommon import releases
from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.releases import Release
from rootservice.db import cluster_version_repo, event_repo, member_repo
from rootservice.db.engine import db_error_summary
from rootservice.db.event_repo import Event
from rootservice.ha.store import MetaStore
from rootservice.servers.whitelist import Whitelist
from rootservice.upgrade.versions import Versions

log = logging.getLogger(__name__)

#: The name SHOW PARAMETERS gives the cluster version (OceanBase's).
PARAMETER = "min_observer_version"
PARAMETER_INFO = (
    "the cluster version: the release every process runs at least; raised only by ALTER "
    "SYSTEM END ROLLING UPGRADE (or BOOTSTRAP of a new cluster), never lowered"
)

#: Blockers named in one refusal; the rest are counted.
MAX_NAMED = 10


class Finalize:
    """END ROLLING UPGRADE for the RS whose release and cluster version ``versions`` holds;
    ``lease_time()`` (microseconds) is how recently a root service must have run an election
    round to count as running. Once the cluster version is this release, the contract
    migrations run (rootservice.db.schema_upgrade): no RS of the previous release may run
    any more."""

    def __init__(
        self,
        versions: Versions,
        whitelist: Whitelist,
        store: MetaStore,
        clock: Clock,
        lease_time: Callable[[], int],
        contract: Callable[[], list[str]],
    ) -> None:
        """Nothing is read until a statement runs. ``contract()`` applies the contract
        migrations and returns their revisions
        (:func:`rootservice.db.schema_upgrade.contract`)."""
        self.versions = versions
        self.whitelist = whitelist
        self.store = store
        self.clock = clock
        self.lease_time = lease_time
        self.contract = contract

    def blockers(self, target: Release) -> list[str]:
        """What keeps the cluster version from rising to ``target``: each whitelisted server
        that has not reported a release of ``target``'s line, and each root service seen
        within one lease that reports another (a row without one is a 0.1.0 RS's)."""
        out = []
        for s in self.whitelist.snapshot():
            if not s.build_version:
                out.append(f"server '{s.key}' has not reported its release")
                continue
            r = releases.of_build_version(s.build_version)
            if r.line != target.line:
                out.append(f"server '{s.key}' reports release {r}")
        with self.store.read() as conn:
            members = member_repo.seen_since(conn, self.clock.now_us() - self.lease_time())
        for m in members:
            r = releases.of_build_version(m.build_version or "")
            if r.line != target.line:
                out.append(f"root service {m.addr} reports release {r}")
        return out

    def end_rolling_upgrade(self, user: str = "") -> tuple[Release, Release]:
        """Raise the cluster version to this RS's release; returns ``(before, after)``
        (equal when it was there already: nothing is written then). ``user`` ran the
        statement (the event names it).

        Raises ``ObError``: OB_OP_NOT_ALLOW when a server or root service does not report
        the release yet (each named), when the cluster version is above this RS's release,
        or when ``releases.toml`` lists no upgrade from the cluster version to it; OB_RS_NOT_MASTER
        / OB_ERR_SYS from the fenced transaction. Nothing changes on a refusal."""
        target = self.versions.release
        with self.store.read() as conn:
            before = cluster_version_repo.get(conn)
        if before.line > target.line:
            raise ObError(
                "OB_OP_NOT_ALLOW",
                "END ROLLING UPGRADE",
                detail=(
                    f"the cluster version {before} is above this root service's release "
                    f"{target}: it is never lowered"
                ),
            )
        if before.line == target.line:
            self.versions.set_cluster(before)
            # Again, in case the contract migrations failed after the version rose.
            self._contract()
            return before, before
        if not releases.may_upgrade(before, target):
            raise ObError(
                "OB_OP_NOT_ALLOW",
                "END ROLLING UPGRADE",
                detail=f"releases.toml lists no upgrade from {before} to {target}",
            )
        blocking = self.blockers(target)
        if blocking:
            named = "; ".join(blocking[:MAX_NAMED])
            more = len(blocking) - MAX_NAMED
            raise ObError(
                "OB_OP_NOT_ALLOW",
                "END ROLLING UPGRADE",
                detail=(
                    f"every server and root service must report release {target} first: "
                    f"{named}{f' and {more} more' if more > 0 else ''}"
                ),
            )
        now = self.clock.now_us()
        with self.store.txn() as conn:
            rose = cluster_version_repo.raise_to(conn, target, now)
            if rose:
                event_repo.insert_events(
                    conn,
                    [
                        Event(
                            now,
                            "upgrade",
                            "end_rolling_upgrade",
                            (
                                ("cluster_version", str(target)),
                                ("ori_cluster_version", str(before)),
                                ("build_version", str(target)),
                                ("user", user),
                            ),
                        )
                    ],
                    self.store.rs_addr,
                )
        self.versions.set_cluster(target)
        log.info("cluster version raised from %s to %s (END ROLLING UPGRADE)", before, target)
        self._contract()
        return before, target

    def _contract(self) -> None:
        """Apply the contract migrations (no RS of the previous release may run any more).
        Raises ``ObError(OB_ERR_SYS)`` when they fail (the statement can be run again)."""
        try:
            applied = self.contract()
        except sa.exc.SQLAlchemyError as e:
            raise ObError(
                "OB_ERR_SYS",
                "END ROLLING UPGRADE",
                detail=f"the contract migrations failed: {db_error_summary(e)}",
            ) from None
        if applied:
            log.info("contract migrations applied: %s", ", ".join(applied))

    def parameter_row(self) -> tuple[str, str, str, str, str, str]:
        """SHOW PARAMETERS' row of the cluster version, read from the database:
        ``(name, value, default_value, range, source, info)``; the default is the release a
        new cluster bootstrapped by this RS starts at. Versions in OceanBase's four numbers
        (:func:`releases.oceanbase_form`), as GV$OB_PARAMETERS shows them."""
        with self.store.read() as conn:
            value = cluster_version_repo.get(conn)
        return (
            PARAMETER,
            releases.oceanbase_form(value),
            releases.oceanbase_form(self.versions.release),
            "",
            "__all_cluster_version",
            PARAMETER_INFO,
        )
