"""ApplyReplicas upserts and drops (observer_agent.replicas.apply): drops remove files, lower
terms are ignored, stale epochs refused."""

from __future__ import annotations

from pathlib import Path

from obcommon.bounds import MAX_TERM_JUMP
from obcommon.clock import FakeClock
from obcommon.proto import obrpc_pb2
from observer_agent.agent import Agent
from tests.unit.observer_agent.helpers import run
from tests.unit.observer_agent.replicas.helpers import LS, T, drop, settings, spec, upsert


def test_drop_removes_files_and_lower_term_and_stale_epoch(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = Agent(settings(tmp_path / "data"), clock)
    members = ["127.0.0.1:3001", "127.0.0.1:3002"]
    now = clock.now_us()
    assert agent.handle_response(
        obrpc_pb2.LeaseResponse(
            lease_expire_time=now + 10_000_000,
            heartbeat_expire_time=now + 10_000_000,
            rs_epoch=5,
            cluster_id="c",
            server_id=1,
        ),
        "127.0.0.1:2882",
    )

    async def scenario() -> None:
        m = agent.replicas
        try:
            stale = await m.apply(upsert(spec(members, "", 2), epoch=4), agent.highest_epoch)
            assert stale.error.name == "OB_RS_NOT_MASTER" and "rs_epoch 4" in stale.error.message
            assert list(stale.replicas) == [] and m.keys() == []

            ok = await m.apply(upsert(spec(members, "", 2), epoch=5), agent.highest_epoch)
            assert ok.error.code == 0 and ok.replicas[0].term == 2

            low = await m.apply(upsert(spec(members, members[0], 1, unit_id=9), epoch=5), 5)
            assert low.error.code == 0
            assert (low.replicas[0].term, low.replicas[0].leader, low.replicas[0].unit_id) == (
                2,
                "",
                7,
            )
            refused = await m.apply(drop(epoch=4), 5)
            assert refused.error.name == "OB_RS_NOT_MASTER" and len(refused.replicas) == 1

            bad = await m.apply(upsert(spec(["nonsense"], "", 3)), 0)
            assert bad.error.name == "OB_INVALID_ARGUMENT"
            assert f"tenant {T} ls {LS}" in bad.error.message

            gone = await m.apply(drop(epoch=6), 5)
            assert gone.error.code == 0 and list(gone.replicas) == [] and m.keys() == []
            again = await m.apply(drop(epoch=6), 5)  # dropping an absent replica is a no-op
            assert again.error.code == 0
        finally:
            await m.stop()

    run(scenario())
    assert not (tmp_path / "data" / "replicas" / f"{T}_{LS}").exists()
    assert not (tmp_path / "data" / "clog" / f"{T}_{LS}").exists()
    assert list(agent.build_lease_request().replicas) == []


def test_absurd_terms_and_epochs_are_refused_and_change_nothing(tmp_path: Path) -> None:
    """A term or an epoch more than MAX_TERM_JUMP above the one seen, or above
    2^53, is refused in-band with OB_INVALID_ARGUMENT naming the field, the value and the
    bound; the request changes nothing (not even its other specs). At the bound it is
    accepted."""
    agent = Agent(settings(tmp_path / "data"), FakeClock())
    members = ["127.0.0.1:3001", "127.0.0.1:3002"]

    async def scenario() -> None:
        m = agent.replicas
        try:
            ok = await m.apply(upsert(spec(members, "", 2), epoch=5), 5)
            assert ok.error.code == 0 and ok.replicas[0].term == 2
            before = list(ok.replicas)

            # Epoch: the highest seen (5) + MAX_TERM_JUMP is the last accepted.
            too_far = await m.apply(drop(epoch=5 + MAX_TERM_JUMP + 1), 5)
            assert too_far.error.name == "OB_INVALID_ARGUMENT"
            assert "rs_epoch 1000006" in too_far.error.message
            assert "1000005" in too_far.error.message
            assert list(too_far.replicas) == before
            forged = await m.apply(upsert(spec(members, "", 3), epoch=2**63 - 1), 5)
            assert forged.error.name == "OB_INVALID_ARGUMENT" and list(forged.replicas) == before

            # Spec term: kept 2, so 2 + MAX_TERM_JUMP is the last accepted; a bad spec
            # beside a good one (another LS) stops both.
            other = spec(members, "", 1)
            other.ls_id = LS + 1
            jump = await m.apply(
                upsert(other, spec(members, "", 2 + MAX_TERM_JUMP + 1), epoch=5), 5
            )
            assert jump.error.name == "OB_INVALID_ARGUMENT"
            assert f"term {2 + MAX_TERM_JUMP + 1}" in jump.error.message
            assert list(jump.replicas) == before and m.keys() == [(T, LS)]
            huge = await m.apply(upsert(spec(members, "", 2**63 - 1), epoch=5), 5)
            assert huge.error.name == "OB_INVALID_ARGUMENT" and list(huge.replicas) == before
            # An absent replica: the jump counts from 0.
            new = spec(members, "", MAX_TERM_JUMP + 1)
            new.ls_id = LS + 1
            absent = await m.apply(upsert(new, epoch=5), 5)
            assert absent.error.name == "OB_INVALID_ARGUMENT" and m.keys() == [(T, LS)]

            at_bound = await m.apply(upsert(spec(members, "", 2 + MAX_TERM_JUMP), epoch=5), 5)
            assert at_bound.error.code == 0 and at_bound.replicas[0].term == 2 + MAX_TERM_JUMP
            epoch_at_bound = await m.apply(drop(epoch=5 + MAX_TERM_JUMP), 5)
            assert epoch_at_bound.error.code == 0 and m.keys() == []
        finally:
            await m.stop()

    run(scenario())
