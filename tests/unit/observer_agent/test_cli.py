"""The agent's command line (observer_agent.cli): bad settings exit 2 with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from observer_agent.cli import main
from tests.unit.observer_agent.helpers import ME, RS1

GOOD = ["--rs-list", RS1, "--rpc-addr", ME, "--sql-port", "2881", "--zone", "z1"]


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"--rs-list": "not-an-address"}, "--rs-list"),
        ({"--rs-list": ""}, "--rs-list"),
        ({"--rs-list": "127.0.0.1:70000"}, "out of range"),
        ({"--rpc-addr": "127.0.0.1:70000"}, "out of range"),
        ({"--rpc-addr": "127.0.0.1:0"}, "out of range"),
        ({"--rpc-addr": "localhost:2882"}, "IPv4"),
        ({"--rpc-addr": "0.0.0.0:2882"}, "0.0.0.0"),
        ({"--sql-port": "70000"}, "--sql-port"),
        ({"--sql-port": "0"}, "--sql-port"),
        ({"--zone": ""}, "zone must not be empty"),
        ({"--zone": "   "}, "zone must not be empty"),
        ({"--heartbeat-interval": "2"}, "not a duration"),
        ({"--heartbeat-interval": "0s"}, "heartbeat_interval = 0us is out of range"),
        ({"--heartbeat-interval": "2h"}, "heartbeat_interval = 2h is out of range"),
        ({"--rpc-timeout": "1d"}, "rpc_timeout"),
        ({"--disk-probe-interval": "soon"}, "--disk-probe-interval"),
        ({"--log-level": "LOUD"}, "log_level"),
        ({"--log-disk-size": "0"}, "--log-disk-size"),
    ],
)
def test_cli_bad_settings_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: dict[str, str], needle: str
) -> None:
    args = dict(zip(GOOD[::2], GOOD[1::2], strict=True))
    args["--data-dir"] = str(tmp_path)
    args.update(override)
    argv = [x for kv in args.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("observer-agent: error: ")
    assert needle in err
    assert err.count("\n") == 1


def test_cli_missing_flag_and_unknown_flag_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*GOOD[:-2], "--data-dir", str(tmp_path)]) == 2  # no --zone
    err = capsys.readouterr().err
    assert "--zone: is required" in err and err.count("\n") == 1
    assert main([*GOOD, "--data-dir", str(tmp_path), "--frobnicate", "1"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --frobnicate" in err and err.count("\n") == 1
    assert main([*GOOD, "--data-dir", str(tmp_path), "--sql-port", "abc"]) == 2
    assert "--sql-port" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--replica-size", "4Q"),
        ("--log-interval", "1ms"),
        ("--cpu-count", "0"),
        ("--cpu-count", "many"),
        ("--memory-limit", "0"),
        ("--log-disk-size", "ten"),
    ],
)
def test_bad_new_flags_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    argv = ["--rs-list", "127.0.0.1:2882", "--rpc-addr", "127.0.0.1:2883", "--sql-port", "1"]
    argv += ["--zone", "z1", "--data-dir", str(tmp_path), flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert flag in err or flag.removeprefix("--").replace("-", "_") in err
