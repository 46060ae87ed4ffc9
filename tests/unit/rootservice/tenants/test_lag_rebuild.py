"""The ``lag_rebuilder`` task ("a lagging replica rebuilt";
rootservice.tenants.lag_rebuild): a follower still LAGGING ``2 x agent_lag_timeout`` after its
``follower_lagging`` event is dropped and copied afresh from the leader, once per episode,
later on each repeat, never below the LS's majority nor on a LAGGING or SUSPECT server.
In-memory agents, fake clock, SQLite (the database plays no part)."""

from __future__ import annotations

import dataclasses

import pytest

from rootservice.metrics import Metrics
from rootservice.servers.lag_policy import LagState
from rootservice.tenants.lag_rebuild import (
    MAX_DOUBLINGS,
    REASON_LAGGING,
    LagRebuilder,
    forget_after_us,
    rebuild_delay_us,
)
from rootservice.tenants.layer import build_lag_rebuilder
from rootservice.tenants.vocabulary import LsKey
from tests.support.tenant_parts import Layer, heartbeat, make_tenant

S = 1_000_000
Episode = dict[tuple[LsKey, str], int]


@pytest.fixture
def db_url(tmp_path: object) -> str:
    """SQLite only: the rebuild reads no table of its own."""
    return f"sqlite:///{tmp_path}/rs.db"


@dataclasses.dataclass
class Lagging:
    """The lag detector's ``lagging_followers`` as a test sets it."""

    now: Episode = dataclasses.field(default_factory=dict)

    def lagging_followers(self) -> Episode:
        """The followers set LAGGING, with the start of their episode."""
        return dict(self.now)


@dataclasses.dataclass
class Setup:
    layer: Layer
    rebuilder: LagRebuilder
    followers: Lagging
    key: LsKey
    leader: str
    lagging: str
    other: str


def _trail(layer: Layer, key: LsKey, behind: dict[str, int]) -> None:
    """Every replica of ``key`` reports the leader's log end minus ``behind[server]`` (0 when
    not named); the leader's is at 100 s."""
    for server, table in layer.agents.replicas.items():
        if key in table:
            table[key].log_end_ts = 100 * S - behind.get(server, 0)
    heartbeat(layer)


@pytest.fixture
def setup(layer: Layer) -> Setup:
    tid = make_tenant(layer, ls_count=1)
    key = (tid, 1001)
    view = layer.reports.views()[key]
    assert view.leader is not None and len(view.replicas) == 3
    lagging, other = (s for s in sorted(view.replicas) if s != view.leader)
    _trail(layer, key, {lagging: 10 * S})
    followers = Lagging({(key, lagging): layer.clock.monotonic_us()})
    rebuilder = build_lag_rebuilder(
        layer, followers, layer.events, layer.clock, layer.settings, Metrics()
    )
    layer.agents.calls.clear()
    return Setup(layer, rebuilder, followers, key, view.leader, lagging, other)


def _rebuild_events(layer: Layer) -> list[dict[str, object]]:
    return [dict(e.values) for e in layer.events.events if e.event == "rebuild_replica"]


def _delay(s: Setup, prior: int = 0) -> int:
    return rebuild_delay_us(s.layer.settings.agent_lag_timeout, prior)


def test_a_follower_still_lagging_after_the_delay_is_dropped_and_copied_from_the_leader(
    setup: Setup,
) -> None:
    s, layer = setup, setup.layer
    members = sorted(layer.agents.replicas[s.leader][s.key].member_list)
    assert _delay(s) == 2 * layer.settings.agent_lag_timeout == 60 * S
    layer.clock.advance(_delay(s) - 1)
    assert s.rebuilder.run_once() == 0
    assert not layer.agents.calls
    layer.clock.advance(1)
    assert s.rebuilder.run_once() == 1
    # Two calls to the lagging server: the drop, then the copy spec from the leader.
    [drop, copy] = [req for server, req in layer.agents.calls if server == s.lagging]
    assert [(k.tenant_id, k.ls_id) for k in drop.drop] == [s.key] and not drop.upsert
    [spec] = copy.upsert
    assert spec.copy_from == s.leader and sorted(spec.member_list) == members
    # A member throughout: the leader's member list never changed.
    assert sorted(layer.agents.replicas[s.leader][s.key].member_list) == members
    [ev] = _rebuild_events(layer)
    assert ev["server"] == s.lagging and ev["source"] == s.leader
    assert str(ev["reason"]).startswith(
        f"{REASON_LAGGING}: 10.0s behind the leader, 60.0s after follower_lagging"
    )
    assert s.rebuilder.metrics.get("lagging_replica_rebuilds_total") == 1
    assert s.rebuilder.name == "lag_rebuilder"


def test_one_rebuild_per_episode_and_a_longer_wait_for_each_repeat(setup: Setup) -> None:
    s, layer = setup, setup.layer
    layer.clock.advance(_delay(s))
    assert s.rebuilder.run_once() == 1
    # The same episode (the detector's report has not caught up yet): nothing more.
    _trail(layer, s.key, {s.lagging: 10 * S})
    layer.clock.advance(10 * _delay(s))
    assert s.rebuilder.run_once() == 0
    # Each new episode waits twice as long as the one before.
    for prior in (1, 2):
        s.followers.now = {(s.key, s.lagging): layer.clock.monotonic_us()}
        layer.clock.advance(_delay(s, prior) - 1)
        assert s.rebuilder.run_once() == 0, prior
        layer.clock.advance(1)
        assert s.rebuilder.run_once() == 1, prior
        _trail(layer, s.key, {s.lagging: 10 * S})
    assert _delay(s, MAX_DOUBLINGS + 3) == _delay(s, MAX_DOUBLINGS) == 32 * _delay(s)
    reasons = [str(e["reason"]) for e in _rebuild_events(layer)]
    assert len(reasons) == 3 and reasons[2].endswith("rebuild 3")
    # Long enough without a rebuild, the count is forgotten: the first delay again.
    assert s.rebuilder.prior_rebuilds(s.key, s.lagging) == 3
    layer.clock.advance(forget_after_us(layer.settings.agent_lag_timeout))
    assert s.rebuilder.prior_rebuilds(s.key, s.lagging) == 0
    s.followers.now = {(s.key, s.lagging): layer.clock.monotonic_us()}
    layer.clock.advance(_delay(s))
    assert s.rebuilder.run_once() == 1


def test_never_below_the_majority_of_members_healthy_and_in_log_sync(setup: Setup) -> None:
    s, layer = setup, setup.layer
    layer.clock.advance(_delay(s))
    threshold = layer.settings.ls_log_sync_threshold
    # The other follower out of sync by one microsecond: the leader alone is 1 of 3.
    _trail(layer, s.key, {s.lagging: 10 * S, s.other: threshold + 1})
    assert s.rebuilder.run_once() == 0
    assert not layer.agents.calls and not _rebuild_events(layer)
    # ... or in sync but its server LAGGING (its commands unapplied).
    _trail(layer, s.key, {s.lagging: 10 * S, s.other: threshold})
    other = layer.servers.get(s.other)
    assert other is not None
    other.lag = LagState(since_mono=0, reasons=("command",), timeouts=1)
    assert s.rebuilder.run_once() == 0
    assert not layer.agents.calls
    # A SUSPECT member counts (it keeps its replicas); exactly at the
    # threshold it is in sync.
    other.lag = LagState()
    other.suspect = dataclasses.replace(other.suspect, until_mono_us=layer.clock.monotonic_us() + S)
    assert s.rebuilder.run_once() == 1


def test_never_while_its_own_server_is_lagging_stopped_or_suspect(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    s, layer = setup, setup.layer
    layer.clock.advance(_delay(s))
    rec = layer.servers.get(s.lagging)
    assert rec is not None
    rec.lag = LagState(since_mono=0, reasons=("command",), timeouts=1)
    assert s.rebuilder.run_once() == 0
    assert f"on {s.lagging}: its server is LAGGING (command)" in caplog.text
    rec.lag = LagState()
    rec.stop_time = layer.clock.now_us()  # stopped (STOP, DRAIN, maintenance)
    assert s.rebuilder.run_once() == 0
    rec.stop_time = 0
    rec.suspect = dataclasses.replace(rec.suspect, until_mono_us=layer.clock.monotonic_us() + 1)
    assert s.rebuilder.run_once() == 0
    assert not layer.agents.calls
    layer.clock.advance(1)  # SUSPECT ends: rebuilt at once (its delay long past)
    assert s.rebuilder.run_once() == 1


def test_a_refused_drop_is_no_rebuild_and_is_tried_again(setup: Setup) -> None:
    s, layer = setup, setup.layer
    layer.clock.advance(_delay(s))
    layer.agents.down.add(s.lagging)
    assert s.rebuilder.run_once() == 0
    assert not _rebuild_events(layer)
    assert s.key in layer.agents.replicas[s.lagging]
    layer.agents.down.discard(s.lagging)
    assert s.rebuilder.run_once() == 1
    assert s.rebuilder.prior_rebuilds(s.key, s.lagging) == 1


def test_not_the_leader_a_replica_being_built_or_a_closed_office(setup: Setup) -> None:
    s, layer = setup, setup.layer
    layer.clock.advance(_delay(s))
    _trail(layer, s.key, {})  # every member in sync: only the role keeps the leader
    s.followers.now = {(s.key, s.leader): 0}
    assert s.rebuilder.run_once() == 0
    building = layer.agents.replicas[s.lagging][s.key]
    building.in_service, building.copy_from = False, s.leader
    heartbeat(layer, s.lagging)
    s.followers.now = {(s.key, s.lagging): 0}
    assert s.rebuilder.run_once() == 0
    building.in_service, building.copy_from = True, ""
    heartbeat(layer, s.lagging)
    with layer.pause.hold("RECOVER LS"):
        assert s.rebuilder.run_once() == 0
    layer.term.close_service()
    assert s.rebuilder.run_once() == 0
    assert not layer.agents.calls
