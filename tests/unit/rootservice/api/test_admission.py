"""Admission of admin statements (rootservice/api/admission.py): the
per-user and the total limits refuse at once and admit again once the others finish, the
statements run on the admission's own threads, the token bound of a statement (both sides)
and its error through ``execute_sql``, and the ``ob-user`` metadata."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from obcommon.errors import ObError
from rootservice.api.admin_servicer import admission_key, metadata_value
from rootservice.api.admission import Admission, check_tokens
from rootservice.api.dispatch import execute_sql
from tests.support.harness import ROOT, make_rs


class Gate:
    """Statements that block until the test opens the gate, recording their thread."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.started = threading.Semaphore(0)
        self.threads: list[str] = []

    def work(self, value: int) -> int:
        self.threads.append(threading.current_thread().name)
        self.started.release()
        assert self.open.wait(10)
        return value


async def _refusal(adm: Admission, user: str) -> str:
    try:
        await adm.run(user, lambda: 0)
    except ObError as e:
        return e.name
    raise AssertionError("admitted")


def test_limits_refuse_at_once_and_admit_again_once_the_others_finish() -> None:
    adm = Admission(workers=2, queue_limit=3, per_user_limit=2)
    gate = Gate()

    async def scenario() -> None:
        a = [asyncio.ensure_future(adm.run("alice", lambda i=i: gate.work(i))) for i in range(2)]
        for _ in range(2):
            assert await asyncio.to_thread(gate.started.acquire, True, 5)
        assert adm.admitted("alice") == 2 and adm.admitted() == 2
        # Per-user limit (2): alice's third is refused at once - the gate is still shut, so
        # a refusal that waited for a slot would never come - and bob still gets in.
        assert await _refusal(adm, "alice") == "ER_TOO_MANY_USER_CONNECTIONS"
        b = asyncio.ensure_future(adm.run("bob", lambda: gate.work(7)))
        while adm.admitted() < 3:  # bob's is admitted and waits for a thread (both busy)
            await asyncio.sleep(0.01)
        assert adm.admitted() == 3 and adm.admitted("bob") == 1
        # Total limit (3): carol is refused though she has nothing running.
        assert await _refusal(adm, "carol") == "ER_CON_COUNT_ERROR"
        assert adm.refused_total == 2
        gate.open.set()
        assert await asyncio.gather(*a, b) == [0, 1, 7]
        assert adm.admitted() == 0 and adm.admitted("alice") == 0
        # Admitted again now that the others finished.
        assert await adm.run("alice", lambda: 42) == 42
        assert await adm.run("carol", lambda: 43) == 43

    asyncio.run(scenario())
    assert set(gate.threads) <= {"rs-admin_0", "rs-admin_1"}
    adm.shutdown()


def test_a_failing_or_abandoned_statement_releases_its_slot() -> None:
    adm = Admission(workers=1, queue_limit=1, per_user_limit=1)
    gate = Gate()

    def boom() -> None:
        raise ObError("OB_ERR_UNEXPECTED")

    async def scenario() -> None:
        with pytest.raises(ObError):
            await adm.run("u", boom)
        assert adm.admitted() == 0
        # The caller gives up; the slot stays taken until the work ends.
        task = asyncio.ensure_future(adm.run("u", lambda: gate.work(1)))
        assert await asyncio.to_thread(gate.started.acquire, True, 5)
        task.cancel()
        await asyncio.sleep(0.05)
        assert adm.admitted("u") == 1
        assert await _refusal(adm, "u") == "ER_TOO_MANY_USER_CONNECTIONS"
        gate.open.set()
        for _ in range(100):
            if adm.admitted() == 0:
                break
            await asyncio.sleep(0.02)
        assert await adm.run("u", lambda: 5) == 5

    asyncio.run(scenario())
    adm.shutdown()


def test_token_bound_both_sides() -> None:
    # 5 tokens each: SHOW, PARAMETERS, LIKE, 'a b ''c', ;
    stmt = "SHOW PARAMETERS LIKE 'a b ''c';"
    check_tokens(stmt, 5)
    with pytest.raises(ObError) as e:
        check_tokens(stmt, 4)
    assert e.value.name == "OB_NOT_SUPPORTED" and "more than 4 tokens" in e.value.message
    # A huge statement is refused at the limit (counting stops there; how long it takes is
    # measured by tests/bench/micro_bench.py).
    big = "x," * 2_000_000
    with pytest.raises(ObError) as e:
        check_tokens(big, 100_000)
    assert "more than 100000 tokens" in e.value.message


def test_execute_sql_refuses_too_many_tokens_before_parsing(db_url: str, tmp_path: Path) -> None:
    rs = make_rs(db_url, tmp_path, seed=False, max_statement_tokens=100)
    try:
        names = ", ".join(f"'127.0.0.1:{4000 + i}'" for i in range(49))  # 98 tokens + 4
        resp = execute_sql(rs, f"ALTER SYSTEM ADD SERVER {names}", ROOT)
        assert resp.error.name == "OB_NOT_SUPPORTED" and "100 tokens" in resp.error.message
        ok = execute_sql(rs, "SHOW PARAMETERS LIKE 'lease_time'", ROOT)
        assert ok.error.code == 0 and len(ok.rows) == 1
        # Over max_statement_bytes: the size error, as before.
        huge = execute_sql(rs, "SELECT " + "x" * rs.settings.max_statement_bytes, ROOT)
        assert huge.error.name == "ER_NET_PACKET_TOO_LARGE"
    finally:
        rs.shutdown()


def test_the_claimed_user_comes_from_ob_user_metadata() -> None:
    # The admission key of a call: its ob-user (else the certificate's user, else root).
    assert metadata_value((("ob-user", "alice"),), "ob-user") == "alice"
    assert metadata_value((("x", "y"),), "ob-user") is None
    assert metadata_value(None, "ob-user") is None
    assert metadata_value((("ob-user-bin", "é".encode()),), "ob-user") == "é"


def test_calls_count_against_the_certificates_user_not_the_claimed_one() -> None:
    assert admission_key("alice", "root") == "alice"  # claiming root spends alice's slots
    assert admission_key(None, "bob") == "bob"  # insecure mode: no certificate
    assert admission_key(None, None) == "root"
