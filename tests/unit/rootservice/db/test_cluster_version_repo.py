"""``__all_cluster_version`` (cluster_version_repo): the cluster version starts at 0.1.0 on a
migrated database and only ever rises, whatever order raises come in; on SQLite and
PostgreSQL."""

from __future__ import annotations

import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from obcommon.releases import Release
from rootservice.db import cluster_version_repo

RELEASES = st.builds(Release, st.integers(0, 3), st.integers(0, 12), st.integers(0, 3))
SETTINGS = settings(
    max_examples=15,
    stateful_step_count=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)


def test_a_migrated_database_is_at_the_first_release(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        assert cluster_version_repo.get(conn) == Release(0, 1, 0)


def test_the_cluster_version_never_falls(engine: sa.Engine) -> None:
    class Model(RuleBasedStateMachine):
        """Raises in any order; the row is always the highest asked, and a raise says whether
        it rose."""

        def __init__(self) -> None:
            super().__init__()
            with engine.begin() as conn:
                conn.execute(
                    sa.text(
                        "UPDATE __all_cluster_version SET version = '0.1.0', version_code = 65536"
                    )
                )
            self.highest = Release(0, 1, 0)

        @rule(version=RELEASES)
        def raise_to(self, version: Release) -> None:
            with engine.begin() as conn:
                rose = cluster_version_repo.raise_to(conn, version, 1_000_000)
            assert rose is (version > self.highest)
            self.highest = max(self.highest, version)

        @rule(version=RELEASES)
        def raise_rolled_back(self, version: Release) -> None:
            # A raise in a transaction that fails changes nothing.
            try:
                with engine.begin() as conn:
                    cluster_version_repo.raise_to(conn, version, 1_000_000)
                    raise RuntimeError("abort")
            except RuntimeError:
                pass

        @invariant()
        def stored_is_highest(self) -> None:
            with engine.connect() as conn:
                assert cluster_version_repo.get(conn) == self.highest
                text = conn.execute(sa.text("SELECT version FROM __all_cluster_version")).scalar()
            assert text == str(self.highest)

    run_state_machine_as_test(Model, settings=SETTINGS)
