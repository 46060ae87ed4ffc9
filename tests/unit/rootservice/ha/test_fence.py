"""The RS's side of the fencing token (rootservice.ha.fence and the
election): take office above every reported epoch, re-take the row when an agent reports a
token ours does not follow, notice the lease row going back, and judge the PostgreSQL
server (system id, timeline). In-process RS on a FakeClock, SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon.clock import FakeClock
from obcommon.errors import ObError
from obcommon.fencing import FenceToken
from rootservice.app import RootService
from rootservice.db import lease_repo
from rootservice.db.engine import _without_server
from rootservice.db.server_identity import ServerIdentity
from rootservice.ha.fence import EpochFence, choose_epoch
from tests.support.harness import ZA, A, error_name, events, hb, make_rs

LEASE = 10_000_000


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_rs(db_url, tmp_path)
    try:
        yield r
    finally:
        r.shutdown()


def lease(rs: RootService) -> lease_repo.RsLease:
    with rs.store.read() as conn:
        return lease_repo.read_lease(conn)


def test_choose_epoch_is_above_the_row_and_every_report() -> None:
    assert choose_epoch(4, []) == 5
    assert choose_epoch(4, [2, 3]) == 5
    assert choose_epoch(4, [9, 3]) == 10


def test_a_conflicting_report_is_refused_and_the_leader_raises_its_epoch(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    own = rs.term.token()
    assert own.epoch > 0 and own.incarnation > 0 and lease(rs).incarnation == own.incarnation
    # Our own token, or a lower one, reported back: nothing to do.
    rs.heartbeats.receive_hb(hb(A, ZA, rs_epoch=own.epoch, rs_incarnation=own.incarnation))
    assert not rs.fence.pending()
    # A server outside the whitelist cannot make it raise anything.
    stranger = hb("127.0.0.1:3999", ZA, rs_epoch=own.epoch + 3)
    assert error_name(rs.heartbeats.receive_hb, stranger) == "OB_SERVER_NOT_IN_WHITE_LIST"
    assert not rs.fence.pending()
    # The agent obeyed another root service with our epoch (the store went back in time).
    other = own.incarnation ^ 0x55
    conflict = hb(A, ZA, rs_epoch=own.epoch, rs_incarnation=other)
    assert error_name(rs.heartbeats.receive_hb, conflict) == "OB_RS_NOT_MASTER"
    assert rs.fence.pending()
    with caplog.at_level(logging.ERROR, logger="rootservice.ha"):
        assert rs.election.run_once()
    new = rs.term.token()
    assert new.epoch == own.epoch + 1 and new.incarnation not in (own.incarnation, other)
    row = lease(rs)
    assert (row.epoch, row.incarnation) == (new.epoch, new.incarnation)
    assert f"epoch went back from {own.epoch} to {own.epoch}" in caplog.text
    assert "raised the epoch" in caplog.text
    assert rs.metrics.counters()["rs_epoch_raised_total"] == 1
    (ev,) = events(rs, "epoch_went_back")
    assert (ev["value1"], ev["value2"]) == (str(own.epoch), str(own.epoch))
    # The same agent is answered now, with the new token.
    resp = rs.heartbeats.receive_hb(conflict)
    assert (resp.rs_epoch, resp.rs_incarnation) == (new.epoch, new.incarnation)


def test_a_report_judged_against_the_token_before_a_retake_raises_nothing_more(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    """Two requests of one agent carry the same conflicting token; the second is judged
    against the old token while the first's re-take runs. One report, one raise: the
    second demand is answered by the re-take already made (seen in a real run: 2 -> 3 -> 4)."""
    own = rs.term.token()
    other = own.incarnation ^ 0x55
    reported = FenceToken(own.epoch, other)
    assert rs.fence.report(A, reported, own)
    assert rs.election.run_once()
    raised = rs.term.token()
    assert raised.epoch == own.epoch + 1
    # The late one: judged against the token the RS held before the re-take.
    assert rs.fence.report(A, reported, own) and rs.fence.pending()
    with caplog.at_level(logging.INFO, logger="rootservice.ha"):
        assert rs.election.run_once()
    assert rs.term.token() == raised
    assert (lease(rs).epoch, lease(rs).incarnation) == (raised.epoch, raised.incarnation)
    assert not rs.fence.pending()
    assert rs.metrics.counters()["rs_epoch_raised_total"] == 1
    assert "already answered by a re-take" in caplog.text
    # A report that does conflict with the raised token still raises it.
    assert rs.fence.report(A, FenceToken(raised.epoch, raised.incarnation ^ 0x55), raised)
    assert rs.election.run_once()
    assert rs.term.epoch == raised.epoch + 1
    assert rs.metrics.counters()["rs_epoch_raised_total"] == 2


def test_take_office_goes_above_every_reported_epoch(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    epoch = rs.term.epoch
    rs.election.release()
    # A standby hears agents that obeyed epoch epoch + 5 (lost by the store).
    rs.fence.note_epoch(epoch + 5)
    with caplog.at_level(logging.ERROR, logger="rootservice.ha"):
        assert rs.election.run_once()
    assert rs.term.epoch == lease(rs).epoch == epoch + 6
    assert f"epoch went back from {epoch + 5} to {epoch}" in caplog.text
    assert rs.metrics.counters()["rs_epoch_went_back_total"] == 1


def test_the_leader_notices_the_lease_row_going_back(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    epoch = rs.term.epoch
    # The store lost the last epoch bump (an asynchronous standby promoted).
    with rs.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE __all_service_epoch SET value = value - 1"))
    with caplog.at_level(logging.ERROR, logger="rootservice.ha"):
        rs.election.run_once()
    assert f"epoch went back from {epoch} to {epoch - 1}" in caplog.text
    # It stepped down and takes office again above the epoch it held, not with it again.
    assert rs.election.run_once()
    assert rs.term.epoch == epoch + 1


def test_judge_server_refuses_a_lower_timeline_or_another_system() -> None:
    clock = FakeClock()
    held: list[int] = []
    fence = EpochFence(clock, lambda: LEASE, on_primary_change=held.append)
    assert fence.judge_server(None) is None
    assert fence.judge_server(ServerIdentity(7, 1, "p1")) is None
    assert not fence.holding(clock.monotonic_us()) and held == []
    assert fence.judge_server(ServerIdentity(7, 2, "p2")) is None  # a failover
    assert held == [clock.monotonic_us() + LEASE] and fence.holding(clock.monotonic_us())
    why = fence.judge_server(ServerIdentity(7, 1, "p1"))
    assert why is not None and "below timeline 2" in why
    why = fence.judge_server(ServerIdentity(8, 3, "p3"))
    assert why is not None and "another PostgreSQL system" in why
    clock.advance(LEASE)
    assert not fence.holding(clock.monotonic_us())
    assert fence.metrics.counters()["rs_db_servers_refused_total"] == 2


def test_fenced_writes_refused_through_a_server_below_the_timeline_seen(rs: RootService) -> None:
    if rs.store.engine.dialect.name != "postgresql":
        pytest.skip("SQLite has no timeline")
    seen = rs.fence.seen
    assert seen is not None and seen.timeline >= 1
    assert lease(rs).pg_timeline == seen.timeline
    # Another server of the same system was promoted since (the connections we hold reach
    # the old one).
    rs.fence.seen = dataclasses.replace(seen, timeline=seen.timeline + 1, server="elsewhere")
    epoch = rs.term.epoch
    with pytest.raises(ObError) as e, rs.store.txn():
        pass
    assert e.value.name == "OB_RS_NOT_MASTER" and "below timeline" in e.value.message
    assert rs.term.epoch == 0 and rs.store.rejected_writes == 1
    # No new term through that server either.
    assert not rs.election.run_once() and rs.term.epoch == 0
    rs.fence.seen = seen  # (the fixture's shutdown reads the tables)
    assert lease(rs).epoch == epoch


def test_a_refused_server_is_skipped_in_a_multi_host_list() -> None:
    params = {"host": "h1,h2", "port": "1,2", "dbname": "d"}
    assert _without_server(params, "h1", 1) == {"host": "h2", "port": "2", "dbname": "d"}
    assert _without_server({"host": "h1,h2", "port": "5"}, "h2", 5) == {"host": "h1", "port": "5"}
    assert _without_server({"host": "h1", "port": "1"}, "h1", 1) is None
    assert _without_server(params, "h3", 1) is None


def test_a_report_below_our_token_is_no_conflict() -> None:
    fence = EpochFence(FakeClock(), lambda: LEASE)
    own = FenceToken(5, 1)
    assert not fence.report("a", FenceToken(4, 9), own)
    assert not fence.report("a", FenceToken(5, 1), own)
    assert not fence.report("a", FenceToken(9, 9), FenceToken(0, 0))  # a standby: noted only
    assert fence.highest_known == 9 and not fence.pending()
    # A forged epoch far above everything known is not believed.
    assert not fence.report("a", FenceToken(10**9, 9), own) and fence.highest_known == 9
    assert fence.report("a", FenceToken(5, 2), own) and fence.take_demand() == (
        FenceToken(5, 2),
        "a",
    )


def test_the_server_seen_survives_a_restart_of_the_rs(tmp_path: Path) -> None:
    state = tmp_path / "rs" / "metadata_server.json"
    first = EpochFence(FakeClock(), lambda: LEASE, state_file=state)
    assert first.judge_server(ServerIdentity(7, 1, "p1")) is None
    assert first.judge_server(ServerIdentity(7, 2, "p2")) is None
    again = EpochFence(FakeClock(), lambda: LEASE, state_file=state)
    assert again.seen == ServerIdentity(7, 2, "p2")
    # The old primary, listed first in the URL and restarted writable, is refused at once.
    assert again.judge_server(ServerIdentity(7, 1, "p1")) is not None
