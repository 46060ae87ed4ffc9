"""RS -> agent heartbeat requests (rootservice.servers.heartbeat_requester), built on its own
with a fake agent client and a fake intake."""

from __future__ import annotations

import logging
import threading

import pytest

from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from rootservice.servers.heartbeat_requester import HeartbeatRequester
from tests.support.harness import hb


class FakeAgents:
    """Answers with a lease request, except for the servers in ``down``."""

    def __init__(self, down: set[str]) -> None:
        self.down = down
        self.asked: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def request_heartbeat(self, server: str, epoch: int) -> obrpc_pb2.LeaseRequest:
        with self._lock:
            self.asked.append((server, epoch))
        if server in self.down:
            raise ObError("OB_SERVER_CONNECTION_ERROR", detail=server)
        return hb(server, "z1")


class FakeStore:
    epoch = 7


class FakeIntake:
    def __init__(self) -> None:
        self.got: list[str] = []
        self._lock = threading.Lock()

    def receive_hb(self, req: obrpc_pb2.LeaseRequest) -> obrpc_pb2.LeaseResponse:
        with self._lock:
            self.got.append(req.server)
        if req.server.endswith(":9"):
            raise ObError("OB_SERVER_NOT_IN_WHITE_LIST")
        return obrpc_pb2.LeaseResponse()


def test_answers_go_to_the_intake_and_failures_are_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agents = FakeAgents(down={"10.0.0.1:2"})
    intake = FakeIntake()
    req = HeartbeatRequester(agents, FakeStore(), lambda: intake)  # type: ignore[arg-type]
    assert req.request_heartbeats([]) == 0 and agents.asked == []
    with caplog.at_level(logging.WARNING):
        n = req.request_heartbeats(["10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:9"], parallel=2)
    assert n == 1
    assert sorted(agents.asked) == [("10.0.0.1:1", 7), ("10.0.0.1:2", 7), ("10.0.0.1:9", 7)]
    assert sorted(intake.got) == ["10.0.0.1:1", "10.0.0.1:9"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "failed for 2 of 3 servers" in warnings[0]


def test_a_server_back_before_its_turn_is_not_asked() -> None:
    """Take office asks every server not alive; one whose heartbeat came while the requests
    went out (``unless`` true at its turn) is skipped, the others are asked."""
    agents = FakeAgents(down=set())
    intake = FakeIntake()
    req = HeartbeatRequester(agents, FakeStore(), lambda: intake)  # type: ignore[arg-type]
    back = {"10.0.0.1:2"}
    n = req.request_heartbeats(
        ["10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:3"], parallel=1, unless=back.__contains__
    )
    assert n == 2
    assert sorted(s for s, _ in agents.asked) == ["10.0.0.1:1", "10.0.0.1:3"]
    assert sorted(intake.got) == ["10.0.0.1:1", "10.0.0.1:3"]
