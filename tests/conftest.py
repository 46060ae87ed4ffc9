"""Shared fixtures: a real PostgreSQL for the session, a fresh database per test on both
backends, a migrated engine, and a ``procs`` fixture that cleans up child processes.

PostgreSQL is not optional: when its binaries are missing the PostgreSQL-parametrized tests
fail with advice (``make setup`` installs it), because a silently skipped half of the suite
would hide breakage. ``OB_TEST_SKIP_PG=1`` skips them instead, for quick local runs.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from rootservice.db.engine import make_engine, upgrade
from tests.support.cluster import ProcSet, procs_since, registry_mark, stop_all
from tests.support.db_template import fill_from_template
from tests.support.pgserver import PgNotAvailable, PgServer
from tests.support.timescale import ENV as TIME_SCALE_ENV
from tests.support.timescale import BadTimeScale, origin, scale

SKIP_PG_ENV = "OB_TEST_SKIP_PG"

_procset_key = pytest.StashKey[ProcSet]()


def _terminate_as_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """Fix the run's wait factor (tests/support/timescale.py) before xdist starts its
    workers, which inherit it; a bad ``OB_TEST_TIME_SCALE`` stops the run with its reason.

    Treat SIGTERM (a CI job cancelled or timed out) like Ctrl-C: Python's default
    SIGTERM exits without running fixture teardown or atexit, which would leave the session's
    PostgreSQL and any test processes running."""
    try:
        scale()
    except BadTimeScale as e:
        raise pytest.UsageError(str(e)) from None
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)


def pytest_report_header(config: pytest.Config) -> str:
    """The wait factor of the run, and where it came from."""
    how = "measured here" if origin() == "derived" else "given"
    return f"waits scaled by {scale():g} ({TIME_SCALE_ENV} {how}; tests/support/timescale.py)"


def _scale_timeout(item: pytest.Item, default_s: float) -> None:
    # pytest-timeout's limit of the item (its closest mark, else the ini's ``timeout``),
    # scaled like every other wait: a mark put first is the closest.
    mark = item.get_closest_marker("timeout")
    limit = mark.kwargs.get("timeout", mark.args[0] if mark.args else None) if mark else None
    limit = default_s if limit is None else float(limit)
    if limit > 0:
        item.add_marker(pytest.mark.timeout(limit * scale()), append=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Scale each test's pytest-timeout limit by the run's wait factor.

    On a pytest-xdist worker (``make test``), longest work first: see
    tests/support/xdist_sched.py. A serial run keeps the file order."""
    # pytest-timeout's limit from --timeout, PYTEST_TIMEOUT or the ini (None: no plugin).
    default_s = float(getattr(config, "_env_timeout", None) or 0)
    for item in items:
        _scale_timeout(item, default_s)
    if hasattr(config, "workerinput"):  # set on xdist workers only
        from tests.support.xdist_sched import rank

        items.sort(key=rank)  # stable: collection order within a rank


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which may not be installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup`` groups by tests/support/xdist_sched.py's ``FILE_GROUPS``."""
    if config.getoption("dist") != "loadgroup":
        return None
    from tests.support.xdist_sched import FileGroupScheduling

    return FileGroupScheduling(config, log)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL 15 server on 127.0.0.1 for the whole session, started on first use."""
    if os.environ.get(SKIP_PG_ENV) == "1":
        pytest.skip(f"{SKIP_PG_ENV}=1: PostgreSQL tests skipped")
    try:
        server = PgServer()
    except PgNotAvailable as e:
        pytest.fail(str(e), pytrace=False)
    # The finally covers failures and Ctrl-C (pytest tears session fixtures down on
    # KeyboardInterrupt, and pytest_configure turns SIGTERM into one); PgServer also registers
    # its own atexit stop for an exit that skips fixture teardown. stop() is idempotent.
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"], ids=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """URL of a fresh, empty database: a SQLite file in ``tmp_path``, or a newly created
    PostgreSQL database (dropped, with FORCE, afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/rs.db"
        return
    # getfixturevalue rather than a parameter: a run that selects only SQLite tests never
    # starts (or needs) a PostgreSQL server.
    server: PgServer = request.getfixturevalue("pg_server")
    name = f"obrs_{uuid.uuid4().hex[:16]}"
    server.create_database(name)
    mark = registry_mark()
    try:
        yield server.url(name)
    finally:
        # The processes of the test first (``procs`` is torn down after this fixture when it
        # was set up before it): an RS whose database vanished under it logs tracebacks and
        # steps down instead of stopping cleanly.
        stop_all(procs_since(mark))
        server.drop_database(name)


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    """``make_engine(db_url)`` with every migration applied (copied from a migrated database:
    tests/support/db_template.py); disposed afterwards."""
    fill_from_template(db_url)
    eng = make_engine(db_url)
    try:
        upgrade(eng)
        yield eng
    finally:
        eng.dispose()


@pytest.fixture
def procs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProcSet]:
    """Starts processes for a test (logs in ``tmp_path/logs``) and stops every
    :class:`cluster.Proc` created during the test afterwards, however it ended. When the test
    fails, the tail of each log is added to the failure report."""
    ps = ProcSet(tmp_path / "logs")
    request.node.stash[_procset_key] = ps
    yield ps
    errors = ps.stop_all()
    if errors:
        pytest.fail("could not stop test processes:\n" + "\n".join(errors), pytrace=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the tails of the test's process logs to a failed setup/call report, while the
    processes are still there to explain themselves (teardown stops them later)."""
    report = yield
    ps = item.stash.get(_procset_key, None)
    if ps is not None and report.failed and report.when in ("setup", "call") and ps.started:
        report.sections.append(("process log tails", ps.log_tails()))
    return report
