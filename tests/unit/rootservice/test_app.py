"""RootService life cycle around the server layer: BOOTSTRAP, deposition, ALTER SYSTEM SET
(docs/design/ha.md). Unit tests on an in-process RS with a FakeClock, on SQLite and
PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from rootservice.app import RootService
from rootservice.bootstrap import BootstrapItem
from tests.support.harness import (
    SEEDED,
    error_name,
    hb,
    make_rs,
    server_row,
)

A, ZA = SEEDED[0]  # 127.0.0.1:3001 in z1
B, ZB = SEEDED[1]  # z2
C, ZC = SEEDED[2]  # z3
D, ZD = SEEDED[3]  # z1


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> RootService:
    r = make_rs(db_url, tmp_path)
    yield r
    r.shutdown()


def test_bootstrap_refusals(db_url: str, tmp_path: Path) -> None:

    rs = make_rs(db_url, tmp_path, seed=False)
    try:
        assert error_name(rs.bootstrap.run, ()) == "OB_INVALID_ARGUMENT"
        dup_zone = (
            BootstrapItem(None, "z1", "127.0.0.1:1"),
            BootstrapItem(None, "z1", "127.0.0.1:2"),
        )
        assert error_name(rs.bootstrap.run, dup_zone) == "OB_PARTITION_ZONE_DUPLICATED"
        dup_server = (
            BootstrapItem(None, "z1", "127.0.0.1:1"),
            BootstrapItem(None, "z2", "127.0.0.1:1"),
        )
        assert error_name(rs.bootstrap.run, dup_server) == "OB_INVALID_ARGUMENT"
        assert (
            error_name(rs.bootstrap.run, (BootstrapItem(None, "z1", "nohost"),))
            == "OB_INVALID_ARGUMENT"
        )
        assert (
            error_name(rs.bootstrap.run, (BootstrapItem(None, "z1", "127.0.0.1:1"),))
            == "OB_SERVER_CONNECTION_ERROR"
        )
        assert not rs.identity.bootstrapped and rs.term.state.value == "WAIT_BOOTSTRAP"
        assert rs.whitelist.counts()["servers"] == 0 and rs.zones.all() == []
    finally:
        rs.shutdown()
    rs = make_rs(db_url, tmp_path / "again")
    try:
        assert (
            error_name(rs.bootstrap.run, (BootstrapItem(None, "z1", "127.0.0.1:1"),))
            == "OB_INIT_TWICE"
        )
    finally:
        rs.shutdown()


def test_a_newer_epoch_deposes_the_old_rs(db_url: str, tmp_path: Path) -> None:
    old = make_rs(db_url, tmp_path / "a")
    new = make_rs(db_url, tmp_path / "b", seed=False)
    try:
        new.identity.bootstrapped = True
        new.office.do_restart()
        assert new.store.epoch == old.store.epoch + 1
        assert error_name(old.server_admin.delete_servers, [A], None) == "OB_RS_NOT_MASTER"
        assert old.term.state.value == "NOT_MASTER"
        assert error_name(old.heartbeats.receive_hb, hb(A, ZA)) == "OB_RS_NOT_MASTER"
        assert server_row(new, A)["status"] == "INACTIVE"
        new.server_admin.delete_servers([A], None)
        assert server_row(new, A)["status"] == "DELETING"
    finally:
        old.shutdown()
        new.shutdown()


def test_set_parameters_ranges_and_invariants(rs: RootService) -> None:
    assert (
        error_name(rs.parameters.set, (("lease_time", "2s"),)) == "OB_INVALID_CONFIG"
    )  # not > heartbeat_interval
    rs.parameters.set((("lease_time", "3s"),))
    assert rs.settings.lease_time == 3_000_000
    rs.parameters.set((("lease_time", "5m"),))
    assert error_name(rs.parameters.set, (("lease_time", "301s"),)) == "OB_INVALID_CONFIG"
    assert error_name(rs.parameters.set, (("lease_time", "ten"),)) == "OB_INVALID_CONFIG"
    assert (
        error_name(rs.parameters.set, (("no_such_parameter", "1s"),)) == "OB_ERR_SYS_CONFIG_UNKNOWN"
    )
    assert (
        error_name(rs.parameters.set, (("server_permanent_offline_time", "19s"),))
        == "OB_INVALID_CONFIG"
    )
    # All or nothing: the second item is bad, so the first is not applied.
    assert (
        error_name(rs.parameters.set, (("lease_time", "20s"), ("rpc_timeout", "0s")))
        == "OB_INVALID_CONFIG"
    )
    assert rs.settings.lease_time == 300_000_000
    rs.parameters.set((("server_permanent_offline_time", "20m"), ("lease_time", "10s")))
    assert rs.settings.server_permanent_offline_time == 1_200_000_000
