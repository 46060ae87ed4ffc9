"""The agent's lease decisions (docs/design/leases.md; observer_agent.lease), driven by a
FakeClock and hand-made LeaseResponse messages: no network, no sleeping."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from obcommon.clock import FakeClock
from obcommon.proto import obrpc_pb2
from observer_agent.settings import DEFAULT_BUILD_VERSION
from tests.unit.observer_agent.helpers import (
    LEASE_US,
    ME,
    RS1,
    RS2,
    make_agent,
    ok_response,
    refusal,
)


def test_heartbeat_expire_time_equal_to_now_is_refused(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, expire_delta=0), RS1) is False
    assert agent.lease_expire_time == 0
    assert agent.identity is None
    assert agent.refused_count == 1


def test_heartbeat_expire_time_one_microsecond_after_now_is_accepted(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, expire_delta=1), RS1) is True
    assert agent.lease_expire_time == clock.now_us() + 1
    assert agent.server_id == 5
    assert agent.rs_server_status == obrpc_pb2.IS_WORKING
    assert agent.registered is True


def test_past_heartbeat_expire_time_is_refused(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    resp = ok_response(clock)
    clock.advance(LEASE_US + 1)
    assert agent.handle_response(resp, RS1) is False


def test_lower_epoch_refused_equal_and_higher_accepted_highest_remembered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, epoch=5), RS1)
    assert agent.highest_epoch == 5
    with caplog.at_level(logging.WARNING, logger="observer_agent"):
        assert not agent.handle_response(ok_response(clock, epoch=4), RS2)
    assert "epoch 4 (incarnation 0) is lower than epoch 5 (incarnation 0)" in caplog.text
    assert agent.handle_response(ok_response(clock, epoch=5), RS1)
    assert agent.handle_response(ok_response(clock, epoch=6), RS1)
    assert agent.highest_epoch == 6
    assert not agent.handle_response(ok_response(clock, epoch=5), RS1)
    assert agent.highest_epoch == 6
    assert agent.build_lease_request().rs_epoch == 6


def test_refusal_does_not_raise_the_epoch(tmp_path: Path) -> None:
    # An RS of another cluster (or a liar) must not be able to fence our own RS out.
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, epoch=2), RS1)
    assert not agent.handle_response(refusal("OB_SERVER_NOT_IN_WHITE_LIST", epoch=99), RS2)
    assert agent.highest_epoch == 2
    assert agent.handle_response(ok_response(clock, epoch=2), RS1)


def test_refusal_is_logged_with_the_oceanbase_error_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Repeated refusals are rate-limited: the first is logged, the next two only
    # counted until a minute has passed.
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    with caplog.at_level(logging.WARNING, logger="observer_agent"):
        for _ in range(3):
            assert not agent.handle_response(refusal("OB_SERVER_NOT_IN_WHITE_LIST"), RS1)
        clock.advance(60_000_000)
        assert not agent.handle_response(refusal("OB_SERVER_NOT_IN_WHITE_LIST"), RS1)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    expected = f"lease refused by {RS1}: ERROR 4630 (HY000): OB_SERVER_NOT_IN_WHITE_LIST: "
    assert len(lines) == 2 and all(m.startswith(expected) for m in lines)
    assert lines[1].endswith("(2 similar suppressed)")
    assert agent.last_refusal is not None and agent.last_refusal.code == -4630
    assert agent.registered is False


def test_rs_server_status_is_tracked(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    agent.handle_response(ok_response(clock), RS1)
    with caplog.at_level(logging.INFO, logger="observer_agent"):
        agent.handle_response(ok_response(clock, status=obrpc_pb2.IS_STOPPED), RS1)
    assert agent.rs_server_status == obrpc_pb2.IS_STOPPED
    assert "IS_STOPPED (was IS_WORKING)" in caplog.text


def test_start_service_time_set_after_first_accept_and_kept(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.build_lease_request().start_service_time == 0
    # Accepted but the gRPC server is not up yet: not in service.
    assert agent.handle_response(ok_response(clock), RS1)
    assert agent.start_service_time == 0
    assert agent.consume_heartbeat_now() is False
    agent.mark_serving()
    clock.advance(1_000)
    started = clock.now_us()
    assert agent.handle_response(ok_response(clock), RS1)
    assert agent.start_service_time == started
    assert agent.consume_heartbeat_now() is True  # the next heartbeat goes at once...
    assert agent.consume_heartbeat_now() is False  # ...once
    assert agent.build_lease_request().start_service_time == started
    # A refusal, an RS restart (new epoch) and later renewals keep it.
    clock.advance(5_000_000)
    agent.handle_response(refusal("OB_RS_NOT_MASTER"), RS1)
    assert agent.handle_response(ok_response(clock, epoch=2), RS2)
    assert agent.start_service_time == started
    assert agent.consume_heartbeat_now() is False


def test_start_service_time_needs_an_identity(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    agent.mark_serving()
    assert agent.handle_response(ok_response(clock, server_id=0, cluster_id=""), RS1)
    assert agent.start_service_time == 0
    assert agent.handle_response(ok_response(clock), RS1)
    assert agent.start_service_time == clock.now_us()


def test_lease_request_fields(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock, build_version="9.9.9", log_disk_size=1 << 30)
    agent.refresh_resources()
    req = agent.build_lease_request()
    assert req.version == 1
    assert (req.zone, req.server, req.sql_port) == ("z1", ME, 3881)
    assert req.build_version == "9.9.9"
    assert req.current_server_time == clock.now_us()
    assert (req.start_service_time, req.server_status, req.rs_epoch, req.cluster_id) == (
        0,
        0,
        0,
        "",
    )
    assert req.resource_info.cpu_total > 0
    assert req.resource_info.log_disk_total == 1 << 30
    clock.advance(7)
    req2 = agent.build_lease_request()
    assert req2.seq > req.seq > 0
    assert req2.current_server_time == req.current_server_time + 7
    assert (
        make_agent(tmp_path / "other").build_lease_request().build_version == DEFAULT_BUILD_VERSION
    )
