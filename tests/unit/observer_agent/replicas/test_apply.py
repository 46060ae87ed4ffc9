"""ApplyReplicas upserts and drops (observer_agent.replicas.apply): drops remove files, lower
terms are ignored, stale epochs refused."""

from __future__ import annotations

from pathlib import Path

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
