"""SWITCH REPLICA {LEADER | FOLLOWER | DEFAULT} (rootservice.tenants.leader_preferences)
against the leader coordinator's primary-zone balancing, with in-memory agents, a FakeClock
and the preferences in ``__all_ls_election_reference_info`` on both databases."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon.errors import ObError
from rootservice.db import election_ref_repo
from rootservice.servers.status import HeartbeatStatus
from tests.support.tenant_parts import A, B, C, D, Layer, build_layer, heartbeat, make_tenant


def _leader(layer: Layer, key: tuple[int, int]) -> str | None:
    return layer.reports.views()[key].leader


def _coordinate(layer: Layer, key: tuple[int, int]) -> int:
    plan = layer.layout.topology().plans[key]
    return layer.leaders.coordinate(plan, layer.reports.views()[key])


def _rows(engine: sa.Engine) -> dict[tuple[int, int], election_ref_repo.LeaderPreference]:
    with engine.connect() as conn:
        return election_ref_repo.load_all(conn)


def _z1(layer: Layer, key: tuple[int, int]) -> str:
    return next(m for m in layer.layout.topology().plans[key].members if m in (A, D))


def test_manual_leader_is_sticky_against_the_primary_zone_until_default(
    layer: Layer, engine: sa.Engine, tmp_path: Path
) -> None:
    tid = make_tenant(layer, ls_count=1, primary="z1")
    key = (tid, 1001)
    z1 = _z1(layer, key)
    assert _leader(layer, key) == z1
    assert layer.preferences.switch_replica(key, C, "LEADER") == f"manual leader {C}"
    assert _leader(layer, key) == C
    # The primary zone z1 would take it back; the manual leader keeps it.
    assert _coordinate(layer, key) == 0
    assert layer.reconciler.reconcile() == 0
    assert _leader(layer, key) == C
    assert _rows(engine)[key] == election_ref_repo.LeaderPreference(C, frozenset())
    # A new RS leader (nothing in memory) reads the preference from the table.
    successor = build_layer(engine, tmp_path / "next")
    successor.agents.replicas = layer.agents.replicas
    heartbeat(successor)
    assert successor.layout.topology().plans[key].manual_leader == C
    assert _coordinate(successor, key) == 0
    # DEFAULT (on the new leader) clears it: the next round follows the primary zone again.
    assert successor.preferences.switch_replica(key, C, "DEFAULT") == "recorded"
    assert _leader(successor, key) == C
    assert key not in _rows(engine)
    assert _coordinate(successor, key) == 1
    assert _leader(successor, key) == z1
    assert dict(successor.events.events[-1].values)["reason"] == "primary zone z1"


def test_manual_leader_takes_the_leadership_back_when_it_can_lead_again(layer: Layer) -> None:
    tid = make_tenant(layer, ls_count=1, primary="z1;z2")
    key = (tid, 1001)
    layer.preferences.switch_replica(key, C, "LEADER")
    layer.servers.get(C).stop_time = 1
    assert _coordinate(layer, key) == 1
    assert _leader(layer, key) == _z1(layer, key)
    layer.servers.get(C).stop_time = 0
    assert _coordinate(layer, key) == 1
    assert _leader(layer, key) == C
    assert dict(layer.events.events[-1].values)["reason"] == (
        "manual leader (SWITCH REPLICA LEADER)"
    )


def test_follower_keeps_the_leader_off_the_server_until_default(
    layer: Layer, engine: sa.Engine
) -> None:
    tid = make_tenant(layer, ls_count=1, primary="z1;z2")
    key = (tid, 1001)
    z1 = _z1(layer, key)
    assert layer.preferences.switch_replica(key, z1, "FOLLOWER") == f"leader moved to {B}"
    assert _leader(layer, key) == B
    assert _coordinate(layer, key) == 0  # z1 has the better priority, but is blacklisted
    assert _rows(engine)[key].blacklist == {z1}
    # The only member able to lead: chosen rather than nobody.
    plan = layer.layout.topology().plans[key]
    assert layer.leaders.choose_leader(plan, layer.reports.views()[key], {B, C}) == z1
    # Leading from a blacklisted server (elected there when nothing else could lead): moved
    # off as soon as another member can lead.
    layer.leaders.switch(plan, layer.reports.views()[key], z1, "test")
    assert _coordinate(layer, key) == 1
    assert _leader(layer, key) == B
    assert "election blacklist" in dict(layer.events.events[-1].values)["reason"]
    layer.preferences.switch_replica(key, z1, "DEFAULT")
    assert key not in _rows(engine)
    assert _coordinate(layer, key) == 1
    assert _leader(layer, key) == z1


def test_follower_on_the_manual_leader_replaces_it(layer: Layer, engine: sa.Engine) -> None:
    tid = make_tenant(layer, ls_count=1, primary="z1")
    key = (tid, 1001)
    layer.preferences.switch_replica(key, C, "LEADER")
    layer.preferences.switch_replica(key, C, "FOLLOWER")
    assert _rows(engine)[key] == election_ref_repo.LeaderPreference("", frozenset({C}))
    assert _leader(layer, key) == _z1(layer, key)
    # LEADER takes the server off the blacklist.
    layer.preferences.switch_replica(key, C, "LEADER")
    assert _rows(engine)[key] == election_ref_repo.LeaderPreference(C, frozenset())


def _refused(layer: Layer, key: tuple[int, int], server: str, role: str) -> ObError:
    with pytest.raises(ObError) as e:
        layer.preferences.switch_replica(key, server, role)
    return e.value


def test_refusals_change_nothing(layer: Layer, engine: sa.Engine) -> None:
    tid = make_tenant(layer, ls_count=1, primary="z1")
    key = (tid, 1001)
    z1 = _z1(layer, key)
    other = A if z1 == D else D
    layer.preferences.switch_replica(key, B, "FOLLOWER")
    before = _rows(engine)
    e = _refused(layer, (tid, 9999), C, "LEADER")
    assert e.name == "OB_ENTRY_NOT_EXIST"
    e = _refused(layer, key, "127.0.0.1:9", "FOLLOWER")
    assert (e.name, e.message) == ("OB_ENTRY_NOT_EXIST", "server not in cluster")
    e = _refused(layer, key, other, "LEADER")  # in the cluster, not a member
    assert e.name == "OB_ENTRY_NOT_EXIST" and "not a member" in e.message
    layer.servers.get(C).hb_status = HeartbeatStatus.LEASE_EXPIRED
    e = _refused(layer, key, C, "LEADER")
    assert (e.name, e.message) == ("OB_OP_NOT_ALLOW", "server not active which is not allowed")
    layer.servers.get(C).hb_status = HeartbeatStatus.ALIVE
    # Both sides of the log-sync threshold.
    threshold = layer.settings.ls_log_sync_threshold
    layer.agents.replicas[z1][key].log_end_ts = threshold + 1
    heartbeat(layer)
    e = _refused(layer, key, C, "LEADER")
    assert e.name == "OB_OP_NOT_ALLOW" and "not in sync" in e.message
    assert _rows(engine) == before
    layer.agents.replicas[z1][key].log_end_ts = threshold
    heartbeat(layer)
    # The switch itself fails (the new leader is unreachable): the preference is undone.
    layer.agents.down = {C}
    e = _refused(layer, key, C, "LEADER")
    assert e.name == "OB_SERVER_CONNECTION_ERROR"
    assert _rows(engine) == before
    assert layer.layout.topology().plans[key].manual_leader == ""
    layer.agents.down = set()
    layer.preferences.switch_replica(key, C, "LEADER")
    assert _leader(layer, key) == C
