"""One long-lived SparkSession per RS, created lazily on a background thread.

Creating a SparkSession starts a JVM (about 7 s on a 2-core machine) and its first job
takes a few seconds more, so the RS calls :meth:`SparkSessionManager.start_async` once at
start-up and :meth:`SparkSessionManager.get` only from the threads that run jobs (the
balancer), never from the heartbeat path or the 100 ms lease checker.

API::

    mgr = SparkSessionManager("local[*]", {"spark.driver.memory": "2g"},
                              db_url="postgresql+psycopg://rs@db:5432/oceanbase")
    mgr.start_async()            # returns at once; the JVM starts on a daemon thread
    spark = mgr.get()            # blocks until ready (or raises SparkStartError)
    mgr.stop()                   # stops the session (a later get() starts a new one)

Defaults (a key given in ``conf`` wins; :meth:`SparkSessionManager.effective_conf` shows
the result):

- ``spark.ui.enabled=false``, no console progress bar, log level WARN (a log4j2
  configuration written to a temporary directory, and ``setLogLevel("WARN")``);
- Arrow for pandas conversions, ``spark.sql.execution.arrow.maxRecordsPerBatch=1000000``
  (the default 10,000 makes pandas -> Spark of 5M rows ten times slower);
- for a ``local[...]`` master only: ``spark.sql.shuffle.partitions=4`` and adaptive query
  execution off (the jobs are latency-bound: their large input meets the others only
  through explicit broadcasts, and AQE's re-planning tripled the time of a small job in
  measurements);
- the driver bound to 127.0.0.1 (``spark.driver.host`` / ``spark.driver.bindAddress``,
  ``SPARK_LOCAL_IP``) for a ``local[...]`` master and for a standalone master on a loopback
  address (``spark://127.0.0.1:7077``, ``spark://localhost:7077``): its executors run on
  this host and the RS binds loopback only (otherwise Spark picks the first non-loopback
  interface, which a loopback-only worker may not reach). With any other cluster master
  (``spark://host:port``, ``yarn``, ``k8s://...``) nothing of this is set: executors must
  reach the driver, so give ``spark.driver.host`` in ``conf`` if the default interface is
  not the right one;
- the Python workers run this interpreter (``PYSPARK_PYTHON``, unless set already or
  ``spark.pyspark.python`` is in ``conf``); on a cluster they need pandas and pyarrow;
- for a PostgreSQL ``db_url`` (or ``postgresql_driver=True``): the JDBC driver jar
  (:data:`POSTGRESQL_JAR`, Debian's ``libpostgresql-jdbc-java``) is added to ``spark.jars``,
  which puts it on the driver's class path and ships it to every executor (each fetches
  it from the driver's file server into its work directory: measured with a standalone
  worker), so executors need no copy of their own.

PySpark keeps one active SparkContext per process, so there should be one manager per
process; a second one would get the same session back from ``getOrCreate``.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from rootservice.config import is_local_spark_master

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

POSTGRESQL_JAR = "/usr/share/java/postgresql.jar"
"""Where Debian's ``libpostgresql-jdbc-java`` installs the PostgreSQL JDBC driver."""

DEFAULT_APP_NAME = "ob-rootservice-jobs"
STOP_JOIN_TIMEOUT_S = 300.0

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
"""


class SparkStartError(RuntimeError):
    """The SparkSession could not be created (no Java, bad master or conf, missing jar...);
    the cause is chained. A later :meth:`SparkSessionManager.get` tries again."""


def is_local_master(master: str) -> bool:
    """True for ``local``, ``local[N]``, ``local[*]`` and ``local[N,F]``."""
    return is_local_spark_master(master)


LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def is_loopback_master(master: str) -> bool:
    """True for a standalone master on this host's loopback interface
    (``spark://127.0.0.1:7077``, ``spark://localhost:7077``, ``spark://[::1]:7077``; any
    127.x.y.z); False for anything else, ``local[...]`` included."""
    if not master.startswith("spark://"):
        return False
    # spark://h1:p1,h2:p2 lists standby masters: all of them must be local.
    hosts = [hp.rpartition(":")[0] for hp in master.removeprefix("spark://").split(",")]
    return all(h in LOOPBACK_HOSTS or h.startswith("127.") for h in hosts)


def _driver_on_loopback(master: str) -> bool:
    return is_local_master(master) or is_loopback_master(master)


def is_postgresql_url(db_url: str) -> bool:
    """True when ``db_url`` (an SQLAlchemy URL) names a PostgreSQL database."""
    return sa.make_url(db_url).get_backend_name() == "postgresql"


class SparkSessionManager:
    """Owns the RS's one SparkSession (see the module docstring).

    ``master`` is any Spark master URL; ``conf`` extra Spark settings (they win over the
    defaults); ``db_url`` the RS's database, used only to decide whether the PostgreSQL JDBC
    driver is needed (``postgresql_driver`` forces the decision). Thread-safe.
    """

    def __init__(
        self,
        master: str = "local[*]",
        conf: Mapping[str, str] | None = None,
        *,
        db_url: str | None = None,
        postgresql_driver: bool | None = None,
        postgresql_jar: str = POSTGRESQL_JAR,
        app_name: str = DEFAULT_APP_NAME,
    ) -> None:
        self.master = master
        self.conf = dict(conf or {})
        self.app_name = app_name
        self.postgresql_jar = postgresql_jar
        if postgresql_driver is None:
            postgresql_driver = db_url is not None and is_postgresql_url(db_url)
        self.postgresql_driver = postgresql_driver
        self.startup_s: float | None = None
        """Seconds the last creation took (None before the first one finished)."""
        self.created_on: str | None = None
        """Name of the thread that created the current session (None before one exists):
        ``spark-session-start`` when :meth:`start_async` did, never a caller's thread."""
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._session: SparkSession | None = None
        self._error: BaseException | None = None
        self._tmpdir: str | None = None

    # --- configuration -------------------------------------------------------------------

    def effective_conf(self, log4j_file: str | None = None) -> dict[str, str]:
        """The Spark settings the session is created with: the defaults of the module
        docstring overlaid with ``conf``. ``log4j_file`` is the log4j2 configuration to
        point the driver at (created by the manager when the session starts)."""
        out: dict[str, str] = {
            "spark.app.name": self.app_name,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "1000000",
            "spark.sql.session.timeZone": "UTC",
        }
        if is_local_master(self.master):
            out["spark.sql.shuffle.partitions"] = "4"
            out["spark.sql.adaptive.enabled"] = "false"
        if _driver_on_loopback(self.master):
            out["spark.driver.host"] = "127.0.0.1"
            out["spark.driver.bindAddress"] = "127.0.0.1"
        out.update(self.conf)
        if self.postgresql_driver:
            jars = [j for j in out.get("spark.jars", "").split(",") if j]
            if self.postgresql_jar not in jars:
                jars.append(self.postgresql_jar)
            out["spark.jars"] = ",".join(jars)
        if log4j_file is not None:
            opt = f"-Dlog4j2.configurationFile=file:{log4j_file}"
            extra = out.get("spark.driver.extraJavaOptions", "")
            if "log4j2.configurationFile" not in extra:
                out["spark.driver.extraJavaOptions"] = f"{extra} {opt}".strip()
        return out

    # --- life cycle ----------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """A session exists and can run jobs now."""
        return self._done.is_set() and self._session is not None

    def start_async(self) -> None:
        """Start creating the session on a daemon thread, unless it exists or is being
        created. Returns at once; errors surface in :meth:`get`."""
        with self._lock:
            if self._thread is not None and (self._thread.is_alive() or self._session):
                return
            self._done.clear()
            self._error = None
            self._thread = threading.Thread(
                target=self._create, name="spark-session-start", daemon=True
            )
            self._thread.start()

    def get(self, timeout: float | None = None) -> SparkSession:
        """The session, creating it first if needed (blocks until it is ready).

        Raises :class:`SparkStartError` when creation failed (the next call tries again)
        and ``TimeoutError`` when ``timeout`` seconds pass first (creation goes on).
        """
        self.start_async()
        if not self._done.wait(timeout):
            raise TimeoutError(f"the SparkSession was not ready within {timeout} s")
        with self._lock:
            if self._session is not None:
                return self._session
            err = self._error
            self._thread = None  # let the next call try again
        raise SparkStartError(f"could not start Spark ({self.master}): {err}") from err

    def stop(self) -> None:
        """Stop the session (waiting for a creation under way). Idempotent."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(STOP_JOIN_TIMEOUT_S)
        with self._lock:
            session, self._session = self._session, None
            self._thread = None
            self._done.clear()
            tmpdir, self._tmpdir = self._tmpdir, None
        if session is not None:
            try:
                session.stop()
            except Exception as e:  # noqa: BLE001 - a JVM that died already
                # The usual case: the JVM shares the RS's process group, so the signal that
                # stops the RS (Ctrl-C, a service manager's stop) reached it first. One line,
                # not a traceback, on what is otherwise a clean stop.
                log.warning("stopping the SparkSession failed (its JVM is gone?): %s", e)
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)

    # --- internals -----------------------------------------------------------------------

    def _create(self) -> None:
        t0 = time.monotonic()
        tmpdir: str | None = None
        try:
            if self.postgresql_driver and not Path(self.postgresql_jar).is_file():
                raise FileNotFoundError(
                    f"PostgreSQL JDBC driver {self.postgresql_jar} not found: install Debian's "
                    "libpostgresql-jdbc-java (`make setup` does) or pass postgresql_jar"
                )
            tmpdir = tempfile.mkdtemp(prefix="obrs-spark-")
            log4j = Path(tmpdir) / "log4j2.properties"
            log4j.write_text(_LOG4J2)
            conf = self.effective_conf(str(log4j))
            self._prepare_environment(conf)
            from pyspark.sql import SparkSession

            builder = SparkSession.builder.master(self.master)
            for k, v in conf.items():
                builder = builder.config(k, v)
            session = builder.getOrCreate()
            session.sparkContext.setLogLevel("WARN")
        except BaseException as e:  # reported through get()
            log.warning("SparkSession start failed: %s", e)
            if tmpdir is not None:
                shutil.rmtree(tmpdir, ignore_errors=True)
            with self._lock:
                self._error = e
            self._done.set()
            return
        self.startup_s = time.monotonic() - t0
        # The application id names the application on the master's UI and the executors'
        # directories on the workers: the one link from the RS's log to the cluster.
        log.info(
            "SparkSession (%s, application %s) ready in %.1f s",
            self.master,
            session.sparkContext.applicationId,
            self.startup_s,
        )
        with self._lock:
            self._session = session
            self._tmpdir = tmpdir
            self.created_on = threading.current_thread().name
        self._done.set()

    def _prepare_environment(self, conf: Mapping[str, str]) -> None:
        # PySpark takes the workers' interpreter from PYSPARK_PYTHON only; without it they
        # run whatever "python3" is on PATH, which lacks this project's packages.
        if "spark.pyspark.python" in conf:
            os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
        else:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if _driver_on_loopback(self.master):
            # Otherwise Spark resolves the host name and may pick a public interface.
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
