"""The checks of the upgrade statements on the tenant layer's in-memory parts (FakeClock,
SQLite and PostgreSQL): BEGIN UPGRADE's pre-checks (servers ACTIVE, one release, every log
stream led and in sync, no change in progress) and STOP ZONE's zone order, each on both
sides of its boundary."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon.releases import Release
from rootservice.db import drain_repo, job_repo
from rootservice.servers.status import AdminStatus, HeartbeatStatus
from rootservice.upgrade.checks import UpgradeChecks
from tests.support.tenant_parts import A, B, C, D, Layer, build_layer, heartbeat, make_tenant

RS = ("127.0.0.1", 2881)
OLD = "0.1.0_ob-rootservice-py"
NEW = "0.2.0_ob-rootservice-py"


@pytest.fixture
def layer(engine: sa.Engine, tmp_path: Path) -> Layer:
    tl = build_layer(engine, tmp_path)
    for s in tl.servers.by_key.values():
        s.build_version = OLD
    make_tenant(tl)
    heartbeat(tl)
    return tl


def checks(tl: Layer) -> UpgradeChecks:
    return UpgradeChecks(
        servers=tl.servers, views=tl.reports, layout=tl.layout, store=tl.store, settings=tl.settings
    )


def trail(tl: Layer, server: str, behind_us: int) -> None:
    """Every replica at log time 10 s but those on ``server``, ``behind_us`` behind."""
    for host, replicas in tl.agents.replicas.items():
        for r in replicas.values():
            r.log_end_ts = 10_000_000 - (behind_us if host == server else 0)
    heartbeat(tl)


def follower_of_every_ls(tl: Layer) -> str:
    leaders = {v.leader for v in tl.reports.views().values()}
    return next(s for s in (B, C) if s not in leaders)


def test_a_healthy_cluster_passes(layer: Layer) -> None:
    assert checks(layer).begin_blockers() == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda s: setattr(s, "hb_status", HeartbeatStatus.LEASE_EXPIRED), "not ACTIVE"),
        (lambda s: setattr(s, "stop_time", 1), "stopped or isolated"),
        (lambda s: setattr(s, "start_service_time", 0), "has not started service"),
        (lambda s: setattr(s, "admin_status", AdminStatus.DELETING), "being deleted"),
        (lambda s: setattr(s, "draining", True), "being drained"),
    ],
)
def test_every_server_must_be_active(layer: Layer, change: object, named: str) -> None:
    change(layer.servers.by_key[C])  # type: ignore[operator]
    [blocker] = checks(layer).begin_blockers()
    assert f"'{C}'" in blocker and named in blocker


def test_one_release_among_the_agents(layer: Layer) -> None:
    layer.servers.by_key[D].build_version = NEW
    [blocker] = checks(layer).begin_blockers()
    assert (
        "more than one release" in blocker
        and "0.1.0 on 3" in blocker
        and f"0.2.0 on 1 ({D}" in blocker
    )
    for s in layer.servers.by_key.values():
        s.build_version = NEW  # all on the new one: one release again
    assert checks(layer).begin_blockers() == []


def test_followers_within_the_sync_threshold(layer: Layer) -> None:
    threshold = layer.settings.ls_log_sync_threshold
    follower = follower_of_every_ls(layer)
    trail(layer, follower, threshold)  # exactly at the threshold: in sync
    assert checks(layer).begin_blockers() == []
    trail(layer, follower, threshold + 1)
    blockers = checks(layer).begin_blockers()
    assert len(blockers) == 2  # one per log stream of t1
    assert all(f"on '{follower}' is not in sync with its leader" in b for b in blockers)


def test_every_log_stream_needs_a_leader(layer: Layer) -> None:
    for server in layer.agents.replicas:
        for r in layer.agents.replicas[server].values():
            r.role = 2  # FOLLOWER everywhere: nobody leads
    heartbeat(layer)
    blockers = checks(layer).begin_blockers()
    assert blockers and all(b.endswith("has no leader") for b in blockers)


def test_no_change_in_progress(layer: Layer) -> None:
    now = layer.clock.now_us()
    with layer.store.txn() as conn:
        job = job_repo.create_job(conn, "DELETE_SERVER", "127.0.0.1", 3001, now, RS)
    [blocker] = checks(layer).begin_blockers()
    assert blocker == f"DELETE_SERVER job {job} is in progress"
    with layer.store.txn() as conn:
        job_repo.finish_job(conn, job, "SUCCESS", now)
        ip, port = B.rsplit(":", 1)
        drain_repo.start_drain(conn, ip, int(port), now, now + 1, "127.0.0.1:2881")
    assert A == "127.0.0.1:3001"
    [blocker] = checks(layer).begin_blockers()
    assert blocker == f"server '{B}' is being drained (DRAIN SERVER in progress)"
    with layer.store.txn() as conn:
        drain_repo.end_drain(conn, ip, int(port), now, drain_repo.CANCELED, "", "127.0.0.1:2881")
        conn.execute(
            sa.text(
                "UPDATE __all_unit SET migrate_from_svr_ip = '127.0.0.1', "
                "migrate_from_svr_port = 3004 WHERE zone = 'z1'"
            )
        )
    [blocker] = checks(layer).begin_blockers()
    assert "is migrating from '127.0.0.1:3004'" in blocker


def test_the_zone_order(layer: Layer) -> None:
    c = checks(layer)
    new = Release(0, 2, 0)
    assert c.zone_blockers("z2", new) == []  # every zone on the old release: the first one
    layer.servers.by_key[D].build_version = NEW  # z1 half-upgraded
    [blocker] = c.zone_blockers("z2", new)
    assert blocker.startswith("zone 'z1' is half-upgraded") and A in blocker
    assert c.zone_blockers("z1", new) == []  # its own zone never blocks
    layer.servers.by_key[A].build_version = NEW
    assert c.zone_blockers("z2", new) == []  # z1 done
    layer.servers.by_key[C].hb_status = HeartbeatStatus.LEASE_EXPIRED
    [blocker] = c.zone_blockers("z2", new)
    assert f"'{C}' is not ACTIVE" in blocker
    layer.servers.by_key[C].hb_status = HeartbeatStatus.ALIVE
    follower = follower_of_every_ls(layer)
    other = next(z for s, z in [(B, "z2"), (C, "z3")] if s == follower)
    trail(layer, follower, layer.settings.ls_log_sync_threshold + 1)
    assert c.zone_blockers(other, new) == []  # its own replicas may trail: it stops next
    assert all("is not in sync" in b for b in c.zone_blockers("z1", new))
    assert c.zone_blockers("z1", new)
