"""``make browser`` (part of ``make setup``): Debian's ``chromium`` and
``chromium-driver`` are installed with apt-get when missing and only then, as the
``mysql-clients`` target does. Run against a fake apt-get that records its arguments and
"installs" the two binaries into a temporary directory."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")


def _make(tmp_path: Path, chromium: Path, driver: Path) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "fake-apt-get"
    log = tmp_path / "apt.log"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {log}\n'
        f'case "$*" in *install*) for f in {chromium} {driver}; do '
        'touch "$f"; chmod +x "$f"; done;; esac\n'
    )
    fake.chmod(0o755)
    assert MAKE is not None
    return subprocess.run(
        [
            MAKE,
            "-s",
            "-C",
            str(ROOT),
            "browser",
            f"CHROMIUM={chromium}",
            f"CHROMEDRIVER={driver}",
            f"APT_GET={fake}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.skipif(MAKE is None, reason="no make on this machine")
def test_installs_what_is_missing_and_nothing_when_present(tmp_path: Path) -> None:
    chromium, driver = tmp_path / "chromium", tmp_path / "chromedriver"
    driver.touch()
    driver.chmod(0o755)
    r = _make(tmp_path, chromium, driver)
    log = tmp_path / "apt.log"
    if os.geteuid() != 0:
        # Not root: says what to install instead of trying.
        assert r.returncode != 0
        assert "sudo apt-get install chromium" in r.stderr
        assert not log.exists()
        return
    assert r.returncode == 0, r.stderr
    assert log.read_text().splitlines() == ["install -y -q --no-install-recommends chromium"]
    assert chromium.is_file()
    # Both present: apt-get is not run again.
    r = _make(tmp_path, chromium, driver)
    assert r.returncode == 0, r.stderr
    assert len(log.read_text().splitlines()) == 1
