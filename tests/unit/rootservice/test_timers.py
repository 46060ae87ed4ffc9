"""Timers (rootservice.timers) built alone: registration, stop, wake and reschedule on a real
APScheduler that is started paused, so no round ever runs."""

from __future__ import annotations

from obcommon.clock import FakeClock
from rootservice.metrics import Metrics
from rootservice.tasks import FnTask
from rootservice.timers import Timers

S = 1_000_000


def test_start_stop_wake_reschedule() -> None:
    timers = Timers(FakeClock(), Metrics(), enabled=True)
    timers.scheduler.start(paused=True)
    try:
        a, b = FnTask("a", lambda: None), FnTask("b", lambda: None)
        timers.start([(a, 10 * S), (b, 30 * S)])
        assert timers.registered() == {"a", "b"} and timers.running
        jobs = {j.id: j for j in timers.scheduler.get_jobs()}
        assert jobs["a"].trigger.interval.total_seconds() == 10
        timers.reschedule([(a, 5 * S)])
        assert timers.scheduler.get_job("a").trigger.interval.total_seconds() == 5
        before = timers.scheduler.get_job("b").next_run_time
        timers.wake("b")
        assert timers.scheduler.get_job("b").next_run_time <= before
        timers.wake("unknown")  # a task that is not registered costs nothing
        timers.stop()
        assert timers.registered() == set() and timers.scheduler.get_jobs() == []
        assert timers.running  # stopped tasks, not the scheduler: a later term starts again
    finally:
        timers.shutdown()
    assert not timers.running


def test_disabled_timers_register_nothing() -> None:
    timers = Timers(FakeClock(), Metrics(), enabled=False)
    timers.start([(FnTask("a", lambda: None), S)])
    assert timers.registered() == set() and not timers.running
