"""``obadmin --wait-job`` (sql/wait_job.py) through RS failover and transient errors, against
in-process AdminServices and unreachable addresses, on a FakeClock whose injected sleep moves
the scenario on (no test sleeps)."""

from __future__ import annotations

import io

from obcommon.clock import FakeClock
from obcommon.errors import ObError
from obcommon.proto import obrpc_pb2
from sql.connect import RETRY_POLICY
from sql.wait_job import wait_job
from tests.support.ports import free_port
from tests.unit.sql.test_obadmin import NOT_MASTER, error_response, fake_rs, result_set

COLUMNS = ["job_status", "progress", "extra_info"]


class Scenario:
    """The phase advances at every sleep; each RS answers according to the phase."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.phase = 0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.clock.advance(int(seconds * 1_000_000))
        self.phase += 1


def job(status: str, progress: int) -> obrpc_pb2.SqlResponse:
    return result_set(COLUMNS, [[status, progress, ""]])


def test_follows_the_job_through_a_failover_without_a_traceback() -> None:
    clock = FakeClock()
    sc = Scenario(clock)

    def first(statement: str) -> obrpc_pb2.SqlResponse:
        # the leader, until it steps down after the first poll
        return job("INPROGRESS", 10) if sc.phase == 0 else error_response(NOT_MASTER)

    def second(statement: str) -> obrpc_pb2.SqlResponse:
        if sc.phase <= 1:
            return error_response(NOT_MASTER)  # election in progress: nobody leads
        if sc.phase == 2:
            return error_response(ObError("OB_TIMEOUT"))  # still transient
        return job("INPROGRESS", 60) if sc.phase == 3 else job("SUCCESS", 100)

    out = io.StringIO()
    dead = f"127.0.0.1:{free_port()}"
    with fake_rs(first) as (a, _), fake_rs(second) as (b, b_rs):
        rc = wait_job([dead, a, b], 7, 5.0, out, clock=clock, sleep=sc.sleep)
    assert rc == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("job 7 [###") and lines[0].endswith(" 10% INPROGRESS")
    assert lines[1] == (
        "lost the RootService, retrying every 1 s: "
        "ERROR 4638 (HY000): OB_RS_NOT_MASTER: The RootServer is not the master"
    )
    assert lines[2] == "RootService answers again"
    assert lines[3].endswith(" 60% INPROGRESS") and lines[4].endswith("100% SUCCESS")
    assert len(lines) == 5
    assert "Traceback" not in out.getvalue()
    assert all(0 <= s <= 1.0 for s in sc.sleeps) and len(sc.sleeps) == 4
    assert len(b_rs.received) == 4


def test_unreachable_rs_until_the_deadline_exits_3_after_one_lost_line() -> None:
    clock = FakeClock()
    sc = Scenario(clock)
    out = io.StringIO()
    addrs = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    rc = wait_job(addrs, 7, 5.0, out, interval_s=0.5, deadline_s=3, clock=clock, sleep=sc.sleep)
    assert rc == 3
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("lost the RootService, retrying every 0.5 s: ERROR 2003 (HY000): ")
    assert lines[1:] == ["job 7 still INPROGRESS after 3 s"]
    # Each poll also retried its connects with backoff, on the same clock.
    cap_s = RETRY_POLICY.cap_us / 1e6
    assert all(s <= max(0.5, cap_s) for s in sc.sleeps) and len(sc.sleeps) >= 6


def test_a_real_error_ends_the_wait_with_1() -> None:
    clock = FakeClock()
    sc = Scenario(clock)
    out = io.StringIO()
    refusal = error_response(ObError("ER_ACCESS_DENIED_ERROR", detail="no"))
    with fake_rs(lambda s: refusal) as (a, _):
        rc = wait_job([a], 7, 5.0, out, clock=clock, sleep=sc.sleep)
    assert rc == 1
    assert out.getvalue().startswith("ERROR 1045 (28000): ")
    assert sc.sleeps == []


def test_unknown_job_and_failed_job() -> None:
    clock = FakeClock()
    out = io.StringIO()
    with fake_rs(lambda s: result_set(COLUMNS, [])) as (a, _):
        assert wait_job([a], 9, 5.0, out, clock=clock, sleep=Scenario(clock).sleep) == 1
    assert out.getvalue() == "no job 9\n"
    with fake_rs(lambda s: job("FAILED", 40)) as (a, _):
        assert wait_job([a], 9, 5.0, io.StringIO(), clock=clock, sleep=Scenario(clock).sleep) == 1
