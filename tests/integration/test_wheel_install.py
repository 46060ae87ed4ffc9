"""The release installs: the wheel `make dist` builds goes into a fresh virtualenv, whose
console scripts print the release, and the demo runs from it (processes started from that
virtualenv's interpreter, importing the installed package, not the checkout).

Offline by design (CI may not reach a package index, and the dependencies weigh hundreds of
MB): the wheel is built without build isolation by the project's virtualenv's setuptools
(whose own bdist_wheel needs no `wheel` distribution, hence --skip-dependency-check) and installed with ``--no-index --no-deps``; its dependencies are lent read-only by a
``.pth`` line naming the project's site-packages directory. A path line does not process that
directory's own ``.pth`` files, so the checkout's editable install stays out: the imports are
checked to come from the fresh virtualenv.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    """Run ``args``; its output, or a failure with it."""
    proc = subprocess.run(
        args,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.timeout(900)
def test_the_wheel_installs_in_a_fresh_virtualenv_and_runs_the_demo(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--skip-dependency-check",
            "--outdir",
            str(dist),
        ],
        REPO,
        300,
    )
    [wheel] = dist.glob("ob_rootservice-*-py3-none-any.whl")
    release = metadata.version("ob-rootservice")
    assert wheel.name == f"ob_rootservice-{release}-py3-none-any.whl"

    venv = tmp_path / "fresh"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path, 120)
    py = venv / "bin" / "python"
    fresh_site = Path(
        run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            tmp_path,
            60,
        ).strip()
    )
    (fresh_site / "ob_rootservice_deps.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8"
    )
    run(
        [str(py), "-m", "pip", "install", "--no-index", "--no-deps", "-q", str(wheel)],
        tmp_path,
        300,
    )

    # A clean environment: nothing of the checkout on the path, the cwd outside it.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    work = tmp_path / "work"
    work.mkdir()
    where = run(
        [str(py), "-c", "import rootservice, observer_agent, sql; print(rootservice.__file__)"],
        work,
        60,
        env,
    )
    assert Path(where.strip()).is_relative_to(fresh_site), where
    assert not Path(where.strip()).is_relative_to(REPO)
    assert run([str(venv / "bin" / "rootservice"), "--version"], work, 60, env).strip() == (
        f"rootservice {release}"
    )
    assert run([str(venv / "bin" / "observer-agent"), "--version"], work, 60, env).strip() == (
        f"observer-agent {release}"
    )

    # The demo, as `make demo` runs it, from the installed package (its RS and agents are
    # started with this interpreter).
    out = run([str(py), "-m", "rootservice.demo"], work, 780, env)
    assert "demo finished in" in out
    assert f"logs in {work / 'demo_data'}" in out
