"""Install as users expect (last section): the dependency floors in pyproject.toml
are the versions the generated protobuf / gRPC code needs, ``grpcio-tools`` is pinned so
that ``make proto`` cannot raise them silently, and ``observer-agent`` / ``obadmin`` work
without the RS's Spark stack (PySpark, pandas, pyarrow: the ``spark`` extra)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
SPARK_STACK = {"pyspark", "pandas", "pyarrow"}


def _requirements(items: list[str]) -> dict[str, Requirement]:
    return {(r := Requirement(item)).name.lower(): r for item in items}


BASE = _requirements(PROJECT["dependencies"])
EXTRAS = {name: _requirements(items) for name, items in PROJECT["optional-dependencies"].items()}


def _floor(req: Requirement) -> Version:
    floors = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
    assert floors, f"{req} has no floor"
    return max(floors)


def _generated_versions() -> tuple[Version, Version]:
    """(protobuf, grpcio) the checked-in generated code was made for."""
    pb2 = (ROOT / "obcommon/proto/obrpc_pb2.py").read_text(encoding="utf-8")
    grpc_py = (ROOT / "obcommon/proto/obrpc_pb2_grpc.py").read_text(encoding="utf-8")
    pb = re.search(r"^# Protobuf Python Version: (\S+)$", pb2, re.MULTILINE)
    gr = re.search(r"^GRPC_GENERATED_VERSION = '([^']+)'$", grpc_py, re.MULTILINE)
    assert pb and gr
    return Version(pb.group(1)), Version(gr.group(1))


def test_floors_are_what_the_generated_code_needs() -> None:
    protobuf, grpcio = _generated_versions()
    # protobuf's runtime check: the same major version, at least the generating one.
    assert _floor(BASE["protobuf"]) >= protobuf
    assert not BASE["protobuf"].specifier.contains(str(Version(f"{protobuf.major + 1}")))
    assert not BASE["protobuf"].specifier.contains(f"{protobuf.major}.0.0")
    # grpc's generated stub refuses an older grpcio at import.
    assert _floor(BASE["grpcio"]) >= grpcio
    assert _floor(BASE["grpcio-health-checking"]) >= grpcio


def test_make_proto_runs_the_pinned_grpcio_tools_of_the_generated_code() -> None:
    _, grpcio = _generated_versions()
    tools = EXTRAS["dev"]["grpcio-tools"]
    assert [s.operator for s in tools.specifier] == ["=="]
    assert _floor(tools) == grpcio
    assert [s.operator for s in EXTRAS["dev"]["mypy-protobuf"].specifier] == ["=="]


def test_the_spark_stack_is_an_extra() -> None:
    assert not SPARK_STACK & set(BASE)
    assert set(EXTRAS["spark"]) == SPARK_STACK
    # make setup installs it (the RS's balancer plans with Spark).
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"pip install .*-e '\.\[[^]]*\bspark\b[^]]*\]'", makefile)


def test_the_agent_and_obadmin_never_import_the_spark_stack() -> None:
    # A fresh interpreter, so that nothing this test session imported counts.
    code = (
        "import sys\n"
        "import observer_agent.cli, observer_agent.agent, observer_agent.service\n"
        "import sql.obadmin, sql.shell, sql.client\n"
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & {SPARK_STACK!r})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
    # Both programs start without it: --help parses and exits 0.
    for module in ("observer_agent.cli", "sql.obadmin"):
        helped = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert helped.returncode == 0, helped.stderr
        assert "usage:" in helped.stdout
