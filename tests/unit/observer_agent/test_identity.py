"""The cluster identity file (observer_agent.identity) and how the lease writes and checks it
(docs/design/statements.md): written once, kept across restarts, atomic, never another cluster."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from obcommon import files as files_mod
from obcommon.clock import FakeClock
from observer_agent.identity import (
    ClusterIdentity,
    IdentityError,
    identity_path,
    load_identity,
    write_identity,
)
from tests.unit.observer_agent.helpers import ME, RS1, RS2, make_agent, ok_response


def test_identity_written_once_on_first_accept(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    path = identity_path(agent.data_dir)
    assert not path.exists()
    assert agent.check_server_empty().is_empty is True
    # An accepted response without ids does not make the server a member.
    assert agent.handle_response(ok_response(clock, server_id=0, cluster_id=""), RS1)
    assert not path.exists()
    assert agent.handle_response(ok_response(clock, server_id=5), RS1)
    assert json.loads(path.read_text()) == {
        "cluster_id": "cluster-a",
        "server_id": 5,
        "zone": "z1",
        "server": ME,
    }
    first_stat = path.stat()
    clock.advance(2_000_000)
    assert agent.handle_response(ok_response(clock, server_id=5), RS1)
    assert path.stat().st_mtime_ns == first_stat.st_mtime_ns
    assert path.stat().st_ino == first_stat.st_ino
    assert sorted(p.name for p in agent.data_dir.iterdir() if "identity" in p.name) == [
        "identity.json"
    ]
    empty = agent.check_server_empty()
    assert (empty.is_empty, empty.cluster_id, empty.server_id, empty.zone, empty.server) == (
        False,
        "cluster-a",
        5,
        "z1",
        ME,
    )
    assert agent.build_lease_request().cluster_id == "cluster-a"


def test_different_cluster_id_is_refused_at_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.handle_response(ok_response(clock, cluster_id="cluster-a"), RS1)
    before = identity_path(agent.data_dir).read_text()
    with caplog.at_level(logging.WARNING, logger="observer_agent"):
        assert not agent.handle_response(ok_response(clock, cluster_id="cluster-b", epoch=9), RS2)
        assert not agent.handle_response(ok_response(clock, cluster_id="", epoch=1), RS2)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and "'cluster-b'" in errors[0].getMessage()
    assert identity_path(agent.data_dir).read_text() == before
    assert agent.highest_epoch == 1  # the foreign RS's epoch was not learnt


def test_identity_kept_across_restart_and_foreign_cluster_refused(tmp_path: Path) -> None:
    clock = FakeClock()
    write_identity(tmp_path / "data", ClusterIdentity("cluster-a", 3, "z1", ME))
    agent = make_agent(tmp_path, clock)
    assert agent.identity == ClusterIdentity("cluster-a", 3, "z1", ME)
    assert agent.server_id == 3
    req = agent.build_lease_request()
    assert req.cluster_id == "cluster-a"
    assert not agent.handle_response(ok_response(clock, cluster_id="cluster-b"), RS1)
    assert agent.handle_response(ok_response(clock, cluster_id="cluster-a", server_id=3), RS1)


def test_identity_write_is_atomic_when_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(files_mod.os, "replace", broken_replace)
    assert agent.handle_response(ok_response(clock), RS1) is False
    assert agent.identity is None
    assert list(agent.data_dir.glob("*identity*")) == []  # no half-written file, no temp left
    monkeypatch.undo()
    assert agent.handle_response(ok_response(clock), RS1) is True
    assert load_identity(agent.data_dir) == ClusterIdentity("cluster-a", 5, "z1", ME)


def test_write_identity_fsyncs_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[bool] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.path.isdir(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(files_mod.os, "fsync", spy)
    write_identity(tmp_path, ClusterIdentity("c", 1, "z1", ME))
    assert synced == [False, True]  # the temp file first, then the directory after the rename


def test_malformed_identity_file_is_an_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    identity_path(data).write_text("{not json")
    with pytest.raises(IdentityError):
        load_identity(data)
    with pytest.raises(IdentityError):
        make_agent(tmp_path)
    with pytest.raises(ValueError):
        write_identity(data, ClusterIdentity("", 1, "z1", ME))


def test_requests_carry_the_kept_server_id_and_another_one_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Agent side: the request names the kept server id (the RS refuses a
    mismatch); a response naming another server id is refused at ERROR, rate-limited, and
    service never starts with that data directory."""
    clock = FakeClock()
    agent = make_agent(tmp_path, clock)
    assert agent.build_lease_request().server_id == 0  # empty: nothing kept yet
    agent.mark_serving()
    assert agent.handle_response(ok_response(clock, server_id=5), RS1)
    assert agent.build_lease_request().server_id == 5
    write_identity(tmp_path / "other" / "data", ClusterIdentity("cluster-a", 3, "z1", ME))
    other = make_agent(tmp_path / "other", clock)
    other.mark_serving()
    with caplog.at_level(logging.WARNING, logger="observer_agent"):
        assert not other.handle_response(ok_response(clock, server_id=5), RS1)
        assert not other.handle_response(ok_response(clock, server_id=5), RS1)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # rate-limited
    assert "server_id 5" in errors[0] and "belongs to server_id 3" in errors[0]
    assert other.start_service_time == 0 and not other.registered
    assert other.lease.refusals["other_server_id"] == 2
    assert other.identity == ClusterIdentity("cluster-a", 3, "z1", ME)
