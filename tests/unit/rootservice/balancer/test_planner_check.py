"""Whether the configured planner can run, checked without a JVM (
rootservice.balancer.planner_check), and what the RS does with the answer at open: its log,
``ob_rs_planner_ready`` and ``/api/v1/planner``'s document."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from rootservice.balancer.planner_check import check_planner, find_java
from rootservice.http.status import ClusterStatus
from tests.support.harness import make_rs

SQLITE = "sqlite:///rs.db"
PG = "postgresql+psycopg://rs@127.0.0.1:5432/ob"


def fake_jdk(tmp_path: Path, version_line: str, code: int = 0) -> str:
    """A JAVA_HOME whose bin/java prints ``version_line`` on stderr and exits ``code``."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\nexit {code}\n")
    java.chmod(0o755)
    return str(home)


def test_local_needs_only_pandas() -> None:
    found = check_planner("local", PG, env={"PATH": "/nonexistent"})
    assert found.ready and found.planner == "local"


def test_spark_without_java_names_the_fix() -> None:
    found = check_planner("spark", SQLITE, env={"PATH": "/nonexistent"})
    assert not found.ready
    assert found.detail.startswith("no java on PATH and JAVA_HOME is not set: install Java")
    assert "ALTER SYSTEM SET balancer_planner = 'local'" in found.detail


def test_spark_with_java_home_pointing_nowhere() -> None:
    found = check_planner("spark", SQLITE, env={"JAVA_HOME": "/nowhere", "PATH": os.defpath})
    assert not found.ready
    assert found.detail.startswith("JAVA_HOME=/nowhere has no executable bin/java")
    assert find_java({"JAVA_HOME": "/nowhere"}) == (None, found.detail.split(":")[0])


def test_a_java_too_old_or_broken_is_not_ready(tmp_path: Path) -> None:
    old = fake_jdk(tmp_path, 'java version "1.7.0_80"')
    found = check_planner("spark", SQLITE, env={"JAVA_HOME": old})
    assert not found.ready and " is Java 7; PySpark " in found.detail
    broken = fake_jdk(tmp_path / "b", "Error: could not create the Java VM", code=1)
    found = check_planner("spark", SQLITE, env={"JAVA_HOME": broken})
    assert not found.ready and "-version failed (exit 1): Error: could not create" in found.detail


def test_a_good_java_and_the_jdbc_jar(tmp_path: Path) -> None:
    home = fake_jdk(tmp_path, 'openjdk version "17.0.9" 2023-10-17')
    found = check_planner("spark", SQLITE, env={"JAVA_HOME": home})
    assert found.ready and "with Java 17" in found.detail
    missing = str(tmp_path / "postgresql.jar")
    found = check_planner("spark", PG, env={"JAVA_HOME": home}, jdbc_jar=missing)
    assert not found.ready and f"JDBC driver {missing} is missing" in found.detail
    (tmp_path / "postgresql.jar").write_bytes(b"")
    assert check_planner("spark", PG, env={"JAVA_HOME": home}, jdbc_jar=missing).ready


@pytest.mark.skipif(shutil.which("java") is None, reason="no java on this machine")
def test_this_machines_java_is_found() -> None:
    found = check_planner("spark", SQLITE, env={"PATH": os.environ["PATH"]})
    assert found.ready, found.detail


def test_the_rs_says_at_open_that_spark_cannot_run(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("JAVA_HOME", "/nowhere")
    caplog.set_level(logging.INFO, logger="rootservice.app")
    rs = make_rs(db_url, tmp_path)
    try:
        [warning] = [
            r
            for r in caplog.records
            if r.name == "rootservice.app" and "balancer planner" in r.getMessage()
        ]
        assert warning.levelno == logging.WARNING
        assert "JAVA_HOME=/nowhere has no executable bin/java" in warning.getMessage()
        text = generate_latest(rs.metrics.registry).decode()
        assert 'ob_rs_planner_ready{planner="spark"} 0.0' in text
        doc = ClusterStatus(rs).planner()
        assert (doc["name"], doc["ready"], doc["failing"]) == ("spark", False, {})
        # switching to the pandas planner checks again, and it can run
        rs.parameters.set([("balancer_planner", "local")])
        text = generate_latest(rs.metrics.registry).decode()
        assert 'ob_rs_planner_ready{planner="local"} 1.0' in text
        assert any(
            r.levelno == logging.INFO and "balancer planner local can run" in r.getMessage()
            for r in caplog.records
        )
    finally:
        rs.shutdown()


def test_the_flag_and_the_environment_choose_the_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    from rootservice import cli
    from rootservice.config import RsSettings

    args = cli._parser().parse_args(["serve", "--insecure", "--balancer-planner", "local"])
    assert cli._settings(args).balancer_planner == "local"
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["serve", "--balancer-planner", "hadoop"])
    monkeypatch.setenv("OB_RS_BALANCER_PLANNER", "Local")
    assert RsSettings().balancer_planner == "local"
    monkeypatch.setenv("OB_RS_BALANCER_PLANNER", "yarn")
    with pytest.raises(ValueError, match="balancer_planner = 'yarn' is not one of spark, local"):
        RsSettings()
