"""The manual's generated references are complete: a real `mkdocs build --strict` of the
repository's mkdocs.yml, then every statement, parameter, table and view (with its columns),
error code and metric the code has must be on the built site's reference pages.

The expected sets come from the code by other routes than docs/gen_ref.py where one exists:
the tables from a migrated SQLite database read through the catalog the SELECT engine uses,
the metrics from the exposition of a real RS and agent after a few events
(tests/unit/test_deploy_configs.py), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
import sqlalchemy as sa

from obcommon.errors import ERRORS
from rootservice.config import RsSettings
from rootservice.db import engine as dbengine
from rootservice.db.catalog import Catalog
from rootservice.db.tables import metadata
from sql.help import COMMANDS, STATEMENTS, help_text
from tests.unit.test_deploy_configs import real_exposition

REPO = Path(__file__).resolve().parents[2]


class _Text(HTMLParser):
    """The text of an HTML page (tags dropped, entities resolved), scripts left out."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag == "pre":
            self._pre += 1
        if tag in ("script", "style"):
            self._skip += 1
        # A table row is one line of the text, its cells separated by " | ".
        elif tag in ("tr", "h1", "h2", "h3", "p", "li", "pre"):
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre":
            self._pre -= 1
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        # The markup's own line breaks are not text, except inside <pre>.
        if not self._skip and (self._pre or data.strip()):
            self.parts.append(data)


def page_text(site: Path, name: str) -> str:
    """The text of site/reference/<name>/index.html."""
    parser = _Text()
    parser.feed((site / "reference" / name / "index.html").read_text(encoding="utf-8"))
    return unescape("".join(parser.parts))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The manual, built as `make docs` builds it, into a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", DISABLE_MKDOCS_2_WARNING="true")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def missing(expected: set[str], text: str) -> list[str]:
    """The expected names that the text does not contain as a whole word."""
    import re

    return sorted(
        n for n in expected if not re.search(r"(?<![\w.])" + re.escape(n) + r"(?![\w])", text)
    )


def test_every_statement_with_the_help_text_obadmin_shows(site: Path) -> None:
    text = page_text(site, "statements")
    assert missing({t.name for t in (*STATEMENTS, *COMMANDS) if t.name[0].isalpha()}, text) == []
    for t in (*STATEMENTS, *COMMANDS):
        assert t.syntax in text, t.name
        assert t.summary in text, t.name
    # The listing of a bare `help`, line for line as obadmin prints it.
    assert help_text("") in text


def test_every_parameter_and_setting_with_its_default_and_range(site: Path) -> None:
    text = page_text(site, "parameters")
    assert missing(set(RsSettings.model_fields), text) == []
    assert "[1s, 5m]" in text  # lease_time's range as SHOW PARAMETERS prints it


def test_every_table_and_view_with_its_columns(site: Path, tmp_path: Path) -> None:
    engine = dbengine.make_engine(f"sqlite:///{tmp_path / 'ref.db'}")
    try:
        dbengine.upgrade(engine)
        with engine.connect() as conn:
            tables = Catalog().tables(conn)
            views = set(sa.inspect(conn).get_view_names())
    finally:
        engine.dispose()
    text = page_text(site, "tables")
    assert {t.name.lower() for t in tables if t.kind == "VIEW"} == {v.lower() for v in views}
    assert missing({t.name for t in tables} | set(metadata.tables), text) == []
    for t in tables:
        section = text.split(t.name, 1)[1]
        assert missing({c.name for c in t.columns}, section) == [], t.name
    for name, table in metadata.tables.items():
        section = text.split(name, 1)[1]
        assert missing({c.name for c in table.columns}, section) == [], name


def test_every_error_with_its_code_and_message(site: Path) -> None:
    text = page_text(site, "errors")
    assert missing(set(ERRORS), text) == []
    rows = {line.split(" | ")[2]: line for line in text.splitlines() if line.count(" | ") >= 5}
    for e in ERRORS.values():
        row = rows[e.name]
        assert row.startswith(f" | {abs(e.code)} | {e.name} | {e.sqlstate} | "), row
        assert e.template.split("%s")[0].strip() in row, e.name


def test_every_metric_a_real_rs_and_agent_expose(site: Path, db_url: str, tmp_path: Path) -> None:
    text = page_text(site, "metrics")
    absent = []
    for name in real_exposition(db_url, tmp_path):
        # A histogram's series are documented under the family's name.
        base = name
        for suffix in ("_bucket", "_sum", "_count", "_created"):
            base = base.removesuffix(suffix)
        if missing({name}, text) and missing({base}, text):
            absent.append(name)
    assert absent == []


def test_the_check_catches_a_missing_name() -> None:
    assert missing({"ob_rs_epoch", "ob_rs_epoch_raised_total"}, "| ob_rs_epoch_raised_total |") == [
        "ob_rs_epoch"
    ]
