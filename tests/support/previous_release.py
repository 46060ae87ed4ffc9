"""The previous release, built from this repository's own history, to run as real processes
beside the current code (mixed-version tests, ``make demo-upgrade``).

:func:`build` takes the commit ``obcommon/releases.toml`` records for the release before the
newest (0.1.0 at 7670dc7), ``git archive`` s it out of the repository the code runs from and
installs it into a virtualenv of its own, with no network: ``pip install --no-index
--no-deps``. Its dependencies are this virtualenv's: the new virtualenv's site-packages
ends in a ``.pth`` line naming the running interpreter's site-packages, after its own, so
the previous release's packages (``rootservice``, ``observer_agent``, ``obcommon``...) and its
distribution metadata (``rootservice --version`` says 0.1.0) win, and grpcio, SQLAlchemy
and the rest are the versions CI installs for the current release, within the previous
release's floors (the release after it only added dependencies). The machine's local package
mirror cannot stand in: it holds grpcio 1.84, below 0.1.0's floor 1.85.1.

The virtualenv is built once per commit and dependency directory under the system's
temporary directory (``ob-prev-release-<commit>-<hash>``), under a file lock, and marked
complete last, so xdist workers and consecutive runs share one build and a half-built one is
never used.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from obcommon import releases
from obcommon.releases import Release

REPO = Path(__file__).resolve().parents[2]
#: Whole-build bound: an archive of a few MB and one pip install without downloads.
BUILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class PreviousRelease:
    """A built previous release: ``venv`` holds ``bin/rootservice`` and
    ``bin/observer-agent``; ``build_s`` is how long this call waited or built (0 when it
    was there already)."""

    release: Release
    commit: str
    venv: Path
    build_s: float

    @property
    def rootservice(self) -> Path:
        """Its ``rootservice`` console script."""
        return self.venv / "bin" / "rootservice"

    @property
    def observer_agent(self) -> Path:
        """Its ``observer-agent`` console script."""
        return self.venv / "bin" / "observer-agent"

    def env(self) -> dict[str, str]:
        """Environment overrides for its processes: nothing of the current checkout on the
        path, no reported-release override (it reports its own)."""
        return {"PYTHONPATH": "", releases.RELEASE_OVERRIDE_ENV: ""}


def entry() -> releases.ReleaseEntry:
    """The ``releases.toml`` entry of the release before the newest. Raises ``RuntimeError``
    when the table has one release only or that entry records no commit."""
    table = releases.table()
    if len(table) < 2 or not table[-2].commit:
        raise RuntimeError("obcommon/releases.toml records no previous release with a commit")
    return table[-2]


def _deps_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def cache_dir(commit: str) -> Path:
    """Where the virtualenv of ``commit`` is kept: one per commit and dependency
    directory (another checkout's virtualenv gets its own)."""
    key = hashlib.sha256("\n".join([sys.executable, *_deps_dirs()]).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"ob-prev-release-{commit[:12]}-{key}"


def _run(args: list[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(args, capture_output=True, timeout=BUILD_TIMEOUT_S, **kw)  # type: ignore[call-overload]
    if done.returncode != 0:
        out = (done.stdout + done.stderr).decode(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(map(str, args))} failed ({done.returncode}):\n{out}")
    return done  # type: ignore[no-any-return]


def _build_into(commit: str, dest: Path) -> None:
    """``git archive`` of ``commit`` into ``dest/src``, a virtualenv ``dest/venv`` with the
    previous release installed from it (no index, no dependencies fetched)."""
    try:
        _run(["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"])
    except RuntimeError:
        raise RuntimeError(
            f"commit {commit} of the previous release is not in {REPO}'s history (a shallow "
            "clone?): fetch the full history, e.g. 'git fetch --unshallow'"
        ) from None
    archive = _run(["git", "-C", str(REPO), "archive", "--format=tar", commit]).stdout
    src = dest / "src"
    src.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    venv = dest / "venv"
    # No pip of its own: this interpreter's pip installs into it (``--python``), and its
    # build backend (setuptools) comes from the dependency directories below.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    site = Path(
        _run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ]
        )
        .stdout.decode()
        .strip()
    )
    (site / "zz-ob-current-deps.pth").write_text("\n".join(_deps_dirs()) + "\n", encoding="utf-8")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--disable-pip-version-check",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
            str(src),
        ],
        # Any PIP_* of the caller (a find-links, an index) is irrelevant with --no-index.
        env={k: v for k, v in os.environ.items() if not k.startswith("PIP_")},
        cwd=str(dest),
    )


def build() -> PreviousRelease:
    """The previous release's virtualenv, built now unless a complete one exists (another
    worker may be building it: this waits on the lock). Raises ``RuntimeError`` naming what
    failed (no commit in the history, pip's output)."""
    e = entry()
    dest = cache_dir(e.commit)
    ready = dest / ".ready"
    t0 = time.monotonic()
    if ready.exists():
        return PreviousRelease(e.release, e.commit, dest / "venv", 0.0)
    lock_path = dest.with_name(dest.name + ".lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            # Built in place (the console scripts name their interpreter by its path); a
            # directory without the marker is a build that died half-way.
            shutil.rmtree(dest, ignore_errors=True)
            try:
                _build_into(e.commit, dest)
            except BaseException:
                shutil.rmtree(dest, ignore_errors=True)
                raise
            ready.write_text(e.commit + "\n", encoding="utf-8")
    return PreviousRelease(e.release, e.commit, dest / "venv", time.monotonic() - t0)
