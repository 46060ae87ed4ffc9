"""A cluster Spark master over SQLite is refused at start-up: the plans'
executors read the system tables over JDBC and cannot reach a SQLite file of the RS."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from rootservice import cli
from rootservice.config import RsSettings


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "yarn", "k8s://https://k:6443"])
def test_cluster_master_over_sqlite_is_refused(master: str, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="SQLite file .* cannot reach: use PostgreSQL"):
        RsSettings(spark_master=master, data_dir=tmp_path)  # the default database: SQLite
    with pytest.raises(ValidationError, match="cannot reach"):
        RsSettings(spark_master=master, db_url=f"sqlite:///{tmp_path}/rs.db")


def test_local_master_over_sqlite_and_cluster_master_over_postgresql_start(
    tmp_path: Path,
) -> None:
    assert RsSettings(spark_master="local[1]", data_dir=tmp_path).spark_master == "local[1]"
    assert RsSettings(spark_master="local", data_dir=tmp_path).spark_master == "local"
    pg = RsSettings(spark_master="spark://127.0.0.1:7077", db_url="postgresql+psycopg://u@h/d")
    assert pg.spark_master == "spark://127.0.0.1:7077"


def test_rootservice_serve_says_why_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command line refuses before it opens the database or listens anywhere."""
    argv = [
        "serve",
        "--insecure",
        "--data-dir",
        str(tmp_path),
        "--spark-master",
        "spark://127.0.0.1:7077",
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("rootservice: invalid settings: spark_master spark://127.0.0.1:7077")
    assert "use PostgreSQL (--db postgresql+psycopg://" in err
    assert not (tmp_path / "rootservice.db").exists()
