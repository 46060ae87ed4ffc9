"""The systemd units of deploy/systemd/ pass `systemd-analyze verify` (unknown keys, bad
values, a missing executable: any complaint fails), and say what the manual promises: the
environment file, the restart policy, the hardening, the certificate paths.

The units name the install prefix /opt/ob-rootservice; the copy verified here points at this
checkout's virtualenv instead (verify checks that ExecStart is executable), nothing else
changes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"
PREFIX = "/opt/ob-rootservice/bin/"
ANALYZE = shutil.which("systemd-analyze")

needs_systemd = pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze not installed (Debian's systemd package)"
)


def verify(unit: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of ``unit`` with the install prefix replaced by this
    virtualenv's bin directory."""
    text = unit.read_text(encoding="utf-8").replace(PREFIX, str(Path(sys.executable).parent) + "/")
    copy = tmp_path / unit.name
    copy.write_text(text, encoding="utf-8")
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def directives(unit: Path) -> dict[str, str]:
    """``Key=value`` lines of ``unit`` (the last value of a repeated key)."""
    out = {}
    for line in unit.read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def env_file(path: Path) -> dict[str, str]:
    """The variables of an environment file."""
    return dict(
        line.split("=", 1)
        for line in path.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    )


@needs_systemd
@pytest.mark.parametrize("name", ["rootservice.service", "observer-agent.service"])
def test_the_unit_passes_systemd_analyze_verify(name: str, tmp_path: Path) -> None:
    result = verify(UNITS / name, tmp_path)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@needs_systemd
def test_verify_refuses_a_broken_unit(tmp_path: Path) -> None:
    broken = tmp_path / "src"
    broken.mkdir()
    unit = broken / "rootservice.service"
    unit.write_text(
        (UNITS / "rootservice.service")
        .read_text(encoding="utf-8")
        .replace("RestartSec=2s", "RestartSec=2s\nRestartSecs=2s"),
        encoding="utf-8",
    )
    result = verify(unit, tmp_path)
    assert "Unknown key 'RestartSecs'" in result.stderr


@pytest.mark.parametrize(
    ("name", "env", "binary", "prefix"),
    [
        (
            "rootservice.service",
            "/etc/ob-rootservice/rootservice.env",
            "rootservice serve",
            "OB_RS_",
        ),
        (
            "observer-agent.service",
            "/etc/observer-agent/observer-agent.env",
            "observer-agent",
            "OB_AGENT_",
        ),
    ],
)
def test_the_unit_runs_the_program_with_its_environment_file_restarted_and_hardened(
    name: str, env: str, binary: str, prefix: str
) -> None:
    d = directives(UNITS / name)
    assert d["EnvironmentFile"] == env
    assert d["ExecStart"] == PREFIX + binary
    assert d["User"] == "oceanbase"
    assert (d["Restart"], d["RestartPreventExitStatus"]) == ("on-failure", "2")
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "PrivateDevices"):
        assert d[key] == "yes", key
    assert d["ProtectSystem"] == "strict"
    assert d["CapabilityBoundingSet"] == ""
    variables = env_file(UNITS / Path(env).name)
    assert all(k.startswith(prefix) for k in variables)
    certs = variables[prefix + "CERTS_DIR"]
    assert certs == str(Path(env).parent / "certs")


def test_the_environment_files_name_real_settings() -> None:
    from observer_agent.settings import AgentSettings
    from rootservice.config import PARAMETERS, RsSettings

    rs = env_file(UNITS / "rootservice.env")
    assert {k.removeprefix("OB_RS_").lower() for k in rs} <= set(RsSettings.model_fields)
    # A run-time parameter set in the environment would override ALTER SYSTEM SET.
    assert not {k.removeprefix("OB_RS_").lower() for k in rs} & set(PARAMETERS)
    agent = env_file(UNITS / "observer-agent.env")
    assert {k.removeprefix("OB_AGENT_").lower() for k in agent} <= set(AgentSettings.model_fields)
