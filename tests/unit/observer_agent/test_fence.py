"""The agent's fencing token (observer_agent.fence): the highest
``(rs_epoch, rs_incarnation)`` obeyed, from lease answers and ApplyReplicas alike, reported in
lease requests and kept in DATA_DIR across restarts. FakeClock, hand-made messages."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from obcommon.clock import FakeClock
from obcommon.fencing import FenceToken
from obcommon.proto import obrpc_pb2
from observer_agent.agent import Agent
from observer_agent.fence import TOKEN_FILE, TokenKeeper
from observer_agent.identity import IdentityError
from observer_agent.service import ObserverServicer
from tests.unit.observer_agent.helpers import RS1, RS2, make_agent, ok_response, run

A, B = 0x1111, 0x2222


def answer(clock: FakeClock, epoch: int, incarnation: int) -> obrpc_pb2.LeaseResponse:
    resp = ok_response(clock, epoch=epoch)
    resp.rs_incarnation = incarnation
    return resp


def apply(agent: Agent, epoch: int, incarnation: int) -> obrpc_pb2.ApplyReplicasResponse:
    req = obrpc_pb2.ApplyReplicasRequest(rs_epoch=epoch, rs_incarnation=incarnation)
    return run(ObserverServicer(agent).ApplyReplicas(req, None))


def test_same_epoch_of_another_incarnation_is_refused_lease_and_command(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(answer(clock, 5, A), RS1)
    # A second root service with epoch 5 (a metadata store that went back in time).
    assert not agent.handle_response(answer(clock, 5, B), RS2)
    refused = apply(agent, 5, B)
    assert refused.error.name == "OB_RS_NOT_MASTER"
    assert "reuses the epoch" in refused.error.message and f"{B:x}" in refused.error.message
    assert agent.tokens.highest == FenceToken(5, A)
    # The one it obeyed still is; a lower epoch is not; a higher one is, and becomes the highest.
    assert apply(agent, 5, A).error.code == 0
    assert apply(agent, 4, A).error.name == "OB_RS_NOT_MASTER"
    assert apply(agent, 6, B).error.code == 0
    assert not agent.handle_response(answer(clock, 5, A), RS1)
    req = agent.build_lease_request()
    assert (req.rs_epoch, req.rs_incarnation) == (6, B)


def test_a_command_teaches_the_token_before_any_lease(tmp_path: Path) -> None:
    # Two root services with epoch 7: whichever the agent obeys first, it never obeys the
    # other, even when the command arrives before any lease answer.
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert apply(agent, 7, B).error.code == 0
    assert apply(agent, 7, A).error.name == "OB_RS_NOT_MASTER"
    assert not agent.handle_response(answer(clock, 7, A), RS1)


def test_the_token_survives_a_restart(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(answer(clock, 9, A), RS1)
    kept = json.loads((tmp_path / "data" / TOKEN_FILE).read_text())
    assert kept == {"epoch": 9, "incarnation": A}

    again = make_agent(tmp_path, clock)
    assert again.highest_epoch == 9
    req = again.build_lease_request()
    assert (req.rs_epoch, req.rs_incarnation) == (9, A)
    assert apply(again, 9, B).error.name == "OB_RS_NOT_MASTER"
    assert apply(again, 8, A).error.name == "OB_RS_NOT_MASTER"


def test_an_unreadable_token_file_stops_the_agent(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / TOKEN_FILE).write_text("{not json")
    with pytest.raises(IdentityError, match=TOKEN_FILE):
        make_agent(tmp_path)


def test_an_absurd_epoch_is_neither_obeyed_nor_learnt(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(answer(clock, 3, A), RS1)
    assert apply(agent, 2**62, A).error.name == "OB_INVALID_ARGUMENT"
    assert agent.tokens.highest == FenceToken(3, A)


def test_every_incarnation_obeyed_is_logged_even_of_one_epoch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The log is what the failover tests read to check that no two root services were
    # obeyed with one epoch: a token obeyed past the rule (obey without judge) must show.
    keeper = TokenKeeper(tmp_path, logging.getLogger("fence-test"))
    with caplog.at_level(logging.INFO, logger="fence-test"):
        keeper.obey(FenceToken(5, A))
        keeper.obey(FenceToken(5, A))  # the kept token again: nothing to say
        keeper.obey(FenceToken(5, B))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"obeying the root service of epoch 5 (incarnation {A:x}) (was epoch 0 (incarnation 0))",
        f"obeying the root service of epoch 5 (incarnation {B:x}) "
        f"(was epoch 5 (incarnation {A:x}))",
    ]
    # The highest (and the file) stay the first incarnation's.
    assert keeper.highest == FenceToken(5, A)
    assert json.loads((tmp_path / TOKEN_FILE).read_text())["incarnation"] == A
