"""How ``make test`` spreads the suite over pytest-xdist workers (``-n N --dist loadgroup``).

Two rules:

- :data:`FILE_GROUPS`: every test of such a file runs on one worker, one after the other
  (a session- or module-scoped fixture that is costly to start, or fixed ports). xdist's own
  ``xdist_group`` mark cannot do it here: with pytest 9.2 the worker's group suffix on the
  node id no longer takes effect and grouped tests are silently spread out
  (pytest-dev/pytest-xdist#1386), so :class:`FileGroupScheduling` (installed by
  tests/conftest.py through xdist's ``pytest_xdist_make_scheduler`` hook) groups by this
  table, and still honours ``@group`` suffixes should xdist put them back.
- :func:`rank`: workers hand out the longest work first, so that no worker ends the run alone
  with a test of minutes: ``slow``-marked tests, then grouped files, then the other
  integration tests, then the rest (collection order within a rank; every worker computes
  the same order, as xdist requires). ``--no-loadscope-reorder`` keeps xdist from putting
  the groups first by size instead.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadGroupScheduling

#: Test file (path from the repository root, as in node ids) -> group; one worker per group.
FILE_GROUPS: dict[str, str] = {
    # "cpu": one at a time, what needs the CPU or times itself against the wall clock. Under
    # 4 workers on 2 cores (and a loaded machine) two RS Spark plans side by side missed
    # test_delete_server's 120 s wait for a copy (the SparkSession alone took 45-62 s to
    # start), and test_flood's "a small statement answers in under 2 s" measured 2.07 s and
    # 2.37 s beside them.
    "tests/integration/test_delete_server.py": "cpu",
    # "spark": a Spark standalone master, worker and executor beside the RS's driver (four
    # JVMs, about 6 minutes with their start-up), then the session fixture of test_spark_jobs
    # (one JVM, started once). Beside "cpu" rather than after it: one after the other they
    # made that worker the last to finish by minutes (suite 16 min 52 s); test_delete_server
    # has 600 s for the contention.
    "tests/integration/test_spark_cluster.py": "spark",
    "tests/unit/rootservice/balancer/test_spark_jobs.py": "spark",
    "tests/integration/test_flood.py": "cpu",
    # The demo from a freshly installed wheel: an RS with its SparkSession and five agents
    # (220 s alone on the 2-core machine), as CPU-hungry as test_delete_server.
    "tests/integration/test_wheel_install.py": "cpu",
    # The module-scoped secure cluster would otherwise start on every worker.
    "tests/integration/test_trust_boundary.py": "trust_boundary",
    "tests/integration/test_mysql_clients.py": "mysql_clients",
    # One module-scoped cluster per database serves every verbatim tool query.
    "tests/integration/test_oceanbase_tool_queries.py": "tool_queries",
    # A headless Chromium (several processes, ~300 MB) beside each cluster: its SQLite and
    # PostgreSQL runs go one after the other rather than two browsers side by side.
    "tests/integration/test_dashboard.py": "browser",
    # These tests bind fixed ports of their own range; run them in turn, never side by side.
    "tests/unit/support/test_ports.py": "fixed_ports",
}


#: Files of :data:`FILE_GROUPS` whose PostgreSQL variants leave the group: test_delete_server
#: plans with pandas on PostgreSQL (no Spark to share the CPU with), and its two variants one
#: after the other made the "cpu" worker the last to finish by minutes.
POSTGRESQL_UNGROUPED = frozenset({"tests/integration/test_delete_server.py"})


def file_group(nodeid: str) -> str | None:
    """The :data:`FILE_GROUPS` group of the test ``nodeid`` (``path::name[params]``), if any
    (None for the PostgreSQL variants of :data:`POSTGRESQL_UNGROUPED`)."""
    path = nodeid.split("::", 1)[0]
    if path in POSTGRESQL_UNGROUPED and nodeid.endswith("[postgresql]"):
        return None
    return FILE_GROUPS.get(path)


class FileGroupScheduling(LoadGroupScheduling):
    """xdist's ``loadgroup`` scheduler with :data:`FILE_GROUPS` as groups: a work unit is a
    whole group, any other test is a unit of its own. Units go to workers in collection order
    (after :func:`rank`), each worker keeping about two queued."""

    def _split_scope(self, nodeid: str) -> str:
        group = file_group(nodeid)
        return f"group:{group}" if group is not None else super()._split_scope(nodeid)


def rank(item: pytest.Item) -> int:
    """Sort key of ``item`` under xdist: 0 ``slow``, 1 in a file group, 2 ``integration``, 3
    the rest."""
    if item.get_closest_marker("slow") is not None:
        return 0
    if file_group(item.nodeid) is not None:
        return 1
    if item.get_closest_marker("integration") is not None:
        return 2
    return 3
