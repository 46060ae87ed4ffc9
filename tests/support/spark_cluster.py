"""A Spark standalone cluster (one master, one worker) on 127.0.0.1 from the installed
``pyspark`` distribution, for the tests and ``make demo-spark-cluster``.

PySpark's wheel carries Spark's ``bin/spark-class`` and ``jars/`` but not the ``sbin``
start scripts of the master and workers, so both run in the foreground through
``spark-class`` as :class:`tests.support.cluster.Proc` (own process group, killed as a group)::

    sc = SparkStandalone(log_dir, work_dir)
    sc.start()                      # master, then the worker; bounded waits
    sc.master_url                   # "spark://127.0.0.1:<port>" for --spark-master
    sc.applications()               # the master's view: [{"id", "name", "state", ...}]
    sc.executor_dirs("app-...")     # the worker's directories of that application's executors
    sc.stop()                       # worker, then master (SIGTERM, SIGKILL after 10 s)

The master's state comes from its web UI's JSON (``http://127.0.0.1:<webui>/json/``).
"""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.cluster import Proc, wait_until
from tests.support.ports import free_port

HOST = "127.0.0.1"
#: Bounds of the waits: a JVM starts in 2-5 s on a quiet 2-core machine, 20 s and more
#: under a loaded test run.
START_TIMEOUT_S = 120.0


#: JVM options of the tests' short-lived Spark JVMs (master, worker, executor, the RS's
#: driver): the C1 compiler only (C2 spends seconds of CPU compiling code a test runs a few
#: times) and the serial collector (no GC threads beside the work on a 2-core machine).
LEAN_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: The same for a SparkSession, as ``--spark-conf`` items of the RS.
LEAN_SPARK_CONF = [
    f"spark.driver.extraJavaOptions={LEAN_JVM_OPTS}",
    f"spark.executor.extraJavaOptions={LEAN_JVM_OPTS}",
]


def spark_home() -> Path:
    """The installed ``pyspark`` package directory, which is a Spark home (bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkStandalone:
    """One standalone master and one worker (``cores`` cores, ``memory`` e.g. ``"1g"``) on
    127.0.0.1, logs in ``log_dir`` (``spark-master.log``, ``spark-worker.log``), executors'
    files under ``work_dir``. Ports come from :func:`tests.support.ports.free_port`."""

    def __init__(
        self, log_dir: Path, work_dir: Path, *, cores: int = 1, memory: str = "1g"
    ) -> None:
        self.log_dir = Path(log_dir)
        self.work_dir = Path(work_dir)
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.webui_port = free_port()
        self.worker_webui_port = free_port()
        self.master: Proc | None = None
        self.worker: Proc | None = None
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None

    @property
    def master_url(self) -> str:
        """The URL the driver (``--spark-master``) and the worker connect to."""
        return f"spark://{HOST}:{self.port}"

    @property
    def webui_url(self) -> str:
        """The master's web UI (``/json/`` is its state as JSON)."""
        return f"http://{HOST}:{self.webui_port}"

    def _env(self) -> dict[str, str]:
        home = spark_home()
        return {
            "SPARK_HOME": str(home),
            # Every socket of master, worker and executors on loopback, and no warning that
            # the host name resolves to it.
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOCAL_HOSTNAME": HOST,
            "SPARK_WORKER_DIR": str(self.work_dir),
            # No daemon pid files or logs of spark-daemon.sh anywhere (unused, but spark-class
            # reads spark-env.sh from here if one exists: none does).
            "SPARK_CONF_DIR": str(self.log_dir),
            "SPARK_DAEMON_JAVA_OPTS": LEAN_JVM_OPTS,
        }

    def _spark_class(self, *args: str) -> list[str]:
        return [str(spark_home() / "bin" / "spark-class"), *args]

    def start(self) -> None:
        """Start the master, wait for its JSON to answer ALIVE, start the worker and wait
        until the master counts it alive. Raises ``AssertionError`` (with the log tail) when
        either does not come up within :data:`START_TIMEOUT_S`; what started is then stopped."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        env = self._env()
        try:
            self.master = Proc(
                self._spark_class(
                    "org.apache.spark.deploy.master.Master",
                    "--host", HOST, "--port", str(self.port),
                    "--webui-port", str(self.webui_port),
                ),
                self.log_dir, name="spark-master", env=env,
            )  # fmt: skip
            self._wait(lambda: self.state().get("status") == "ALIVE", self.master, "master ALIVE")
            self.worker = Proc(
                self._spark_class(
                    "org.apache.spark.deploy.worker.Worker", self.master_url,
                    "--host", HOST, "--cores", str(self.cores), "--memory", self.memory,
                    "--webui-port", str(self.worker_webui_port),
                    "--work-dir", str(self.work_dir),
                ),
                self.log_dir, name="spark-worker", env=env,
            )  # fmt: skip
            self._wait(lambda: self.state().get("aliveworkers") == 1, self.worker, "worker alive")
        except BaseException:
            self.stop()
            raise

    def start_in_background(self) -> None:
        """:meth:`start` on a thread of its own, so that the caller sets up the rest of a
        test while the two JVMs start (most of a core each for 10-40 s);
        :meth:`wait_started` joins it."""

        def run() -> None:
            try:
                self.start()
            except BaseException as e:  # re-raised by wait_started
                self._start_error = e

        self._starting = threading.Thread(target=run, name="spark-standalone-start", daemon=True)
        self._starting.start()

    def wait_started(self) -> None:
        """Wait for :meth:`start_in_background`'s start (bounded by :meth:`start`'s own
        waits) and raise what it raised."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._start_error is not None:
            raise self._start_error

    def _wait(self, predicate: Any, proc: Proc, what: str) -> None:
        def ready() -> bool:
            if not proc.alive:
                raise AssertionError(
                    f"{proc.name} exited with {proc.returncode}\n{proc.log_tail()}"
                )
            return bool(predicate())

        try:
            wait_until(ready, START_TIMEOUT_S, 0.5, what, ignore=(OSError, ValueError))
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- {proc.log_path} ---\n{proc.log_tail()}") from None

    def state(self) -> dict[str, Any]:
        """The master's ``/json/``: ``status``, ``aliveworkers``, ``workers``,
        ``activeapps``, ``completedapps``... Raises ``OSError`` when it does not answer
        within 5 s, ``ValueError`` on a malformed answer."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as r:
            out: dict[str, Any] = json.loads(r.read())
        return out

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master knows, running ones first: dicts with at least
        ``id``, ``name`` and ``state`` (``RUNNING``, ``FINISHED``...)."""
        st = self.state()
        return [*st.get("activeapps", []), *st.get("completedapps", [])]

    def executor_dirs(self, app_id: str) -> list[Path]:
        """The worker's directory of each executor of ``app_id`` (``<work_dir>/<app>/<n>``,
        holding the executor's ``stderr`` and the jars it fetched)."""
        base = self.work_dir / app_id
        return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []

    def stop(self) -> list[str]:
        """Stop the worker, then the master (their whole process groups: SIGTERM, SIGKILL
        after 10 s), after a start in the background has ended. Idempotent; returns the
        errors met instead of raising."""
        errors: list[str] = []
        starting = self._starting
        if starting is not None and starting is not threading.current_thread():
            starting.join()
        for p in (self.worker, self.master):
            if p is None:
                continue
            try:
                p.stop(10)
            except Exception as e:  # collected: the other one must still be stopped
                errors.append(f"{p!r}: {e}")
        return errors
