"""Timers (rootservice.timers) built alone: registration, stop, wake and reschedule on a real
APScheduler that is started paused, so no round ever runs; the wall-clock watchdog on a
FakeClock, and making every job due on a running scheduler."""

from __future__ import annotations

import datetime as dt
import threading

from obcommon.clock import FakeClock, SystemClock
from rootservice.metrics import Metrics
from rootservice.tasks import CatchUpIntervalTrigger, FnTask
from rootservice.timers import (
    WALL_JUMP_CHECK_US,
    WALL_JUMP_THRESHOLD_US,
    DueWaker,
    PeriodicThread,
    Timers,
    WallClockWatchdog,
)

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


def test_rescheduling_an_unchanged_period_keeps_the_next_run() -> None:
    # A SET of any parameter reschedules every task: one whose period did not change must
    # keep its next run, else SETs faster than its period postpone it for ever (the
    # election's renewals too). Both sides: the same period, and one microsecond more.
    timers = Timers(FakeClock(), Metrics(), enabled=True)
    timers.scheduler.start(paused=True)
    try:
        a = FnTask("a", lambda: None)
        timers.start([(a, 400_000)])
        first = timers.scheduler.get_job("a").next_run_time
        timers.reschedule([(a, 400_000)])
        assert timers.scheduler.get_job("a").next_run_time == first
        timers.reschedule([(a, 400_001)])
        assert timers.scheduler.get_job("a").next_run_time > first
    finally:
        timers.shutdown()


def test_disabled_timers_register_nothing() -> None:
    timers = Timers(FakeClock(), Metrics(), enabled=False)
    timers.start([(FnTask("a", lambda: None), S)])
    assert timers.registered() == set() and not timers.running


# --- the wall-clock watchdog ---------------------------------------------


def test_watchdog_reports_each_step_once_and_both_sides_of_the_threshold() -> None:
    clock = FakeClock()
    jumps: list[int] = []
    dog = WallClockWatchdog(clock, jumps.append)
    assert dog.check_once() == 0  # the first check only takes readings
    clock.advance(WALL_JUMP_CHECK_US)
    assert dog.check_once() == 0  # both clocks moved alike: no step
    clock.jump(WALL_JUMP_THRESHOLD_US)
    assert dog.check_once() == 0  # at the threshold: not a step
    clock.jump(-WALL_JUMP_THRESHOLD_US)
    assert dog.check_once() == 0
    clock.jump(WALL_JUMP_THRESHOLD_US + 1)
    assert dog.check_once() == WALL_JUMP_THRESHOLD_US + 1
    assert dog.check_once() == 0  # reported once
    clock.advance(S)
    clock.jump(-3600 * S)
    assert dog.run_once() == -3600 * S
    assert jumps == [WALL_JUMP_THRESHOLD_US + 1, -3600 * S]


def test_watchdog_survives_a_failing_handler_and_stops() -> None:
    clock = FakeClock()

    def boom(_: int) -> None:
        raise RuntimeError("handler failed")

    dog = WallClockWatchdog(clock, boom, period_us=1_000)
    dog.start()
    try:
        clock.jump(3600 * S)
        # The thread checks every millisecond; its handler fails, the thread lives on.
        for _ in range(2_000):
            if dog._last is not None and dog._last[0] == clock.now_us():
                break
            threading.Event().wait(0.005)
        assert dog._last is not None and dog._last[0] == clock.now_us()
        assert dog._thread.running
    finally:
        dog.stop()
    assert not dog._thread.running


def test_a_periodic_thread_outlives_a_failing_check_and_stops() -> None:
    """PeriodicThread: a check that raises every time is logged, and called again."""
    calls: list[int] = []
    done = threading.Event()

    def check() -> None:
        calls.append(1)
        if len(calls) >= 3:
            done.set()
        raise RuntimeError("check failed on purpose")

    t = PeriodicThread("test_periodic", 1_000, check)
    t.start()
    t.start()  # idempotent: still one thread
    try:
        assert done.wait(10)
        assert t.running
    finally:
        t.stop()
    assert not t.running
    assert not any(th.name == "test_periodic" for th in threading.enumerate())


def test_make_all_due_runs_a_job_scheduled_an_hour_ahead() -> None:
    """What a -1 h step does to APScheduler (every next run time an hour ahead), and the
    fix: every job made due now runs at once and is next due one interval later."""
    timers = Timers(SystemClock(), Metrics(), enabled=True)
    ran = threading.Event()
    try:
        timers.start([(FnTask("hb", ran.set), S // 10)])
        job = timers.scheduler.get_job("hb")
        ahead = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        job.modify(next_run_time=ahead)
        ran.clear()
        assert not ran.wait(0.3)  # nothing runs for an hour
        assert timers.make_all_due() == 1
        assert ran.wait(10)
        nxt = timers.scheduler.get_job("hb").next_run_time
        assert nxt is not None and nxt < ahead - dt.timedelta(minutes=59)
    finally:
        timers.shutdown()
    assert timers.make_all_due() == 0  # not running: nothing to do


def test_a_job_an_hour_behind_catches_up_in_two_steps() -> None:
    """After a +1 h step a 100 ms job's missed run times are not walked one by one (36,000
    steps under the scheduler's lock): the trigger goes to the last one not after now."""
    trig = CatchUpIntervalTrigger(seconds=0.1, timezone=dt.UTC)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    now = t0 + dt.timedelta(hours=1, milliseconds=50)
    runs, nxt = [], trig.get_next_fire_time(t0, now)
    while nxt is not None and nxt <= now and len(runs) < 10:
        runs.append(nxt)
        nxt = trig.get_next_fire_time(nxt, now)
    assert len(runs) == 1 and now - dt.timedelta(milliseconds=100) < runs[0] <= now
    assert nxt is not None and now < nxt <= now + dt.timedelta(milliseconds=100)
    # Two intervals behind or less: the plain walk, one interval at a time.
    near = t0 + dt.timedelta(milliseconds=200)
    assert trig.get_next_fire_time(t0, near) == t0 + dt.timedelta(milliseconds=100)
    late = t0 + dt.timedelta(milliseconds=201)
    assert trig.get_next_fire_time(t0, late) == t0 + dt.timedelta(milliseconds=200)


def test_a_wake_during_a_cycle_runs_another_cycle_right_after_it() -> None:
    """APScheduler drops a run that falls due while the job's one instance still
    runs; a wake landing during a cycle (a copy noticed while a balancer round runs) must
    not wait for the next period (1 h here): the job runs again as soon as the cycle ends.
    A cycle without a wake is not repeated."""
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def cycle() -> None:
        runs.append(1)
        if len(runs) == 1:
            started.set()
            assert release.wait(20)

    timers = Timers(SystemClock(), Metrics(), enabled=True)
    timers.scheduler.start()
    try:
        timers.start([(FnTask("round", cycle), 3600 * S)])
        timers.wake("round")
        assert started.wait(20)
        timers.wake("round")  # during the first cycle
        # ...and APScheduler has seen it: the run it made due was dropped (max_instances=1)
        # and the job's next run put a period ahead.
        pause = threading.Event()
        soon = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30)
        for _ in range(1000):
            if timers.scheduler.get_job("round").next_run_time > soon:
                break
            pause.wait(0.02)
        assert timers.scheduler.get_job("round").next_run_time > soon
        assert len(runs) == 1
        release.set()
        deadline = threading.Event()
        for _ in range(1000):
            if len(runs) >= 2:
                break
            deadline.wait(0.02)
        assert len(runs) == 2
    finally:
        timers.shutdown()
    assert len(runs) == 2


class _DueOnce:
    """A task whose first cycle finds work due ``after_us`` later (a lease expiring before
    the checker's next tick); its later cycles find none."""

    name = "early"

    def __init__(self, clock: SystemClock, after_us: int) -> None:
        self.clock = clock
        self.after_us = after_us
        self.runs: list[int] = []  # monotonic start of each cycle
        self.deadline: int | None = None

    def run_once(self) -> None:
        self.runs.append(self.clock.monotonic_us())
        if self.deadline is None:
            self.deadline = self.runs[-1] + self.after_us

    def early_due_mono_us(self) -> int | None:
        return self.deadline if len(self.runs) == 1 else None


def test_a_deadline_before_the_next_period_runs_the_task_then() -> None:
    """A task with work due between its runs (the lease checker with a lease expiring
    before its next tick) runs again at that deadline, not a period (1 h here) later,
    and not before it; with no deadline it waits its period."""
    clock = SystemClock()
    task = _DueOnce(clock, 20_000)
    timers = Timers(clock, Metrics(), enabled=True)
    try:
        timers.start([(task, 3600 * S)])
        timers.wake("early")  # the first cycle now, not in an hour
        pause = threading.Event()
        for _ in range(1000):
            if len(task.runs) >= 2:
                break
            pause.wait(0.01)
        assert len(task.runs) == 2 and task.deadline is not None
        assert task.runs[1] >= task.deadline
        # No deadline after the second cycle: nothing pending, the next run a period away.
        assert timers.waker.pending() == {}
        nxt = timers.scheduler.get_job("early").next_run_time
        assert nxt > dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30)
    finally:
        timers.shutdown()


def test_the_waker_keeps_the_earliest_deadline_of_a_task_and_forgets_on_stop() -> None:
    clock = SystemClock()
    woken: list[str] = []
    got = threading.Event()

    def wake(name: str) -> None:
        woken.append(name)
        got.set()

    waker = DueWaker(clock, wake)
    try:
        now = clock.monotonic_us()
        waker.due("a", now + 3600 * S)
        waker.due("a", now + 7200 * S)  # later: ignored
        assert waker.pending() == {"a": now + 3600 * S}
        waker.due("b", now + 3600 * S)
        waker.clear()  # a step-down: the tasks are gone
        assert waker.pending() == {}
        waker.due("a", now + 3600 * S)
        waker.due("a", clock.monotonic_us() + 10_000)  # sooner: replaces it
        assert got.wait(10)
        assert woken == ["a"] and waker.pending() == {}
    finally:
        waker.stop()
    waker.due("a", clock.monotonic_us())  # stopped: nothing starts again
    assert waker.pending() == {}
    assert not any(th.name == "due_waker" for th in threading.enumerate())
