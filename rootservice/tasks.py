"""Background tasks of the RS and the one place that registers them with APScheduler.

Each task is an object with a ``name`` and a plain ``run_once()`` that tests call directly.
:func:`register_tasks` adds them to a scheduler with ``max_instances=1`` and
``coalesce=True``, wrapping each cycle so an exception is logged (rate-limited) and counted
and the loop lives on (nova's periodic tasks, Prefect's loop services).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from obcommon.clock import Clock
from obcommon.errors import ObError
from obcommon.ratelimit_log import RateLimitedLog
from rootservice.db.engine import db_error_summary
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)


class Task(Protocol):
    """What :func:`register_tasks` schedules: a job id ``name`` and one cycle ``run_once()``.

    The return value of ``run_once()`` (e.g. how many servers a checker removed) is ignored by
    the scheduler; tests use it.
    """

    name: str

    def run_once(self) -> Any:
        """Run one cycle; an exception fails this cycle only (see :func:`guarded`)."""
        ...


class EarlyDue(Protocol):
    """What a task with work due between its ticks offers (the lease checker: the next lease
    to expire, when that is sooner than its next 100 ms tick)."""

    def early_due_mono_us(self) -> int | None:
        """After a cycle: the monotonic time (microseconds) at which the task next has work
        due, when that comes before its next regular run; None otherwise."""
        ...


class DueSink(Protocol):
    """Where :class:`Guarded` hands an :class:`EarlyDue` task's early deadline after each
    cycle (met by :class:`rootservice.timers.DueWaker`)."""

    def due(self, name: str, at_mono_us: int) -> None:
        """Wake task ``name`` at monotonic ``at_mono_us`` (microseconds)."""
        ...


@dataclass
class FnTask:
    """A task made of a function: ``run_once()`` calls ``fn()``."""

    name: str
    fn: Callable[[], Any]

    def run_once(self) -> Any:
        """Call ``fn()`` and return its result; its exceptions propagate."""
        return self.fn()


#: A task failing round after round (e.g. the database is unreachable) logs its failure at
#: most this often, in microseconds; every failure is still counted.
FAILURE_LOG_US = 60_000_000


class Guarded:
    """``task.run_once`` as a scheduler job: one failed cycle is counted
    (``task_failures_total.<name>``) and logged with its traceback through ``failures``
    (keyed by the task's name: the first failure at once, then at most once per its interval
    with the number suppressed), not fatal; a success after failures is logged once at INFO.
    Every cycle's duration lands in the ``task_run_us.<name>`` latency window.

    A :func:`wake` that comes while a cycle runs makes the job run one more cycle right after
    it: APScheduler drops a run due while its one instance still runs
    (``max_instances=1``), so a wake landing there waited a whole period (a DELETE SERVER
    whose last copies were noticed during a balancer round waited 10 s more for the next).

    A task that has work due before its next run (:class:`EarlyDue`) has that deadline
    handed to ``due`` after each call, which wakes the job then: the lease checker finds a
    lease that expires 10 ms after its tick at that moment, not at the next tick up to a
    whole period (100 ms) late."""

    def __init__(
        self,
        task: Task,
        metrics: Metrics,
        failures: RateLimitedLog,
        due: DueSink | None = None,
    ) -> None:
        """Not running."""
        self.task = task
        early = getattr(task, "early_due_mono_us", None)
        self._early: Callable[[], int | None] | None = early if due is not None else None
        self._due = due
        self._metrics = metrics
        self._failures = failures
        self._window = metrics.window(f"task_run_us.{task.name}")
        self._failing = 0  # failures in a row; only this task's one scheduler thread touches it
        self._lock = threading.Lock()
        self._running = False
        self._again = False

    def woken(self) -> None:
        """A wake: if a cycle runs now, another one follows it."""
        with self._lock:
            if self._running:
                self._again = True

    def __call__(self) -> None:
        """Run cycles until no wake came during the last one."""
        while True:
            with self._lock:
                self._running, self._again = True, False
            try:
                self._cycle()
            finally:
                with self._lock:
                    self._running = again = self._again
            if not again:
                break
        if self._early is not None and self._due is not None:
            try:
                at = self._early()
            except Exception:  # a surprise must not fail the job: the regular run comes
                log.exception("%s: finding its next deadline failed", self.task.name)
                return
            if at is not None:
                self._due.due(self.task.name, at)

    def _cycle(self) -> None:
        task = self.task
        t0 = time.perf_counter_ns()
        try:
            task.run_once()
        except Exception as e:
            self._metrics.inc(f"task_failures_total.{task.name}")
            self._failing += 1
            # A database that cannot be reached, or a refusal the domain names, is the
            # round's expected failure: one line saying why. A traceback (three chained ones
            # for a lost connection) is kept for what nobody expected: a bug.
            expected = isinstance(e, (ObError, sa.exc.OperationalError, sa.exc.InterfaceError))
            self._failures.log(
                logging.ERROR,
                task.name,
                "%s: cycle failed; the task keeps running%s",
                task.name,
                f": {db_error_summary(e) if isinstance(e, sa.exc.DBAPIError) else e}"
                if expected
                else "",
                extra={"task": task.name},
                exc_info=not expected,
            )
        else:
            if self._failing:
                log.info(
                    "%s: cycle succeeded after %d failed cycles",
                    task.name,
                    self._failing,
                    extra={"task": task.name},
                )
                self._failing = 0
                self._failures.reset(task.name)
        finally:
            self._window.record((time.perf_counter_ns() - t0) // 1000)


def guarded(
    task: Task, metrics: Metrics, failures: RateLimitedLog, due: DueSink | None = None
) -> Callable[[], None]:
    """:class:`Guarded` of ``task`` (see there)."""
    return Guarded(task, metrics, failures, due)


_US = dt.timedelta(microseconds=1)


class CatchUpIntervalTrigger(IntervalTrigger):  # type: ignore[misc]
    """APScheduler's ``IntervalTrigger``, except that a job more than two intervals behind
    goes straight to its last fire time not after ``now``.

    APScheduler finds a late job's run times by walking every missed interval
    (``Job._get_run_times``) with the scheduler's job-store lock held. After a +1 h step of
    the wall clock that is 36,000 steps for each 100 ms job; measured in a loaded RS the walk held every timer, the election's lease renewals included, for 12 s, and
    the leader stepped down. Since every job is coalesced (``coalesce=True``) only the last
    missed run would run anyway, so skipping to it changes nothing else: the walk is 2 steps
    whatever the step of the clock."""

    def get_next_fire_time(
        self, previous_fire_time: dt.datetime | None, now: dt.datetime
    ) -> dt.datetime | None:
        """The next fire time after ``previous_fire_time``; when that is more than two
        intervals before ``now``, the last fire time of the same phase not after ``now``."""
        if previous_fire_time is not None:
            # Integer microseconds: float timestamps blur the boundary.
            interval = self.interval // _US
            behind = (now - previous_fire_time) // _US
            if interval > 0 and behind > 2 * interval:
                skip = behind // interval - 1
                previous_fire_time += dt.timedelta(microseconds=skip * interval)
        nxt: dt.datetime | None = super().get_next_fire_time(previous_fire_time, now)
        return nxt


def make_scheduler() -> BackgroundScheduler:
    """A thread-based scheduler. APScheduler logs every job run at INFO, which at 10 runs a
    second would drown the RS log, so its loggers are raised to WARNING; the scheduler's own
    "skipped: maximum number of running instances" warnings are expected (``max_instances``
    is 1 on purpose and a balancer round with a Spark job outlasts its period), so that
    logger is raised to ERROR."""
    for name in ("apscheduler", "apscheduler.executors.default"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
    return BackgroundScheduler(
        job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": 5},
        executors={"default": {"type": "threadpool", "max_workers": 8}},
        timezone=dt.UTC,
    )


def register_tasks(
    scheduler: BackgroundScheduler,
    tasks: list[tuple[Task, int]],
    metrics: Metrics,
    clock: Clock,
    phase_step_us: int = 1_700_000,
    due: DueSink | None = None,
) -> None:
    """Add ``(task, interval_us)`` pairs as interval jobs whose id is the task name
    (replacing a job of the same name). The k-th task's first run is delayed by
    ``k * phase_step_us`` (modulo its interval), so that tasks whose periods are multiples
    of each other (10 s, 30 s) do not all scan the whitelist at the same instant. The early
    deadlines of :class:`EarlyDue` tasks go to ``due`` (none are kept without one)."""
    now = dt.datetime.fromtimestamp(clock.now_us() / 1e6, tz=dt.UTC)
    failures = RateLimitedLog(log, clock, FAILURE_LOG_US)
    for k, (task, interval_us) in enumerate(tasks):
        phase = (k * phase_step_us) % max(interval_us, 1)
        scheduler.add_job(
            guarded(task, metrics, failures, due),
            CatchUpIntervalTrigger(
                seconds=interval_us / 1e6,
                start_date=now + dt.timedelta(microseconds=phase),
                timezone=dt.UTC,
            ),
            id=task.name,
            name=task.name,
            replace_existing=True,
            max_instances=1,
            coalesce=True,
        )


def wake(scheduler: BackgroundScheduler, clock: Clock, name: str) -> bool:
    """Run job ``name`` as soon as possible (``wakeup()`` of OceanBase's checker threads).
    Returns False when no such job is registered."""
    job = scheduler.get_job(name)
    if job is None:
        return False
    if isinstance(job.func, Guarded):
        job.func.woken()
    job.modify(next_run_time=dt.datetime.fromtimestamp(clock.now_us() / 1e6, tz=dt.UTC))
    return True


def make_all_due(scheduler: BackgroundScheduler, clock: Clock) -> int:
    """Make every job of ``scheduler`` due now and wake its thread; returns how many jobs.

    The recovery from a step of the wall clock: APScheduler keeps each
    job's next run time in wall time, so after a backward step of 1 h no job would run for an
    hour (measured: a 100 ms interval job ran 0 times in the 2 s after a -1 h step under
    libfaketime). A job run now computes its next run from the new wall time (a forward
    step needs no help beyond :class:`CatchUpIntervalTrigger`, but gets it too). A job
    removed concurrently (a step-down) is skipped."""
    now = dt.datetime.fromtimestamp(clock.now_us() / 1e6, tz=dt.UTC)
    n = 0
    for job in scheduler.get_jobs():
        try:
            job.modify(next_run_time=now)
        except Exception:  # JobLookupError: removed meanwhile (a step-down)
            log.debug("job %s gone before it was made due", job.id)
            continue
        n += 1
    scheduler.wakeup()
    return n


def reschedule(scheduler: BackgroundScheduler, name: str, interval_us: int) -> None:
    """Change the period of a registered job (ALTER SYSTEM SET of an *_interval). A job
    whose period is already ``interval_us`` keeps its next run time: rescheduling restarts
    the period, so SETs of other parameters arriving faster than a period (a script in a
    loop) would otherwise postpone the job for ever - the election's renewal among them."""
    job = scheduler.get_job(name)
    if job is None:
        return
    if getattr(job.trigger, "interval", None) == dt.timedelta(microseconds=interval_us):
        return
    scheduler.reschedule_job(
        name, trigger=CatchUpIntervalTrigger(seconds=interval_us / 1e6, timezone=dt.UTC)
    )
