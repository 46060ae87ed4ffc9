"""tests/support/db_template.py: an empty database gets the migrated schema by copy, at the
head revision, and a database holding anything is left alone."""

from __future__ import annotations

import sqlalchemy as sa

from rootservice.db.engine import current_revision, head_revision, make_engine
from tests.support.db_template import fill_from_template


def test_an_empty_database_is_filled_at_the_head_revision_and_then_left_alone(
    db_url: str,
) -> None:
    assert fill_from_template(db_url)
    engine = make_engine(db_url)
    try:
        assert current_revision(engine) == head_revision()
        with engine.begin() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM __all_server")).scalar() == 0
            conn.execute(sa.text("CREATE TABLE mine (x INTEGER)"))
            conn.execute(sa.text("INSERT INTO mine VALUES (7)"))
    finally:
        engine.dispose()
    # Not empty any more: untouched, the row kept.
    assert not fill_from_template(db_url)
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT x FROM mine")).scalar() == 7
    finally:
        engine.dispose()


def test_a_database_with_any_table_is_not_touched(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE seeded (x INTEGER)"))
        assert not fill_from_template(db_url)
        assert current_revision(engine) is None
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM seeded")).scalar() == 0
    finally:
        engine.dispose()
