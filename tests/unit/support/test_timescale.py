"""The run's wait factor (tests/support/timescale.py): what ``OB_TEST_TIME_SCALE`` accepts,
what the derivation gives, and that the helpers and pytest-timeout's limits follow it."""

from __future__ import annotations

import time

import pytest

from tests.support import timescale
from tests.support.cluster import wait_until
from tests.support.timescale import BadTimeScale, parse, scale, scaled


@pytest.mark.parametrize("text", ["1", "1.0", "2.5", " 3 "])
def test_a_factor_of_at_least_one_is_taken(text: str) -> None:
    assert parse(text) == float(text)


@pytest.mark.parametrize("text", ["0.99", "0", "-2", "nan", "inf", "", "fast", "2x"])
def test_anything_else_is_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(BadTimeScale, match="OB_TEST_TIME_SCALE"):
        parse(text)


def test_the_derived_factor_follows_the_speed_and_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ref = timescale.REFERENCE_AES_GCM_BPS
    cases = [
        # (bytes/s, usable cores) -> factor
        ((ref, 2), 1.0),
        ((ref * 2, 4), 1.0),  # faster and bigger than the reference: never below 1
        ((ref / 2.4, 2), 2.4),
        ((ref / 2.41, 2), 2.5),  # rounded up to a tenth
        ((ref, 1), 2.0),  # taskset -c 0: one core of two
        ((ref / 2.4, 1), 4.8),
    ]
    for (bps, cores), want in cases:
        monkeypatch.setattr(timescale, "aes_gcm_bps", lambda bps=bps: bps)
        monkeypatch.setattr(timescale, "usable_cores", lambda cores=cores: cores)
        assert timescale.derive() == want, (bps / ref, cores)


def test_the_measurement_is_a_plausible_speed() -> None:
    bps = timescale.aes_gcm_bps()
    assert 1e7 < bps < 1e12, bps


def test_the_run_has_one_factor_in_its_environment() -> None:
    import os

    assert parse(os.environ[timescale.ENV]) == scale() >= 1.0
    assert scaled(10) == 10 * scale()


def test_wait_until_waits_the_scaled_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # The factor of the run, whatever it is, is replaced by 3 for this check.
    monkeypatch.setattr(timescale, "scale", lambda: 3.0)
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0\.6s \(0\.2s x 3\)"):
        wait_until(lambda: False, 0.2, 0.05, "never")
    assert time.monotonic() - start >= 0.6


@pytest.mark.timeout(7)
def test_a_timeout_mark_is_scaled(request: pytest.FixtureRequest) -> None:
    mark = request.node.get_closest_marker("timeout")
    assert mark is not None and mark.args[0] == pytest.approx(7 * scale())


def test_the_default_timeout_is_scaled(request: pytest.FixtureRequest) -> None:
    mark = request.node.get_closest_marker("timeout")
    default = float(request.config.getini("timeout"))
    assert mark is not None and mark.args[0] == pytest.approx(default * scale())
