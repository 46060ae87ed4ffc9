"""Server transitions logged at INFO with the server and the reason, once per transition and
never per heartbeat, on a real RS with a fake clock."""

from __future__ import annotations

import logging

import pytest

from rootservice.app import RootService
from rootservice.servers.events import log as transitions_log
from tests.support.harness import LEASE, OFFLINE, SEEDED, A, D, heartbeat_all

S = 1_000_000


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, str]]:
    return [
        (r.server, r.event, r.reason)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == transitions_log.name
    ]


def test_online_lease_expire_permanent_offline_and_back(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=transitions_log.name):
        heartbeat_all(rs)
        # The seeded servers were found INACTIVE in the tables when this RS took office.
        first = _lines(caplog)
        assert sorted(s for s, _, _ in first) == sorted(s for s, _ in SEEDED)
        assert all(e == "online" for _, e, _ in first)
        assert {r for _, _, r in first} == {
            "heartbeat again after its lease expired (none for 10.000s)"
        }
        caplog.clear()
        # Heartbeats of alive servers log nothing.
        for _ in range(5):
            rs.clock.advance(1 * S)
            heartbeat_all(rs)
        assert _lines(caplog) == []
        # A falls silent: lease_expire once, however often the checker runs.
        others = [x for x in SEEDED if x[0] != A]
        rs.clock.advance(LEASE + 1)
        heartbeat_all(rs, others)
        for _ in range(3):
            rs.lease_checker.run_once()
        assert _lines(caplog) == [(A, "lease_expire", "no heartbeat for 10.000s (lease_time 10s)")]
        caplog.clear()
        rs.clock.advance(OFFLINE)
        heartbeat_all(rs, others)
        rs.lease_checker.run_once()
        rs.lease_checker.run_once()
        [(server, event, reason)] = _lines(caplog)
        assert (server, event) == (A, "permanent_offline")
        assert "server_permanent_offline_time 1h" in reason
        caplog.clear()
        heartbeat_all(rs, [SEEDED[0]])
        [(server, event, reason), (_, suspect, why)] = _lines(caplog)
        assert (server, event) == (A, "online")
        assert reason.startswith("heartbeat after permanent offline (none for ")
        # Back after an expiry this RS saw: SUSPECT.
        assert (suspect, why) == (
            "suspect",
            "back after its lease expired: no new leaders and no copies for 30s",
        )
    rec = next(r for r in caplog.records if r.name == transitions_log.name)
    assert rec.levelno == logging.INFO and rec.zone == "z1"  # type: ignore[attr-defined]
    assert rec.getMessage().startswith(f"server {A} online: heartbeat after permanent offline")


def test_admin_transitions_logged_after_commit(
    rs: RootService, caplog: pytest.LogCaptureFixture
) -> None:
    heartbeat_all(rs)
    with caplog.at_level(logging.INFO, logger=transitions_log.name):
        rs.server_admin.stop_servers([D], None, "STOP")
        rs.server_admin.start_servers([D], None)
        rs.server_admin.stop_servers([D], None, "ISOLATE")
        rs.server_admin.delete_servers([D], None)
        rs.server_admin.cancel_delete_servers([D], None)
    assert [(s, e) for s, e, _ in _lines(caplog)] == [
        (D, "stop_server"),
        (D, "start_server"),
        (D, "isolate_server"),
        (D, "delete_server"),
        (D, "cancel_delete_server"),
    ]
    assert {r for _, _, r in _lines(caplog)} == {"ALTER SYSTEM statement"}
