"""A background task failing round after round (the database down) is counted every round but
logged once a minute with the count suppressed; its recovery is logged once."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from obcommon.clock import FakeClock
from obcommon.errors import ObError
from obcommon.ratelimit_log import RateLimitedLog
from rootservice.metrics import Metrics
from rootservice.tasks import FAILURE_LOG_US, guarded
from rootservice.tasks import log as tasks_log


class _Flaky:
    name = "flaky"

    def __init__(self) -> None:
        self.fail = True

    def run_once(self) -> None:
        if self.fail:
            raise RuntimeError("database unreachable")


def test_failures_rate_limited_counted_and_recovery_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, metrics, task = FakeClock(), Metrics(), _Flaky()
    run = guarded(task, metrics, RateLimitedLog(tasks_log, clock, FAILURE_LOG_US))
    with caplog.at_level(logging.INFO, logger=tasks_log.name):
        for _ in range(120):  # two minutes of a round a second
            run()
            clock.advance(1_000_000)
        task.fail = False
        run()
        run()
    recs = [r for r in caplog.records if r.name == tasks_log.name]
    failed = [r for r in recs if "cycle failed" in r.getMessage()]
    assert len(failed) == 2
    assert failed[0].levelno == logging.ERROR and failed[0].exc_info is not None
    assert failed[1].getMessage().endswith("(59 similar suppressed)")
    assert metrics.get("task_failures_total.flaky") == 120
    ok = [r.getMessage() for r in recs if "succeeded" in r.getMessage()]
    assert ok == ["flaky: cycle succeeded after 120 failed cycles"]


class _DatabaseDown:
    name = "db_down"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def run_once(self) -> None:
        raise self.error


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            sa.exc.OperationalError("SELECT 1", {}, Exception("connection refused")),
            "connection refused",
        ),
        (ObError("OB_RS_NOT_MASTER", detail="stepped down"), "OB_RS_NOT_MASTER"),
    ],
)
def test_an_expected_failure_is_one_line_without_a_traceback(
    caplog: pytest.LogCaptureFixture, error: Exception, said: str
) -> None:
    run = guarded(_DatabaseDown(error), Metrics(), RateLimitedLog(tasks_log, FakeClock(), 1))
    with caplog.at_level(logging.INFO, logger=tasks_log.name):
        run()
    [rec] = [r for r in caplog.records if "cycle failed" in r.getMessage()]
    assert not rec.exc_info and said in rec.getMessage(), rec.getMessage()
