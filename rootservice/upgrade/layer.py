"""The upgrade statements' objects wired together for the composition root
(:class:`rootservice.app.wiring.RsComponents`): END ROLLING UPGRADE (:class:`Finalize`, with
the contract migrations it applies) and BEGIN / END [ROLLING] UPGRADE with their pre-checks
(:class:`UpgradeMode`, :class:`UpgradeChecks`). Nothing is read until a statement runs.
"""

from __future__ import annotations

from collections.abc import Callable

from obcommon.clock import Clock
from rootservice.config import RsSettings
from rootservice.db import schema_upgrade
from rootservice.ha.store import MetaStore
from rootservice.servers.whitelist import Whitelist
from rootservice.tenants.layer import TenantLayer
from rootservice.upgrade.checks import UpgradeChecks
from rootservice.upgrade.finalize import Finalize
from rootservice.upgrade.mode import UpgradeMode
from rootservice.upgrade.versions import Versions


def build_upgrade(
    versions: Versions,
    whitelist: Whitelist,
    store: MetaStore,
    clock: Clock,
    settings: RsSettings,
    tenants: TenantLayer,
    lease_time: Callable[[], int],
) -> tuple[Finalize, UpgradeMode]:
    """``(finalize, mode)``; ``lease_time()`` (µs) is how recently a root service must have
    run an election round to count as running. The contract migrations run on
    ``store.engine`` as it is when END ROLLING UPGRADE runs (the RS opens it after
    wiring). Raises nothing."""
    finalize = Finalize(
        versions,
        whitelist,
        store,
        clock,
        lease_time,
        contract=lambda: schema_upgrade.contract(store.engine),
    )
    checks = UpgradeChecks(
        servers=whitelist,
        views=tenants.reports,
        layout=tenants.layout,
        store=store,
        settings=settings,
    )
    return finalize, UpgradeMode(versions, finalize, checks, store, clock)
