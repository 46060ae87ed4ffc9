"""Which RS the agent tries next (observer_agent.rs_list): round robin, leader hints and the RS
list adopted from responses."""

from __future__ import annotations

from pathlib import Path

from obcommon.clock import FakeClock
from tests.unit.observer_agent.helpers import RS1, RS2, make_agent, ok_response, refusal


def test_round_robin_and_leader_hint(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    assert [agent.next_rs_address() for _ in range(3)] == [RS1, RS2, RS1]
    agent.handle_response(refusal("OB_RS_NOT_MASTER", leader_hint="10.9.9.9:2882"), RS1)
    assert agent.next_rs_address() == "10.9.9.9:2882"
    assert agent.next_rs_address() == RS2  # round robin goes on afterwards
    agent.handle_response(refusal("OB_RS_NOT_MASTER", leader_hint="garbage"), RS1)
    assert agent.next_rs_address() == RS1


def test_rs_list_from_response_is_adopted_with_ours_as_fallback(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, rs_list=["10.0.0.7:2882", "bad"]), RS1)
    assert agent.rs_list == ["10.0.0.7:2882", RS1, RS2]
    assert agent.handle_response(ok_response(clock, rs_list=[]), RS1)
    assert agent.rs_list == ["10.0.0.7:2882", RS1, RS2]
