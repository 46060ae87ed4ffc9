"""The version skew rule at lease time, the cluster version the lease responses carry and the
stopping notice's receiving side: an in-process RS of this release (0.2.0) with a FakeClock, on
SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon import releases
from obcommon.clock import FakeClock
from obcommon.errors import ObError
from obcommon.releases import Release
from rootservice.app import RootService, StartupError
from rootservice.config import RsSettings
from rootservice.servers.status import STOPPING_BIT, HeartbeatStatus
from tests.support.harness import ZA, ZB, A, B, events, flush, hb, make_rs, server_row


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_rs(db_url, tmp_path)
    yield r
    r.shutdown()


def refusal(rs: RootService, server: str, zone: str, build_version: str) -> ObError:
    with pytest.raises(ObError) as e:
        rs.heartbeats.receive_hb(hb(server, zone, build_version=build_version))
    return e.value


def test_this_rs_is_the_current_release_and_a_migrated_cluster_at_the_first(
    rs: RootService,
) -> None:
    assert rs.versions.release == releases.table()[-1].release == Release(0, 2, 0)
    assert rs.versions.cluster == Release(0, 1, 0)


def test_an_agent_ahead_of_the_leader_is_refused_and_nothing_changes(rs: RootService) -> None:
    before, record = server_row(rs, A), rs.whitelist.get(A)
    err = refusal(rs, A, ZA, "0.3.0_ob-rootservice-py")
    assert err.name == "OB_VERSION_NOT_MATCH" and err.code == -4143
    for word in ("release 0.3.0", "release 0.2.0", "ahead of", "cluster version 0.1.0"):
        assert word in err.message
    assert releases.SKEW_RULE in err.message
    s = rs.whitelist.get(A)
    assert s is not None and s.hb_status is not HeartbeatStatus.ALIVE and s == record
    flush(rs)
    assert server_row(rs, A) == before
    assert rs.metrics.get("lease_version_refused_total") == 1


def test_two_releases_behind_is_refused_one_behind_accepted(rs: RootService) -> None:
    err = refusal(rs, A, ZA, "0.0.9")
    assert "more than one release behind" in err.message
    # 0.1.0's agents: their default build version carries no release of this project.
    resp = rs.heartbeats.receive_hb(hb(A, ZA, build_version="4.2.0.0-ob-rootservice-py"))
    assert resp.lease_expire_time > 0 and resp.cluster_version == "0.1.0"
    resp = rs.heartbeats.receive_hb(hb(B, ZB, build_version="0.1.0"))
    assert resp.lease_expire_time > 0


def test_a_refusal_repeated_is_one_event_and_one_log_line(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(3):
        refusal(rs, A, ZA, "0.3.0")
    refusal(rs, B, ZB, "0.3.0")
    flush(rs)
    evs = events(rs, "version_refused")
    assert [(e["value1"], e["value3"], e["value4"]) for e in evs] == [
        (A, "0.3.0", "0.2.0"),
        (B, "0.3.0", "0.2.0"),
    ]
    assert "OB_VERSION_NOT_MATCH" not in evs[0]["extra_info"]
    assert "ahead of" in evs[0]["extra_info"]
    assert rs.metrics.get("lease_version_refused_total") == 4
    assert rs.heartbeats_refused_total == 0  # counted by the lease servicer, not called here
    assert sum("lease of" in r.getMessage() for r in caplog.records) == 2


def test_below_the_cluster_version_is_refused_at_it_accepted(rs: RootService) -> None:
    rs.versions.set_cluster(Release(0, 2, 0))
    err = refusal(rs, A, ZA, "0.1.0")
    assert "below the cluster version 0.2.0" in err.message
    resp = rs.heartbeats.receive_hb(hb(A, ZA, build_version="0.2.0_ob-rootservice-py"))
    assert resp.cluster_version == "0.2.0"


def test_the_stopping_notice_is_taken_whatever_the_rs_cluster_version(rs: RootService) -> None:
    # The receiver never refuses for its own gate: the cluster version here is still 0.1.0.
    assert rs.versions.cluster == Release(0, 1, 0)
    resp = rs.heartbeats.receive_hb(hb(A, ZA, build_version="0.2.0", server_status=STOPPING_BIT))
    assert not resp.HasField("error") or resp.error.code == 0
    flush(rs)
    assert [e["value1"] for e in events(rs, "server_stopping")] == [A]
    rs.heartbeats.receive_hb(hb(A, ZA, build_version="0.2.0"))
    flush(rs)
    assert len(events(rs, "server_stopping")) == 1


def test_a_root_service_two_releases_from_a_running_one_does_not_start(
    rs: RootService, db_url: str, tmp_path: Path
) -> None:
    def other_rs() -> RootService:
        settings = RsSettings(data_dir=tmp_path / "other", db_url=db_url, rpc_addr="127.0.0.1:2882")
        return RootService(settings, FakeClock(), start_scheduler=False)

    def member(release: str) -> None:
        with rs.store.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO __all_rootservice_member "
                    "(svr_ip, svr_port, last_seen_time, build_version) "
                    "VALUES ('127.0.0.9', 2882, :t, :v)"
                ),
                {"t": FakeClock().now_us(), "v": release},
            )

    member("0.4.0")
    with pytest.raises(StartupError) as e:
        other_rs().open()
    for word in ("OB_VERSION_NOT_MATCH", "release 0.2.0", "127.0.0.9:2882 of release 0.4.0"):
        assert word in str(e.value)
    with rs.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE __all_rootservice_member SET build_version = '0.3.0'"))
    ok = other_rs()
    ok.open()
    ok.shutdown()
