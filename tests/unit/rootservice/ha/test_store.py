"""MetaStore.txn's ``wait_s``: a bounded transaction, its wait for the write lock included
(the audit record of a statement on a slow database, test_db_faults)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import rootservice.auth.audit as audit_mod
from obcommon.errors import ObError
from rootservice.app import RootService
from tests.support.harness import make_rs


@pytest.fixture
def rs(db_url: str, tmp_path: Path) -> Iterator[RootService]:
    r = make_rs(db_url, tmp_path)
    try:
        yield r
    finally:
        r.shutdown()


def _held(rs: RootService) -> tuple[threading.Event, threading.Thread]:
    """Another thread holds the write lock until the returned event is set."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with rs.store.write_lock:
            taken.set()
            release.wait(30)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert taken.wait(30)
    return release, t


def test_a_bounded_transaction_gives_up_on_a_held_lock_and_changes_nothing(
    rs: RootService,
) -> None:
    release, t = _held(rs)
    try:
        with pytest.raises(ObError) as e, rs.store.txn(fenced=False, wait_s=0.05):
            raise AssertionError("the body ran without the lock")
        assert e.value.name == "OB_TIMEOUT" and "busy for 0.05 s" in e.value.message
    finally:
        release.set()
        t.join(30)
    # The lock is free again and was not left taken by the refused call.
    with rs.store.txn(fenced=False, wait_s=5) as conn:
        assert conn is not None
    assert rs.store.write_lock.acquire(timeout=0)
    rs.store.write_lock.release()


def test_the_audit_record_gives_up_instead_of_holding_the_answer(
    rs: RootService, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = rs.audit.failures
    rs.audit.record("root", "127.0.0.1:1", "ALTER SYSTEM SET a = 1", "OK")
    assert rs.audit.failures == before
    monkeypatch.setattr(audit_mod, "AUDIT_WRITE_BOUND_S", 0.05)
    release, t = _held(rs)
    try:
        rs.audit.record("root", "127.0.0.1:1", "ALTER SYSTEM SET a = 2", "OK")
        assert rs.audit.failures == before + 1
    finally:
        release.set()
        t.join(30)
