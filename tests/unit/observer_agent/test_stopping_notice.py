"""The agent's side of the gated stopping notice and of its release: the ``server_status``
stopping bit is set only while the RS that answered last said the cluster version is 0.2.0 or
later (a 0.1.0 RS refuses a bit it does not know), and the build version starts with the
release the RS's skew rule reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from obcommon import releases
from obcommon.clock import FakeClock
from obcommon.releases import Release
from tests.unit.observer_agent.helpers import RS1, make_agent, make_settings, ok_response

BIT = releases.STOPPING_STATUS_BIT


def test_no_stopping_bit_before_any_answer_or_from_a_first_release_rs(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.lease.cluster_version == Release(0, 1, 0)
    assert agent.build_lease_request().server_status & BIT == 0
    lease = agent.lease
    # A 0.1.0 RS sends no cluster version.
    resp = ok_response(clock)
    assert agent.handle_response(resp, RS1)
    assert lease.cluster_version == Release(0, 1, 0)
    assert lease.build_lease_request(stopping=True).server_status & BIT == 0


def test_the_stopping_bit_once_the_cluster_version_allows_and_only_when_stopping(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    resp = ok_response(clock)
    resp.cluster_version = "0.2.0"
    assert agent.handle_response(resp, RS1)
    assert agent.lease.build_lease_request(stopping=True).server_status & BIT == BIT
    assert agent.lease.build_lease_request().server_status & BIT == 0
    # Then an RS of the first release answers (a rollback): the gate closes again.
    assert agent.handle_response(ok_response(clock), RS1)
    assert agent.lease.build_lease_request(stopping=True).server_status & BIT == 0


def test_the_build_version_starts_with_the_release(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    assert agent.build_lease_request().build_version == (f"{releases.current()}_ob-rootservice-py")
    assert make_settings(tmp_path, build_version="0.1.0").build_version == "0.1.0"
    with pytest.raises(ValidationError, match="must start with the release"):
        make_settings(tmp_path, build_version="4.2.0.0-ob-rootservice-py")
