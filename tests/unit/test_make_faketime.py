"""``make faketime`` (part of ``make setup``): Debian's ``faketime``
(libfaketime, for the wall-clock jump test) is installed with apt-get when its library is
missing and only then, as the ``browser`` target does. Run against a fake apt-get that
records its arguments and "installs" the library into a temporary directory."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")


def _make(tmp_path: Path, lib: Path) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "fake-apt-get"
    log = tmp_path / "apt.log"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\ncase "$*" in *install*) touch {lib};; esac\n')
    fake.chmod(0o755)
    assert MAKE is not None
    return subprocess.run(
        [MAKE, "-s", "-C", str(ROOT), "faketime", f"FAKETIME_LIB={lib}", f"APT_GET={fake}"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.skipif(MAKE is None, reason="no make on this machine")
def test_installs_faketime_when_missing_and_nothing_when_present(tmp_path: Path) -> None:
    lib = tmp_path / "libfaketime.so.1"
    r = _make(tmp_path, lib)
    log = tmp_path / "apt.log"
    if os.geteuid() != 0:
        # Not root: says what to install, and the test that needs it is skipped.
        assert r.returncode == 0
        assert "sudo apt-get install faketime" in r.stderr
        assert not log.exists()
        return
    assert r.returncode == 0, r.stderr
    assert log.read_text().splitlines() == ["install -y -q --no-install-recommends faketime"]
    assert lib.is_file()
    r = _make(tmp_path, lib)
    assert r.returncode == 0, r.stderr
    assert len(log.read_text().splitlines()) == 1
