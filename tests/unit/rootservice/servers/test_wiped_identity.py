"""RS side: a server that joined (it sent this cluster's id, so its data
directory kept the identity) and comes back with an empty data directory, or with another
server's identity, is refused with OB_STATE_NOT_MATCH naming the fix and never becomes the
old server; a server ADDed that never joined is still accepted. Fake clock, both databases."""

from __future__ import annotations

import pytest

from obcommon.errors import ObError
from rootservice.app import RootService
from rootservice.servers.status import HeartbeatStatus
from tests.support.harness import LEASE, ZA, A, flush, hb, server_row


def _refusal(rs: RootService, **fields: object) -> ObError:
    with pytest.raises(ObError) as e:
        rs.heartbeats.receive_hb(hb(A, ZA, **fields))
    return e.value


def test_a_joined_server_with_a_wiped_data_directory_is_refused(rs: RootService) -> None:
    rs.clock.advance(LEASE)  # past the take-office grace
    rs.heartbeats.receive_hb(hb(A, ZA, server_id=1))  # joined: identity kept
    s = rs.whitelist.get(A)
    assert s is not None and s.with_partition == 1
    flush(rs)
    assert server_row(rs, A)["with_partition"] == 1
    # Its lease expires (start_service_time goes back to 0), then it comes back wiped.
    rs.clock.advance(LEASE + 1)
    rs.lease_checker.run_once()
    s = rs.whitelist.get(A)
    assert (
        s is not None and s.start_service_time == 0 and s.hb_status is HeartbeatStatus.LEASE_EXPIRED
    )
    err = _refusal(rs, cluster_id="", start_service_time=0)
    assert err.name == "OB_STATE_NOT_MATCH" and err.code == -4109
    assert (
        f"server '{A}' is in the cluster as server id 1 but its data directory has no identity "
        f"(wiped?): restore the data directory, or DELETE SERVER '{A}' then ADD SERVER it again"
    ) in err.message
    assert "c0ffee" not in err.message
    # Never re-admitted: not alive, no lease, no cluster id handed out.
    assert s.hb_status is HeartbeatStatus.LEASE_EXPIRED
    # The fact survives a reload of the whitelist from the table (a new RS in office).
    rs.server_loader.load(take_office=False)
    assert rs.whitelist.get(A).with_partition == 1  # type: ignore[union-attr]
    assert _refusal(rs, cluster_id="", start_service_time=0).name == "OB_STATE_NOT_MATCH"


def test_another_servers_identity_is_refused(rs: RootService) -> None:
    err = _refusal(rs, server_id=7)
    assert err.name == "OB_STATE_NOT_MATCH"
    assert f"server '{A}' keeps server id 7 in its data directory" in err.message
    assert "as server id 1" in err.message
    assert rs.heartbeats.receive_hb(hb(A, ZA, server_id=1)).server_id == 1


def test_an_added_server_that_never_joined_is_accepted_empty(rs: RootService) -> None:
    """ADD SERVER then the first heartbeats of an empty agent (no cluster id, not in
    service): accepted and taught the cluster id, even after its lease expired (the
    response of the first one may never have reached it)."""
    resp = rs.heartbeats.receive_hb(hb(A, ZA, cluster_id="", start_service_time=0))
    assert resp.cluster_id == "c0ffee" and resp.server_id == 1
    assert rs.whitelist.get(A).with_partition == 0  # type: ignore[union-attr]
    rs.clock.advance(2 * LEASE)
    rs.lease_checker.run_once()
    resp = rs.heartbeats.receive_hb(hb(A, ZA, cluster_id="", start_service_time=0))
    assert resp.cluster_id == "c0ffee"
