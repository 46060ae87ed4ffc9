"""The agent parameters of a lease answer, applied while the agent runs
(observer_agent.runtime_parameters): syslog_level onto the logger's level, disk_probe_interval
into the settings the periodic jobs read at each round; a value the agent cannot take changes
nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from observer_agent.runtime_parameters import RuntimeParameters
from tests.unit.observer_agent.helpers import make_settings


@pytest.fixture
def params(tmp_path: Path) -> RuntimeParameters:
    logger = logging.getLogger("test_runtime_parameters")
    logger.setLevel(logging.INFO)
    return RuntimeParameters(make_settings(tmp_path), logging.getLogger("test.rp"), logger)


@pytest.mark.parametrize(
    ("word", "level"),
    [
        ("DEBUG", logging.DEBUG),
        ("trace", logging.DEBUG),
        ("INFO", logging.INFO),
        ("WDIAG", logging.WARNING),
        ("WARN", logging.WARNING),
        ("EDIAG", logging.ERROR),
        ("ERROR", logging.ERROR),
    ],
)
def test_syslog_level_sets_the_logger_level(
    params: RuntimeParameters, word: str, level: int
) -> None:
    params.apply({"syslog_level": word})
    assert params.logger.level == level
    assert params.settings.log_level == logging.getLevelName(level)


def test_disk_probe_interval_is_read_by_the_next_round(params: RuntimeParameters) -> None:
    assert params.settings.disk_probe_interval == 5_000_000
    params.apply({"disk_probe_interval": "250ms"})
    assert params.settings.disk_probe_interval == 250_000
    # Both ends of the agent's range: 10ms and 1h are taken, beyond them not.
    params.apply({"disk_probe_interval": "10ms"})
    assert params.settings.disk_probe_interval == 10_000
    params.apply({"disk_probe_interval": "1h"})
    assert params.settings.disk_probe_interval == 3_600_000_000


@pytest.mark.parametrize(
    "values",
    [
        {"syslog_level": "LOUD"},
        {"disk_probe_interval": "9ms"},
        {"disk_probe_interval": "61m"},
        {"disk_probe_interval": "soon"},
        {"no_such_parameter": "1"},
    ],
)
def test_a_value_the_agent_cannot_take_changes_nothing(
    params: RuntimeParameters, values: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="test.rp"):
        params.apply(values)
    assert params.logger.level == logging.INFO
    assert params.settings.disk_probe_interval == 5_000_000
    assert "not applied" in caplog.text
    # Told once: the same value in the next answer is not logged again.
    caplog.clear()
    params.apply(values)
    assert caplog.text == ""
