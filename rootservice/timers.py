"""The RS's two sets of timers: the leader's background tasks, registered when it takes office
and removed when it steps down, and the election's rounds, which run for the whole life of
the process (SPEC.md section 8, issue 5).

Each set is one APScheduler (:func:`rootservice.tasks.make_scheduler`) so that the leader's
timers can be stopped and started without touching the election's. Registration goes
through :func:`rootservice.tasks.register_tasks` (``max_instances=1``, ``coalesce=True``, a
failed round logged and counted). Intervals are integer microseconds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from obcommon.clock import Clock
from rootservice.metrics import Metrics
from rootservice.tasks import Task, make_scheduler, register_tasks, reschedule, wake

log = logging.getLogger(__name__)

#: ``(task, interval_us)`` pairs.
Schedule = Sequence[tuple[Task, int]]


class Timers:
    """One scheduler and the tasks registered on it.

    ``enabled`` False (unit tests that call ``run_once`` themselves) makes :meth:`start` a
    no-op. ``phase_step_us`` staggers the first runs (see :func:`register_tasks`).
    """

    def __init__(
        self, clock: Clock, metrics: Metrics, *, enabled: bool, phase_step_us: int = 1_700_000
    ) -> None:
        """No task registered and the scheduler not started yet."""
        self.clock = clock
        self.metrics = metrics
        self.enabled = enabled
        self.phase_step_us = phase_step_us
        self.scheduler = make_scheduler()
        self._registered: set[str] = set()

    @property
    def running(self) -> bool:
        """The scheduler runs (started and not shut down)."""
        return bool(self.scheduler.running)

    def start(self, tasks: Schedule) -> None:
        """Register ``tasks`` (replacing jobs of the same names) and start the scheduler."""
        if not self.enabled:
            return
        register_tasks(
            self.scheduler, list(tasks), self.metrics, self.clock, phase_step_us=self.phase_step_us
        )
        self._registered = {task.name for task, _ in tasks}
        if not self.scheduler.running:
            self.scheduler.start()

    def stop(self) -> None:
        """Remove every registered task; the scheduler keeps running for a later start."""
        names, self._registered = self._registered, set()
        for name in names:
            try:
                self.scheduler.remove_job(name)
            except Exception:  # JobLookupError, or the scheduler is shut down
                log.debug("no job %s to remove", name)

    def wake(self, name: str) -> None:
        """Run task ``name`` now (OceanBase's checker ``wakeup()``); a no-op for a task that is
        not registered."""
        # Called on the heartbeat path for every transition: a name with no job must cost
        # nothing.
        if name in self._registered and self.scheduler.running:
            wake(self.scheduler, self.clock, name)

    def reschedule(self, tasks: Schedule) -> None:
        """Apply new intervals to registered tasks (ALTER SYSTEM SET of an ``*_interval``)."""
        if not self.scheduler.running:
            return
        for task, interval in tasks:
            reschedule(self.scheduler, task.name, interval)

    def shutdown(self) -> None:
        """Stop the scheduler, waiting for running rounds."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)

    def registered(self) -> set[str]:
        """Names of the tasks registered now."""
        return set(self._registered)
