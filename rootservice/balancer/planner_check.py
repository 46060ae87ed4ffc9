"""Whether the configured planner can run, checked without starting a JVM.

The RS checks this when it opens its database and whenever ``balancer_planner`` changes, logs
the answer (INFO when fine, WARNING with the fix when not) and exposes it as
``ob_rs_planner_ready`` and in the HTTP health document. For ``spark`` it needs: PySpark
installed, a ``java`` (``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set, else on ``PATH``)
whose ``java -version`` answers within :data:`JAVA_VERSION_TIMEOUT_S` with a version PySpark
supports (Spark 3.5: Java 8, 11 or 17 and later; Spark 4: 17 and later), and for a PostgreSQL
database the JDBC driver jar. ``local`` (pandas) needs pandas only.

The probe of one ``java`` binary is remembered per process (path and modification time), so
that tests building many RootServices run ``java -version`` once.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: Seconds ``java -version`` may take (a JVM answers in well under a second; a hung or
#: swapping machine must not hold the RS's start-up).
JAVA_VERSION_TIMEOUT_S = 10.0

#: What to do when Spark cannot run, appended to every "not ready" detail.
LOCAL_FIX = "or run the plans without a JVM: ALTER SYSTEM SET balancer_planner = 'local'"


@dataclass(frozen=True)
class PlannerCheck:
    """The answer: ``planner`` (``spark`` / ``local``), ``ready``, and ``detail`` (what was
    found when ready, else what is missing and the fix)."""

    planner: str
    ready: bool
    detail: str


@functools.lru_cache(maxsize=16)
def _java_version(java: str, _mtime_ns: int) -> tuple[int | None, str]:
    """``(major version, first line of java -version)`` or ``(None, why it failed)``."""
    try:
        out = subprocess.run(
            [java, "-version"],
            capture_output=True,
            text=True,
            timeout=JAVA_VERSION_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"{java} -version did not answer within {JAVA_VERSION_TIMEOUT_S:.0f} s"
    except OSError as e:
        return None, f"{java} cannot run: {e.strerror or e}"
    text = (out.stderr or "") + (out.stdout or "")
    first = text.strip().splitlines()[0] if text.strip() else ""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if out.returncode != 0 or m is None:
        return None, f"{java} -version failed (exit {out.returncode}): {first[:200]}"
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_392" is Java 8
        major = int(m.group(2))
    return major, first


def find_java(env: dict[str, str] | None = None) -> tuple[str | None, str]:
    """The ``java`` Spark's launcher would run: ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is
    set (as ``spark-class`` does), else ``java`` on ``PATH``. Returns ``(path, "")`` or
    ``(None, why not)``."""
    env = dict(os.environ) if env is None else env
    home = env.get("JAVA_HOME", "")
    if home:
        java = Path(home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            return None, f"JAVA_HOME={home} has no executable bin/java"
        return str(java), ""
    found = shutil.which("java", path=env.get("PATH", os.defpath))
    if found is None:
        return None, "no java on PATH and JAVA_HOME is not set"
    return found, ""


def _min_java() -> tuple[int, str]:
    try:
        version = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return 0, ""
    return (17 if int(version.split(".")[0]) >= 4 else 8), version


def check_planner(
    planner: str, db_url: str, *, env: dict[str, str] | None = None, jdbc_jar: str | None = None
) -> PlannerCheck:
    """Whether ``planner`` (``spark`` or ``local``) can compute plans for the database
    ``db_url``, without starting a JVM; ``env`` replaces ``os.environ`` (tests) and
    ``jdbc_jar`` the PostgreSQL driver's path (default
    :data:`rootservice.balancer.spark.session.POSTGRESQL_JAR`). Never raises."""
    if planner == "local":
        if importlib.util.find_spec("pandas") is None:
            return PlannerCheck(planner, False, "pandas is not installed (pip install pandas)")
        return PlannerCheck(planner, True, "pandas, in the RS process")
    min_java, pyspark = _min_java()
    if not pyspark:
        return PlannerCheck(
            planner, False, f"PySpark is not installed (pip install pyspark), {LOCAL_FIX}"
        )
    java, why = find_java(env)
    if java is None:
        return PlannerCheck(
            planner,
            False,
            f"{why}: install Java {min_java}+ (e.g. apt-get install openjdk-17-jre-headless) "
            f"or set JAVA_HOME, {LOCAL_FIX}",
        )
    major, first = _java_version(java, os.stat(java).st_mtime_ns)
    if major is None:
        return PlannerCheck(planner, False, f"{first}, {LOCAL_FIX}")
    if major < min_java:
        return PlannerCheck(
            planner,
            False,
            f"{java} is Java {major}; PySpark {pyspark} needs Java {min_java}+, {LOCAL_FIX}",
        )
    from rootservice.balancer.spark.session import POSTGRESQL_JAR, is_postgresql_url

    jar = jdbc_jar or POSTGRESQL_JAR
    if is_postgresql_url(db_url) and not os.path.exists(jar):
        return PlannerCheck(
            planner,
            False,
            f"the PostgreSQL JDBC driver {jar} is missing (apt-get install "
            f"libpostgresql-jdbc-java), {LOCAL_FIX}",
        )
    return PlannerCheck(planner, True, f"PySpark {pyspark} with Java {major} ({java})")
