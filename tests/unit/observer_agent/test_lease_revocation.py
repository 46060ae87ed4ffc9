"""The agent's copy of the revocation list: taken from accepted lease
answers whose version differs from the one it holds, sent back in every request, shared
with its peer gate; refused answers teach it nothing. FakeClock, hand-made responses."""

from __future__ import annotations

from pathlib import Path

from obcommon.clock import FakeClock
from obcommon.security.revocation import list_version
from tests.unit.observer_agent.helpers import RS1, make_agent, ok_response, refusal


def test_the_list_rides_on_accepted_answers(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    revoked = agent.peer_gate.revoked
    assert agent.lease.revoked is revoked  # one set: what the lease learns, the gate refuses
    assert agent.build_lease_request().revocation_version == 0

    version = list_version(["a1", "b2"])
    resp = ok_response(clock)
    resp.revocation_version = version
    resp.revoked_serials.extend(["a1", "b2"])
    assert agent.handle_response(resp, RS1)
    assert revoked.serials == {"a1", "b2"} and revoked.version == version
    assert agent.build_lease_request().revocation_version == version

    # Unchanged: the RS sends the version only, and the list stays.
    same = ok_response(clock)
    same.revocation_version = version
    assert agent.handle_response(same, RS1)
    assert revoked.serials == {"a1", "b2"}

    # A refused answer (another RS's in-band error) changes nothing, whatever it carries.
    bad = refusal("OB_RS_NOT_MASTER")
    bad.revocation_version = 7
    assert not agent.handle_response(bad, RS1)
    assert revoked.serials == {"a1", "b2"}

    # The list emptied (version 0, no serials).
    assert agent.handle_response(ok_response(clock), RS1)
    assert revoked.serials == frozenset() and revoked.version == 0
