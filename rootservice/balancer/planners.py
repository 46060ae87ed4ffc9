"""The planners behind the balancer (:class:`rootservice.balancer.planner.Planner`,
docs/design/migration.md).

:class:`SparkPlanner` is what the RS runs: the three Spark jobs of :mod:`rootservice.balancer.spark`
on one long-lived SparkSession (``spark_master``, ``local[*]`` by default, created lazily in
the balancer's thread the first time a plan is needed, so neither its start-up nor a job
ever delays heartbeats or the 100 ms checker). :class:`PandasPlanner` runs the same plans as
single-process pandas (``rootservice.balancer.spark.reference``, checked against Spark by
``tests/unit/rootservice/balancer/test_spark_jobs.py``); the fake-clock unit tests use it to stay fast.
:class:`LazySparkPlanner` is the RS's default: a :class:`SparkPlanner` built on first use.
:class:`SwitchablePlanner` is the one planner the RS's balancer and lost-replica checker hold:
it delegates to the Spark or the pandas planner as the ``balancer_planner`` parameter says at
each call, and makes a failed plan visible (counter, event, one WARNING per cause) before
raising :class:`rootservice.balancer.planner.PlannerError`.

Each method takes the servers rows (``rootservice.balancer.planner.SERVER_COLUMNS``) and returns
plan rows as dicts, nulls as None.

The :mod:`rootservice.balancer.spark` modules (pandas, and PySpark through the session) are
imported inside the methods on purpose: an RS that never empties a server never loads them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from obcommon.clock import Clock
from obcommon.ratelimit_log import RateLimitedLog
from rootservice.balancer.planner import Planner, PlannerError, Row, short_cause
from rootservice.balancer.planner_check import PlannerCheck, check_planner
from rootservice.balancer.ports import EventSink
from rootservice.config import RsSettings
from rootservice.db.event_repo import Event
from rootservice.metrics import Metrics

log = logging.getLogger(__name__)


def _records(df: Any) -> list[Row]:
    """pandas DataFrame -> list of dicts with NaN / NA turned into None."""
    if df is None or len(df) == 0:
        return []
    obj = df.astype(object)
    return [
        {k: (None if v is None or v != v else v) for k, v in rec.items()}  # NaN != NaN
        for rec in obj.to_dict("records")
    ]


def _servers_frame(servers: list[Row]) -> Any:
    import pandas as pd

    from rootservice.balancer.spark import schema as S

    return S.conform_pandas(
        pd.DataFrame(servers, columns=S.columns(S.SERVERS_SCHEMA)), S.SERVERS_SCHEMA
    )


class SparkPlanner:
    """Plans computed by Spark (docs/design/migration.md). ``settings`` give the master and extra
    configuration (``spark_conf`` entries ``k=v``) and the database the jobs read."""

    def __init__(self, settings: RsSettings) -> None:
        """No JVM is started here; the first plan starts it."""
        from rootservice.balancer.spark.session import SparkSessionManager

        conf = {}
        for item in settings.spark_conf:
            k, _, v = item.partition("=")
            conf[k.strip()] = v.strip()
        self.db_url = settings.effective_db_url()
        self.sessions = SparkSessionManager(settings.spark_master, conf, db_url=self.db_url)

    def _inputs(self, servers: list[Row]) -> Any:
        from rootservice.balancer.spark.readers import PLAN_COLUMNS, read_inputs

        spark = self.sessions.get()
        # Only the columns the plans read travel from PostgreSQL.
        return read_inputs(
            spark, self.db_url, servers=_servers_frame(servers), columns=PLAN_COLUMNS
        )

    def _run(self, job: Any, servers: list[Row]) -> list[Row]:
        # Each plan reads the tables afresh (the unit plan's moves change what the replica
        # plan must see); within one plan the inputs are cached, since a job may scan
        # __all_ls_meta_table more than once and each scan would be a JDBC read. Lazily: a
        # table the plan does not touch is never read (the unit plan skips ls_meta).
        inputs = self._inputs(servers).persist(eager=False)
        try:
            return _records(job(inputs).toPandas())
        finally:
            inputs.unpersist()

    def unit_plan(self, servers: list[Row]) -> list[Row]:
        """``rootservice.balancer.spark.unit_plan.unit_migration_plan``, collected."""
        from rootservice.balancer.spark.unit_plan import unit_migration_plan

        return self._run(unit_migration_plan, servers)

    def replica_plan(self, servers: list[Row]) -> list[Row]:
        """``rootservice.balancer.spark.replica_plan.replica_migration_plan``, collected (rows whose
        source or destination is not known yet have None there)."""
        from rootservice.balancer.spark.replica_plan import replica_migration_plan

        return self._run(replica_migration_plan, servers)

    def lost_replicas(self, servers: list[Row]) -> list[Row]:
        """``rootservice.balancer.spark.lost_replicas.lost_replicas``, collected."""
        from rootservice.balancer.spark.lost_replicas import lost_replicas

        return self._run(lost_replicas, servers)

    def stop(self) -> None:
        """Stop the SparkSession (if one was started)."""
        self.sessions.stop()


class PandasPlanner:
    """The same plans in single-process pandas (``rootservice.balancer.spark.reference``)."""

    def __init__(self, db_url: str) -> None:
        """Read the tables of ``db_url`` on each plan."""
        self.db_url = db_url

    def _inputs(self, servers: list[Row]) -> Any:
        from rootservice.balancer.spark.readers import PLAN_COLUMNS, read_pandas_inputs

        return read_pandas_inputs(
            self.db_url, servers=_servers_frame(servers), columns=PLAN_COLUMNS
        )

    def unit_plan(self, servers: list[Row]) -> list[Row]:
        """``pandas_unit_migration_plan``."""
        from rootservice.balancer.spark.reference import pandas_unit_migration_plan

        return _records(pandas_unit_migration_plan(self._inputs(servers)))

    def replica_plan(self, servers: list[Row]) -> list[Row]:
        """``pandas_replica_migration_plan``."""
        from rootservice.balancer.spark.reference import pandas_replica_migration_plan

        return _records(pandas_replica_migration_plan(self._inputs(servers)))

    def lost_replicas(self, servers: list[Row]) -> list[Row]:
        """``pandas_lost_replicas``."""
        from rootservice.balancer.spark.reference import pandas_lost_replicas

        return _records(pandas_lost_replicas(self._inputs(servers)))

    def stop(self) -> None:
        """Nothing to stop."""


class LazySparkPlanner:
    """A :class:`SparkPlanner` built on first use, so that an RS that never empties a server
    never imports PySpark (nor starts a JVM)."""

    def __init__(self, settings: RsSettings) -> None:
        """Remember ``settings``; nothing is built yet."""
        self.settings = settings
        self._planner: SparkPlanner | None = None
        self._lock = threading.Lock()

    def _get(self) -> SparkPlanner:
        with self._lock:
            if self._planner is None:
                self._planner = SparkPlanner(self.settings)
            return self._planner

    def unit_plan(self, servers: list[Row]) -> list[Row]:
        """See :class:`rootservice.balancer.planner.Planner`."""
        return self._get().unit_plan(servers)

    def replica_plan(self, servers: list[Row]) -> list[Row]:
        """See :class:`rootservice.balancer.planner.Planner`."""
        return self._get().replica_plan(servers)

    def lost_replicas(self, servers: list[Row]) -> list[Row]:
        """See :class:`rootservice.balancer.planner.Planner`."""
        return self._get().lost_replicas(servers)

    def stop(self) -> None:
        """Stop Spark if it was started."""
        with self._lock:
            if self._planner is not None:
                self._planner.stop()


#: The task each plan serves (the label of ``ob_rs_planner_failures_total``).
PLAN_TASKS = {
    "unit_plan": "balancer",
    "replica_plan": "balancer",
    "lost_replicas": "lost_replica_checker",
}

#: A failure whose cause keeps changing is still logged at most this often per task, in
#: microseconds (the cause of the first line is the one shown).
FAILURE_LOG_US = 600_000_000


class SwitchablePlanner:
    """The RS's one :class:`rootservice.balancer.planner.Planner`: each
    call goes to ``spark`` or ``local`` as ``settings.balancer_planner`` says at that moment,
    so ALTER SYSTEM SET balancer_planner applies from the next round.

    A call that raises (any exception: no Java, JVM crash, lost executor, unreachable
    master, database error) is counted in ``planner_failures_total`` by task
    (:data:`PLAN_TASKS`; ``ob_rs_planner_failures_total{task}``), and, once per distinct
    cause and task, logged at WARNING (through a :class:`RateLimitedLog`) and recorded as a
    ``planner_failed`` event (``task``, ``planner``, ``cause``); then
    :class:`rootservice.balancer.planner.PlannerError` is raised with the short cause. When
    the Spark planner fails and :func:`check_planner` finds Spark cannot run at all, the
    cause is that finding (it names the fix). The first success after failures is logged at
    INFO and clears the task's cause. ``check`` replaces :func:`check_planner` (tests).
    """

    def __init__(
        self,
        settings: RsSettings,
        *,
        spark: Planner,
        local: Planner,
        events: EventSink,
        metrics: Metrics,
        clock: Clock,
        check: Callable[[str, str], PlannerCheck] = check_planner,
    ) -> None:
        """Nothing is started: ``spark`` is typically a :class:`LazySparkPlanner`."""
        self.settings = settings
        self.planners: dict[str, Planner] = {"spark": spark, "local": local}
        self.events = events
        self.metrics = metrics
        self.clock = clock
        self.check = check
        self.failures: dict[str, str] = {}  # task -> cause of its last failure
        self._log = RateLimitedLog(log, clock, FAILURE_LOG_US)
        self._lock = threading.Lock()

    @property
    def current(self) -> str:
        """The planner the next call uses (``spark`` or ``local``)."""
        return self.settings.balancer_planner

    def _call(self, plan: str, servers: list[Row]) -> list[Row]:
        which = self.current
        task = PLAN_TASKS[plan]
        try:
            rows: list[Row] = getattr(self.planners[which], plan)(servers)
        except Exception as e:
            cause = short_cause(e)
            if which == "spark":
                found = self.check(which, self.settings.effective_db_url())
                if not found.ready:
                    cause = found.detail
            self._failed(task, which, cause, e)
            raise PlannerError(task, cause) from e
        self._succeeded(task, which)
        return rows

    def _failed(self, task: str, which: str, cause: str, exc: Exception) -> None:
        self.metrics.inc_labelled("planner_failures", (task,))
        with self._lock:
            new = self.failures.get(task) != cause
            self.failures[task] = cause
        if not new:
            return
        self.events.add_event(
            Event(
                self.clock.now_us(),
                "balancer",
                "planner_failed",
                (("task", task), ("planner", which), ("cause", cause)),
            )
        )
        self._log.log(
            logging.WARNING,
            task,
            "%s: the %s planner failed, nothing moves until it works again: %s",
            task,
            which,
            cause,
            extra={"task": task},
            exc_info=(type(exc), exc, exc.__traceback__)
            if log.isEnabledFor(logging.DEBUG)
            else None,
        )

    def _succeeded(self, task: str, which: str) -> None:
        with self._lock:
            cause = self.failures.pop(task, None)
        if cause is not None:
            self._log.reset(task)
            log.info("%s: the %s planner works again (it failed: %s)", task, which, cause)

    def unit_plan(self, servers: list[Row]) -> list[Row]:
        """See :class:`rootservice.balancer.planner.Planner`; raises ``PlannerError``."""
        return self._call("unit_plan", servers)

    def replica_plan(self, servers: list[Row]) -> list[Row]:
        """See :class:`rootservice.balancer.planner.Planner`; raises ``PlannerError``."""
        return self._call("replica_plan", servers)

    def lost_replicas(self, servers: list[Row]) -> list[Row]:
        """See :class:`rootservice.balancer.planner.Planner`; raises ``PlannerError``."""
        return self._call("lost_replicas", servers)

    def stop(self) -> None:
        """Stop every planner that has something to stop (the SparkSession)."""
        for p in self.planners.values():
            stop = getattr(p, "stop", None)
            if stop is not None:
                stop()
