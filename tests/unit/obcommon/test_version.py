"""``--version`` of the programs: the release of the installed distribution's metadata."""

from __future__ import annotations

from importlib import metadata

import pytest

from obcommon import version
from observer_agent import cli as agent_cli
from rootservice import cli as rs_cli


def test_rootservice_version_prints_the_installed_release(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        rs_cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"rootservice {metadata.version('ob-rootservice')}\n"


def test_observer_agent_version_prints_the_installed_release(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert agent_cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"observer-agent {metadata.version('ob-rootservice')}\n"


def test_the_release_is_pyprojects_version() -> None:
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
    assert version.release() == declared


def test_a_checkout_that_was_never_installed_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version, "DISTRIBUTION", "ob-rootservice-not-installed")
    assert version.release() == "unknown (not installed)"
    assert version.version_line("rootservice") == "rootservice unknown (not installed)"
